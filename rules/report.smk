# Figures of the report that summarise the shared stages (data, meter).


rule plot_bodmas_sizes:
    input:
        bodmas_all_fold_files(),
    output:
        report(
            "results/plots/bodmas_sizes.png",
            caption="../workflow/report/bodmas_sizes.rst",
            category="Datasets",
            labels={"figure": "BODMAS file sizes"},
        ),
    log:
        log_path("plot_bodmas_sizes"),
    benchmark:
        benchmark_path("plot_bodmas_sizes")
    localrule: True
    conda:
        ENV
    resources:
        mem_mb=1000,
        runtime=10,
    shell:
        "membench bodmas plot-sizes --out {output} {input} > {log} 2>&1"


rule plot_meter_memlog:
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
        log_path("plot_meter_memlog"),
    benchmark:
        benchmark_path("plot_meter_memlog")
    localrule: True
    conda:
        ENV
    resources:
        mem_mb=1000,
        runtime=10,
    shell:
        "membench meter plot --memlog {input} --out {output} > {log} 2>&1"


FINAL_OUTPUTS.append("results/plots/meter_memlog.png")
if bodmas_datasets():
    FINAL_OUTPUTS.append("results/plots/bodmas_sizes.png")
