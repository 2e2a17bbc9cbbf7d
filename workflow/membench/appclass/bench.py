"""Benchmark jobs: one implementation on one graph pair under the meter, and side-by-side comparisons."""

from __future__ import annotations

import contextlib
import filecmp
import logging
import os
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from membench.appclass.api import classify
from membench.appclass.options import AppclassOptions, formula_bytes
from membench.core import atomic, sources
from membench.core.errors import InputError
from membench.core.extension import KernelSelection
from membench.core.meter import MIB, Meter
from membench.core.metrics import KERNELS_FIELD, job_record, kernels_value, read_metrics, write_job_outputs
from membench.core.processes import membench_command
from membench.core.tables import write_table
from membench.core.timing import Timer, steady_median
from membench.core.validate import open_regular
from membench.data.graphs import Graph, read_graph_pair

__all__ = [
    "agreement",
    "AGREEMENT_ATOL",
    "AGREEMENT_RTOL",
    "BenchSpec",
    "compare",
    "COMPARE_COLUMNS",
    "COPY_REPEATS",
    "measure_bench",
    "read_reference_beliefs",
    "REFERENCE_ALLOC_NOTE",
    "reference_fields",
    "run_bench_job",
    "streaming_copy_ms",
    "summarise_comparison",
]

log = logging.getLogger(__name__)

AGREEMENT_RTOL = {"float64": 1e-9, "float32": 1e-3}
# Log-beliefs at (or a rounding away from) 0 cannot agree relatively; this much absolute slack.
AGREEMENT_ATOL = {"float64": 1e-12, "float32": 1e-4}
COMPARE_COLUMNS = (
    "round",
    "variant",
    "kernels",
    "run_s",
    "prints_first_variant_bytes",
    "read_ms",
    "init_ms",
    "iterations_ms",
    "total_ms",
    "edge_copy_ms",
    "iteration_vs_copy",
    "algorithm_rss_mib",
    "peak_rss_mib",
    "alloc_peak_mib",
    "peak_tensor_mib",
    "formula_mib",
    "reference_max_rel_diff",
    "agrees_with_reference",
)
COPY_REPEATS = 3
REFERENCE_ALLOC_NOTE = (
    "the NumPy reference allocates outside torch's allocator, so no allocator-level peak is "
    "recorded; algorithm_rss_mib is its memory"
)


@dataclass(frozen=True)
class BenchSpec:
    """What one benchmark job runs."""

    implementation: str = "torch"
    device: str = "cpu"
    threads: int = 2
    precision: str = "float64"
    options: AppclassOptions = AppclassOptions()
    repeats: int = 1
    chunk_edges: int | None = None
    kernels: str = "auto"

    @property
    def variant(self) -> str:
        name = f"{self.implementation}-{self.device}-t{self.threads}-{self.precision}"
        if self.kernels != "auto":
            name += f"-kernels_{self.kernels}"
        if self.options.normalisation != "reference":
            name += f"-{self.options.normalisation}"
        if self.options.forward_message_index != "src":
            name += f"-forward_{self.options.forward_message_index}"
        return name


def agreement(beliefs: np.ndarray, reference: np.ndarray, precision: str) -> dict[str, object]:
    """How far ``beliefs`` are from the reference's (same shape).

    Max relative and absolute differences over entries finite in both, and whether every entry is
    within ``AGREEMENT_RTOL * |reference| + AGREEMENT_ATOL`` (per precision) with NaN and
    infinities in the same places.
    """
    if beliefs.shape != reference.shape:
        return {
            "reference_max_rel_diff": None,
            "reference_max_abs_diff": None,
            "agrees_with_reference": False,
        }
    finite = np.isfinite(beliefs) & np.isfinite(reference)
    same_special = np.array_equal(beliefs[~finite], reference[~finite], equal_nan=True)
    diff = np.abs(beliefs[finite] - reference[finite])
    scale = np.abs(reference[finite])
    rel = diff / np.where(scale > 0, scale, 1.0)
    within = bool(np.all(diff <= AGREEMENT_RTOL[precision] * scale + AGREEMENT_ATOL[precision]))
    return {
        "reference_max_rel_diff": float(rel.max(initial=0.0)),
        "reference_max_abs_diff": float(diff.max(initial=0.0)),
        "agrees_with_reference": bool(same_special and within),
        "reference_rtol": AGREEMENT_RTOL[precision],
    }


