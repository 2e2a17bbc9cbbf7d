# GPUMemNet: generate configurations, measure each in its own process, clean into
# GPUMemNet's CSV format, evaluate every estimator at the requested risk (measured, shipped and
# published data), train them once for `membench memnet predict`, then the table and figures.

MEMNET = config["memnet"]
MEMNET_FAMILIES = workflow_support.memnet_measured_families(MEMNET)
# Evaluated data sets: measured_<family> for each measured family (the CPU smoke test by
# default), the shipped GPU measurements (GPUMemNet's MLP data), then the user's CSVs; each with
# its CSV (a shipped one's a file of this checkout), family, classes and GPU.
MEMNET_DATASETS = {
    name: {
        **spec,
        "path": checkout_path(spec["resource"]) if "resource" in spec else spec["path"],
    }
    for name, spec in workflow_support.memnet_datasets(MEMNET).items()
}


wildcard_constraints:
    memnet_family=alternatives(MEMNET_FAMILIES),
    memnet_dataset=alternatives(MEMNET_DATASETS),


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
        runtime=5,
    params:
        options=lambda wildcards: workflow_support.memnet_generate_options(
            MEMNET["families"][wildcards.memnet_family], config["seed"]
        ),
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
    threads: workflow_support.timing_job_threads(2, local_cores())
    resources:
        mem_mb=8000,
        runtime=workflow_support.memnet_measure_runtime_min(MEMNET),
        gpu=gpu_count(),
    params:
        records="results/memnet/{memnet_family}/records",
        options=workflow_support.memnet_measure_options(
            MEMNET, config["meter"], config["device"]
        ),
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
        runtime=5,
    shell:
        "membench memnet clean --configs {input.configs:q} --measurements {input.measurements:q}"
        " --family {wildcards.memnet_family:q} --out {output:q} > {log:q} 2>&1"


rule memnet_evaluate:
    input:
        lambda wildcards: MEMNET_DATASETS[wildcards.memnet_dataset]["path"],
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
        options=lambda wildcards: workflow_support.memnet_estimator_options(
            MEMNET,
            MEMNET_DATASETS[wildcards.memnet_dataset]["family"],
            MEMNET_DATASETS[wildcards.memnet_dataset]["bins"],
            config["seed"],
            evaluate=True,
            device_name=MEMNET_DATASETS[wildcards.memnet_dataset]["device_name"],
        ),
    shell:
        "membench memnet evaluate --data {input:q} --dataset {wildcards.memnet_dataset:q} {params.options:q}"
        " --out {output.table:q} --out-predictions {output.predictions:q} > {log:q} 2>&1"


rule memnet_train:
    input:
        lambda wildcards: MEMNET_DATASETS[wildcards.memnet_dataset]["path"],
    output:
        "results/memnet/estimators/{memnet_dataset}/estimators.json",
        "results/memnet/estimators/{memnet_dataset}/estimators.pt",
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
        outdir=subpath(output[0], parent=True),
        options=lambda wildcards: workflow_support.memnet_estimator_options(
            MEMNET,
            MEMNET_DATASETS[wildcards.memnet_dataset]["family"],
            MEMNET_DATASETS[wildcards.memnet_dataset]["bins"],
            config["seed"],
            evaluate=False,
            device_name=MEMNET_DATASETS[wildcards.memnet_dataset]["device_name"],
        ),
    shell:
        "membench memnet train --data {input:q} --dataset {wildcards.memnet_dataset:q} {params.options:q}"
        " --outdir {params.outdir:q} > {log:q} 2>&1"


rule memnet_table:
    input:
        expand(
            "results/memnet/evaluation/{memnet_dataset}/table.csv",
            memnet_dataset=MEMNET_DATASETS,
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
        runtime=5,
    shell:
        "membench memnet table --out {output.csv:q} {input:q} > {log:q} 2>&1"


rule memnet_plots:
    input:
        tables=expand(
            "results/memnet/evaluation/{memnet_dataset}/table.csv",
            memnet_dataset=MEMNET_DATASETS,
        ),
        predictions=expand(
            "results/memnet/evaluation/{memnet_dataset}/predictions.csv",
            memnet_dataset=MEMNET_DATASETS,
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
        tradeoff=report(
            "results/plots/memnet_tradeoff.png",
            caption="../workflow/report/memnet_tradeoff.rst",
            category="GPUMemNet",
            labels={"figure": "accuracy against under-estimation"},
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
        " --comparison-png {output.comparison:q} --tradeoff-png {output.tradeoff:q} > {log:q} 2>&1"


if MEMNET_DATASETS:
    FINAL_OUTPUTS.extend(
        [
            "results/tables/memnet.csv",
            "results/plots/memnet_confusion.png",
            "results/plots/memnet_comparison.png",
            "results/plots/memnet_tradeoff.png",
        ]
        + expand(
            "results/memnet/estimators/{memnet_dataset}/estimators.json",
            memnet_dataset=MEMNET_DATASETS,
        )
    )
