"""Exact, device-independent byte counters for tensors.

:class:`SavedActivationCounter` counts the bytes autograd holds for backward
(``torch.autograd.graph.saved_tensors_hooks``); :class:`LiveTensorTracker` counts the bytes of every
storage created while it is active (a ``TorchDispatchMode``). Both key storages by device and
address, count each storage once, and uncount it through a ``weakref.finalize`` on the storage's
Python object, which torch keeps alive exactly as long as the storage itself.
"""

from __future__ import annotations

import threading
import weakref
from typing import Iterable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

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


class LiveTensorTracker(_LedgerCounts, TorchDispatchMode):
    """Track the peak bytes of tensor storages created while active (``max_memory_allocated``'s analogue).

    Only storages an operator creates are counted: outputs that alias an input (views, in-place
    results) and storages that existed before (parameters) are not. Works on every device.
    """

    def __init__(self) -> None:
        super().__init__()
        self._ledger = _StorageLedger()

    def reset_peak(self) -> None:
        """Restart the peak from the bytes alive now."""
        self._ledger.reset_peak()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {storage_key(t) for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)}
        for tensor in tree_flatten(out)[0]:
            if isinstance(tensor, torch.Tensor) and storage_key(tensor) not in inputs:
                self._ledger.add(tensor)
        return out
