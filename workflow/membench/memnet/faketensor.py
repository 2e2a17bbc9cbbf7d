"""Tensor bytes of training steps counted on fake tensors (``FakeTensorMode``): no memory, no GPU.

Two counts, two baselines:

- :func:`step_bytes` (the ``faketensor`` estimator): one step. Live storages are counted by their
  storage identity: parameters, their gradients and the optimizer's state after the step, and the
  peak of tensors saved for backward during the forward pass (``saved_tensors_hooks``, parameters
  excluded), the same definition as the meter's ``activation_mib``.
- :func:`tracked_peak_bytes` (the ``memtracker`` estimator): PyTorch's module-level memory tracker
  (``torch.distributed._tools.mem_tracker.MemTracker``) over two steps, whose peak is the largest
  sum of every live tensor at one moment (parameters, buffers, gradients, activations, temporaries,
  optimizer state), the second step holding the optimizer state the first one made.

:func:`meta_layer_summary` gives a model's layer list from one forward pass on the meta device,
without compute.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from membench.core.errors import InputError
from membench.core.meter import MIB

__all__ = ["meta_layer_summary", "OPTIMIZERS", "step_bytes", "StepBytes", "tracked_peak_bytes"]

OPTIMIZERS: dict[str, Callable] = {
    "adam": lambda params: torch.optim.Adam(params, lr=1e-3),
    "adamw": lambda params: torch.optim.AdamW(params, lr=1e-3),
    "sgd": lambda params: torch.optim.SGD(params, lr=1e-2, momentum=0.9),
}


@dataclass
class StepBytes:
    """Bytes one training step holds, by kind."""

    parameter_bytes: int
    gradient_bytes: int
    optimizer_bytes: int
    activation_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.parameter_bytes + self.gradient_bytes + self.optimizer_bytes + self.activation_bytes

    @property
    def total_mib(self) -> float:
        return self.total_bytes / MIB


def _storage_bytes(tensors) -> int:
    seen: dict[int, int] = {}
    for t in tensors:
        if isinstance(t, torch.Tensor):
            storage = t.untyped_storage()
            seen[storage._cdata] = storage.nbytes()
    return sum(seen.values())


class _SavedPeak:
    """Peak bytes of unique storages saved for backward (excluded storages not counted)."""

    def __init__(self, excluded: set[int]) -> None:
        self.excluded = excluded
        self.live: dict[int, int] = {}
        self.peak_bytes = 0

    def pack(self, tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage._cdata not in self.excluded and storage._cdata not in self.live:
            self.live[storage._cdata] = storage.nbytes()
            self.peak_bytes = max(self.peak_bytes, sum(self.live.values()))
        return tensor


def _sized(count: Callable, *args):
    """``count(*args)``, with a tensor too large for int64 to size as :class:`InputError`."""
    try:
        return count(*args)
    except (RuntimeError, TypeError, OverflowError) as exc:
        # torch reports a size beyond int64 only in its message ("Storage size calculation
        # overflowed", "Overflow when unpacking long long"); anything else is not about the input.
        if "overflow" not in str(exc).lower():
            raise
        raise InputError(
            None, f"a tensor of this training step would hold 2**63 bytes or more ({exc})"
        ) from None


def step_bytes(
    build: Callable[[], torch.nn.Module], make_batch: Callable[[], tuple], optimizer: str = "adam"
) -> StepBytes:
    """Count one training step (forward, cross-entropy, backward, optimizer step) of ``build()`` on
    ``make_batch()`` under ``FakeTensorMode``.

    The model is built on the meta device (no memory, no initialisation; module copies such as an
    encoder's layer clones stay outside the fake mode), then given fake CPU storages; ``make_batch``
    runs inside the mode. A step with a tensor of 2**63 bytes or more, which no device holds and
    torch cannot size, raises :class:`InputError`.
    """
    return _sized(_step_bytes, build, make_batch, optimizer)


def _step_bytes(
    build: Callable[[], torch.nn.Module], make_batch: Callable[[], tuple], optimizer: str
) -> StepBytes:
    with torch.device("meta"):
        meta_model = build()
    # Non-fake inputs are allowed only so that ``to_empty`` can turn the meta storages into fake ones.
    with FakeTensorMode(allow_non_fake_inputs=True):
        model = meta_model.to_empty(device="cpu")
        x, y = make_batch()
        params = list(model.parameters())
        excluded = {p.untyped_storage()._cdata for p in params} | {
            b.untyped_storage()._cdata for b in model.buffers()
        }
        saved = _SavedPeak(excluded)
        with torch.autograd.graph.saved_tensors_hooks(saved.pack, lambda t: t):
            out = model(x)
            loss = torch.nn.functional.cross_entropy(out.float(), y)
        loss.backward()
        opt = OPTIMIZERS[optimizer](params)
        opt.step()
        state = [
            v for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor) and v.dim() > 0
        ]
        return StepBytes(
            parameter_bytes=_storage_bytes(params),
            gradient_bytes=_storage_bytes(p.grad for p in params if p.grad is not None),
            optimizer_bytes=_storage_bytes(state),
            activation_bytes=saved.peak_bytes,
        )


def tracked_peak_bytes(
    build: Callable[[], torch.nn.Module],
    make_batch: Callable[[], tuple],
    optimizer: str = "adam",
    steps: int = 2,
) -> int:
    """Peak bytes of every live tensor over ``steps`` training steps of ``build()`` on
    ``make_batch()``, as ``MemTracker`` counts them under ``FakeTensorMode`` (the model built on
    the meta device first, as in :func:`step_bytes`). Raises :class:`InputError` for a step with a
    tensor of 2**63 bytes or more."""
    return _sized(_tracked_peak_bytes, build, make_batch, optimizer, steps)


def _tracked_peak_bytes(build, make_batch, optimizer: str, steps: int) -> int:
    from torch.distributed._tools.mem_tracker import MemTracker

    with torch.device("meta"):
        meta_model = build()
    with FakeTensorMode(allow_non_fake_inputs=True):
        model = meta_model.to_empty(device="cpu")
        opt = OPTIMIZERS[optimizer](list(model.parameters()))
        x, y = make_batch()
        tracker = MemTracker()
        tracker.track_external(model, opt, x, y)
        with tracker:
            for step in range(steps):
                if step:
                    tracker.reset_mod_stats()
                loss = torch.nn.functional.cross_entropy(model(x).float(), y)
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                del loss
        peak = tracker.get_tracker_snapshot("peak")
    return int(sum(snapshot.get("Total", 0) for snapshot in peak.values()))


def meta_layer_summary(
    build: Callable[[], torch.nn.Module], example: Callable[[], torch.Tensor]
) -> tuple[list[tuple[str, int, int]], dict[str, int], int]:
    """(layer list, module counts, parameters) of ``build()`` from one forward pass of
    ``example()`` (a batch), both on the meta device: shapes only, so neither the weights nor the
    activations take memory or time. An operator without a meta kernel is run on fake tensors
    instead (``FakeTensorMode``, which costs its import, seconds, on first use). See
    ``models.layer_summary`` for the list."""
    from membench.memnet.models import layer_summary, module_counts

    with torch.device("meta"):
        meta_model = build()
        batch = example()
    parameters = sum(p.numel() for p in meta_model.parameters())
    counts = module_counts(meta_model)
    try:
        return _sized(layer_summary, meta_model, batch), counts, parameters
    except NotImplementedError:
        pass
    with FakeTensorMode(allow_non_fake_inputs=True):
        model = meta_model.to_empty(device="cpu")
        layers = _sized(layer_summary, model, torch.empty(batch.shape, dtype=batch.dtype))
    return layers, counts, parameters
