# Application classification: the C++ kernels' build, graphs (RMAT data graphs, induced
# patterns), benchmark jobs (implementation x device x threads x precision x graph pair), their table,
# graph statistics, figures.

import os

from membench.appclass import extension as appclass_extension
from membench.core.config import APPCLASS_REFERENCE

APPCLASS = config["appclass"]
APPCLASS_BUILD_MANIFEST = "results/build/appclass/manifest.json"
APPCLASS_VARIANTS = workflow_support.appclass_variants(APPCLASS["variants"])
APPCLASS_REFERENCE_VARIANT = workflow_support.appclass_variant_name(APPCLASS_REFERENCE)
APPCLASS_TORCH_VARIANTS = [
    name for name, v in APPCLASS_VARIANTS.items() if v["implementation"] == "torch"
]
# The build manifest a variant's jobs wait for; none for the NumPy reference and for variants that
# pick the pure-torch kernels.
APPCLASS_BUILD_INPUT = {
    name: APPCLASS_BUILD_MANIFEST if workflow_support.appclass_uses_build(v) else []
    for name, v in APPCLASS_VARIANTS.items()
}
APPCLASS_BENCH_OPTIONS = {
    name: workflow_support.appclass_bench_options(
        v, APPCLASS, APPCLASS_BUILD_INPUT[name] or None, config["meter"]
    )
    for name, v in APPCLASS_VARIANTS.items()
}
# Timing jobs claim every core of a local run (no job runs beside them), their own threads on a
# cluster.
APPCLASS_THREADS = {
    name: workflow_support.timing_job_threads(v["threads"], local_cores())
    for name, v in APPCLASS_VARIANTS.items()
}
# (vertices, edges) of each data graph: the user's files, or generated under results/data/graphs;
# of each pattern on each graph: the user's files, or induced from the graph.
APPCLASS_GRAPH_FILES = {
    graph: (
        (spec["vertices"], spec["edges"])
        if spec["source"] == "files"
        else (
            f"results/data/graphs/{graph}/data.Vertex.csv",
            f"results/data/graphs/{graph}/data.Edges.csv",
        )
    )
    for graph, spec in APPCLASS["graphs"].items()
}
APPCLASS_PATTERN_FILES = {
    (graph, pattern): (
        (spec["vertices"], spec["edges"])
        if spec["source"] == "files"
        else (
            f"results/data/graphs/{graph}/patterns/{pattern}.Vertex.csv",
            f"results/data/graphs/{graph}/patterns/{pattern}.Edges.csv",
        )
    )
    for graph in APPCLASS["graphs"]
    for pattern, spec in APPCLASS["patterns"].items()
}
APPCLASS_PAIRS = [os.path.split(pair) for pair in APPCLASS["benchmark_pairs"]]
# The four graph files of each benchmarked pair, in the order the commands take them.
APPCLASS_PAIR_FILES = {
    pair: [*APPCLASS_GRAPH_FILES[pair[0]], *APPCLASS_PATTERN_FILES[pair]]
    for pair in APPCLASS_PAIRS
}
APPCLASS_METRICS = [
    f"results/appclass/{graph}/{pattern}/{variant}/metrics.json"
    for graph, pattern in APPCLASS_PAIRS
    for variant in APPCLASS_VARIANTS
]


# Builds into the per-user cache ($MEMBENCH_CACHE_DIR, else ~/.cache/membench), unless built there
# already; its manifest here names that build for the jobs (and for Snakemake, which tracks it).
rule appclass_build:
    input:
        # The kernels' sources and headers, so that editing them rebuilds (paths from this
        # checkout, also when the workflow is used as a module of another).
        [
            checkout_path(f"workflow/membench/appclass/csrc/{name}")
            for name in appclass_extension.SPEC.source_names()
        ],
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
        outdir=subpath(output.manifest, parent=True),
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
        graph=alternatives(with_source(APPCLASS["graphs"], "rmat")),
    conda:
        ENV
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        options=lambda wildcards: workflow_support.appclass_rmat_options(
            APPCLASS["graphs"][wildcards.graph], APPCLASS, config["seed"]
        ),
    shell:
        "membench appclass generate-rmat --vertices {output.vertices:q} --edges {output.edges:q} {params.options:q} > {log:q} 2>&1"


