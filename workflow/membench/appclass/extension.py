"""The appclass C++ kernels (``csrc/``, OpenMP): their build and which kernels a run uses.

The build machinery (the per-user cache, manifest, loading) is :mod:`membench.core.extension`;
``kernels="auto"`` takes the built extension (a build manifest's, else the cache's, built there on
first use) and otherwise, saying why, the pure-torch path of :mod:`membench.appclass.fast`. This
module imports neither torch nor the kernels, so the workflow's rules read :data:`SPEC`'s sources
from it.
"""

from __future__ import annotations

import os
from pathlib import Path

from membench.core import extension
from membench.core.extension import KernelSelection

__all__ = ["build_extension", "KERNEL_CHOICES", "select_kernels", "SPEC"]

KERNEL_CHOICES = extension.KERNEL_CHOICES
# No FMA contraction: a fused multiply-add rounds differently from the reference's multiply then add.
SPEC = extension.ExtensionSpec(
    name="membench_appclass_ops",
    source_dir=Path(__file__).parent / "csrc",
    cpu_sources=("appclass_ops.cpp",),
    kernels=(
        "distances",
        "column_max",
        "normprob_",
        "group_min",
        "prepare_messages",
        "group_exp_sums",
        "scatter_max_",
        "node_exp_sums",
        "normalise_maxima_",
        "update_beliefs_",
        "format_e",
    ),
    build_command="membench appclass build",
    cflags=("-O3", "-ffp-contract=off", "-fopenmp"),
    ldflags=("-fopenmp",),
)


def build_extension(
    cache_dir: str | os.PathLike, verbose: bool = False, outdir: str | os.PathLike | None = None
) -> dict:
    """Find or compile the kernels in ``cache_dir`` (and with ``outdir`` write
    ``outdir/manifest.json`` pointing at them); return the manifest (see
    :func:`membench.core.extension.build_extension`)."""
    return extension.build_extension(SPEC, cache_dir, cuda="no", verbose=verbose, outdir=outdir)


def select_kernels(
    choice: str,
    manifest_path: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> KernelSelection:
    """The kernels of a CPU run for ``choice`` (``auto`` | ``torch`` | ``extension``): the built
    module (``module``, None for pure torch), the metrics value ``kernels`` (``cpp-<digest8>`` or
    ``torch``) and why ``auto`` fell back (see :func:`membench.core.extension.select_kernels`).
    The build is the one ``manifest_path`` names, else the one in ``cache_dir``, built on first use.
    """
    return extension.select_kernels(SPEC, choice, manifest_path=manifest_path, cache_dir=cache_dir)
