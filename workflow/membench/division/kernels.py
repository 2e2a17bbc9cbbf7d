"""Which implementation of the compressor kernels a job uses: the pure-torch reference or the
built C++/CUDA extension (a build manifest's, else the per-user cache's, built on first use; see
:func:`membench.core.extension.select_kernels`)."""

from __future__ import annotations

import os
from types import ModuleType

from membench.core import extension
from membench.core.errors import InputError
from membench.division import compress
from membench.division.extension import DEFAULT_LOCK_TIMEOUT_S, SPEC

__all__ = ["CPU_ISA_VARIABLE", "KERNEL_NAMES", "Kernels", "select_kernels", "TORCH_KERNELS"]

# Names the instruction set of the extension's CPU kernels (avx512, avx2, baseline); unset: the best
# this CPU has. Read by the extension once per process.
CPU_ISA_VARIABLE = "MEMBENCH_CPU_ISA"
# The ops every implementation provides: the extension's exports (its build spec).
KERNEL_NAMES = SPEC.kernels


class Kernels:
    """The kernels of one implementation (:data:`KERNEL_NAMES`), called as methods
    (``ops.maxpool2d_forward(...)``).

    ``name`` is ``"torch"`` or ``"extension"``; ``cuda`` says whether they run on CUDA tensors;
    ``value`` is what a job records in its metrics field ``kernels`` (``cpp-<digest8>``,
    ``cuda-<digest8>``, ``torch``); ``fallback_reason`` says why ``auto`` fell back to the
    pure-torch kernels (``None`` otherwise); ``cpu_isa`` is the instruction set the extension's CPU
    kernels run with (``avx512``, ``avx2``, ``baseline``: the best this CPU has, or the one the
    environment variable ``MEMBENCH_CPU_ISA`` names), ``None`` for the pure-torch kernels.
    """

    def __init__(
        self, name: str, module: ModuleType, cuda: bool, value: str, fallback_reason: str | None = None
    ) -> None:
        self.name = name
        self.cuda = cuda
        self.value = value
        self.fallback_reason = fallback_reason
        self.cpu_isa = _cpu_isa(module) if name == "extension" else None
        for kernel in KERNEL_NAMES:
            setattr(self, kernel, getattr(module, kernel))

    def supports(self, device_type: str) -> bool:
        return device_type == "cpu" or self.name == "torch" or self.cuda


def _cpu_isa(module: ModuleType) -> str:
    try:
        return module.cpu_isa()
    except RuntimeError as error:  # MEMBENCH_CPU_ISA names a set this build or CPU lacks
        problem = str(error).splitlines()[0].removeprefix(f"{CPU_ISA_VARIABLE}: ")
        raise InputError(None, problem, f"environment variable {CPU_ISA_VARIABLE}") from None


TORCH_KERNELS = Kernels("torch", compress, cuda=True, value="torch")


def select_kernels(
    choice: str,
    manifest_path: str | os.PathLike | None = None,
    device_type: str = "cpu",
    *,
    cache_dir: str | os.PathLike | None = None,
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
) -> Kernels:
    """Resolve ``choice`` (``auto`` | ``torch`` | ``extension``) to a :class:`Kernels` for
    ``device_type``: the build ``manifest_path`` names, else the one in ``cache_dir`` (built there on
    first use). ``extension`` without such a build raises a one-line
    :class:`~membench.core.errors.InputError`; ``auto`` falls back to the reference, logs one line
    and keeps the reason in ``fallback_reason``."""
    selected = extension.select_kernels(
        SPEC,
        choice,
        manifest_path=manifest_path,
        cache_dir=cache_dir,
        device_type=device_type,
        lock_timeout_s=lock_timeout_s,
    )
    if selected.module is None:
        if selected.fallback_reason is None:
            return TORCH_KERNELS
        return Kernels("torch", compress, True, selected.value, selected.fallback_reason)
    return Kernels("extension", selected.module, bool(selected.module.has_cuda_kernels()), selected.value)