def read_reference_beliefs(path: str | os.PathLike) -> np.ndarray:
    """The beliefs another run saved with ``out_npy`` (a floating-point ``.npy`` array, no pickles);
    raise :class:`InputError` naming ``path`` when it is missing, not a regular file or not such an array."""
    with open_regular(
        path, missing="reference beliefs not found (run the reference variant with --out-npy first)"
    ) as handle:
        try:
            reference = np.load(handle, allow_pickle=False)
        except (ValueError, EOFError, OSError) as exc:
            raise InputError(path, f"not a NumPy .npy array ({exc})") from None
    if not isinstance(reference, np.ndarray):
        raise InputError(path, "expected one .npy array, found an .npz archive")
    if not np.issubdtype(reference.dtype, np.floating):
        raise InputError(path, f"expected a floating-point array, found dtype {reference.dtype}")
    return reference


def run_bench_job(
    graph_paths: tuple[str, str, str, str],
    dataset: str,
    spec: BenchSpec,
    outdir: str | os.PathLike,
    *,
    reference_npy: str | None = None,
    out_npy: str | None = None,
    sample_interval_s: float = 0.02,
    trace_live_tensors: bool = False,
    trace_allocator: bool = True,
    grid_intensity_g_per_kwh: float = 475.0,
    build_manifest: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> dict[str, object]:
    """Read the graphs, run ``spec.repeats`` times under the meter, write metrics.json and memlog.csv.

    The timing fields of :mod:`membench.core.timing` time one repeat (init + iterations; the first
    repeat excluded as warm-up). Times (ms, median over the same repeats): ``read_ms``, ``init_ms``,
    ``iterations_ms``, ``total_ms``
    (init + iterations), and ``edge_copy_ms``, a streaming copy of one (data edges x pattern edges)
    array with the same threads, the memory-bandwidth yardstick of an iteration
    (``iteration_vs_copy`` = iteration time / copy time). Memory (MiB): ``algorithm_rss_mib``
    (sampled RSS peak of init and iterations above the RSS after reading and a warm-up run),
    ``formula_mib`` (the dominant arrays, :func:`~membench.appclass.options.formula_bytes`), and
    ``alloc_peak_mib``: the allocator-level peak of init and iterations above the level after
    reading, exact, every buffer of the C++ kernels included (on a
    GPU the CUDA allocator's, on a CPU with ``trace_allocator`` from a separate traced run; for the
    NumPy reference, which allocates outside torch, empty with ``alloc_peak_note`` saying so). With
    ``trace_live_tensors`` the traced run also gives ``peak_tensor_mib`` (torch tensors only).
    ``kernels``: what ran (:func:`membench.core.metrics.kernels_value`): ``cpp-<digest8>``, the C++
    kernels of ``build_manifest``, else of ``cache_dir`` (built there on first use, see
    :func:`~membench.appclass.extension.select_kernels`); ``torch``, with ``kernels_fallback_reason``
    where ``auto`` found none; ``numpy`` for the reference.

    The graphs are read inside the measurement (phase ``read``, ``read_ms``); the reference beliefs
    after it, so that their array is not in the memory measured.

    torch's threads are the caller's to set to ``spec.threads`` (the command does).
    """
    from membench.appclass.output import write_npy
    from membench.core.device import resolve_device

    start = time.perf_counter()
    device = resolve_device(spec.device)
    selection = _kernels(spec, device, build_manifest, cache_dir)
    record = job_record("appclass", spec.variant, dataset, device, 0, None)
    record.update(
        {
            KERNELS_FIELD: "numpy" if selection is None else selection.value,
            "kernels_fallback_reason": None if selection is None else selection.fallback_reason,
        }
    )
    fields, beliefs, memlog = measure_bench(
        graph_paths,
        dataset,
        spec,
        device,
        None if selection is None else selection.module,
        sample_interval_s=sample_interval_s,
        trace_live_tensors=trace_live_tensors,
        trace_allocator=trace_allocator,
        grid_intensity_g_per_kwh=grid_intensity_g_per_kwh,
    )
    record.update(fields)
    if reference_npy is not None:
        record.update(reference_fields(beliefs, read_reference_beliefs(reference_npy), spec.precision))
    if out_npy is not None:
        write_npy(out_npy, beliefs)
    record["wall_s"] = time.perf_counter() - start
    write_job_outputs(outdir, record, memlog)
    return record


def _kernels(
    spec: BenchSpec,
    device: torch.device,
    build_manifest: str | os.PathLike | None,
    cache_dir: str | os.PathLike | None,
) -> KernelSelection | None:
    """The kernels ``spec.kernels`` asks for (the C++ ones on a CPU only; pure torch on CUDA), or
    None for the NumPy reference."""
    from membench.appclass.extension import select_kernels

    if spec.implementation != "torch":
        return None
    if device.type != "cpu":
        return KernelSelection(None, kernels_value("torch"))
    return select_kernels(spec.kernels, build_manifest, cache_dir)


def measure_bench(
    graph_paths: tuple[str, str, str, str],
    dataset: str,
    spec: BenchSpec,
    device: torch.device,
    kernels,
    *,
    sample_interval_s: float = 0.02,
    trace_live_tensors: bool = False,
    trace_allocator: bool = True,
    grid_intensity_g_per_kwh: float = 475.0,
) -> tuple[dict[str, object], np.ndarray, pd.DataFrame]:
    """The measurement of :func:`run_bench_job` (which describes the fields), with ``kernels`` the
    built module (:func:`~membench.appclass.extension.select_kernels`'s ``module``) or None:
    ``(fields, beliefs of the last repeat (data nodes x pattern nodes), the meter's memlog)``."""
    run = dict(
        implementation=spec.implementation,
        options=spec.options,
        device=device,
        precision=spec.precision,
        chunk_edges=spec.chunk_edges,
        kernels=kernels,
        threads=spec.threads,
    )
    repeats = _metered_repeats(
        graph_paths, dataset, spec, device, run, sample_interval_s, grid_intensity_g_per_kwh
    )
    fields = {**repeats.meter.summary(), **repeats.timer.fields()}
    fields.update(_run_figures(spec, device, repeats, fields))
    fields.update(_allocator_figures(spec, device, run, repeats, trace_live_tensors, trace_allocator))
    return fields, repeats.beliefs, repeats.meter.memlog()


@dataclass
class _Repeats:
    """What the metered repeats leave: the graphs, the last beliefs, each phase's times (ms, one per
    run of it), the RSS after reading, and the meter and timer that measured them."""

    data: Graph
    pattern: Graph
    beliefs: np.ndarray
    phase_ms: dict[str, list[float]]
    rss_after_read_bytes: int
    meter: Meter
    timer: Timer


def _metered_repeats(
    graph_paths,
    dataset: str,
    spec: BenchSpec,
    device: torch.device,
    run: dict,
    sample_interval_s: float,
    grid_intensity_g_per_kwh: float,
) -> _Repeats:
    """Read the graphs (phase ``read``), warm up, then run ``spec.repeats`` times (phases ``init`` and
    ``iterations``), all under one meter."""
    phase_ms: dict[str, list[float]] = {"read": [], "init": [], "iterations": []}
    with Meter(
        device, sample_interval_s=sample_interval_s, grid_intensity_g_per_kwh=grid_intensity_g_per_kwh
    ) as meter:

        @contextlib.contextmanager
        def timed(name: str):
            begin = time.perf_counter()
            with meter.phase(name):
                yield
            phase_ms[name].append((time.perf_counter() - begin) * 1000.0)

        with timed("read"):
            data, pattern = read_graph_pair(*graph_paths)
        # A run on the pattern alone initialises the libraries (thread pools, kernels) first, so the
        # memory above this baseline is the algorithm's own.
        classify(pattern, pattern, **run)
        rss_after_read = sources.current_rss_bytes()
        timer = Timer("repeat", threads=spec.threads, device=device)
        for repeat in range(spec.repeats):
            with timer.sample():
                beliefs = classify(data, pattern, **run, phase=timed)
            log.info(
                "%s on %s, repeat %d: init %.1f ms, iterations %.1f ms",
                spec.variant,
                dataset,
                repeat,
                phase_ms["init"][-1],
                phase_ms["iterations"][-1],
            )
    return _Repeats(data, pattern, beliefs, phase_ms, rss_after_read, meter, timer)


def _run_figures(
    spec: BenchSpec, device: torch.device, repeats: _Repeats, summary: dict
) -> dict[str, object]:
    """The run's settings, the graphs' sizes, the phases' median times, the streaming copy beside
    them, and the memory above the RSS after reading (from the meter's ``summary``)."""
    data, pattern, phase_ms = repeats.data, repeats.pattern, repeats.phase_ms
    algorithm_peak = max(summary["init_peak_rss_mib"], summary["iterations_peak_rss_mib"])
    itemsize = 8 if spec.precision == "float64" else 4
    edge_copy_ms = streaming_copy_ms(
        data.num_edges * pattern.num_edges, getattr(torch, spec.precision), device
    )
    iterations_ms = steady_median(phase_ms["iterations"])
    return {
        "implementation": spec.implementation,
        "threads": spec.threads,
        "precision": spec.precision,
        "normalisation": spec.options.normalisation,
        "forward_message_index": spec.options.forward_message_index,
        "repeats": spec.repeats,
        "data_nodes": data.num_nodes,
        "data_edges": data.num_edges,
        "pattern_nodes": pattern.num_nodes,
        "pattern_edges": pattern.num_edges,
        "read_ms": steady_median(phase_ms["read"]),
        "init_ms": steady_median(phase_ms["init"]),
        "iterations_ms": iterations_ms,
        "edge_copy_ms": edge_copy_ms,
        "iteration_vs_copy": iterations_ms / max(pattern.num_nodes, 1) / edge_copy_ms
        if edge_copy_ms > 0
        else None,
        "total_ms": steady_median([a + b for a, b in zip(phase_ms["init"], phase_ms["iterations"])]),
        "rss_after_read_mib": repeats.rss_after_read_bytes / MIB,
        "algorithm_rss_mib": max(0.0, algorithm_peak - repeats.rss_after_read_bytes / MIB),
        "formula_mib": formula_bytes(
            data.num_nodes, data.num_edges, pattern.num_nodes, pattern.num_edges, itemsize
        )
        / MIB,
    }


def _allocator_figures(
    spec: BenchSpec,
    device: torch.device,
    run: dict,
    repeats: _Repeats,
    trace_live_tensors: bool,
    trace_allocator: bool,
) -> dict[str, object]:
    """``alloc_peak_mib`` (and ``peak_tensor_mib``) of one traced run from init to the last iteration."""
    # The timed run's allocator figures are per phase; the algorithm's peak spans init and iterations.
    fields: dict[str, object] = {"alloc_peak_mib": None}
    if spec.implementation == "reference":
        fields["alloc_peak_note"] = REFERENCE_ALLOC_NOTE
    allocator_run = spec.implementation != "reference" and (device.type == "cuda" or trace_allocator)
    if trace_live_tensors or allocator_run:
        # Tracing slows the run, so it is a run of its own, one phase from init to the last iteration.
        with Meter(
            device,
            sample_interval_s=0,
            trace_live_tensors=trace_live_tensors,
            trace_allocator=allocator_run and device.type == "cpu",
        ) as traced:
            with traced.phase("algorithm"):
                classify(repeats.data, repeats.pattern, **run)
        summary = traced.summary()
        if trace_live_tensors:
            fields.update(peak_tensor_mib=summary["peak_tensor_mib"], trace_live_tensors=True)
        if allocator_run:
            fields.update(
                alloc_peak_mib=summary["alloc_peak_mib"],
                trace_allocator=summary["trace_allocator"],
                allocator_available=True,
            )
    return fields


def reference_fields(beliefs: np.ndarray, reference: np.ndarray, precision: str) -> dict[str, object]:
    """:func:`agreement` with ``reference``, and ``prints_reference_bytes``: whether both print the same."""
    from membench.appclass.output import format_beliefs

    same_print = beliefs.shape == reference.shape and format_beliefs(beliefs) == format_beliefs(reference)
    return {**agreement(beliefs, reference, precision), "prints_reference_bytes": bool(same_print)}


def streaming_copy_ms(numel: int, dtype: torch.dtype, device: torch.device) -> float:
    """Median time (ms) of copying a ``numel``-element array into another (torch's threads)."""
    source = torch.ones(numel, dtype=dtype, device=device)
    target = torch.empty_like(source)
    times = []
    for _ in range(COPY_REPEATS):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        begin = time.perf_counter()
        target.copy_(source)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append((time.perf_counter() - begin) * 1000.0)
    return statistics.median(times)


def _timed_run(command: list[str], stdout_path: str | os.PathLike) -> float:
    """Run ``command`` with its standard output in ``stdout_path``; its wall time in seconds."""
    begin = time.perf_counter()
    with open(stdout_path, "wb") as stdout:
        subprocess.run(command, check=True, stdout=stdout)
    return time.perf_counter() - begin


def compare(
    graph_paths: tuple[str, str, str, str],
    dataset: str,
    specs: list[BenchSpec],
    outdir: str | os.PathLike,
    rounds: int,
    extra_args: list[str],
    build_manifest: str | os.PathLike | None = None,
) -> pd.DataFrame:
    """Run each spec as a ``membench appclass run`` process and a ``bench`` process, interleaved
    over ``rounds``.

    ``run_s`` is the whole ``run`` process (start, reading, matching, printing, exit) and
    ``prints_first_variant_bytes`` whether its standard output equals the first variant's, byte for
    byte. The ``bench`` process, under the meter, gives the phases and memory; separate processes
    give each implementation its own peak RSS, and interleaving exposes all to the same background
    load. The first spec's beliefs (round 0) are the agreement reference of the rest. The processes
    load the kernels ``build_manifest`` names, else the per-user cache's (their environment's). Writes
    ``<outdir>/compare.csv`` (one row per run) and returns it.
    """
    outdir = Path(outdir)
    reference_npy = outdir / "first_variant_beliefs.npy"
    first_output = outdir / "first_variant_output.txt"
    manifest_arguments = [] if build_manifest is None else ["--build-manifest", build_manifest]
    rows = []
    for round_index in range(rounds):
        for position, spec in enumerate(specs):
            jobdir = outdir / f"round{round_index}" / spec.variant
            jobdir.mkdir(parents=True, exist_ok=True)
            run_command = membench_command(
                "appclass",
                "run",
                *graph_paths,
                *_spec_arguments(spec, run=True),
                *manifest_arguments,
            )
            if position == 0 and round_index == 0:
                with atomic.atomic_path(first_output) as printed:
                    run_s = _timed_run(run_command, printed)
                same_bytes = True
            else:  # compared with the first variant's output, then dropped
                with tempfile.NamedTemporaryFile(dir=jobdir, prefix=".output.", suffix=".txt") as printed:
                    run_s = _timed_run(run_command, printed.name)
                    same_bytes = filecmp.cmp(printed.name, first_output, shallow=False)
            command = membench_command(
                "appclass",
                "bench",
                *graph_paths,
                "--dataset",
                dataset,
                "--outdir",
                jobdir,
                *_spec_arguments(spec),
                *extra_args,
                *manifest_arguments,
            )
            if position == 0 and round_index == 0:
                command += ["--out-npy", str(reference_npy)]
            elif position > 0:
                command += ["--reference-npy", str(reference_npy)]
            log.info("round %d: %s: run %.1f s", round_index, spec.variant, run_s)
            subprocess.run(command, check=True)
            record = read_metrics(jobdir / "metrics.json")
            record.update(run_s=run_s, prints_first_variant_bytes=same_bytes)
            rows.append({"round": round_index, **{c: record.get(c) for c in COMPARE_COLUMNS[1:]}})
    frame = pd.DataFrame(rows, columns=list(COMPARE_COLUMNS))
    write_table(frame, outdir / "compare.csv")
    return frame


def summarise_comparison(frame: pd.DataFrame) -> pd.DataFrame:
    """Median per variant, with speed-ups (whole run process, and init + iterations) and memory ratio
    against the first variant; ``all_print_first_variant_bytes`` over every round."""
    numeric = frame.drop(columns=["prints_first_variant_bytes", "agrees_with_reference", KERNELS_FIELD])
    medians = numeric.groupby("variant", sort=False).median(numeric_only=True).drop(columns="round")
    medians["all_print_first_variant_bytes"] = frame.groupby("variant", sort=False)[
        "prints_first_variant_bytes"
    ].all()
    first = medians.iloc[0]
    medians["run_speedup_vs_first"] = first["run_s"] / medians["run_s"]
    medians["speedup_vs_first"] = first["total_ms"] / medians["total_ms"]
    medians["algorithm_rss_vs_first"] = medians["algorithm_rss_mib"] / first["algorithm_rss_mib"]
    return medians.reset_index()


def _spec_arguments(spec: BenchSpec, run: bool = False) -> list[str]:
    words = [
        "--implementation",
        spec.implementation,
        "--device",
        spec.device,
        "--threads",
        str(spec.threads),
        "--precision",
        spec.precision,
        "--normalisation",
        spec.options.normalisation,
        "--forward-message-index",
        spec.options.forward_message_index,
        "--kernels",
        spec.kernels,
    ]
    if not run:
        words += ["--repeats", str(spec.repeats)]
    if spec.chunk_edges:
        words += ["--chunk-edges", str(spec.chunk_edges)]
    return words
