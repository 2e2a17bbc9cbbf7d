# DIVISION: the kernels' build, memory / throughput / largest-batch benchmarks of vanilla,
# DIVISION, ActNN-style 2-bit and checkpointing, accuracy runs on an image set, tables and figures.

from membench.division import extension as division_extension

DIVISION = config["division"]
DIVISION_METHODS = DIVISION["variants"]
DIVISION_MODELS = ("resnet18", "resnet164", "densenet121", "resnet50")
DIVISION_BUILD_MANIFEST = "results/build/division/manifest.json"
# The build manifest the jobs wait for; none when the config picks the pure-torch kernels.
DIVISION_BUILD_INPUT = [] if DIVISION["kernels"] == "torch" else DIVISION_BUILD_MANIFEST
DIVISION_JOB_OPTIONS = {
    section: workflow_support.division_job_options(
        DIVISION,
        section,
        DIVISION_BUILD_INPUT or None,
        config["meter"],
        config["device"],
        config["seed"],
    )
    for section in ("memory", "speed", "max_batch")
}
DIVISION_TRAIN_THREADS = workflow_support.division_train_threads(
    local_cores(), workflow_support.local_gpu_count()
)
# metrics.json of every job of the memory and speed benchmarks (method x batch size), the
# largest-batch search and the accuracy runs; none when division measures no method.
DIVISION_BENCHMARKS = {
    section: [
        f"results/division/{section}/{DIVISION[section]['model']}/{method}/b{batch}/metrics.json"
        for method in DIVISION_METHODS
        for batch in DIVISION[section]["batch_sizes"]
    ]
    for section in ("memory", "speed")
}
DIVISION_MAX_BATCH = [
    f"results/division/max_batch/{DIVISION['max_batch'].get('model', 'resnet50')}/{method}/metrics.json"
    for method in DIVISION_METHODS
]
DIVISION_ACCURACY = [
    f"results/division/accuracy/{DIVISION['accuracy']['dataset']}/{DIVISION['accuracy']['model']}/{method}/metrics.json"
    for method in (
        DIVISION_METHODS
        if DIVISION["accuracy"]["variants"] is None
        else DIVISION["accuracy"]["variants"]
    )
    if DIVISION_METHODS
]
# The LMDBs an accuracy run trains and validates on: the image set's splits of those names.
DIVISION_ACCURACY_LMDBS = {
    name: {
        role: f"results/data/images/{name}/lmdb/{spec.get(f'{role}_split', role)}"
        for role in ("train", "val")
    }
    for name, spec in IMAGES.items()
}


wildcard_constraints:
    division_method=alternatives(DIVISION_METHODS),
    division_model=alternatives(DIVISION_MODELS),
    division_batch=r"\d+",


# Builds into the per-user cache ($MEMBENCH_CACHE_DIR, else ~/.cache/membench), unless built there
# already; its manifest here names that build for the jobs (and for Snakemake, which tracks it).
rule division_build:
    input:
        # The kernels' sources and headers, so that editing them rebuilds (paths from this
        # checkout, also when the workflow is used as a module of another).
        sources=[
            checkout_path(f"workflow/membench/division/csrc/{name}")
            for name in division_extension.SPEC.source_names()
        ],
    output:
        manifest=DIVISION_BUILD_MANIFEST,
    log:
        log_path("division_build"),
    benchmark:
        benchmark_path("division_build")
    # Start first: the jobs of a whole system wait for it, and it compiles on one core.
    priority: 2
    conda:
        ENV
    # One compiler process (the CUDA source compiles beside it only where CUDA is built).
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
        # Built where the GPU jobs run, so that torch sees the GPU's architecture.
        gpu=0 if DIVISION["cuda"] == "no" else gpu_count(),
    params:
        cuda=DIVISION["cuda"],
    shell:
        "membench division build --outdir results/build/division --cuda {params.cuda:q} > {log:q} 2>&1"


