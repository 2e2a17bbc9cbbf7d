# Robust training (seed 004): sequential PGD-K / FGSM-RS baselines and parallel adversary generation
# (P producers, one trainer publishing weights every k steps), swept over P and k; the scaling table
# with speed-ups over the best sequential run on the same cores, and its figures.


rule robust_train:
    output:
        metrics="results/robust/{robust_run}/metrics.json",
        memlog="results/robust/{robust_run}/memlog.csv",
        history="results/robust/{robust_run}/history.csv",
        staleness="results/robust/{robust_run}/staleness.csv",
    log:
        log_path("robust_train", "{robust_run}"),
    benchmark:
        benchmark_path("robust_train", "{robust_run}")
    conda:
        ENV
    # A run keeps its cores to itself, so its timing is not shared with another job.
    threads: lambda wildcards: robust_run_cores(wildcards.robust_run)
    resources:
        mem_mb=4000,
        runtime=lambda wildcards: robust_run_minutes(wildcards.robust_run),
        gpu=gpu_count(),
    params:
        outdir=subpath(output.metrics, parent=True),
        options=lambda wildcards: robust_train_options(wildcards.robust_run),
    shell:
        "membench robust train --outdir {params.outdir} {params.options} > {log} 2>&1"


rule robust_table:
    input:
        robust_metrics_files(),
    output:
        csv=report(
            "results/tables/robust.csv",
            caption="../workflow/report/robust_table.rst",
            category="robust",
            labels={"table": "runs, accuracies, speed-ups"},
        ),
        parquet="results/tables/robust.parquet",
    log:
        log_path("robust_table"),
    benchmark:
        benchmark_path("robust_table")
    localrule: True
    conda:
        ENV
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        steps=ROBUST["steps"],
        weak_base_steps=ROBUST["weak_base_steps"],
    shell:
        "membench robust table --out {output.csv} --strong-steps {params.steps}"
        " --weak-base-steps {params.weak_base_steps} {input} > {log} 2>&1"


rule robust_plot_scaling:
    input:
        rules.robust_table.output.csv,
    output:
        report(
            "results/plots/robust_scaling.png",
            caption="../workflow/report/robust_scaling.rst",
            category="robust",
            labels={"figure": "speed-up and robust accuracy"},
        ),
    log:
        log_path("robust_plot_scaling"),
    benchmark:
        benchmark_path("robust_plot_scaling")
    localrule: True
    conda:
        ENV
    resources:
        mem_mb=1000,
        runtime=10,
    shell:
        "membench robust plot-scaling --table {input} --out {output} > {log} 2>&1"


rule robust_plot_staleness:
    input:
        rules.robust_table.output.csv,
    output:
        report(
            "results/plots/robust_staleness.png",
            caption="../workflow/report/robust_staleness.rst",
            category="robust",
            labels={"figure": "staleness"},
        ),
    log:
        log_path("robust_plot_staleness"),
    benchmark:
        benchmark_path("robust_plot_staleness")
    localrule: True
    conda:
        ENV
    resources:
        mem_mb=1000,
        runtime=10,
    shell:
        "membench robust plot-staleness --table {input} --out {output} > {log} 2>&1"


if ROBUST_RUNS:
    FINAL_OUTPUTS.extend(
        [
            "results/tables/robust.csv",
            "results/plots/robust_scaling.png",
            "results/plots/robust_staleness.png",
        ]
    )
