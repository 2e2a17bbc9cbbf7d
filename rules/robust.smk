# Robust training: sequential PGD-K / FGSM-RS baselines and parallel adversary generation
# (P producers, one trainer publishing weights every k steps), swept over P and k; the scaling table
# with speed-ups over the best sequential run on the same cores, and its figures.

from membench.robust.plan import plan_runs, run_cores, spans_nodes

ROBUST = config["robust"]
ROBUST_RUNS = plan_runs(ROBUST) if ROBUST["enabled"] else {}
# Parallel runs over several nodes: a multi-task Slurm job each (rule robust_train_nodes).
ROBUST_NODE_RUNS = [
    run for run, options in ROBUST_RUNS.items() if spans_nodes(options, ROBUST["nodes"])
]
ROBUST_OPTIONS = {
    run: workflow_support.robust_train_options(
        options, config["meter"], config["device"], config["seed"]
    )
    for run, options in ROBUST_RUNS.items()
}
# What starts a run: shell code that quotes its own values, so the command takes it as is.
ROBUST_LAUNCHERS = {
    run: workflow_support.robust_train_launcher(options, ROBUST["nodes"])
    for run, options in ROBUST_RUNS.items()
}
# GPUs per node of a multi-node run on GPUs; none on the CPU.
ROBUST_NODES_GPUS = (
    {
        "gres": lambda wildcards: workflow_support.robust_nodes_gres(
            ROBUST_RUNS[wildcards.robust_run], ROBUST["nodes"]
        )
    }
    if gpu_count()
    else {}
)


wildcard_constraints:
    robust_run=alternatives(ROBUST_RUNS),


# Timed: no `benchmark:`, whose poller would take CPU from the job it times (docs/DEVELOPING.md).
rule robust_train:
    output:
        metrics="results/robust/{robust_run}/metrics.json",
        memlog="results/robust/{robust_run}/memlog.csv",
        history="results/robust/{robust_run}/history.csv",
        staleness="results/robust/{robust_run}/staleness.csv",
    log:
        log_path("robust_train", "{robust_run}"),
    wildcard_constraints:
        robust_run=alternatives([r for r in ROBUST_RUNS if r not in ROBUST_NODE_RUNS]),
    conda:
        ENV
    # A run keeps its cores to itself, so its timing is not shared with another job.
    threads: lambda wildcards: run_cores(ROBUST_RUNS[wildcards.robust_run], ROBUST["nodes"])
    resources:
        mem_mb=4000,
        runtime=lambda wildcards: workflow_support.robust_run_minutes(
            ROBUST, ROBUST_RUNS[wildcards.robust_run]
        ),
        gpu=lambda wildcards: workflow_support.robust_run_gpus(
            ROBUST_RUNS[wildcards.robust_run], gpu_count()
        ),
    params:
        outdir=subpath(output.metrics, parent=True),
        options=lambda wildcards: ROBUST_OPTIONS[wildcards.robust_run],
        # Shell code that quotes its own values (workflow_support), so the command takes it as is.
        launcher=lambda wildcards: ROBUST_LAUNCHERS[wildcards.robust_run],
    shell:
        "{params.launcher} robust train --outdir {params.outdir:q} {params.options:q} > {log:q} 2>&1"


# A parallel run over several nodes, the way division's multi-node training runs: a multi-task job
# (`nodes`, `tasks` = P + 1 ranks, `mpi` set so that the executor runs the command in the batch step),
# whose own srun starts one membench per rank with MASTER_ADDR on the allocation's first node.
# Timed: no `benchmark:`, whose poller would take CPU from the job it times (docs/DEVELOPING.md).
rule robust_train_nodes:
    output:
        metrics="results/robust/{robust_run}/metrics.json",
        memlog="results/robust/{robust_run}/memlog.csv",
        history="results/robust/{robust_run}/history.csv",
        staleness="results/robust/{robust_run}/staleness.csv",
    log:
        log_path("robust_train", "{robust_run}"),
    wildcard_constraints:
        robust_run=alternatives(ROBUST_NODE_RUNS),
    conda:
        ENV
    threads: lambda wildcards: run_cores(ROBUST_RUNS[wildcards.robust_run], ROBUST["nodes"])
    resources:
        **ROBUST_NODES_GPUS,
        mem_mb=4000,
        runtime=lambda wildcards: workflow_support.robust_run_minutes(
            ROBUST, ROBUST_RUNS[wildcards.robust_run]
        ),
        nodes=ROBUST["nodes"],
        tasks=lambda wildcards: ROBUST_RUNS[wildcards.robust_run]["producers"] + 1,
        tasks_per_gpu=0,
        mpi="srun",
    params:
        outdir=subpath(output.metrics, parent=True),
        options=lambda wildcards: ROBUST_OPTIONS[wildcards.robust_run],
        # Shell code that quotes its own values (workflow_support), so the command takes it as is.
        launcher=lambda wildcards: ROBUST_LAUNCHERS[wildcards.robust_run],
    shell:
        "{params.launcher} robust train --outdir {params.outdir:q} {params.options:q} > {log:q} 2>&1"


rule robust_table:
    input:
        [f"results/robust/{run}/metrics.json" for run in ROBUST_RUNS],
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
