# Application classification: the C++ kernels' build, graphs (RMAT data graphs, induced
# patterns), benchmark jobs (implementation x device x threads x precision x graph pair), their table,
# graph statistics, figures.


rule appclass_build:
    input:
        # The kernels' source, so that editing it rebuilds (path from this checkout, also when the
        # workflow is used as a module of another).
        workflow.source_path("../workflow/membench/appclass/csrc/appclass_ops.cpp"),
    output:
        manifest=APPCLASS_BUILD_MANIFEST,
    log:
        log_path("appclass_build"),
    benchmark:
        benchmark_path("appclass_build")
    # Start first: the jobs of a whole system wait for it, and it compiles on one core.
    priority: 2
    conda:
        ENV
    # One source file: one compiler process.
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        outdir=lambda wildcards, output: os.path.dirname(output.manifest),
    shell:
        "membench appclass build --outdir {params.outdir:q} > {log:q} 2>&1"


rule appclass_rmat:
    output:
        vertices="results/data/graphs/{graph}/data.Vertex.csv",
        edges="results/data/graphs/{graph}/data.Edges.csv",
    log:
        log_path("appclass_rmat", "{graph}"),
    benchmark:
        benchmark_path("appclass_rmat", "{graph}")
    wildcard_constraints:
        graph=alternatives(appclass_graphs("rmat")),
    conda:
        ENV
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        options=lambda wildcards: appclass_rmat_options(wildcards.graph),
    shell:
        "membench appclass generate-rmat --vertices {output.vertices:q} --edges {output.edges:q} {params.options:q} > {log:q} 2>&1"


rule appclass_pattern:
    input:
        vertices=lambda wildcards: appclass_graph_files(wildcards.graph)[0],
        edges=lambda wildcards: appclass_graph_files(wildcards.graph)[1],
    output:
        vertices="results/data/graphs/{graph}/patterns/{pattern}.Vertex.csv",
        edges="results/data/graphs/{graph}/patterns/{pattern}.Edges.csv",
    log:
        log_path("appclass_pattern", "{graph}/{pattern}"),
    benchmark:
        benchmark_path("appclass_pattern", "{graph}/{pattern}")
    wildcard_constraints:
        graph=alternatives(appclass_graphs()),
        pattern=alternatives(appclass_patterns("induced")),
    conda:
        ENV
    resources:
        mem_mb=4000,
        runtime=10,
    params:
        max_pattern_nodes=lambda wildcards: APPCLASS["patterns"][wildcards.pattern][
            "max_pattern_nodes"
        ],
        seed=config["seed"],
    shell:
        "membench appclass generate-pattern {input.vertices:q} {input.edges:q} --max-pattern-nodes {params.max_pattern_nodes:q}"
        " --seed {params.seed:q} --vertices {output.vertices:q} --edges {output.edges:q} > {log:q} 2>&1"


rule appclass_reference:
    input:
        appclass_pair_files,
    output:
        metrics=f"results/appclass/{{graph}}/{{pattern}}/{APPCLASS_REFERENCE_VARIANT}/metrics.json",
        memlog=f"results/appclass/{{graph}}/{{pattern}}/{APPCLASS_REFERENCE_VARIANT}/memlog.csv",
        beliefs=f"results/appclass/{{graph}}/{{pattern}}/{APPCLASS_REFERENCE_VARIANT}/beliefs.npy",
    log:
        log_path("appclass_reference", "{graph}/{pattern}"),
    benchmark:
        benchmark_path("appclass_reference", "{graph}/{pattern}")
    wildcard_constraints:
        graph=alternatives(appclass_graphs()),
        pattern=alternatives(appclass_patterns()),
    conda:
        ENV
    # Timing jobs claim every core of a local run (no job runs beside them), their own threads on a cluster.
    threads: appclass_threads(APPCLASS_REFERENCE_VARIANT)
    resources:
        mem_mb=appclass_mem_mb,
        runtime=60,
    params:
        outdir=lambda wildcards, output: os.path.dirname(output.metrics),
        options=appclass_bench_options(APPCLASS_REFERENCE_VARIANT),
    shell:
        "membench appclass bench {input:q} --dataset {wildcards.graph:q}/{wildcards.pattern:q} --outdir {params.outdir:q}"
        " --out-npy {output.beliefs:q} {params.options:q} > {log:q} 2>&1"


