"""The PNNL output format: C ``printf("%e\\n")`` of each log-belief, row-major."""

from __future__ import annotations

import os

import numpy as np

from membench.core import atomic

__all__ = ["format_beliefs", "format_value", "write_npy"]


def format_value(value: float) -> str:
    """C's ``%e`` of one double as glibc prints it (``-nan`` for a NaN with its sign bit set)."""
    if value != value:
        return "-nan" if np.signbit(value) else "nan"
    return "%e" % value


def format_beliefs(beliefs: np.ndarray) -> str:
    """All values of ``beliefs`` (any shape, row-major), one ``%e`` line each, as PNNL prints them."""
    values = np.ascontiguousarray(beliefs, dtype=np.float64).ravel()
    if np.isnan(values).any():
        lines = [format_value(v) for v in values]
    else:
        # Python's %e equals C's for finite values and infinities ("inf", "-inf").
        lines = list(map("%e".__mod__, values.tolist()))
    return "\n".join(lines) + "\n" if lines else ""


def write_npy(path: str | os.PathLike, beliefs: np.ndarray) -> None:
    """Write the belief matrix (float64, (data nodes, pattern nodes)) as .npy, atomically."""
    with atomic.atomic_path(path, suffix=".npy") as tmp:
        np.save(tmp, np.asarray(beliefs, dtype=np.float64), allow_pickle=False)
