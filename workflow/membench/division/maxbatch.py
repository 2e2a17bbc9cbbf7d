"""The largest-batch search, one fresh process per probe.

Each probe is ``membench division memory`` at one batch size, run as a subprocess with its output
in ``<outdir>/probes/b<batch>/``: it writes its ``metrics.json`` atomically as soon as it is
measured, ``status`` ``ok`` or ``oom`` (whatever raised the out-of-memory). So every probe starts
with no cuBLAS/cuDNN handles, workspaces, loaded kernels or cached allocator blocks left by an
earlier one, an out-of-memory probe loses nothing, and a search killed half-way resumes measuring
only the probes without a result of the same arguments and code (the points of
:mod:`membench.core.points`). The driver never initialises CUDA itself (it would hold a context on
the device the probes measure); it takes the device's identity from the probes.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pandas as pd

from membench.core import atomic
from membench.core.checkpoint import code_version, run_identity
from membench.core.errors import InputError
from membench.core.metrics import REQUIRED_FIELDS, check_record, write_job_outputs
from membench.core.oom import OOM_STATUS
from membench.core.points import Command, Point, is_measured, measure
from membench.core.processes import membench_command
from membench.core.validate import read_json_object
from membench.division.bench import largest_batch

__all__ = ["LOG", "PROBE_FIELDS", "probe_path", "PROBE_STATUSES", "read_probe", "search"]

LOG = logging.getLogger(__name__)
PROBE_STATUSES = ("ok", OOM_STATUS)
# Columns of probes.csv taken from each probe's record; ``measured_now`` follows them.
PROBE_FIELDS = (
    "batch_size",
    "status",
    "status_message",
    "total_memory_mib",
    "cuda_peak_allocated_mib",
    "pid",
    "wall_s",
)
# Identity fields of the final record taken from the probes (the driver does not touch the device).
_DEVICE_FIELDS = (
    "device",
    "device_name",
    "torch_version",
    "cuda_version",
    "kernels",
    "kernels_fallback_reason",
    "kernels_cpu_isa",
)


def probe_path(outdir: str | os.PathLike, batch: int) -> Path:
    """``<outdir>/probes/b<batch>/metrics.json``."""
    return Path(outdir) / "probes" / f"b{batch}" / "metrics.json"


def read_probe(path: Path, expected: dict) -> dict:
    """Read a probe's ``metrics.json`` and check it is a finished probe of this search: a metrics
    record with ``status`` ok or oom whose fields in ``expected`` (model, method, sizes, seed,
    batch size...) match; raise :class:`InputError` naming the file otherwise."""
    record = read_json_object(path, "probe metrics not found")
    check_record(record, path)
    if record.get("status") not in PROBE_STATUSES:
        raise InputError(
            path,
            f"status must be one of {', '.join(PROBE_STATUSES)}, got {record.get('status')!r}",
            "key 'status'",
        )
    for key, value in expected.items():
        if record.get(key) != value:
            raise InputError(
                path,
                f"this probe was measured with {key} {record.get(key)!r}, the search uses "
                f"{value!r}; move it away or search into another --outdir",
                f"key '{key}'",
            )
    return record


def search(
    outdir: str | os.PathLike, probe_arguments: list[str], expected: dict, start: int, limit: int
) -> dict:
    """Find the largest batch in ``[start, limit]`` whose training step fits (see
    :func:`~membench.division.bench.largest_batch`), one ``membench division memory
    <probe_arguments> --batch-size <b>`` subprocess per probe not already in ``outdir``.

    Writes ``probes.csv`` (one row per probe, in search order) and ``metrics.json`` (identity from
    the probes, ``largest_batch``, ``probes``, ``probe_count``, ``probes_measured``) into ``outdir``
    and returns the record. A probe that exits without writing its result raises ``RuntimeError``.
    """
    begin = time.perf_counter()
    if start > limit:
        raise InputError(None, f"--start {start} is above --limit {limit}", "option --start")
    records: dict[int, dict] = {}
    measured_now: set[int] = set()

    code = code_version("core", "data", "division")

    def fits(batch: int) -> bool:
        point = Point(
            probe_path(outdir, batch),
            run_identity({"arguments": probe_arguments, "batch_size": batch}, code=code),
        )
        if is_measured(point):
            LOG.info("batch %d: reusing %s", batch, point.record)
        else:
            _run_probe(point, [*probe_arguments, "--batch-size", str(batch)], batch)
            measured_now.add(batch)
        records[batch] = read_probe(point.record, {**expected, "batch_size": batch})
        return records[batch]["status"] == "ok"

    largest, probes = largest_batch(fits, start, limit)
    table = pd.DataFrame(
        [
            {**{c: records[b].get(c) for c in PROBE_FIELDS}, "measured_now": b in measured_now}
            for b, _ in probes
        ]
    )
    atomic.write_csv(Path(outdir) / "probes.csv", table)
    first = records[probes[0][0]]
    record = {key: first.get(key) for key in (*REQUIRED_FIELDS, *_DEVICE_FIELDS, *expected)}
    record.update(
        {
            "job": "maxbatch",
            "batch_size": None,
            "pid": os.getpid(),
            "largest_batch": largest,
            "probes": " ".join(f"{b}:{records[b]['status']}" for b, _ in probes),
            "probe_count": len(probes),
            "probes_measured": len(measured_now),
            "start": start,
            "limit": limit,
            "wall_s": time.perf_counter() - begin,
        }
    )
    write_job_outputs(outdir, record)
    return record


def _run_probe(point: Point, arguments: list[str], batch: int) -> None:
    command = membench_command("division", "memory", "--outdir", point.record.parent, *arguments)
    LOG.info("batch %d: %s", batch, " ".join(command))
    # The probe's output goes to this job's log; an out-of-memory probe still exits 0 with its result.
    outcome = measure(point, Command(command))
    if outcome.record is None:
        raise RuntimeError(
            f"the probe at batch {batch} exited with code {outcome.exit_code} without writing "
            f"{point.record}; its output is above"
        )
