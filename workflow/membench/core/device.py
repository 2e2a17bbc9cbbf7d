"""Resolve the configured device (``auto|cpu|cuda``) and describe it."""

from __future__ import annotations

import platform

import torch

from membench.core.errors import InputError
from membench.core.options import DEVICE_CHOICES

__all__ = ["device_name", "resolve_device", "synchronize"]


def resolve_device(name: str) -> torch.device:
    """Return the torch device for ``auto`` (CUDA when present), ``cpu`` or ``cuda[:i]``."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cpu":
        return torch.device("cpu")
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise InputError(
                None, f"device {name!r} was asked for but torch sees no CUDA device", "key 'device'"
            )
        return torch.device(name)
    raise InputError(None, f"device {name!r} is not one of {', '.join(DEVICE_CHOICES)}", "key 'device'")


def device_name(device: torch.device) -> str:
    """Human-readable name of the device: the GPU model, or the CPU model."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def synchronize(device: torch.device) -> None:
    """Wait for queued work on ``device`` so that wall times cover it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