rule appclass_pattern:
    input:
        vertices=lambda wildcards: APPCLASS_GRAPH_FILES[wildcards.graph][0],
        edges=lambda wildcards: APPCLASS_GRAPH_FILES[wildcards.graph][1],
    output:
        vertices="results/data/graphs/{graph}/patterns/{pattern}.Vertex.csv",
        edges="results/data/graphs/{graph}/patterns/{pattern}.Edges.csv",
    log:
        log_path("appclass_pattern", "{graph}/{pattern}"),
    benchmark:
        benchmark_path("appclass_pattern", "{graph}/{pattern}")
    wildcard_constraints:
        graph=alternatives(APPCLASS["graphs"]),
        pattern=alternatives(with_source(APPCLASS["patterns"], "induced")),
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
        lambda wildcards: APPCLASS_PAIR_FILES[wildcards.graph, wildcards.pattern],
    output:
        metrics=f"results/appclass/{{graph}}/{{pattern}}/{APPCLASS_REFERENCE_VARIANT}/metrics.json",
        memlog=f"results/appclass/{{graph}}/{{pattern}}/{APPCLASS_REFERENCE_VARIANT}/memlog.csv",
        beliefs=f"results/appclass/{{graph}}/{{pattern}}/{APPCLASS_REFERENCE_VARIANT}/beliefs.npy",
    log:
        log_path("appclass_reference", "{graph}/{pattern}"),
    benchmark:
        benchmark_path("appclass_reference", "{graph}/{pattern}")
    wildcard_constraints:
        graph=alternatives(APPCLASS["graphs"]),
        pattern=alternatives(APPCLASS["patterns"]),
    conda:
        ENV
    # Timing jobs claim every core of a local run (no job runs beside them), their own threads on a cluster.
    threads: APPCLASS_THREADS[APPCLASS_REFERENCE_VARIANT]
    resources:
        mem_mb=lambda wildcards: workflow_support.appclass_mem_mb(
            APPCLASS["graphs"][wildcards.graph],
            APPCLASS["patterns"][wildcards.pattern],
        ),
        runtime=60,
    params:
        outdir=subpath(output.metrics, parent=True),
        options=APPCLASS_BENCH_OPTIONS[APPCLASS_REFERENCE_VARIANT],
    shell:
        "membench appclass bench {input:q} --dataset {wildcards.graph:q}/{wildcards.pattern:q} --outdir {params.outdir:q}"
        " --out-npy {output.beliefs:q} {params.options:q} > {log:q} 2>&1"


# Timed: no `benchmark:`, whose poller would take CPU from the job it times (docs/DEVELOPING.md).
rule appclass_bench:
    input:
        graphs=lambda wildcards: APPCLASS_PAIR_FILES[wildcards.graph, wildcards.pattern],
        reference=f"results/appclass/{{graph}}/{{pattern}}/{APPCLASS_REFERENCE_VARIANT}/beliefs.npy",
        manifest=lambda wildcards: APPCLASS_BUILD_INPUT[wildcards.variant],
    output:
        metrics="results/appclass/{graph}/{pattern}/{variant}/metrics.json",
        memlog="results/appclass/{graph}/{pattern}/{variant}/memlog.csv",
    log:
        log_path("appclass_bench", "{graph}/{pattern}/{variant}"),
    wildcard_constraints:
        graph=alternatives(APPCLASS["graphs"]),
        pattern=alternatives(APPCLASS["patterns"]),
        variant=alternatives(APPCLASS_TORCH_VARIANTS),
    conda:
        ENV
    # Timing jobs claim every core of a local run (no job runs beside them), their own threads on a cluster.
    threads: lambda wildcards: APPCLASS_THREADS[wildcards.variant]
    resources:
        mem_mb=lambda wildcards: workflow_support.appclass_mem_mb(
            APPCLASS["graphs"][wildcards.graph],
            APPCLASS["patterns"][wildcards.pattern],
        ),
        runtime=60,
        gpu=lambda wildcards: int(
            APPCLASS_VARIANTS[wildcards.variant]["device"] != "cpu"
        ),
    params:
        outdir=subpath(output.metrics, parent=True),
        options=lambda wildcards: APPCLASS_BENCH_OPTIONS[wildcards.variant],
    shell:
        "membench appclass bench {input.graphs:q} --dataset {wildcards.graph:q}/{wildcards.pattern:q} --outdir {params.outdir:q}"
        " --reference-npy {input.reference:q} {params.options:q} > {log:q} 2>&1"


rule appclass_table:
    input:
        APPCLASS_METRICS,
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
        runtime=5,
    shell:
        "membench table metrics --out {output.csv:q} {input:q} > {log:q} 2>&1"


rule appclass_graph_stats:
    input:
        [path for pair in APPCLASS_PAIRS for path in APPCLASS_PAIR_FILES[pair]],
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
        # --pair NAME DATA_V DATA_E PATT_V PATT_E for each pair
        pairs=[
            word
            for pair in APPCLASS_PAIRS
            for word in ("--pair", "/".join(pair), *APPCLASS_PAIR_FILES[pair])
        ],
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
        runtime=5,
    shell:
        "membench appclass plot --table {input:q} --runtime-png {output.runtime:q} --speedup-png {output.speedup:q} > {log:q} 2>&1"


if APPCLASS_PAIRS:
    FINAL_OUTPUTS.extend(
        [
            "results/tables/appclass.csv",
            "results/tables/appclass_graphs.csv",
            "results/plots/appclass_runtime.png",
            "results/plots/appclass_speedup.png",
        ]
    )
