"""One interface over the implementations: ``classify(data, pattern, implementation=...)``."""

from __future__ import annotations

import contextlib
from types import ModuleType
from typing import Callable, ContextManager

import numpy as np
import torch

from membench.appclass.options import IMPLEMENTATIONS, PRECISIONS, AppclassOptions
from membench.core.errors import InputError
from membench.data.graphs import Graph

__all__ = ["classify"]

PhaseFactory = Callable[[str], ContextManager]


def _no_phase(name: str) -> ContextManager:
    return contextlib.nullcontext()


def classify(
    data: Graph,
    pattern: Graph,
    *,
    implementation: str = "reference",
    options: AppclassOptions = AppclassOptions(),
    device: torch.device | str = "cpu",
    precision: str = "float64",
    chunk_edges: int | None = None,
    kernels: ModuleType | None = None,
    threads: int | None = None,
    phase: PhaseFactory = _no_phase,
) -> np.ndarray:
    """Log-beliefs of matching each pattern node to each data node.

    Runs the initialisation and ``pattern.num_nodes`` iterations (as PNNL does) inside
    ``phase("init")`` and ``phase("iterations")`` (e.g. :meth:`membench.core.meter.Meter.phase`).
    ``reference`` is the NumPy reference (CPU, float64 only); ``torch`` the fast version on
    ``device`` in ``precision`` (``float64`` or ``float32``): on the CPU with the built C++ kernels
    ``kernels`` (the ``module`` of :func:`membench.appclass.extension.select_kernels`, ``threads``
    OpenMP threads, default torch's), else pure torch ``chunk_edges`` edges at a time.

    Returns float64, shape (data.num_nodes, pattern.num_nodes); each column's exponentials sum to 1.
    """
    if implementation not in IMPLEMENTATIONS:
        raise InputError(
            None,
            f"implementation {implementation!r} is not one of {', '.join(IMPLEMENTATIONS)}",
            "key 'implementation'",
        )
    if precision not in PRECISIONS:
        raise InputError(
            None, f"precision {precision!r} is not one of {', '.join(PRECISIONS)}", "key 'precision'"
        )
    if implementation == "reference":
        from membench.appclass import reference as module

        if precision != "float64" or torch.device(device).type != "cpu":
            raise InputError(
                None, "the reference implementation runs on the CPU in float64 only", "key 'implementation'"
            )
        with phase("init"):
            state = module.initialise(data, pattern, options)
        with phase("iterations"):
            for _ in range(pattern.num_nodes):
                module.iterate(state)
        return module.beliefs(state)

    dtype = getattr(torch, precision)
    if kernels is not None and torch.device(device).type == "cpu":
        from membench.appclass import native as module

        with phase("init"):
            state = module.initialise(
                data, pattern, options, dtype, kernels, threads or torch.get_num_threads()
            )
    else:
        from membench.appclass import fast as module

        with phase("init"):
            state = module.initialise(data, pattern, options, device, dtype, chunk_edges)
    with phase("iterations"):
        for _ in range(pattern.num_nodes):
            module.iterate(state)
    return module.beliefs(state).to(device="cpu", dtype=torch.float64).numpy()
