"""Seeded blocks that leave torch's global random state as they found it.

Code that can take a ``torch.Generator`` takes one. What draws from torch's global generators
instead (a model's initialisation, a data transform in a DataLoader) runs inside :func:`seeded`:
the generators are seeded on entry and restored on exit, so the caller's random state, and any
other job of the process, is untouched.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch

__all__ = ["seeded"]


@contextlib.contextmanager
def seeded(seed: int, device: torch.device | str = "cpu") -> Iterator[None]:
    """Run the block with torch's CPU generator seeded with ``seed`` (as ``torch.manual_seed``
    does), and every CUDA device's too when ``device`` is a CUDA device; restore them on exit.

    A CPU ``device`` leaves CUDA alone: forking its generators would create the CUDA context.
    """
    cuda = torch.device(device).type == "cuda"
    with torch.random.fork_rng(devices=range(torch.cuda.device_count()) if cuda else []):
        torch.random.default_generator.manual_seed(seed)
        if cuda:
            torch.cuda.manual_seed_all(seed)
        yield
