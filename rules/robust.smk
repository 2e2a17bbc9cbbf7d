# Robust training: sequential PGD-K / FGSM-RS baselines and parallel adversary generation
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
    wildcard_constraints:
        robust_run=alternatives([r for r in ROBUST_RUNS if r not in ROBUST_NODE_RUNS]),
    conda:
        ENV
    # A run keeps its cores to itself, so its timing is not shared with another job.
    threads: lambda wildcards: robust_run_cores(wildcards.robust_run)
    resources:
        mem_mb=4000,
        runtime=lambda wildcards: robust_run_minutes(wildcards.robust_run),
        gpu=lambda wildcards: robust_run_gpus(wildcards.robust_run),
    params:
        outdir=subpath(output.metrics, parent=True),
        options=lambda wildcards: robust_train_options(wildcards.robust_run),
        # Shell code that quotes its own values (workflow_support), so the command takes it as is.
        launcher=lambda wildcards: robust_launcher(wildcards.robust_run),
    shell:
        "{params.launcher} robust train --outdir {params.outdir:q} {params.options:q} > {log:q} 2>&1"


# A parallel run over several nodes, the way division's multi-node training runs: a multi-task job
# (`nodes`, `tasks` = P + 1 ranks, `mpi` set so that the executor runs the command in the batch step),
# whose own srun starts one membench per rank with MASTER_ADDR on the allocation's first node.
rule robust_train_nodes:
    output:
        metrics="results/robust/{robust_run}/metrics.json",
        memlog="results/robust/{robust_run}/memlog.csv",
        history="results/robust/{robust_run}/history.csv",
        staleness="results/robust/{robust_run}/staleness.csv",
    log:
        log_path("robust_train", "{robust_run}"),
    benchmark:
        benchmark_path("robust_train", "{robust_run}")
    wildcard_constraints:
        robust_run=alternatives(ROBUST_NODE_RUNS),
    conda:
        ENV
    threads: lambda wildcards: robust_run_cores(wildcards.robust_run)
    resources:
        **robust_nodes_gpu_resources(),
        mem_mb=4000,
        runtime=lambda wildcards: robust_run_minutes(wildcards.robust_run),
        nodes=ROBUST["nodes"],
        tasks=lambda wildcards: robust_run_tasks(wildcards.robust_run),
        tasks_per_gpu=0,
        mpi="srun",
    params:
        outdir=subpath(output.metrics, parent=True),
        options=lambda wildcards: robust_train_options(wildcards.robust_run),
        # Shell code that quotes its own values (workflow_support), so the command takes it as is.
        launcher=lambda wildcards: robust_launcher(wildcards.robust_run),
    shell:
        "{params.launcher} robust train --outdir {params.outdir:q} {params.options:q} > {log:q} 2>&1"


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
        attack_steps=ROBUST["attack_steps"],
        weak_base_attack_steps=ROBUST["weak_base_attack_steps"],
    shell:
        "membench robust table --out {output.csv:q} --attack-steps {params.attack_steps:q}"
        " --weak-base-attack-steps {params.weak_base_attack_steps:q} {input:q} > {log:q} 2>&1"


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
        "membench robust plot-scaling --table {input:q} --out {output:q} > {log:q} 2>&1"


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
        "membench robust plot-staleness --table {input:q} --out {output:q} > {log:q} 2>&1"


if ROBUST_RUNS:
    FINAL_OUTPUTS.extend(
        [
            "results/tables/robust.csv",
            "results/plots/robust_scaling.png",
            "results/plots/robust_staleness.png",
        ]
    )
