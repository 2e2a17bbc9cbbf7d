# HotConv: MalConv, MalConv2, HotConv and HotConv-Eco trained on BODMAS folds and
# measured side by side; the memory sweep; the table and figures of the report.

HOTCONV = config["hotconv"]
HOTCONV_SWEEP_VARIANTS = sorted(
    {variant for name in ("sweep", "bench") for variant in HOTCONV[name]["variants"]}
)
# metrics.json of every training job (variant x dataset x fold).
HOTCONV_METRICS = [
    f"results/hotconv/{dataset}/{variant}/fold_{fold}/metrics.json"
    for dataset in HOTCONV["datasets"]
    for variant in HOTCONV["variants"]
    for fold in HOTCONV["folds"]
]
# metrics.json of every point of the sweeps hotconv.sweep and hotconv.bench (variant x batch size x
# max_len): one job each.
HOTCONV_SWEEP_POINTS = {
    name: [
        f"results/hotconv/sweeps/{name}/{variant}/b{batch_size}_l{max_len}/metrics.json"
        for max_len in HOTCONV[name]["max_lens"]
        for batch_size in HOTCONV[name]["batch_sizes"]
        for variant in HOTCONV[name]["variants"]
    ]
    for name in ("sweep", "bench")
}
# The table the variants figure takes a training step's memory from: the paper model's points
# where the config measures them, else the sweep's.
HOTCONV_STEP_TABLE = (
    "results/tables/hotconv_bench.csv"
    if HOTCONV["bench"]["variants"]
    else "results/tables/hotconv_sweep.csv"
)


rule hotconv_train:
    input:
        train="results/data/bodmas/{dataset}/folds/train_{dataset}_fold_{fold}.csv",
        val="results/data/bodmas/{dataset}/folds/val_{dataset}_fold_{fold}.csv",
        test="results/data/bodmas/{dataset}/folds/test_{dataset}_fold_{fold}.csv",
        classes="results/data/bodmas/{dataset}/folds/classes.csv",
        binaries=lambda wildcards: BODMAS_BINARIES_INPUT[wildcards.dataset],
    # checkpoint.pt is written beside these but not declared: Snakemake deletes the outputs of a
    # failed job, and the checkpoint is what lets the rerun resume.
    output:
        metrics="results/hotconv/{dataset}/{variant}/fold_{fold}/metrics.json",
        memlog="results/hotconv/{dataset}/{variant}/fold_{fold}/memlog.csv",
    log:
        log_path("hotconv_train", "{dataset}/{variant}/fold_{fold}"),
    benchmark:
        benchmark_path("hotconv_train", "{dataset}/{variant}/fold_{fold}")
    wildcard_constraints:
        dataset=alternatives(HOTCONV["datasets"]),
        variant=alternatives(HOTCONV["variants"]),
    conda:
        ENV
    threads: 2
    resources:
        mem_mb=workflow_support.hotconv_train_mem_mb(
            HOTCONV, on_cpu=config["device"] == "cpu"
        ),
        runtime=workflow_support.hotconv_train_runtime_min(HOTCONV),
        gpu=gpu_count(),
    params:
        binaries=lambda wildcards: BODMAS_DATA[wildcards.dataset]["binaries"],
        outdir=subpath(output.metrics, parent=True),
        options=workflow_support.hotconv_train_options(
            HOTCONV, config["meter"], config["device"], config["seed"]
        ),
    shell:
        "membench hotconv train --variant {wildcards.variant:q} --dataset {wildcards.dataset:q} --fold {wildcards.fold:q}"
        " --train {input.train:q} --val {input.val:q} --test {input.test:q} --classes {input.classes:q}"
        " --binaries {params.binaries:q} --outdir {params.outdir:q} {params.options:q} > {log:q} 2>&1"


rule hotconv_table:
    input:
        HOTCONV_METRICS,
    output:
        csv=report(
            "results/tables/hotconv.csv",
            caption="../workflow/report/hotconv_table.rst",
            category="HotConv",
            labels={"table": "training jobs"},
        ),
        parquet="results/tables/hotconv.parquet",
    log:
        log_path("hotconv_table"),
    benchmark:
        benchmark_path("hotconv_table")
    localrule: True
    conda:
        ENV
    resources:
        runtime=5,
    shell:
        "membench table metrics --out {output.csv:q} {input:q} > {log:q} 2>&1"