rule division_memory:
    input:
        manifest=DIVISION_BUILD_INPUT,
    output:
        metrics="results/division/memory/{division_model}/{division_method}/b{division_batch}/metrics.json",
        memlog="results/division/memory/{division_model}/{division_method}/b{division_batch}/memlog.csv",
    log:
        log_path(
            "division_memory", "{division_model}/{division_method}/b{division_batch}"
        ),
    benchmark:
        benchmark_path(
            "division_memory", "{division_model}/{division_method}/b{division_batch}"
        )
    # Before the timing jobs, which claim every core locally: points of one core then run in pairs.
    priority: 1
    conda:
        ENV
    # Memory figures are exact counts, not timings: two points may run side by side.
    threads: 1
    resources:
        mem_mb=lambda wildcards: workflow_support.division_job_mem_mb(
            DIVISION["memory"]["image_size"],
            int(wildcards.division_batch),
            on_gpu=gpu_count() > 0,
        ),
        runtime=60,
        gpu=gpu_count(),
    params:
        outdir=subpath(output.metrics, parent=True),
        options=DIVISION_JOB_OPTIONS["memory"],
        trace=cli_options(
            {"trace_live_tensors": DIVISION["memory"]["trace_live_tensors"]}
        ),
        trace_allocator=workflow_support.trace_allocator_option(config["meter"]),
    shell:
        "membench division memory --outdir {params.outdir:q} --model {wildcards.division_model:q}"
        " --variant {wildcards.division_method:q} --batch-size {wildcards.division_batch:q}"
        " {params.trace:q} {params.trace_allocator:q} {params.options:q} > {log:q} 2>&1"


# Timed: no `benchmark:`, whose poller would take CPU from the job it times (docs/DEVELOPING.md).
rule division_speed:
    input:
        manifest=DIVISION_BUILD_INPUT,
    output:
        metrics="results/division/speed/{division_model}/{division_method}/b{division_batch}/metrics.json",
        memlog="results/division/speed/{division_model}/{division_method}/b{division_batch}/memlog.csv",
    log:
        log_path(
            "division_speed", "{division_model}/{division_method}/b{division_batch}"
        ),
    conda:
        ENV
    threads: 2
    resources:
        mem_mb=lambda wildcards: workflow_support.division_job_mem_mb(
            DIVISION["speed"]["image_size"],
            int(wildcards.division_batch),
            on_gpu=gpu_count() > 0,
        ),
        runtime=60,
        gpu=gpu_count(),
    params:
        outdir=subpath(output.metrics, parent=True),
        options=DIVISION_JOB_OPTIONS["speed"],
        timing=cli_options(
            {
                k: DIVISION["speed"][k]
                for k in ("train_steps", "warmup_steps", "paired_vanilla")
            }
        ),
    shell:
        "membench division speed --outdir {params.outdir:q} --model {wildcards.division_model:q}"
        " --variant {wildcards.division_method:q} --batch-size {wildcards.division_batch:q}"
        " {params.timing:q} {params.options:q} > {log:q} 2>&1"


rule division_max_batch:
    input:
        manifest=DIVISION_BUILD_INPUT,
    output:
        metrics="results/division/max_batch/{division_model}/{division_method}/metrics.json",
        probes="results/division/max_batch/{division_model}/{division_method}/probes.csv",
    log:
        log_path("division_max_batch", "{division_model}/{division_method}"),
    benchmark:
        benchmark_path("division_max_batch", "{division_model}/{division_method}")
    conda:
        ENV
    threads: 2
    resources:
        mem_mb=8000,
        runtime=120,
        gpu=gpu_count(),
    params:
        outdir=subpath(output.metrics, parent=True),
        options=DIVISION_JOB_OPTIONS["max_batch"],
        search=cli_options({k: DIVISION["max_batch"][k] for k in ("start", "limit")}),
    shell:
        "membench division maxbatch --outdir {params.outdir:q} --model {wildcards.division_model:q}"
        " --variant {wildcards.division_method:q} {params.search:q} {params.options:q} > {log:q} 2>&1"


rule division_train:
    input:
        unpack(lambda wildcards: DIVISION_ACCURACY_LMDBS[wildcards.image_dataset]),
        manifest=DIVISION_BUILD_INPUT,
    output:
        metrics="results/division/accuracy/{image_dataset}/{division_model}/{division_method}/metrics.json",
        history="results/division/accuracy/{image_dataset}/{division_model}/{division_method}/history.csv",
    log:
        log_path("division_train", "{image_dataset}/{division_model}/{division_method}"),
    benchmark:
        benchmark_path(
            "division_train", "{image_dataset}/{division_model}/{division_method}"
        )
    conda:
        ENV
    threads: DIVISION_TRAIN_THREADS
    resources:
        **workflow_support.division_train_resources(
            DIVISION["accuracy"]["gpus"],
            DIVISION["accuracy"]["nodes"],
            on_gpu=gpu_count() > 0,
        ),
        mem_mb=4000,
        runtime=600,
    params:
        outdir=subpath(output.metrics, parent=True),
        options=workflow_support.division_train_options(
            DIVISION,
            DIVISION_BUILD_INPUT or None,
            config["meter"],
            config["device"],
            config["seed"],
        ),
        # Shell code that quotes its own values (workflow_support), so the command takes it as is.
        launcher=workflow_support.division_train_launcher(
            DIVISION["accuracy"]["gpus"],
            DIVISION["accuracy"]["nodes"],
            DIVISION_TRAIN_THREADS,
        ),
    shell:
        "{params.launcher} division train --outdir {params.outdir:q} --model {wildcards.division_model:q}"
        " --variant {wildcards.division_method:q} --dataset {wildcards.image_dataset:q}"
        " --train-lmdb {input.train:q} --val-lmdb {input.val:q} {params.options:q} > {log:q} 2>&1"


