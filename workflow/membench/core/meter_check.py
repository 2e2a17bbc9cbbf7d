"""The meter check job: a small reference training loop measured under the meter.

It answers, on a new machine or cluster node, which sources can be read (NVML, the CUDA
allocator, RAPL) and what the meter's sampling costs, measured side by side in one run.
"""

from __future__ import annotations

import statistics

import torch
from torch import nn

from membench.core.meter import Meter
from membench.core.seeding import seeded
from membench.core.timing import Timer

__all__ = ["reference_model", "run_meter_check"]


def reference_model(num_classes: int = 10) -> nn.Module:
    """A small CNN (conv-bn-relu x2, pooling, linear) for 3x32x32 inputs."""
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1, bias=False),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, num_classes),
    )


def _train_steps(model, optimizer, inputs, targets, steps: int, meter: Meter | None) -> None:
    criterion = nn.CrossEntropyLoss()
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        if meter is None:
            loss = criterion(model(inputs), targets)
        else:
            with meter.saved_activations(model):
                loss = criterion(model(inputs), targets)
        loss.backward()
        optimizer.step()


_BLOCKS = ("plain", "sampled", "counted", "allocator")


def _timed_block(
    model, optimizer, inputs, targets, steps, device, sample_interval_s, block: str, plain: Timer
) -> float:
    """Seconds of ``steps`` steps: without the meter (``plain``, a sample of the ``plain`` timer),
    under its sampling thread (``sampled``), under the thread with saved activations counted
    (``counted``), or with the CPU allocator tracer on as well (``allocator``; the same as
    ``counted`` on CUDA)."""
    if block == "plain":
        return plain.repeat(lambda: _train_steps(model, optimizer, inputs, targets, steps, None), 1)[0]
    with Meter(device, sample_interval_s=sample_interval_s, trace_allocator=block == "allocator") as probe:
        with probe.phase("train"):
            _train_steps(model, optimizer, inputs, targets, steps, None if block == "sampled" else probe)
    return probe.phases["train"].wall_s


def _median_overhead_pct(measured: list[float], plain: list[float]) -> float:
    """Median over repeats of the extra time of ``measured`` blocks over the plain block beside them."""
    return statistics.median(m / p - 1.0 for m, p in zip(measured, plain)) * 100.0


def run_meter_check(
    device: torch.device,
    batch_size: int = 32,
    steps: int = 20,
    repeats: int = 5,
    sample_interval_s: float = 0.05,
    seed: int = 0,
    grid_intensity_g_per_kwh: float = 475.0,
) -> tuple[dict[str, object], "object"]:
    """Train the reference model and measure it; return ``(metrics fields, memlog frame)``.

    The overhead figures come from ``repeats`` rounds of three timed blocks of ``steps`` steps each,
    in rotating order: without the meter, under its sampling thread (``meter_overhead_pct``),
    with saved activations counted as well (``activation_count_overhead_pct``), and with the CPU
    allocator tracer on too (``allocator_trace_overhead_pct``); each is the median
    over rounds of the ratio to the plain block of the same round. ``sampler_cpu_pct`` is the
    sampling thread's own CPU time as a share of wall time, which machine load does not blur.
    A final phase runs with the live-tensor and allocator tracers on as well, for ``peak_tensor_mib``
    and ``alloc_peak_mib``; the live-tensor tracer
    costs more, so its step time is reported on its own (``traced_step_ms``). The timing fields of
    :mod:`membench.core.timing` (unit ``repeat``) describe the plain blocks.
    """
    generator = torch.Generator().manual_seed(seed)
    with seeded(seed):
        model = reference_model().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    inputs = torch.rand(batch_size, 3, 32, 32, generator=generator).to(device)
    targets = torch.randint(0, 10, (batch_size,), generator=generator).to(device)
    _train_steps(model, optimizer, inputs, targets, 2, None)  # warm-up: allocator, kernels

    seconds: dict[str, list[float]] = {block: [] for block in _BLOCKS}
    plain_timer = Timer("repeat", device=device)
    for repeat in range(repeats):
        # Rotate the order of the blocks so that drift in machine load cancels out.
        for block in _BLOCKS[repeat % len(_BLOCKS) :] + _BLOCKS[: repeat % len(_BLOCKS)]:
            seconds[block].append(
                _timed_block(
                    model, optimizer, inputs, targets, steps, device, sample_interval_s, block, plain_timer
                )
            )

    with Meter(
        device,
        sample_interval_s=sample_interval_s,
        trace_live_tensors=True,
        trace_allocator=True,
        grid_intensity_g_per_kwh=grid_intensity_g_per_kwh,
    ) as meter:
        with meter.phase("train"):
            _train_steps(model, optimizer, inputs, targets, steps, meter)
    plain = statistics.median(seconds["plain"])
    summary = meter.summary()
    fields = {
        **summary,
        **plain_timer.fields(),
        "train_steps": steps,
        "repeats": repeats,
        "sample_interval_s": sample_interval_s,
        "step_ms": plain / steps * 1000.0,
        "sampled_step_ms": statistics.median(seconds["sampled"]) / steps * 1000.0,
        "counted_step_ms": statistics.median(seconds["counted"]) / steps * 1000.0,
        "allocator_traced_step_ms": statistics.median(seconds["allocator"]) / steps * 1000.0,
        "meter_overhead_pct": _median_overhead_pct(seconds["sampled"], seconds["plain"]),
        "activation_count_overhead_pct": _median_overhead_pct(seconds["counted"], seconds["plain"]),
        "allocator_trace_overhead_pct": _median_overhead_pct(seconds["allocator"], seconds["plain"]),
        "sampler_cpu_pct": summary["meter_sampler_cpu_s"] / summary["meter_wall_s"] * 100.0,
        "traced_step_ms": meter.phases["train"].wall_s / steps * 1000.0,
        "samples_per_s": batch_size * steps / plain,
        "parameter_mib": sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20,
    }
    return fields, meter.memlog()
