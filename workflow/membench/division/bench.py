"""The benchmark algorithms: one training step's memory, training throughput, largest batch.

They take a prepared model and tensors and return numbers; the job runner (``commands``) does I/O.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from membench.core.device import synchronize
from membench.core.meter import MIB, Meter
from membench.core.oom import is_out_of_memory, oom_fields
from membench.core.seeding import seeded
from membench.core.timing import Timer
from membench.division.kernels import Kernels
from membench.division.methods import MethodSpec, convert_model
from membench.division.models import build_model
from membench.division.precision import FLOAT32, Precision

__all__ = [
    "largest_batch",
    "make_optimizer",
    "measure_step_memory",
    "measure_throughput",
    "prepare_model",
    "random_batch",
    "state_bytes",
    "training_step",
]


def prepare_model(
    model_name: str,
    method: str,
    num_classes: int,
    device: torch.device,
    spec: MethodSpec,
    kernels: Kernels,
    seed: int,
    width: int | None = None,
    stem: str | None = None,
):
    """Build ``model_name`` with seed ``seed``, convert it for ``method``, move it to ``device``.

    Returns ``(model, compression context or None)``.
    """
    with seeded(seed):
        model = build_model(model_name, num_classes, width=width, stem=stem)
        context = convert_model(model, method, spec, kernels, seed)
    return model.to(device), context


def make_optimizer(model: nn.Module, lr: float = 0.1, momentum: float = 0.9, weight_decay: float = 5e-4):
    """SGD with momentum, as in the DIVISION and ActNN experiments."""
    return torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum, weight_decay=weight_decay)


def training_step(
    model, optimizer, inputs, targets, meter: Meter | None = None, precision: Precision = FLOAT32
) -> float:
    """One SGD step at ``precision``; the forward pass is counted by ``meter.saved_activations``
    when a meter is given. Returns the loss."""
    optimizer.zero_grad(set_to_none=True)
    with precision.autocast():
        if meter is None:
            loss = nn.functional.cross_entropy(model(inputs), targets)
        else:
            with meter.saved_activations(model):
                loss = nn.functional.cross_entropy(model(inputs), targets)
    precision.backward_step(loss, optimizer)
    return float(loss.detach())


def random_batch(batch_size: int, image_size: int, num_classes: int, device: torch.device, seed: int):
    """Seeded inputs float32 (batch_size, 3, image_size, image_size) and int64 targets (batch_size,)."""
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(batch_size, 3, image_size, image_size, generator=generator)
    targets = torch.randint(0, num_classes, (batch_size,), generator=generator)
    return inputs.to(device), targets.to(device)


def state_bytes(model: nn.Module, optimizer) -> int:
    """Bytes of parameters, buffers, gradients and optimizer state (what lives between steps)."""
    tensors = list(model.parameters()) + list(model.buffers())
    tensors += [p.grad for p in model.parameters() if p.grad is not None]
    for state in optimizer.state.values():
        tensors += [v for v in state.values() if isinstance(v, torch.Tensor)]
    return sum(t.numel() * t.element_size() for t in tensors)


def measure_step_memory(
    model, optimizer, inputs, targets, meter: Meter, precision: Precision = FLOAT32
) -> dict[str, object]:
    """Memory of one training step after a warm-up step, measured by ``meter`` as phase ``step``.

    Returns ``status`` (``ok`` or ``oom``) and ``total_memory_mib``: the CUDA allocator peak on a
    GPU; on a CPU the state held between steps plus the step's allocator peak (``alloc_peak_mib``,
    with the meter's ``trace_allocator``) or else its live-tensor peak (``peak_tensor_mib``). Out of
    memory, whatever raised it (:func:`~membench.core.oom.is_out_of_memory`), is a result:
    ``status`` ``oom`` with ``status_message``, memory fields empty.
    """
    try:
        training_step(model, optimizer, inputs, targets, precision=precision)
        held_bytes = state_bytes(model, optimizer)
        synchronize(inputs.device)
        with meter.phase("step") as phase:
            training_step(model, optimizer, inputs, targets, meter, precision)
    except Exception as exc:
        if not is_out_of_memory(exc):
            raise
        _release(optimizer, inputs.device)
        return {**oom_fields(exc), "total_memory_mib": None, "state_mib": None}
    if phase.cuda_peak_allocated_bytes is not None:
        total = phase.cuda_peak_allocated_bytes
    elif phase.alloc_peak_bytes is not None:
        total = held_bytes + phase.alloc_peak_bytes
    elif phase.peak_tensor_bytes is not None:
        total = held_bytes + phase.peak_tensor_bytes
    else:
        total = None
    return {
        "status": "ok",
        "status_message": None,
        "total_memory_mib": None if total is None else total / MIB,
        "state_mib": held_bytes / MIB,
    }


def _release(optimizer, device: torch.device) -> None:
    """Drop the gradients and cached blocks a failed step left behind."""
    optimizer.zero_grad(set_to_none=True)
    if device.type == "cuda":
        torch.cuda.empty_cache()


def measure_throughput(
    model, optimizer, inputs, targets, iterations: int = 16, warmup: int = 3, precision: Precision = FLOAT32
) -> dict[str, float]:
    """Median training throughput over ``iterations`` timed steps after ``warmup`` untimed ones.

    Returns the timing fields of :mod:`membench.core.timing` (unit ``step``; the first timed step
    is excluded too), ``images_per_s`` (batch / median step time), ``step_ms_median``,
    ``step_ms_min``, ``step_ms_max`` (over the same steady-state steps); each step is synchronised
    on a GPU.
    """
    for _ in range(warmup):
        training_step(model, optimizer, inputs, targets, precision=precision)
    timer = Timer("step", device=inputs.device)
    timer.repeat(lambda: training_step(model, optimizer, inputs, targets, precision=precision), iterations)
    timing = timer.fields()
    steady_s = timer.samples_s[-timing["time_samples"] :]
    return {
        **timing,
        "images_per_s": inputs.shape[0] / timing["time_median_s"],
        "step_ms_median": timing["time_median_s"] * 1e3,
        "step_ms_min": min(steady_s) * 1e3,
        "step_ms_max": max(steady_s) * 1e3,
    }


def largest_batch(fits: Callable[[int], bool], start: int, limit: int) -> tuple[int, list[tuple[int, bool]]]:
    """Largest batch size ``b <= limit`` with ``fits(b)``, assuming fitting is monotone.

    Doubles from ``start`` until a size does not fit (or ``limit``), then bisects between the last
    size that fitted and the first that did not. Returns ``(largest, probes)``, ``largest`` 0 when
    not even 1 fits; ``probes`` lists ``(batch, fitted)`` in order.
    """
    if start < 1 or limit < start:
        raise ValueError(f"need 1 <= start <= limit, got start {start}, limit {limit}")
    probes: list[tuple[int, bool]] = []

    def probe(batch: int) -> bool:
        fitted = bool(fits(batch))
        probes.append((batch, fitted))
        return fitted

    good, bad = 0, None
    batch = start
    while True:
        if probe(batch):
            good = batch
            if batch == limit:
                return good, probes
            batch = min(2 * batch, limit)
        else:
            bad = batch
            break
    low = good
    while bad - low > 1:
        middle = (low + bad) // 2
        if probe(middle):
            low = middle
        else:
            bad = middle
    return low, probes