rule appclass_bench:
    input:
        graphs=appclass_pair_files,
        reference=f"results/appclass/{{graph}}/{{pattern}}/{APPCLASS_REFERENCE_VARIANT}/beliefs.npy",
        manifest=lambda wildcards: appclass_build_input(wildcards.variant),
    output:
        metrics="results/appclass/{graph}/{pattern}/{variant}/metrics.json",
        memlog="results/appclass/{graph}/{pattern}/{variant}/memlog.csv",
    log:
        log_path("appclass_bench", "{graph}/{pattern}/{variant}"),
    benchmark:
        benchmark_path("appclass_bench", "{graph}/{pattern}/{variant}")
    wildcard_constraints:
        graph=alternatives(appclass_graphs()),
        pattern=alternatives(appclass_patterns()),
        variant=alternatives(APPCLASS_TORCH_VARIANTS),
    conda:
        ENV
    # Timing jobs claim every core of a local run (no job runs beside them), their own threads on a cluster.
    threads: lambda wildcards: appclass_threads(wildcards.variant)
    resources:
        mem_mb=appclass_mem_mb,
        runtime=60,
        gpu=lambda wildcards: appclass_variant_gpus(wildcards.variant),
    params:
        outdir=lambda wildcards, output: os.path.dirname(output.metrics),
        options=lambda wildcards: appclass_bench_options(wildcards.variant),
    shell:
        "membench appclass bench {input.graphs:q} --dataset {wildcards.graph:q}/{wildcards.pattern:q} --outdir {params.outdir:q}"
        " --reference-npy {input.reference:q} {params.options:q} > {log:q} 2>&1"


rule appclass_table:
    input:
        appclass_all_metrics(),
    output:
        csv=report(
            "results/tables/appclass.csv",
            caption="../workflow/report/appclass_table.rst",
            category="Application classification",
            labels={"table": "appclass benchmark jobs"},
        ),
        parquet="results/tables/appclass.parquet",
    log:
        log_path("appclass_table"),
    benchmark:
        benchmark_path("appclass_table")
    localrule: True
    conda:
        ENV
    resources:
        mem_mb=1000,
        runtime=5,
    shell:
        "membench table metrics --out {output.csv:q} {input:q} > {log:q} 2>&1"


rule appclass_graph_stats:
    input:
        appclass_stats_inputs(),
    output:
        csv=report(
            "results/tables/appclass_graphs.csv",
            caption="../workflow/report/appclass_graphs.rst",
            category="Application classification",
            labels={"table": "graph statistics"},
        ),
        parquet="results/tables/appclass_graphs.parquet",
    log:
        log_path("appclass_graph_stats"),
    benchmark:
        benchmark_path("appclass_graph_stats")
    conda:
        ENV
    resources:
        mem_mb=4000,
        runtime=10,
    params:
        pairs=appclass_stats_pairs(),
    shell:
        "membench appclass graph-stats --out {output.csv:q} {params.pairs:q} > {log:q} 2>&1"


rule appclass_plots:
    input:
        rules.appclass_table.output.csv,
    output:
        runtime=report(
            "results/plots/appclass_runtime.png",
            caption="../workflow/report/appclass_runtime.rst",
            category="Application classification",
            labels={"figure": "runtime vs graph size"},
        ),
        speedup=report(
            "results/plots/appclass_speedup.png",
            caption="../workflow/report/appclass_speedup.rst",
            category="Application classification",
            labels={"figure": "speed-up over the reference"},
        ),
    log:
        log_path("appclass_plots"),
    benchmark:
        benchmark_path("appclass_plots")
    localrule: True
    conda:
        ENV
    resources:
        mem_mb=1000,
        runtime=5,
    shell:
        "membench appclass plot --table {input:q} --runtime-png {output.runtime:q} --speedup-png {output.speedup:q} > {log:q} 2>&1"


if appclass_pairs():
    FINAL_OUTPUTS.extend(
        [
            "results/tables/appclass.csv",
            "results/tables/appclass_graphs.csv",
            "results/plots/appclass_runtime.png",
            "results/plots/appclass_speedup.png",
        ]
    )
