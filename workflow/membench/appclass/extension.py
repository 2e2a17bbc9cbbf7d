"""The appclass C++ kernels (``csrc/``, OpenMP): their build and which kernels a run uses.

The build machinery is :mod:`membench.core.extension`; ``kernels="auto"`` takes the built extension
when a manifest names a loadable one and otherwise the pure-torch path of :mod:`membench.appclass.fast`.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from types import ModuleType

from membench.core import extension
from membench.core.errors import InputError

__all__ = ["build_extension", "DEFAULT_MANIFEST", "KERNEL_CHOICES", "select_kernels", "SPEC"]

# Where the workflow's build rule writes it; `membench appclass run` looks here by default.
DEFAULT_MANIFEST = Path("results/build/appclass") / extension.MANIFEST_NAME
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
_log = logging.getLogger(__name__)


def build_extension(outdir: str | os.PathLike, verbose: bool = False) -> dict:
    """Compile the kernels into ``outdir`` and write ``outdir/manifest.json``; return the manifest."""
    return extension.build_extension(SPEC, outdir, cuda="no", verbose=verbose)


def select_kernels(choice: str, manifest_path: str | os.PathLike | None) -> ModuleType | None:
    """The built module for ``choice`` (``auto`` | ``torch`` | ``extension``), or None for pure torch.

    ``extension`` requires a loadable build; ``auto`` falls back to pure torch (and logs why).
    """
    if choice not in KERNEL_CHOICES:
        raise InputError(
            None, f"kernels must be one of {', '.join(KERNEL_CHOICES)}, got {choice!r}", "option --kernels"
        )
    if choice == "torch":
        return None
    path = Path(manifest_path) if manifest_path is not None else DEFAULT_MANIFEST
    try:
        return extension.load_extension(path, SPEC)
    except (InputError, ImportError, OSError) as exc:
        if choice == "extension":
            raise InputError(path, f"the built kernels cannot be loaded ({exc})") from None
        _log.warning("appclass uses the pure-torch kernels: %s", exc)
        return None
