"""Measure each configuration's training memory under the meter, one fresh process per configuration.

The parent imports torch but never initialises CUDA; it forks one child per configuration, so each
child starts with torch loaded (no interpreter start, no import) and a clean device: the CUDA
context, cuBLAS/cuDNN handles and the allocator's cache are charged to every configuration alike,
and an out-of-memory or a crash loses no other configuration. Each child writes
``<config_id>.json`` atomically as it finishes; a rerun measures only the configurations without a
record of the same identity (configuration, measurement options and code: the points of
:mod:`membench.core.points`), so an edited configuration table is measured anew, never reused.

The measured target (``memory_mib``, see :func:`target_source`): on a GPU the NVML peak minus the
baseline (``nvml_peak_mib``), the closest thing to what nvidia-smi showed GPUMemNet; on a CPU the
allocator-level peak of the training steps (``train_alloc_peak_mib``). Children may run side by
side (``jobs_at_once``); each GPU job is then charged NVML's count of its own process, the same
figure for a job alone (see :func:`run_isolated`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pandas as pd
import torch

from membench.core import atomic
from membench.core.checkpoint import code_version, run_identity
from membench.core.device import device_name, resolve_device
from membench.core.meter import Meter
from membench.core.oom import is_out_of_memory
from membench.core.points import Fork, Point, is_measured, measure_many
from membench.core.seeding import seeded
from membench.core.validate import read_json_object
from membench.memnet.configs import config_of
from membench.memnet.dataset import STATUS_OK, STATUS_OOM
from membench.memnet.faketensor import OPTIMIZERS
from membench.memnet.models import build_model, example_batch, layer_summary, module_counts

__all__ = [
    "config_job",
    "LOG",
    "measure_configs",
    "run_isolated",
    "target_source",
    "train_steps",
]

LOG = logging.getLogger(__name__)
# A run that measured nothing; both are among memnet.dataset's STATUS_FAILED.
STATUS_FAILED, STATUS_TIMEOUT = "FAILED", "TIMEOUT"


def train_steps(
    build: Callable[[], torch.nn.Module],
    make_batch: Callable,
    device: torch.device,
    steps: int,
    optimizer: str,
    sample_interval_s: float,
) -> dict:
    """Build ``build()`` on ``device`` and train it ``steps`` steps (cross-entropy on
    ``make_batch(device, generator)``) under the meter.

    Returns the record: the layer summary (per-layer activations and parameters), module counts,
    the meter's summary and ``memory_mib`` (the target), with ``status`` SUCCESSFUL or OOM_CRASH.
    """
    # The initialisation and the dropout masks draw from the global generators; the CPU's only are
    # seeded, since forking CUDA's would create the CUDA context before the meter's baseline.
    with seeded(0):
        return _train_steps(build, make_batch, device, steps, optimizer, sample_interval_s)


def _train_steps(
    build, make_batch, device: torch.device, steps: int, optimizer: str, sample_interval_s: float
) -> dict:
    record: dict[str, object] = {
        "device": str(device),
        "device_name": device_name(device),
        "torch_version": torch.__version__,
        "train_steps": steps,
        "optimizer": optimizer,
    }
    model = build()
    x_cpu, _ = make_batch(torch.device("cpu"), torch.Generator().manual_seed(0))
    layers = layer_summary(model, x_cpu[:2])
    record.update(
        {
            "layers": [list(layer) for layer in layers],
            "total_activations": sum(acts for _, acts, _ in layers),
            "total_parameters": sum(p.numel() for p in model.parameters()),
            "module_counts": module_counts(model),
        }
    )
    del x_cpu
    on_cuda = device.type == "cuda"
    generator = torch.Generator().manual_seed(0)
    try:
        with Meter(device, sample_interval_s=sample_interval_s, trace_allocator=not on_cuda) as meter:
            with meter.phase("train"):
                model.to(device)
                opt = OPTIMIZERS[optimizer](list(model.parameters()))
                for _ in range(steps):
                    x, y = make_batch(device, generator)
                    with meter.saved_activations(model):
                        loss = torch.nn.functional.cross_entropy(model(x).float(), y)
                    loss.backward()
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                    del x, y, loss
    except Exception as exc:  # noqa: BLE001 - out of memory is a result, anything else is re-raised
        if not is_out_of_memory(exc):
            raise
        record.update(
            {"status": STATUS_OOM, "status_message": str(exc).splitlines()[0][:500], "memory_mib": None}
        )
        return record
    summary = meter.summary()
    record.update(summary)
    source = target_source(summary, on_cuda)
    record.update({"status": STATUS_OK, "memory_mib": summary[source], "memory_source": source})
    return record


def target_source(summary: dict, on_cuda: bool, per_process: bool = False) -> str | None:
    """The meter field a configuration's memory is learned from: NVML's peak on a GPU (the
    allocator's reserved peak where NVML cannot be read), the training steps' allocator peak on a CPU.

    ``per_process``: the job shared the GPU with other jobs, so only NVML's count of this process's
    own memory is its own (``None`` where NVML does not count per process). For a job alone on the
    GPU the two NVML peaks are the same figure, each above its own baseline read after the CUDA
    context exists."""
    if not on_cuda:
        return "train_alloc_peak_mib"
    if per_process:
        return "nvml_process_peak_mib" if summary.get("nvml_process_peak_mib") is not None else None
    return "nvml_peak_mib" if summary.get("nvml_peak_mib") is not None else "cuda_peak_reserved_mib"


def config_job(family: str, row: dict) -> Callable[[torch.device, int, str, float], dict]:
    """The measurement of one generator-table row, as a function of (device, steps, optimizer, interval)."""
    config = config_of(row, family)

    def job(device, steps, optimizer, sample_interval_s):
        return train_steps(
            lambda: build_model(family, config),
            lambda dev, gen: example_batch(family, config, dev, gen),
            device,
            steps,
            optimizer,
            sample_interval_s,
        )

    return job


@dataclass(frozen=True)
class _Settings:
    """How every child of one :func:`run_isolated` measures."""

    device: str
    steps: int
    optimizer: str
    sample_interval_s: float
    threads: int | None
    per_process: bool  # charge each job NVML's count of its own process (see target_source)


def _child(path: Path, labels: dict, job: Callable, settings: _Settings, jobs_at_once: int) -> None:
    if settings.threads:
        torch.set_num_threads(
            settings.threads
        )  # this forked process's own entry point: its threads are its own to set
    start = time.perf_counter()
    record = dict(labels)
    device = resolve_device(settings.device)
    record.update(job(device, settings.steps, settings.optimizer, settings.sample_interval_s))
    record["jobs_at_once"] = jobs_at_once
    if settings.per_process and record["status"] == STATUS_OK and device.type == "cuda":
        source = target_source(record, on_cuda=True, per_process=True)
        if source is None:
            record.update(
                {
                    "status": STATUS_FAILED,
                    "status_message": "NVML does not count each process's memory here: "
                    "measure one job at a time (--jobs-at-once 1)",
                    "memory_mib": None,
                }
            )
        else:
            record.update({"memory_mib": record[source], "memory_source": source})
    record["wall_s"] = time.perf_counter() - start
    atomic.write_json(path, record)


def run_isolated(
    jobs: list[tuple[dict, dict, Callable]],
    outdir: str | os.PathLike,
    device: str = "auto",
    steps: int = 2,
    optimizer: str = "adam",
    sample_interval_s: float = 0.02,
    timeout_s: float = 600.0,
    threads: int | None = None,
    jobs_at_once: int = 1,
) -> list[dict]:
    """Run each ``(labels, determines, job)`` in its own forked child (a point of
    :mod:`membench.core.points`), unless ``outdir`` holds its record ``<labels["config_id"]>.json``
    from the same measurement (``determines``: what fixes the job's result, e.g. its configuration;
    the options here; the code); returns every job's record (``labels`` plus the job's record), in order.

    ``jobs_at_once`` children run side by side. On a GPU each job is then charged the memory NVML
    counts for its own process (``nvml_process_peak_mib``; see :func:`target_source`), and a job
    that ran out of memory beside others is measured again alone (with the same target), so that
    an out-of-memory is the job's own. A child that dies or outlives ``timeout_s`` is recorded as
    FAILED or TIMEOUT with its exit code.
    """
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    code = code_version("core", "memnet")
    settings = _Settings(device, steps, optimizer, sample_interval_s, threads, per_process=jobs_at_once > 1)
    options = {
        "device": device,
        "steps": steps,
        "optimizer": optimizer,
        "sample_interval_s": sample_interval_s,
    }
    if settings.per_process:
        options["memory"] = "nvml_process"
    runs = [
        (
            Point(
                outdir / f"{labels['config_id']}.json",
                run_identity({"job": labels, "determines": determines, **options}, code=code),
            ),
            labels,
            job,
        )
        for labels, determines, job in jobs
    ]
    todo = [run for run in runs if not is_measured(run[0])]
    LOG.info("%d of %d jobs to measure, %d at once", len(todo), len(jobs), jobs_at_once)
    _measure_runs(todo, settings, timeout_s, jobs_at_once)
    crowded = [run for run in runs if _ran_out_beside_others(run[0])]
    if crowded:
        LOG.info("%d jobs ran out of memory beside others: each is measured again alone", len(crowded))
        _measure_runs(crowded, settings, timeout_s, 1)
    return [read_json_object(point.record, missing="rerun the measurement") for point, _, _ in runs]


def _ran_out_beside_others(point: Point) -> bool:
    record = read_json_object(point.record, missing="rerun the measurement")
    return record["status"] == STATUS_OOM and record.get("jobs_at_once", 1) > 1


def _measure_runs(runs: list, settings: _Settings, timeout_s: float, at_once: int) -> None:
    """Measure ``runs`` (``(point, labels, job)``) ``at_once`` at a time."""
    starts = [
        (point, Fork(_child, (point.record, labels, job, settings, at_once))) for point, labels, job in runs
    ]
    labels_of = {point.record: labels for point, labels, _ in runs}
    with contextlib.closing(measure_many(starts, timeout_s, at_once)) as outcomes:
        for i, (point, outcome) in enumerate(outcomes):
            labels = labels_of[point.record]
            record = outcome.record
            if outcome.timed_out or record is None:
                record = {
                    **labels,
                    "status": STATUS_TIMEOUT if outcome.timed_out else STATUS_FAILED,
                    "exit_code": outcome.exit_code,
                    "memory_mib": None,
                    "wall_s": outcome.wall_s,
                }
                atomic.write_json(point.record, record)
            LOG.info("[%d/%d] %s: %s", i + 1, len(runs), labels["config_id"], record["status"])


def measure_configs(configs: pd.DataFrame, family: str, outdir: str | os.PathLike, **options) -> list[dict]:
    """Measure the generator table's configurations (see :func:`run_isolated` for ``options``)."""
    jobs = [
        (
            {"config_id": row["config_id"], "filename": row["filename"], "family": family},
            config_of(row, family),
            config_job(family, row),
        )
        for row in configs.to_dict("records")
    ]
    return run_isolated(jobs, outdir, **options)
