"""The memory benchmark: one variant at one (batch size, max_len) point, one point per process.

A sweep is one job per point (the workflow's ``hotconv_sweep_point``), so the CUDA context,
cuBLAS/cuDNN handles and lazily loaded kernels are charged the same way to every variant whatever
the order, a point that crashes loses no other, and a rerun measures only the missing points;
:func:`membench.hotconv.tables.sweep_table` then gathers the points.

Each point makes a batch of random bytes filling ``max_len`` (the worst case: no padding), then
builds the model (seeded) under the core meter, so that on a GPU ``nvml_peak_mib`` counts the model
from instantiation (the HotConv README's GRMM_peak), and runs:

``step`` phase
    one forward and backward pass with the allocator, live-tensor and saved-activation tracers on:
    ``step_alloc_peak_mib`` is the allocator's peak above the phase start, kernel workspaces
    included (the figure that compares variants), ``step_peak_tensor_mib`` the peak of tensor
    storages the gradient computation creates on the job's device (the input batch is made before
    the phase; a variant that copies it to the device pays for the copy), ``activation_mib`` what
    autograd holds for backward.
``optimizer`` phase
    the AdamW step after it (its state is created here on the first step), traced the same way.
``timed`` phase
    ``steps`` further full training steps without tracers, under a second meter whose NVML baseline
    is read after ``empty_cache``: the timing fields of :mod:`membench.core.timing` (unit ``step``,
    the first step excluded as warm-up) and ``step_ms``, their median in milliseconds.

Out of memory, whatever raised it, is a result (``status`` ``oom`` with ``status_message``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from membench.core.meter import Meter
from membench.core.metrics import job_record
from membench.core.oom import is_out_of_memory, oom_fields
from membench.core.seeding import seeded
from membench.core.timing import Timer
from membench.hotconv.data import TOKEN_DTYPE, padded_length
from membench.hotconv.models import MalConvNet, ModelSpec

__all__ = [
    "measure_point",
    "random_batch",
    "SWEEP_DATASET",
    "SweepSpec",
]

log = logging.getLogger(__name__)

SWEEP_DATASET = "random_bytes"


@dataclass(frozen=True)
class SweepSpec:
    """The model and the training step of a sweep (model keys as
    :class:`~membench.hotconv.models.ModelSpec`)."""

    num_filters: int = 256
    window_size: int = 512
    stride: int = 512
    fp_slice_size: int = 8192
    fp2_slice_size: int = 512
    num_classes: int = 2
    learning_rate: float = 1e-4
    steps: int = 2
    seed: int = 0


def random_batch(
    batch_size: int, max_len: int, slice_size: int, num_classes: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens (B, L) int16 in 1..256 with L = ``max_len`` rounded up to a slice, and labels (B,) int64."""
    generator = torch.Generator().manual_seed(seed)
    length = padded_length(max_len, slice_size)
    tokens = torch.randint(1, 257, (batch_size, length), dtype=TOKEN_DTYPE, generator=generator)
    labels = torch.randint(0, num_classes, (batch_size,), generator=generator)
    return tokens, labels


def measure_point(
    sweep: SweepSpec,
    variant: str,
    batch_size: int,
    max_len: int,
    device: torch.device,
    *,
    sample_interval_s: float = 0.05,
    trace_allocator: bool = True,
    grid_intensity_g_per_kwh: float = 475.0,
) -> dict[str, object]:
    """Measure one grid point; returns a flat record (metrics contract fields plus the sweep's)."""
    spec = ModelSpec(
        variant,
        sweep.num_classes,
        sweep.num_filters,
        sweep.window_size,
        sweep.stride,
        sweep.fp_slice_size,
        sweep.fp2_slice_size,
    )
    record = job_record("hotconv", variant, SWEEP_DATASET, device, sweep.seed, batch_size)
    record.update(
        max_len=max_len,
        num_filters=sweep.num_filters,
        window_size=sweep.window_size,
        stride=sweep.stride,
        fp_slice_size=sweep.fp_slice_size,
        fp2_slice_size=sweep.fp2_slice_size,
        status="ok",
        status_message=None,
        step_ms=None,
    )
    record.update(Timer("step", device=device).fields())  # no samples, unless the point is measured
    start = time.perf_counter()
    try:
        record.update(
            _measure(
                spec,
                sweep,
                batch_size,
                max_len,
                device,
                sample_interval_s,
                trace_allocator,
                grid_intensity_g_per_kwh,
            )
        )
    except Exception as exc:
        if not is_out_of_memory(exc):
            raise
        record.update(oom_fields(exc))
        log.warning(
            "%s batch %d max_len %d: out of memory (%s)",
            variant,
            batch_size,
            max_len,
            record["status_message"],
        )
    finally:
        if device.type == "cuda":
            torch.cuda.empty_cache()
    record["wall_s"] = time.perf_counter() - start
    return record


def _measure(
    spec, sweep, batch_size, max_len, device, sample_interval_s, trace_allocator, grid_intensity_g_per_kwh
) -> dict:
    tokens, labels = random_batch(batch_size, max_len, sweep.fp_slice_size, sweep.num_classes, sweep.seed)
    with Meter(
        device,
        sample_interval_s=sample_interval_s,
        trace_live_tensors=True,
        trace_allocator=trace_allocator,
        grid_intensity_g_per_kwh=grid_intensity_g_per_kwh,
    ) as traced:
        # After the meter's NVML baseline, so nvml_peak_mib counts the model (GRMM_peak); before
        # the phases, whose figures are above their own start.
        with seeded(sweep.seed):
            model = MalConvNet(spec).to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=sweep.learning_rate)
        labels = labels.to(device)
        not_activations = [*model.parameters(), tokens]
        with traced.phase("step"):
            with traced.saved_activations(not_activations):
                loss = F.cross_entropy(model(tokens), labels)
            loss.backward()
            del loss
        with traced.phase("optimizer"):
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    fields = traced.summary()

    def step() -> None:
        F.cross_entropy(model(tokens), labels).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    timer = Timer("step", device=device)
    with Meter(
        device,
        sample_interval_s=sample_interval_s,
        trace_live_tensors=False,
        trace_saved_activations=False,
        grid_intensity_g_per_kwh=grid_intensity_g_per_kwh,
    ) as timed:
        with timed.phase("timed"):
            timer.repeat(step, sweep.steps)
    timed_fields = timed.summary()
    timing = timer.fields()
    fields.update(timing)
    fields.update(
        step_ms=timing["time_median_s"] * 1000,
        timed_wall_s=timed_fields["timed_wall_s"],
        timed_nvml_peak_mib=timed_fields["nvml_peak_mib"],
        timed_nvml_process_peak_mib=timed_fields["nvml_process_peak_mib"],
        timed_cuda_peak_allocated_mib=timed_fields["cuda_peak_allocated_mib"],
        timed_alloc_peak_mib=timed_fields["alloc_peak_mib"],
        energy_per_step_j=None
        if timed_fields["energy_j"] is None
        else timed_fields["energy_j"] / sweep.steps,
        co2e_per_step_g=None if timed_fields["co2e_g"] is None else timed_fields["co2e_g"] / sweep.steps,
    )
    return fields
