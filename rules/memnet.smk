# GPUMemNet: generate configurations, measure each in its own process, clean into
# GPUMemNet's CSV format, evaluate every estimator (measured and published data), train them for
# `membench memnet predict`, then the table and figures.


rule memnet_generate:
    output:
        "results/memnet/{memnet_family}/configs.csv",
    log:
        log_path("memnet_generate", "{memnet_family}"),
    benchmark:
        benchmark_path("memnet_generate", "{memnet_family}")
    conda:
        ENV
    resources:
        mem_mb=1000,
        runtime=5,
    params:
        options=lambda wildcards: memnet_generate_options(wildcards.memnet_family),
    shell:
        "membench memnet generate --family {wildcards.memnet_family:q} {params.options:q} --out {output:q} > {log:q} 2>&1"


# One forked process per configuration; records/ is not an output, so a rerun after a kill
# measures only the configurations without a record.
rule memnet_measure:
    input:
        rules.memnet_generate.output,
    output:
        "results/memnet/{memnet_family}/measurements.csv",
    log:
        log_path("memnet_measure", "{memnet_family}"),
    benchmark:
        benchmark_path("memnet_measure", "{memnet_family}")
    conda:
        ENV
    # Memory jobs claim every core of a local run (no job runs beside them), two CPUs of their own on a cluster.
    threads: memnet_measure_threads()
    resources:
        mem_mb=8000,
        runtime=memnet_measure_runtime(),
        gpu=gpu_count(),
    params:
        records="results/memnet/{memnet_family}/records",
        options=memnet_measure_options(),
    shell:
        "membench memnet measure --configs {input:q} --family {wildcards.memnet_family:q} --records-dir {params.records:q}"
        " --out {output:q} {params.options:q} > {log:q} 2>&1"


rule memnet_clean:
    input:
        configs=rules.memnet_generate.output,
        measurements=rules.memnet_measure.output,
    output:
        "results/memnet/{memnet_family}/gpumemnet.csv",
    log:
        log_path("memnet_clean", "{memnet_family}"),
    benchmark:
        benchmark_path("memnet_clean", "{memnet_family}")
    conda:
        ENV
    resources:
        mem_mb=1000,
        runtime=5,
    shell:
        "membench memnet clean --configs {input.configs:q} --measurements {input.measurements:q}"
        " --family {wildcards.memnet_family:q} --out {output:q} > {log:q} 2>&1"


rule memnet_evaluate:
    input:
        memnet_dataset_csv,
    output:
        table="results/memnet/evaluation/{memnet_dataset}/table.csv",
        parquet="results/memnet/evaluation/{memnet_dataset}/table.parquet",
        predictions="results/memnet/evaluation/{memnet_dataset}/predictions.csv",
    log:
        log_path("memnet_evaluate", "{memnet_dataset}"),
    benchmark:
        benchmark_path("memnet_evaluate", "{memnet_dataset}")
    conda:
        ENV
    resources:
        mem_mb=4000,
        runtime=60,
    params:
        options=lambda wildcards: memnet_evaluate_options(wildcards.memnet_dataset),
    shell:
        "membench memnet evaluate --data {input:q} --dataset {wildcards.memnet_dataset:q} {params.options:q}"
        " --out {output.table:q} --out-predictions {output.predictions:q} > {log:q} 2>&1"


rule memnet_train:
    input:
        memnet_dataset_csv,
    output:
        "results/memnet/estimators/{memnet_dataset}/estimators.json",
    log:
        log_path("memnet_train", "{memnet_dataset}"),
    benchmark:
        benchmark_path("memnet_train", "{memnet_dataset}")
    conda:
        ENV
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        outdir=lambda wildcards, output: os.path.dirname(output[0]),
        options=lambda wildcards: memnet_train_options(wildcards.memnet_dataset),
    shell:
        "membench memnet train --data {input:q} {params.options:q} --outdir {params.outdir:q} > {log:q} 2>&1"


rule memnet_table:
    input:
        expand(
            "results/memnet/evaluation/{memnet_dataset}/table.csv",
            memnet_dataset=memnet_datasets(),
        ),
    output:
        csv=report(
            "results/tables/memnet.csv",
            caption="../workflow/report/memnet_table.rst",
            category="GPUMemNet",
            labels={"table": "memory estimators"},
        ),
        parquet="results/tables/memnet.parquet",
    log:
        log_path("memnet_table"),
    benchmark:
        benchmark_path("memnet_table")
    localrule: True
    conda:
        ENV
    resources:
        mem_mb=1000,
        runtime=5,
    shell:
        "membench memnet table --out {output.csv:q} {input:q} > {log:q} 2>&1"


rule memnet_plots:
    input:
        tables=expand(
            "results/memnet/evaluation/{memnet_dataset}/table.csv",
            memnet_dataset=memnet_datasets(),
        ),
        predictions=expand(
            "results/memnet/evaluation/{memnet_dataset}/predictions.csv",
            memnet_dataset=memnet_datasets(),
        ),
    output:
        confusion=report(
            "results/plots/memnet_confusion.png",
            caption="../workflow/report/memnet_confusion.rst",
            category="GPUMemNet",
            labels={"figure": "confusion matrices"},
        ),
        comparison=report(
            "results/plots/memnet_comparison.png",
            caption="../workflow/report/memnet_comparison.rst",
            category="GPUMemNet",
            labels={"figure": "estimator comparison"},
        ),
    log:
        log_path("memnet_plots"),
    benchmark:
        benchmark_path("memnet_plots")
    localrule: True
    conda:
        ENV
    resources:
        mem_mb=2000,
        runtime=5,
    params:
        tables=lambda wildcards, input: [
            word for path in input.tables for word in ("--table", path)
        ],
        predictions=lambda wildcards, input: [
            word for path in input.predictions for word in ("--predictions", path)
        ],
    shell:
        "membench memnet plot {params.tables:q} {params.predictions:q} --confusion-png {output.confusion:q}"
        " --comparison-png {output.comparison:q} > {log:q} 2>&1"


if memnet_datasets():
    FINAL_OUTPUTS.extend(
        [
            "results/tables/memnet.csv",
            "results/plots/memnet_confusion.png",
            "results/plots/memnet_comparison.png",
        ]
        + expand(
            "results/memnet/estimators/{memnet_dataset}/estimators.json",
            memnet_dataset=memnet_datasets(),
        )
    )
