"""Exact byte counters for tensors and for the CPU allocator.

:class:`SavedActivationCounter` counts the bytes autograd holds for backward
(``torch.autograd.graph.saved_tensors_hooks``); :class:`LiveTensorTracker` counts the bytes of every
storage created while it is active (a ``TorchDispatchMode``), per device type. Both key storages by
device and address, count each storage once, and uncount it through a ``weakref.finalize`` on the
storage's Python object, which torch keeps alive exactly as long as the storage itself.

Neither sees memory a kernel allocates for itself (convolution workspaces, oneDNN buffers):
:class:`CpuAllocatorTracker` does, from the allocation and free events the PyTorch profiler records
with ``profile_memory=True``.
"""

from __future__ import annotations

import threading
import weakref
from typing import Iterable

import torch
from torch.autograd import DeviceType
from torch.autograd.profiler import profile
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

__all__ = [
    "allocator_peak_bytes",
    "CpuAllocatorTracker",
    "LiveTensorTracker",
    "SavedActivationCounter",
    "storage_key",
]

_Key = tuple[str, int]


def storage_key(tensor: torch.Tensor) -> _Key:
    """Identify the storage behind ``tensor`` (views of one storage share the key)."""
    return (str(tensor.device), tensor.untyped_storage().data_ptr())


class _StorageLedger:
    """Running and peak byte count of a set of live storages."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: dict[_Key, int] = {}
        self.current_bytes = 0
        self.peak_bytes = 0

    def add(self, tensor: torch.Tensor) -> None:
        storage = tensor.untyped_storage()
        nbytes = storage.nbytes()
        key = (str(tensor.device), storage.data_ptr())
        if nbytes == 0:
            return
        with self._lock:
            if key in self._live:
                return
            self._live[key] = nbytes
            self.current_bytes += nbytes
            self.peak_bytes = max(self.peak_bytes, self.current_bytes)
        weakref.finalize(storage, self._release, key)

    def _release(self, key: _Key) -> None:
        with self._lock:
            nbytes = self._live.pop(key, 0)
            self.current_bytes -= nbytes

    def reset_peak(self) -> None:
        with self._lock:
            self.peak_bytes = self.current_bytes


class _LedgerCounts:
    """Exposes a ``_ledger``'s running and peak byte counts."""

    _ledger: _StorageLedger

    @property
    def peak_bytes(self) -> int:
        return self._ledger.peak_bytes

    @property
    def current_bytes(self) -> int:
        return self._ledger.current_bytes


class SavedActivationCounter(_LedgerCounts):
    """Count the bytes of tensors saved for backward while the context is active.

    Parameters
    ----------
    exclude : iterable of tensors
        Tensors whose storages are not activations (the model's parameters and buffers).

    Attributes
    ----------
    peak_bytes : int
        Largest number of saved bytes alive at once (unique storages).
    current_bytes : int
        Saved bytes still alive now.
    """

    def __init__(self, exclude: Iterable[torch.Tensor] = ()) -> None:
        self._excluded = {storage_key(t) for t in exclude}
        self._ledger = _StorageLedger()
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, _unpack)

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        if storage_key(tensor) not in self._excluded:
            self._ledger.add(tensor)
        return tensor

    def __enter__(self) -> "SavedActivationCounter":
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._hooks.__exit__(*exc)


def _unpack(tensor: torch.Tensor) -> torch.Tensor:
    return tensor


class LiveTensorTracker(TorchDispatchMode):
    """Track the peak bytes of tensor storages created while active, per device type
    (``max_memory_allocated``'s analogue at the tensor level).

    Only storages an operator creates are counted: outputs that alias an input (views, in-place
    results) and storages that existed before (parameters) are not. Works on every device; the
    peaks of different device types are kept apart (a GPU job's host buffers are not device memory).
    """

    def __init__(self) -> None:
        super().__init__()
        self._ledgers: dict[str, _StorageLedger] = {}
        self._lock = threading.Lock()

    def peak_bytes(self, device_type: str) -> int:
        """Largest number of bytes of storages on ``device_type`` ("cpu", "cuda") alive at once."""
        ledger = self._ledgers.get(device_type)
        return 0 if ledger is None else ledger.peak_bytes

    def current_bytes(self, device_type: str) -> int:
        """Bytes of storages on ``device_type`` created while active and still alive."""
        ledger = self._ledgers.get(device_type)
        return 0 if ledger is None else ledger.current_bytes

    def reset_peak(self) -> None:
        """Restart the peaks from the bytes alive now."""
        for ledger in list(self._ledgers.values()):
            ledger.reset_peak()

    def add(self, tensor: torch.Tensor) -> None:
        """Count ``tensor``'s storage as if an operator had created it now (once per storage)."""
        device_type = tensor.device.type
        ledger = self._ledgers.get(device_type)
        if ledger is None:
            with self._lock:
                ledger = self._ledgers.setdefault(device_type, _StorageLedger())
        ledger.add(tensor)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {storage_key(t) for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)}
        for tensor in tree_flatten(out)[0]:
            if isinstance(tensor, torch.Tensor) and storage_key(tensor) not in inputs:
                self.add(tensor)
        return out


class CpuAllocatorTracker:
    """Peak bytes the CPU allocator held above its level at entry, kernel workspaces included.

    Reads the allocation and free events of the PyTorch profiler (``profile_memory=True``): exact,
    at the cost of one profiler record per operator (the overhead is measured by the meter check).
    Blocks allocated before entry and freed inside are not seen (the profiler does not know their
    size), so the figure is the peak of what the enclosed code allocated and still held. Only one
    profiler can run at a time: entering while one runs raises ``RuntimeError``.

    Attributes
    ----------
    peak_bytes : int
        Set on exit.
    """

    def __init__(self) -> None:
        self._profile = profile(use_cpu=True, profile_memory=True)
        self.peak_bytes = 0

    def __enter__(self) -> "CpuAllocatorTracker":
        if torch.autograd._profiler_enabled():
            raise RuntimeError(
                "the CPU allocator tracker needs the PyTorch profiler, which is already running"
            )
        self._profile.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._profile.__exit__(*exc)
        self.peak_bytes = allocator_peak_bytes(self._profile.kineto_results.events(), DeviceType.CPU)


def allocator_peak_bytes(events, device_type: DeviceType) -> int:
    """Peak of the running sum of the profiler's ``[memory]`` events on ``device_type``, in event order."""
    memory = [e for e in events if e.name() == "[memory]" and e.device_type() == device_type]
    memory.sort(key=lambda e: e.start_ns())  # stable: events of one timestamp keep their order
    current = peak = 0
    for event in memory:
        current += event.nbytes()
        peak = max(peak, current)
    return peak