# One job per sweep point (variant x batch size x max_len), each its own process: CUDA context,
# cuBLAS/cuDNN handles and lazily loaded kernels are charged alike whatever the order, an
# out-of-memory point is a recorded result, and a rerun measures only the missing points.
# Timed: no `benchmark:`, whose poller would take CPU from the job it times (docs/DEVELOPING.md).
rule hotconv_sweep_point:
    output:
        metrics="results/hotconv/sweeps/{sweep}/{variant}/b{batch_size}_l{max_len}/metrics.json",
    log:
        log_path("hotconv_sweep_point", "{sweep}/{variant}/b{batch_size}_l{max_len}"),
    wildcard_constraints:
        sweep="sweep|bench",
        variant=alternatives(HOTCONV_SWEEP_VARIANTS),
        batch_size=r"\d+",
        max_len=r"\d+",
    # Before the timing jobs, which claim every core locally: points of one core then run in pairs.
    priority: 1
    conda:
        ENV
    # Memory figures are exact counts, not timings: two points may run side by side.
    threads: 1
    resources:
        mem_mb=lambda wildcards: workflow_support.hotconv_sweep_point_mem_mb(
            wildcards.sweep
        ),
        runtime=lambda wildcards: workflow_support.hotconv_sweep_point_runtime_min(
            wildcards.sweep
        ),
        gpu=gpu_count(),
    params:
        outdir=subpath(output.metrics, parent=True),
        options=lambda wildcards: workflow_support.hotconv_sweep_options(
            HOTCONV[wildcards.sweep], config["meter"], config["device"], config["seed"]
        ),
    shell:
        "membench hotconv bench --outdir {params.outdir:q} --variant {wildcards.variant:q}"
        " --batch-size {wildcards.batch_size:q} --max-len {wildcards.max_len:q} {params.options:q} > {log:q} 2>&1"


rule hotconv_sweep:
    input:
        HOTCONV_SWEEP_POINTS["sweep"],
    output:
        csv=report(
            "results/tables/hotconv_sweep.csv",
            caption="../workflow/report/hotconv_sweep_table.rst",
            category="HotConv",
            labels={"table": "memory sweep"},
        ),
        parquet="results/tables/hotconv_sweep.parquet",
    log:
        log_path("hotconv_sweep"),
    benchmark:
        benchmark_path("hotconv_sweep")
    localrule: True
    conda:
        ENV
    resources:
        runtime=5,
    shell:
        "membench hotconv sweep-table --out {output.csv:q} {input:q} > {log:q} 2>&1"


# The paper model (256 filters, window 512) at 2 MiB: the step memory the summary sets beside the
# HotConv README's figures.
rule hotconv_bench:
    input:
        HOTCONV_SWEEP_POINTS["bench"],
    output:
        csv=report(
            "results/tables/hotconv_bench.csv",
            caption="../workflow/report/hotconv_bench_table.rst",
            category="HotConv",
            labels={"table": "one training step at the paper's model"},
        ),
        parquet="results/tables/hotconv_bench.parquet",
    log:
        log_path("hotconv_bench"),
    benchmark:
        benchmark_path("hotconv_bench")
    localrule: True
    conda:
        ENV
    resources:
        runtime=5,
    shell:
        "membench hotconv sweep-table --out {output.csv:q} {input:q} > {log:q} 2>&1"


rule hotconv_plot_variants:
    input:
        table=rules.hotconv_table.output.csv,
        sweep=HOTCONV_STEP_TABLE,
        # what makes an accuracy say little (membench.hotconv.plots.HEADLINE): a change redraws
        headline=checkout_path("resources/headlines/hotconv.yaml"),
    output:
        report(
            "results/plots/hotconv_variants.png",
            caption="../workflow/report/hotconv_variants.rst",
            category="HotConv",
            labels={
                "figure": "step memory at the paper's model, epoch time and accuracy in training"
            },
        ),
    log:
        log_path("hotconv_plot_variants"),
    benchmark:
        benchmark_path("hotconv_plot_variants")
    localrule: True
    conda:
        ENV
    resources:
        runtime=10,
    shell:
        "membench hotconv plot --table {input.table:q} --sweep {input.sweep:q} --out {output:q} > {log:q} 2>&1"


rule hotconv_plot_sweep:
    input:
        rules.hotconv_sweep.output.csv,
    output:
        report(
            "results/plots/hotconv_sweep.png",
            caption="../workflow/report/hotconv_sweep.rst",
            category="HotConv",
            labels={"figure": "memory sweep"},
        ),
    log:
        log_path("hotconv_plot_sweep"),
    benchmark:
        benchmark_path("hotconv_plot_sweep")
    localrule: True
    conda:
        ENV
    resources:
        runtime=10,
    shell:
        "membench hotconv plot-sweep --table {input:q} --out {output:q} > {log:q} 2>&1"


# A config that trains on no data set runs nothing of HotConv (the other systems' paper configs).
if HOTCONV["datasets"]:
    FINAL_OUTPUTS.extend(
        ["results/tables/hotconv.csv", "results/plots/hotconv_variants.png"]
    )
    if HOTCONV["bench"]["variants"]:
        FINAL_OUTPUTS.append("results/tables/hotconv_bench.csv")
    if HOTCONV["sweep"]["variants"]:
        FINAL_OUTPUTS.extend(
            ["results/tables/hotconv_sweep.csv", "results/plots/hotconv_sweep.png"]
        )
