"""Training checkpoints: written atomically, read without executing code (``weights_only=True``)."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from membench.core import atomic
from membench.core.errors import InputError


def save_checkpoint(path: str | os.PathLike, state: dict) -> None:
    """Save ``state`` (tensors, state dicts, numbers, strings) to ``path`` atomically."""
    with atomic.atomic_path(path, suffix=".pt") as tmp:
        torch.save(state, tmp)


def load_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict | None:
    """Load a checkpoint written by :func:`save_checkpoint`; ``None`` if there is none yet."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # a torn or foreign file must not crash into a traceback
        raise InputError(path, f"not a readable membench checkpoint ({exc})") from None
