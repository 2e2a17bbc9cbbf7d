"""``membench appclass <step>``: graphs (generate, describe), run the matching, benchmark it.

``run`` prints the log-belief matrix exactly as the PNNL code does (C ``%e``, row-major, one value
per line) on standard output and nothing else; logs go to standard error (one line says which
kernels ran). By default it runs the C++ kernels, built on first use into the per-user cache
(``$MEMBENCH_CACHE_DIR``, else ``$XDG_CACHE_HOME/membench`` or ``~/.cache/membench``) from any
directory; pure torch, saying why, where they cannot be built.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import TYPE_CHECKING

from membench.appclass.extension import KERNEL_CHOICES
from membench.appclass.options import FORWARD_MESSAGE_INDEX, IMPLEMENTATIONS, NORMALISATIONS, PRECISIONS
from membench.core.options import (
    DEVICE_CHOICES,
    SEED,
    THREADS,
    InputFile,
    OutputDir,
    OutputFile,
    add_allocator_option,
    add_meter_options,
    fields_action,
    integer,
    real,
)

if TYPE_CHECKING:  # the plot step imports pandas where it reads the table
    import pandas as pd

__all__ = ["build_parser", "CONFIG_KEYS", "FEATURE_DIM", "GRAPH_FILES", "PLOT_COLUMNS", "REPEATS", "run"]

GRAPH_FILES = ("data_vertices", "data_edges", "pattern_vertices", "pattern_edges")
PLOT_COLUMNS = (
    "dataset",
    "variant",
    "implementation",
    "data_edges",
    "pattern_edges",
    "time_median_s",
    "time_min_s",
    "time_max_s",
    "timing_reliable",
    "timing_flag",
)
REPEATS = integer(1, 1000)
FEATURE_DIM = integer(1, 4096)


def _add_graph_files(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("data_vertices", type=InputFile, help="data graph vertex table (PNNL text format)")
    parser.add_argument("data_edges", type=InputFile, help="data graph edge table")
    parser.add_argument("pattern_vertices", type=InputFile, help="pattern graph vertex table")
    parser.add_argument("pattern_edges", type=InputFile, help="pattern graph edge table")


def _add_method_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--implementation",
        choices=IMPLEMENTATIONS,
        default="torch",
        help="torch: the fast implementation (default); reference: the NumPy specification",
    )
    parser.add_argument(
        "--kernels",
        choices=KERNEL_CHOICES,
        default="auto",
        help="torch on the CPU: the C++ kernels (extension, built on first use into the per-user cache),"
        " pure torch, or auto (the C++ kernels when they build, else pure torch, saying why)",
    )
    parser.add_argument(
        "--build-manifest",
        type=InputFile,
        default=None,
        help="manifest of `membench appclass build --outdir` (default: the per-user cache's build)",
    )
    parser.add_argument(
        "--device", default="cpu", help=f"torch only: one of {', '.join(DEVICE_CHOICES)} (or cuda:N)"
    )
    parser.add_argument(
        "--threads", type=THREADS, default=None, help="torch CPU threads (default: torch's choice)"
    )
    parser.add_argument(
        "--precision", choices=PRECISIONS, default="float64", help="torch only; the reference is float64"
    )
    parser.add_argument(
        "--normalisation",
        choices=NORMALISATIONS,
        default="reference",
        help="reference: PNNL's log(exp(.)) (underflows past ~745); stable: log-sum-exp",
    )
    parser.add_argument(
        "--forward-message-index",
        choices=FORWARD_MESSAGE_INDEX,
        default="src",
        help="row of the forward edge message: src as PNNL, or dst (the dst-fixed mode)",
    )
    parser.add_argument(
        "--chunk-edges",
        type=integer(1, 2**31),
        default=None,
        help="torch: edges per chunk (default by device)",
    )


# Config keys the workflow passes to each step (``*``: any name, ``[]``: each item), each as the
# step's option spelled the same way; tests/test_vocabulary.py checks them against the schema,
# these parsers and the rules.
CONFIG_KEYS = {
    "generate-rmat": (
        "seed",
        "appclass.node_feature_dim",
        "appclass.edge_feature_dim",
        *(f"appclass.graphs.*.{key}" for key in ("scale", "edge_factor", "feature_max")),
    ),
    "generate-pattern": ("seed", "appclass.patterns.*.max_pattern_nodes"),
    "bench": (
        *(
            f"appclass.variants.[].{key}"
            for key in ("implementation", "device", "threads", "precision", "kernels")
        ),
        "appclass.repeats",
        "appclass.trace_live_tensors",
        "meter.sample_interval_s",
        "meter.grid_intensity_g_per_kwh",
        "meter.trace_allocator",
    ),
}


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    steps = parser.add_subparsers(dest="step", required=True, metavar="<step>")

    build = steps.add_parser(
        "build",
        help="compile the C++ kernels (OpenMP) into the per-user cache ($MEMBENCH_CACHE_DIR, else "
        "$XDG_CACHE_HOME/membench or ~/.cache/membench), unless built there already",
    )
    build.add_argument(
        "--outdir",
        type=OutputDir,
        default=None,
        help="also write <outdir>/manifest.json naming the build (what the workflow's jobs load)",
    )
    build.add_argument("--verbose", action="store_true", help="show the compiler's output")

    run = steps.add_parser("run", help="print the log-belief matrix (C %%e, row-major) on stdout")
    _add_graph_files(run)
    _add_method_options(run)
    run.add_argument(
        "--out-npy",
        type=OutputFile,
        help="also write the matrix (float64, data nodes x pattern nodes) as .npy",
    )
    run.add_argument("--no-stdout", action="store_true", help="do not print the matrix (with --out-npy)")

    bench = steps.add_parser(
        "bench", help="one implementation on one graph pair under the meter: metrics.json"
    )
    _add_graph_files(bench)
    _add_method_options(bench)
    bench.add_argument("--dataset", required=True, help="name of the graph pair in the results")
    bench.add_argument(
        "--outdir", type=OutputDir, required=True, help="job directory for metrics.json and memlog.csv"
    )
    bench.add_argument(
        "--repeats", type=REPEATS, default=1, help="runs of init + iterations (median reported)"
    )
    bench.add_argument(
        "--reference-npy", type=InputFile, help="reference beliefs (.npy) to check agreement against"
    )
    bench.add_argument("--out-npy", type=OutputFile, help="write this job's beliefs as .npy")
    add_meter_options(bench, sample_interval_s=0.02)
    bench.add_argument(
        "--trace-live-tensors",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="one extra traced run for peak_tensor_mib (torch tensors)",
    )
    add_allocator_option(bench)

    compare = steps.add_parser(
        "compare", help="several variants side by side (separate processes, interleaved)"
    )
    _add_graph_files(compare)
    compare.add_argument("--dataset", required=True)
    compare.add_argument("--outdir", type=OutputDir, required=True)
    compare.add_argument(
        "--variant",
        action="append",
        required=True,
        help="IMPLEMENTATION:DEVICE:THREADS:PRECISION[:KERNELS], repeatable; the first is the baseline",
    )
    compare.add_argument(
        "--build-manifest",
        type=InputFile,
        default=None,
        help="kernels' build manifest (default: the per-user cache's build)",
    )
    compare.add_argument("--rounds", type=REPEATS, default=3)
    compare.add_argument("--repeats", type=REPEATS, default=1)
    compare.add_argument("--trace-live-tensors", action=argparse.BooleanOptionalAction, default=False)
    add_allocator_option(compare)

    rmat = steps.add_parser("generate-rmat", help="RMAT data graph with uniform random features")
    rmat.add_argument("--scale", type=integer(2, 26), required=True, help="2**scale + 1 nodes")
    rmat.add_argument(
        "--edge-factor",
        type=integer(1, 1024),
        default=8,
        help="edges drawn per node (before dropping loops/duplicates)",
    )
    rmat.add_argument("--node-feature-dim", type=FEATURE_DIM, default=13)
    rmat.add_argument("--edge-feature-dim", type=FEATURE_DIM, default=17)
    rmat.add_argument("--feature-max", type=real(0, 1e6, exclusive_low=True), default=10.0)
    rmat.add_argument("--seed", type=SEED, default=0)
    rmat.add_argument("--vertices", type=OutputFile, required=True, help="output vertex table")
    rmat.add_argument("--edges", type=OutputFile, required=True, help="output edge table")

    pattern = steps.add_parser("generate-pattern", help="pattern graph induced by a sampled neighbourhood")
    pattern.add_argument("data_vertices", type=InputFile)
    pattern.add_argument("data_edges", type=InputFile)
    pattern.add_argument("--max-pattern-nodes", type=integer(2, 100_000), required=True)
    pattern.add_argument("--seed", type=SEED, default=0)
    pattern.add_argument("--vertices", type=OutputFile, required=True)
    pattern.add_argument("--edges", type=OutputFile, required=True)

    stats = steps.add_parser("graph-stats", help="statistics table of graph pairs")
    stats.add_argument(
        "--out", type=OutputFile, required=True, help="table CSV; the Parquet twin is written beside it"
    )
    stats.add_argument(
        "--pair",
        nargs=5,
        action=fields_action(str, *[InputFile] * 4),
        required=True,
        metavar=("NAME", "DATA_V", "DATA_E", "PATT_V", "PATT_E"),
        help="repeatable",
    )

    plot = steps.add_parser("plot", help="runtime and speed-up figures from the appclass table")
    plot.add_argument("--table", type=InputFile, required=True)
    plot.add_argument("--runtime-png", type=OutputFile, required=True)
    plot.add_argument("--speedup-png", type=OutputFile, required=True)
    return parser


def _options(args: argparse.Namespace):
    from membench.appclass.options import AppclassOptions

    return AppclassOptions(normalisation=args.normalisation, forward_message_index=args.forward_message_index)


def _graph_paths(args: argparse.Namespace) -> tuple[str, str, str, str]:
    return tuple(getattr(args, name) for name in GRAPH_FILES)


def run(args: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    handler = {
        "build": _build,
        "run": _run,
        "bench": _bench,
        "compare": _compare,
        "generate-rmat": _generate_rmat,
        "generate-pattern": _generate_pattern,
        "graph-stats": _graph_stats,
        "plot": _plot,
    }[args.step]
    handler(args)


def _build(args: argparse.Namespace) -> None:
    import json

    from membench.appclass.extension import build_extension
    from membench.core.extension import user_cache_dir

    manifest = build_extension(user_cache_dir(os.environ), args.verbose, args.outdir)
    if manifest["status"] == "built":
        logging.info("kernels built, or found built, in the cache: %s", json.dumps(manifest))
    else:
        logging.warning("the build failed; runs with kernels auto use pure torch: %s", json.dumps(manifest))


def _kernels(args: argparse.Namespace):
    """The built module a CPU run of the torch implementation uses, or None (pure torch or the
    reference); selecting logs which kernels run."""
    from membench.appclass.extension import select_kernels
    from membench.core.device import resolve_device
    from membench.core.extension import user_cache_dir

    if args.implementation != "torch" or resolve_device(args.device).type != "cpu":
        return None
    return select_kernels(args.kernels, args.build_manifest, user_cache_dir(os.environ)).module


def _run(args: argparse.Namespace) -> None:
    import gc
    from concurrent.futures import ThreadPoolExecutor

    from membench.data.graphs import read_graph_pair

    # pyarrow parses the tables without holding the GIL, so reading them overlaps importing torch
    # and loading the kernels (about two seconds each on a two-core machine).
    with ThreadPoolExecutor(max_workers=1) as reader:
        graphs = reader.submit(read_graph_pair, *_graph_paths(args))
        # Importing torch creates so many objects that the cycle collector runs again and again, and
        # once more over all of them when the interpreter exits: about a second, measured. They live
        # as long as the process, so they are collected neither during the imports nor after.
        gc.disable()
        try:
            import torch

            from membench.appclass.api import classify
            from membench.appclass.output import format_beliefs, write_npy
            from membench.core.device import resolve_device

            kernels = _kernels(args)
        finally:
            gc.freeze()
            gc.enable()
        if args.threads:
            torch.set_num_threads(args.threads)
        data, pattern = graphs.result()
    beliefs = classify(
        data,
        pattern,
        implementation=args.implementation,
        options=_options(args),
        device=resolve_device(args.device),
        precision=args.precision,
        chunk_edges=args.chunk_edges,
        kernels=kernels,
    )
    del data
    if args.out_npy:
        write_npy(args.out_npy, beliefs)
    if not args.no_stdout:
        if kernels is not None:
            sys.stdout.buffer.write(kernels.format_e(torch.from_numpy(beliefs), torch.get_num_threads()))
        else:
            sys.stdout.write(format_beliefs(beliefs))
        sys.stdout.flush()


def _bench_spec(args: argparse.Namespace):
    import torch

    from membench.appclass.bench import BenchSpec

    return BenchSpec(
        implementation=args.implementation,
        device=args.device,
        threads=args.threads or torch.get_num_threads(),
        precision=args.precision,
        options=_options(args),
        repeats=args.repeats,
        chunk_edges=args.chunk_edges,
        kernels=args.kernels,
    )


def _bench(args: argparse.Namespace) -> None:
    import torch

    from membench.appclass.bench import run_bench_job
    from membench.core.extension import user_cache_dir

    spec = _bench_spec(args)
    torch.set_num_threads(spec.threads)
    record = run_bench_job(
        _graph_paths(args),
        args.dataset,
        spec,
        args.outdir,
        reference_npy=args.reference_npy,
        out_npy=args.out_npy,
        sample_interval_s=args.sample_interval_s,
        build_manifest=args.build_manifest,
        cache_dir=user_cache_dir(os.environ),
        trace_live_tensors=args.trace_live_tensors,
        trace_allocator=args.trace_allocator,
        grid_intensity_g_per_kwh=args.grid_intensity_g_per_kwh,
    )
    logging.info(
        "%s on %s: read %.0f ms, init %.0f ms, iterations %.0f ms, algorithm RSS %.0f MiB (formula %.0f MiB)",
        record["variant"],
        args.dataset,
        record["read_ms"],
        record["init_ms"],
        record["iterations_ms"],
        record["algorithm_rss_mib"],
        record["formula_mib"],
    )


def _parse_variant(text: str) -> tuple[str, str, int, str, str]:
    from membench.core.errors import InputError

    parts = text.split(":")
    if len(parts) not in (4, 5):
        raise InputError(
            None,
            f"variant {text!r} must be IMPLEMENTATION:DEVICE:THREADS:PRECISION[:KERNELS]",
            "option --variant",
        )
    implementation, device, threads, precision = parts[:4]
    kernels = parts[4] if len(parts) == 5 else "auto"
    if implementation not in IMPLEMENTATIONS or precision not in PRECISIONS or kernels not in KERNEL_CHOICES:
        raise InputError(
            None, f"variant {text!r}: implementation, precision or kernels unknown", "option --variant"
        )
    try:
        return implementation, device, THREADS(threads), precision, kernels
    except argparse.ArgumentTypeError as exc:
        raise InputError(None, f"variant {text!r}: THREADS {exc}", "option --variant") from None


def _compare(args: argparse.Namespace) -> None:
    from pathlib import Path

    from membench.appclass.bench import BenchSpec, compare, summarise_comparison
    from membench.core.tables import write_table

    specs = [
        BenchSpec(implementation=i, device=d, threads=t, precision=p, repeats=args.repeats, kernels=k)
        for i, d, t, p, k in map(_parse_variant, args.variant)
    ]
    extra = ["--trace-live-tensors"] if args.trace_live_tensors else []
    extra.append("--trace-allocator" if args.trace_allocator else "--no-trace-allocator")
    frame = compare(
        _graph_paths(args),
        args.dataset,
        specs,
        args.outdir,
        args.rounds,
        extra,
        args.build_manifest,
    )
    summary = summarise_comparison(frame)
    write_table(summary, Path(args.outdir) / "summary.csv")
    logging.info("side-by-side medians:\n%s", summary.to_string(index=False))


def _generate_rmat(args: argparse.Namespace) -> None:
    from membench.data.graphs import rmat_graph, write_graph

    graph = rmat_graph(
        args.scale,
        args.edge_factor,
        args.node_feature_dim,
        args.edge_feature_dim,
        args.seed,
        args.feature_max,
    )
    write_graph(graph, args.vertices, args.edges)
    logging.info(
        "RMAT scale %d: %d nodes, %d edges -> %s, %s",
        args.scale,
        graph.num_nodes,
        graph.num_edges,
        args.vertices,
        args.edges,
    )


def _generate_pattern(args: argparse.Namespace) -> None:
    from membench.data.graphs import induced_pattern, read_graph, write_graph

    data = read_graph(args.data_vertices, args.data_edges)
    pattern = induced_pattern(data, args.max_pattern_nodes, args.seed)
    write_graph(pattern, args.vertices, args.edges)
    logging.info(
        "pattern: %d nodes, %d edges -> %s, %s",
        pattern.num_nodes,
        pattern.num_edges,
        args.vertices,
        args.edges,
    )


def _graph_stats(args: argparse.Namespace) -> None:
    import pandas as pd

    from membench.core.tables import parquet_path_for, write_table
    from membench.data.graphs import STATS_COLUMNS, graph_statistics, read_graph_pair

    rows = []
    for name, *paths in args.pair:
        data, pattern = read_graph_pair(*paths)
        rows += [graph_statistics(data, name, "data"), graph_statistics(pattern, name, "pattern")]
    write_table(pd.DataFrame(rows, columns=list(STATS_COLUMNS)), args.out, parquet_path_for(args.out))


def _read_plot_table(path) -> pd.DataFrame:
    """The appclass table with the :data:`PLOT_COLUMNS` the figures use: edge counts as integers
    (a bad one named by its line), times as numbers (an empty time is NaN)."""
    import pandas as pd

    from membench.core.validate import int_column, read_csv_columns

    table = read_csv_columns(path, PLOT_COLUMNS, other_columns=True)
    for column in ("data_edges", "pattern_edges"):
        table[column] = int_column(table, column, path, minimum=0)
    for column in ("time_median_s", "time_min_s", "time_max_s"):
        table[column] = pd.to_numeric(table[column], errors="coerce")
    return table


def _plot(args: argparse.Namespace) -> None:
    from membench.appclass.plots import plot_runtime, plot_speedup

    table = _read_plot_table(args.table)
    plot_runtime(table, args.runtime_png)
    plot_speedup(table, args.speedup_png)
