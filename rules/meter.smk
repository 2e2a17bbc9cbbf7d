# The meter check: what this machine (or cluster node) lets membench measure, and at what cost.


# Timed: no `benchmark:`, whose poller would take CPU from the job it times (docs/DEVELOPING.md).
rule meter_check:
    output:
        metrics="results/meter/check/metrics.json",
        memlog="results/meter/check/memlog.csv",
    log:
        log_path("meter_check"),
    conda:
        ENV
    threads: 2
    resources:
        mem_mb=2000,
        runtime=15,
        gpu=gpu_count(),
    params:
        device=config["device"],
        options=cli_options(config["meter_check"])
        + workflow_support.meter_options(config["meter"]),
        seed=config["seed"],
    shell:
        "membench meter check --outdir results/meter/check --device {params.device:q}"
        " --seed {params.seed:q} {params.options:q} > {log:q} 2>&1"


rule meter_table:
    input:
        rules.meter_check.output.metrics,
    output:
        csv=report(
            "results/tables/meter.csv",
            caption="../workflow/report/meter.rst",
            category="Meter check",
            labels={"table": "meter check"},
        ),
        parquet="results/tables/meter.parquet",
    log:
        log_path("meter_table"),
    benchmark:
        benchmark_path("meter_table")
    localrule: True
    conda:
        ENV
    resources:
        runtime=5,
    shell:
        "membench table metrics --out {output.csv:q} {input:q} > {log:q} 2>&1"


rule meter_plot_memlog:
    input:
        rules.meter_check.output.memlog,
    output:
        report(
            "results/plots/meter_memlog.png",
            caption="../workflow/report/meter_memlog.rst",
            category="Meter check",
            labels={"figure": "memory over time"},
        ),
    log:
        log_path("meter_plot_memlog"),
    benchmark:
        benchmark_path("meter_plot_memlog")
    localrule: True
    conda:
        ENV
    resources:
        runtime=10,
    shell:
        "membench meter plot --memlog {input:q} --out {output:q} > {log:q} 2>&1"


FINAL_OUTPUTS.extend(["results/tables/meter.csv", "results/plots/meter_memlog.png"])
