"""Build and load the C++/CUDA kernels of the compressors (``csrc/``).

The build machinery (manifest, loading, version checks) is :mod:`membench.core.extension`; this
module names DIVISION's sources and flags. The pure-torch functions in
:mod:`membench.division.compress` are the fallback and the reference the kernels are tested against.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

from membench.core import extension
from membench.core.extension import (
    CUDA_CHOICES,
    DEFAULT_LOCK_TIMEOUT_S,
    KERNEL_CHOICES,
    LOCK_NAME,
    MANIFEST_NAME,
    build_lock,
    cuda_build_possible,
    cxx_compiler_present,
)

__all__ = [
    "CUDA_CHOICES",
    "DEFAULT_LOCK_TIMEOUT_S",
    "KERNEL_CHOICES",
    "LOCK_NAME",
    "MANIFEST_NAME",
    "SPEC",
    "build_extension",
    "build_lock",
    "cuda_build_possible",
    "cxx_compiler_present",
    "load_extension",
]

CSRC_DIR = Path(__file__).parent / "csrc"
# Contraction into FMAs would round differently from the reference's separate multiply and add.
SPEC = extension.ExtensionSpec(
    name="membench_division_ops",
    source_dir=CSRC_DIR,
    cpu_sources=("division_ops.cpp",),
    cuda_sources=("division_cuda.cu",),
    kernels=(
        "quantize_pack",
        "unpack_dequantize",
        "pack_mask",
        "unpack_mask",
        "maxpool2d_forward",
        "maxpool2d_backward",
    ),
    build_command="membench division build",
    cflags=("-O3", "-ffp-contract=off"),
    cuda_cflags=("-O3", "--fmad=false"),
)


def build_extension(
    outdir: str | os.PathLike,
    cuda: str = "auto",
    verbose: bool = False,
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
) -> dict:
    """Compile the kernels into ``outdir`` and write ``outdir/manifest.json`` (see
    :func:`membench.core.extension.build_extension`); return the manifest."""
    return extension.build_extension(SPEC, outdir, cuda, verbose, lock_timeout_s)


def load_extension(manifest_path: str | os.PathLike) -> ModuleType:
    """Import the built kernels named by a build manifest (see
    :func:`membench.core.extension.load_extension`)."""
    return extension.load_extension(manifest_path, SPEC)
