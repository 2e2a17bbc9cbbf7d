"""Mixed precision (AMP) of the division jobs: autocast and, for float16, a gradient scaler.

The DIVISION paper's throughputs are measured with AMP; ``amp`` picks it per job:
``none`` (float32), ``bf16`` (autocast to bfloat16, CPU or CUDA) or ``fp16`` (autocast to float16
with a ``GradScaler``, as torch.cuda.amp recipes do).
"""

from __future__ import annotations

import contextlib

import torch

from membench.division.options import AMP_CHOICES

__all__ = ["FLOAT32", "Precision"]

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


class Precision:
    """How one job computes its training steps: ``autocast()`` around the forward pass and loss,
    ``backward_step(loss, optimizer)`` for the backward pass and the optimizer step."""

    def __init__(self, amp: str, device: torch.device) -> None:
        if amp not in AMP_CHOICES:
            raise ValueError(f"amp must be one of {', '.join(AMP_CHOICES)}, got {amp!r}")
        self.amp = amp
        self.device_type = torch.device(device).type
        self.scaler = torch.amp.GradScaler(self.device_type) if amp == "fp16" else None

    def autocast(self):
        if self.amp == "none":
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=_DTYPES[self.amp])

    def backward_step(self, loss: torch.Tensor, optimizer: torch.optim.Optimizer) -> None:
        if self.scaler is None:
            loss.backward()
            optimizer.step()
            return
        self.scaler.scale(loss).backward()
        self.scaler.step(optimizer)
        self.scaler.update()


FLOAT32 = Precision("none", torch.device("cpu"))
