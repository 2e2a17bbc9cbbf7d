"""The benchmark algorithms: one training step's memory and its lower bound, training throughput,
the largest batch, and the compressors against cloning a map.

They take a prepared model and tensors and return numbers; the job runner (``commands``) does I/O.
"""

from __future__ import annotations

import statistics
import weakref
from typing import Callable

import torch
from torch import nn

from membench.core.device import synchronize
from membench.core.meter import MIB, Meter
from membench.core.oom import is_out_of_memory, oom_fields
from membench.core.seeding import seeded
from membench.core.timing import Timer
from membench.core.tracers import SavedActivationCounter
from membench.division.compress import DivisionCompressor, GroupCompressor
from membench.division.functions import CompressedBatchNorm2d, CompressedConv2d
from membench.division.kernels import Kernels
from membench.division.methods import convert_model
from membench.division.models import build_model
from membench.division.options import MethodSpec
from membench.division.precision import FLOAT32, Precision

__all__ = [
    "largest_batch",
    "make_optimizer",
    "measure_compressors",
    "measure_paired_throughput",
    "measure_step_memory",
    "measure_throughput",
    "prepare_model",
    "random_batch",
    "state_bytes",
    "step_memory_bound",
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
    """Bytes of parameters, buffers and optimizer state: what a training step starts from (the
    step allocates its own gradients)."""
    tensors = list(model.parameters()) + list(model.buffers())
    for state in optimizer.state.values():
        tensors += [v for v in state.values() if isinstance(v, torch.Tensor)]
    return sum(t.numel() * t.element_size() for t in tensors)


def measure_step_memory(
    model, optimizer, inputs, targets, meter: Meter, precision: Precision = FLOAT32
) -> dict[str, object]:
    """Memory of one training step after a warm-up step, measured by ``meter`` as phase ``step``.

    The warm-up step's gradients are dropped before the measured step, so that the step frees
    nothing it did not allocate: its peak (``alloc_peak_mib``) is then what it allocated and held,
    new gradients included, on every device. (A GPU's peak above the phase's start would otherwise
    lack the old gradients' bytes, which the step's ``zero_grad`` frees.)

    Returns ``status`` (``ok`` or ``oom``), ``state_mib`` (parameters, buffers and optimizer state,
    what the step starts from) and ``total_memory_mib``: the CUDA allocator peak on a GPU; on a CPU
    the same sum, the state and the batch plus the step's allocator peak (``alloc_peak_mib``, with
    the meter's ``trace_allocator``) or else its live-tensor peak (``peak_tensor_mib``). Out of
    memory, whatever raised it (:func:`~membench.core.oom.is_out_of_memory`), is a result:
    ``status`` ``oom`` with ``status_message``, memory fields empty.
    """
    try:
        training_step(model, optimizer, inputs, targets, precision=precision)
        optimizer.zero_grad(set_to_none=True)
        held_bytes = state_bytes(model, optimizer)
        synchronize(inputs.device)
        with meter.phase("step") as phase:
            training_step(model, optimizer, inputs, targets, meter, precision)
    except Exception as exc:
        if not is_out_of_memory(exc):
            raise
        _release(optimizer, inputs.device)
        return {**oom_fields(exc), "total_memory_mib": None, "state_mib": None}
    before_step = held_bytes + _nbytes(inputs) + _nbytes(targets)
    if phase.cuda_peak_allocated_bytes is not None:
        total = phase.cuda_peak_allocated_bytes
    elif phase.alloc_peak_bytes is not None:
        total = before_step + phase.alloc_peak_bytes
    elif phase.peak_tensor_bytes is not None:
        total = before_step + phase.peak_tensor_bytes
    else:
        total = None
    return {
        "status": "ok",
        "status_message": None,
        "total_memory_mib": None if total is None else total / MIB,
        "state_mib": held_bytes / MIB,
    }


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def step_memory_bound(
    model, optimizer, inputs, targets, precision: Precision = FLOAT32
) -> dict[str, float | str]:
    """A lower bound of a training step's allocator peak (what :func:`measure_step_memory` reports
    as ``step_alloc_peak_mib``: bytes allocated during the step), from one instrumented step.

    These bytes are allocated during the step and alive at once:
    - at the end of the forward pass, every saved tensor (unique storages; parameters, buffers and
      the input batch excluded);
    - when a layer's backward starts: the saved tensors of the layers whose backward has not run yet
      (its own included), the gradients accumulated so far and its own parameters' (about to be),
      the gradient maps autograd holds (the layer's output gradient, and those waiting for another
      consumer, as a residual block's output gradient waits for the shortcut), the gradient of its
      input (when the input needs one) and, for a layer that keeps its input compressed, the
      decompressed input in the dtype it computes in: one convolution backward takes both.
    The bound is the largest of these sums over the step; kernels' workspaces and any other
    temporaries come on top of it. Returns ``step_alloc_bound_mib`` and its parts at that moment:
    ``bound_saved_mib``, ``bound_grads_mib``, ``bound_maps_mib`` and ``bound_at`` (the layer, or
    ``end of forward``).
    """
    params = [p for p in model.parameters() if p.requires_grad]
    counter = SavedActivationCounter(exclude=[*model.parameters(), *model.buffers(), inputs])
    best = {"total": -1, "saved": 0, "grads": 0, "maps": 0, "at": ""}
    names = {module: name for name, module in model.named_modules()}
    held: dict[int, tuple[weakref.ref, int]] = {}  # output gradients seen, by storage

    def consider(at: str, saved: int, grads: int, maps: int) -> None:
        if saved + grads + maps > best["total"]:
            best.update(total=saved + grads + maps, saved=saved, grads=grads, maps=maps, at=at)

    def after_forward(module, args, output) -> None:
        if not (isinstance(output, torch.Tensor) and output.requires_grad) or not args:
            return
        x = args[0]
        maps = _nbytes(x) if isinstance(x, torch.Tensor) and x.requires_grad else 0
        compressed = isinstance(module, (CompressedConv2d, CompressedBatchNorm2d))
        if compressed and module.context.compressor is not None:
            device = x.device.type
            autocast = isinstance(module, CompressedConv2d) and torch.is_autocast_enabled(device)
            dtype = torch.get_autocast_dtype(device) if autocast else x.dtype
            maps += x.numel() * torch.finfo(dtype).bits // 8
        own = [p for p in module.parameters(recurse=False) if p.requires_grad]

        def before_backward(grad: torch.Tensor) -> None:
            storage = grad.untyped_storage()  # an expanded gradient holds less than its numel
            held[storage.data_ptr()] = (weakref.ref(grad), storage.nbytes())
            gradient_maps = sum(nbytes for ref, nbytes in held.values() if ref() is not None)
            grads = sum(_nbytes(p.grad) for p in params if p.grad is not None)
            grads += sum(_nbytes(p) for p in own if p.grad is None)
            at = names.get(module, type(module).__name__)
            consider(at, counter.current_bytes, grads, maps + gradient_maps)

        output.register_hook(before_backward)

    leaves = [m for m in model.modules() if not any(True for _ in m.children())]
    handles = [m.register_forward_hook(after_forward) for m in leaves]
    try:
        optimizer.zero_grad(set_to_none=True)
        with precision.autocast(), counter:
            loss = nn.functional.cross_entropy(model(inputs), targets)
        consider("end of forward", counter.current_bytes, 0, 0)
        precision.backward_step(loss, optimizer)
    finally:
        for handle in handles:
            handle.remove()
    return {
        "step_alloc_bound_mib": best["total"] / MIB,
        "bound_saved_mib": best["saved"] / MIB,
        "bound_grads_mib": best["grads"] / MIB,
        "bound_maps_mib": best["maps"] / MIB,
        "bound_at": best["at"],
    }


def _release(optimizer, device: torch.device) -> None:
    """Drop the gradients and cached blocks a failed step left behind."""
    optimizer.zero_grad(set_to_none=True)
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _throughput_fields(timer: Timer, batch_size: int) -> dict[str, float]:
    timing = timer.fields()
    steady_s = timer.samples_s[-timing["time_samples"] :]
    return {
        **timing,
        "images_per_s": batch_size / timing["time_median_s"],
        "step_ms_median": timing["time_median_s"] * 1e3,
        "step_ms_min": min(steady_s) * 1e3,
        "step_ms_max": max(steady_s) * 1e3,
    }


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
    return _throughput_fields(timer, inputs.shape[0])


def measure_paired_throughput(
    model,
    optimizer,
    vanilla_model,
    vanilla_optimizer,
    inputs,
    targets,
    iterations: int = 16,
    warmup: int = 3,
    precision: Precision = FLOAT32,
) -> dict[str, float]:
    """:func:`measure_throughput` of ``model``, with a step of ``vanilla_model`` timed beside each of
    its steps in the same process (vanilla first in even rounds, second in odd ones), so that a
    change of the machine's load hits both alike.

    Adds ``paired_vanilla_images_per_s`` (vanilla's throughput from its median step) and
    ``vs_paired_vanilla``: the median over the steady rounds of vanilla's step time over the
    method's (the method's throughput as a fraction of vanilla's).
    """
    steps = (
        lambda: training_step(model, optimizer, inputs, targets, precision=precision),
        lambda: training_step(vanilla_model, vanilla_optimizer, inputs, targets, precision=precision),
    )
    for _ in range(warmup):
        for step in steps:
            step()
    timers = (Timer("step", device=inputs.device), Timer("step", device=inputs.device))
    for round_index in range(iterations):
        for which in (1, 0) if round_index % 2 == 0 else (0, 1):
            with timers[which].sample():
                steps[which]()
    fields = _throughput_fields(timers[0], inputs.shape[0])
    steady = fields["time_samples"]
    ratios = [v / m for v, m in zip(timers[1].samples_s[-steady:], timers[0].samples_s[-steady:])]
    fields.update(
        paired_vanilla_images_per_s=inputs.shape[0] / timers[1].fields()["time_median_s"],
        vs_paired_vanilla=statistics.median(ratios),
    )
    return fields


def measure_compressors(
    kernels: Kernels,
    shape: tuple[int, int, int, int],
    spec: MethodSpec = MethodSpec(),
    repeats: int = 20,
    dtype: torch.dtype = torch.float32,
    device: torch.device = torch.device("cpu"),
    seed: int = 0,
) -> dict[str, object]:
    """Time compressing and decompressing one random map of ``shape`` (N, C, H, W) and ``dtype``
    by DIVISION and by the ActNN-style compressor of ``spec``, and the ReLU's 1-bit mask, against
    cloning the map.

    Each of ``repeats`` rounds times, one after the other, a clone, then each compressor's compress
    and its decompress, then the mask's forward (``relu_pack``: the ReLU and its packed mask) and
    backward (``masked_grad`` of a gradient the map's size), so load changes hit all alike. Returns
    per operation its median in ms over the steady rounds (``clone_ms``, ``division_compress_ms``,
    ``division_decompress_ms``, ..., ``relu_pack_ms``, ``masked_grad_ms``), per compressor
    ``<method>_ms`` (compress plus decompress) and ``<method>_vs_clone`` (that over ``clone_ms``),
    ``relu_mask_ms`` and ``relu_mask_vs_clone`` alike, the clone's timing fields
    (:mod:`membench.core.timing`, unit ``repeat``), and ``timing_reliable`` / ``timing_flag`` over
    all operations.
    """
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=generator).to(device=device, dtype=dtype)
    compressors = {
        "division": DivisionCompressor(spec.block_size, spec.hfc_bits),
        "actnn2bit": GroupCompressor(spec.group_size, spec.actnn_bits),
    }
    timers = {"clone": Timer("repeat", device=device)}
    for name in compressors:
        timers[f"{name}_compress"] = Timer("repeat", device=device)
        timers[f"{name}_decompress"] = Timer("repeat", device=device)
    timers["relu_pack"] = Timer("repeat", device=device)
    timers["masked_grad"] = Timer("repeat", device=device)
    for _ in range(repeats + 1):  # the first round is warm-up (timing_fields leaves it out)
        with timers["clone"].sample():
            x.clone()
        for name, compressor in compressors.items():
            with timers[f"{name}_compress"].sample():
                saved = compressor.compress(x, generator, kernels)
            with timers[f"{name}_decompress"].sample():
                compressor.decompress(saved, x.shape, dtype, kernels)
            del saved
        with timers["relu_pack"].sample():
            _, mask = kernels.relu_pack(x)
        with timers["masked_grad"].sample():
            kernels.masked_grad(x, mask, 1.0)
        del mask
    fields: dict[str, object] = dict(timers["clone"].fields())
    timings = {name: timer.fields() for name, timer in timers.items()}
    for name, timing in timings.items():
        fields[f"{name}_ms"] = timing["time_median_s"] * 1e3
        fields[f"{name}_spread_pct"] = timing["time_spread_pct"]
    for name in compressors:
        fields[f"{name}_ms"] = fields[f"{name}_compress_ms"] + fields[f"{name}_decompress_ms"]
        fields[f"{name}_vs_clone"] = fields[f"{name}_ms"] / fields["clone_ms"]
    fields["relu_mask_ms"] = fields["relu_pack_ms"] + fields["masked_grad_ms"]
    fields["relu_mask_vs_clone"] = fields["relu_mask_ms"] / fields["clone_ms"]
    flags = [f"{name}: {t['timing_flag']}" for name, t in timings.items() if not t["timing_reliable"]]
    fields.update(timing_reliable=not flags, timing_flag="; ".join(flags))
    fields.update(
        map_shape="x".join(map(str, shape)),
        map_dtype=str(dtype).removeprefix("torch."),
        map_mib=x.numel() * x.element_size() / MIB,
        repeats=repeats,
    )
    return fields


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