rule division_memory_table:
    input:
        DIVISION_BENCHMARKS["memory"],
    output:
        csv=report(
            "results/tables/division_memory.csv",
            caption="../workflow/report/division_memory_table.rst",
            category="DIVISION",
            labels={"table": "memory per method and batch size"},
        ),
        parquet="results/tables/division_memory.parquet",
    log:
        log_path("division_memory_table"),
    benchmark:
        benchmark_path("division_memory_table")
    localrule: True
    conda:
        ENV
    resources:
        runtime=10,
    shell:
        "membench table metrics --out {output.csv:q} {input:q} > {log:q} 2>&1"


rule division_speed_table:
    input:
        DIVISION_BENCHMARKS["speed"],
    output:
        csv=report(
            "results/tables/division_speed.csv",
            caption="../workflow/report/division_speed_table.rst",
            category="DIVISION",
            labels={"table": "throughput per method and batch size"},
        ),
        parquet="results/tables/division_speed.parquet",
    log:
        log_path("division_speed_table"),
    benchmark:
        benchmark_path("division_speed_table")
    localrule: True
    conda:
        ENV
    resources:
        runtime=10,
    shell:
        "membench table metrics --out {output.csv:q} {input:q} > {log:q} 2>&1"


rule division_accuracy_table:
    input:
        DIVISION_ACCURACY,
    output:
        csv=report(
            "results/tables/division_accuracy.csv",
            caption="../workflow/report/division_accuracy.rst",
            category="DIVISION",
            labels={"table": "accuracy per method"},
        ),
        parquet="results/tables/division_accuracy.parquet",
    log:
        log_path("division_accuracy_table"),
    benchmark:
        benchmark_path("division_accuracy_table")
    localrule: True
    conda:
        ENV
    resources:
        runtime=10,
    shell:
        "membench table metrics --out {output.csv:q} {input:q} > {log:q} 2>&1"


rule division_max_batch_table:
    input:
        DIVISION_MAX_BATCH,
    output:
        csv=report(
            "results/tables/division_max_batch.csv",
            caption="../workflow/report/division_max_batch.rst",
            category="DIVISION",
            labels={"table": "largest batch per method"},
        ),
        parquet="results/tables/division_max_batch.parquet",
    log:
        log_path("division_max_batch_table"),
    benchmark:
        benchmark_path("division_max_batch_table")
    localrule: True
    conda:
        ENV
    resources:
        runtime=10,
    shell:
        "membench table metrics --out {output.csv:q} {input:q} > {log:q} 2>&1"


rule division_plot_memory:
    input:
        rules.division_memory_table.output.csv,
    output:
        report(
            "results/plots/division_memory.png",
            caption="../workflow/report/division_memory.rst",
            category="DIVISION",
            labels={"figure": "activation and step memory per method"},
        ),
    log:
        log_path("division_plot_memory"),
    benchmark:
        benchmark_path("division_plot_memory")
    localrule: True
    conda:
        ENV
    resources:
        runtime=10,
    shell:
        "membench division plot-memory --table {input:q} --out {output:q} > {log:q} 2>&1"


rule division_plot_speed:
    input:
        rules.division_speed_table.output.csv,
    output:
        report(
            "results/plots/division_speed.png",
            caption="../workflow/report/division_speed.rst",
            category="DIVISION",
            labels={"figure": "throughput per method"},
        ),
    log:
        log_path("division_plot_speed"),
    benchmark:
        benchmark_path("division_plot_speed")
    localrule: True
    conda:
        ENV
    resources:
        runtime=10,
    shell:
        "membench division plot-speed --table {input:q} --out {output:q} > {log:q} 2>&1"


if DIVISION_METHODS:
    FINAL_OUTPUTS.extend(
        [
            "results/tables/division_memory.csv",
            "results/tables/division_speed.csv",
            "results/tables/division_accuracy.csv",
            "results/plots/division_memory.png",
            "results/plots/division_speed.png",
        ]
    )


if DIVISION_METHODS and DIVISION["max_batch"]["enabled"]:
    FINAL_OUTPUTS.append("results/tables/division_max_batch.csv")
