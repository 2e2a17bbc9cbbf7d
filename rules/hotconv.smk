# HotConv (seed 000): MalConv, MalConv2, HotConv and HotConv-Eco trained on BODMAS folds and
# measured side by side; the memory sweep; the table and figures of the report.


rule hotconv_train:
    input:
        train="results/data/bodmas/{dataset}/folds/train_{dataset}_fold_{fold}.csv",
        val="results/data/bodmas/{dataset}/folds/val_{dataset}_fold_{fold}.csv",
        test="results/data/bodmas/{dataset}/folds/test_{dataset}_fold_{fold}.csv",
        classes="results/data/bodmas/{dataset}/folds/classes.csv",
        binaries=bodmas_binaries_input,
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
        mem_mb=hotconv_train_mem_mb(),
        runtime=hotconv_train_runtime(),
        gpu=gpu_count(),
    params:
        binaries=lambda wildcards: bodmas_binaries(wildcards.dataset),
        outdir=lambda wildcards: hotconv_job_dir(
            wildcards.dataset, wildcards.variant, wildcards.fold
        ),
        options=hotconv_train_options(),
    shell:
        "membench hotconv train --variant {wildcards.variant} --dataset {wildcards.dataset} --fold {wildcards.fold}"
        " --train {input.train} --val {input.val} --test {input.test} --classes {input.classes}"
        " --binaries {params.binaries} --outdir {params.outdir} {params.options} > {log} 2>&1"


rule hotconv_table:
    input:
        hotconv_metrics_files(),
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
        mem_mb=1000,
        runtime=5,
    shell:
        "membench table metrics --out {output.csv} {input} > {log} 2>&1"


rule hotconv_sweep:
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
    conda:
        ENV
    threads: 2
    resources:
        mem_mb=4000,
        runtime=60,
        gpu=gpu_count(),
    params:
        options=hotconv_sweep_options("sweep"),
    shell:
        "membench hotconv bench --out {output.csv} {params.options} > {log} 2>&1"


# The paper model (256 filters, window 512) at max_len up to 2 MiB: minutes on a CPU, so it is not
# part of the default target; run it by name: snakemake --cores 2 hotconv_bench
rule hotconv_bench:
    output:
        csv="results/tables/hotconv_bench.csv",
        parquet="results/tables/hotconv_bench.parquet",
    log:
        log_path("hotconv_bench"),
    benchmark:
        benchmark_path("hotconv_bench")
    conda:
        ENV
    threads: 2
    resources:
        mem_mb=8000,
        runtime=120,
        gpu=gpu_count(),
    params:
        options=hotconv_sweep_options("bench"),
    shell:
        "membench hotconv bench --out {output.csv} {params.options} > {log} 2>&1"


rule plot_hotconv_variants:
    input:
        rules.hotconv_table.output.csv,
    output:
        report(
            "results/plots/hotconv_variants.png",
            caption="../workflow/report/hotconv_variants.rst",
            category="HotConv",
            labels={"figure": "memory, time, CO2e and accuracy per variant"},
        ),
    log:
        log_path("plot_hotconv_variants"),
    benchmark:
        benchmark_path("plot_hotconv_variants")
    localrule: True
    conda:
        ENV
    resources:
        mem_mb=1000,
        runtime=10,
    shell:
        "membench hotconv plot --table {input} --out {output} > {log} 2>&1"


rule plot_hotconv_sweep:
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
        log_path("plot_hotconv_sweep"),
    benchmark:
        benchmark_path("plot_hotconv_sweep")
    localrule: True
    conda:
        ENV
    resources:
        mem_mb=1000,
        runtime=10,
    shell:
        "membench hotconv plot-sweep --table {input} --out {output} > {log} 2>&1"


if HOTCONV["datasets"]:
    FINAL_OUTPUTS.extend(
        [
            "results/tables/hotconv.csv",
            "results/tables/hotconv_sweep.csv",
            "results/plots/hotconv_variants.png",
            "results/plots/hotconv_sweep.png",
        ]
    )
