"""Which implementation of the compressor kernels a job uses: the pure-torch reference or the
built C++/CUDA extension (``auto`` takes the extension when a build manifest names a loadable one)."""

from __future__ import annotations

import logging
import os
from types import ModuleType

from membench.core.errors import InputError
from membench.division import compress
from membench.division.extension import KERNEL_CHOICES, load_extension

__all__ = ["KERNEL_NAMES", "Kernels", "select_kernels", "TORCH_KERNELS"]

KERNEL_NAMES = (
    "quantize_pack",
    "unpack_dequantize",
    "pack_mask",
    "unpack_mask",
    "maxpool2d_forward",
    "maxpool2d_backward",
)
_log = logging.getLogger(__name__)


class Kernels:
    """The six kernels of one implementation, called as methods (``ops.pack_mask(mask)``).

    ``name`` is ``"torch"`` or ``"extension"``; ``cuda`` says whether the extension holds CUDA kernels;
    ``fallback_reason`` says why ``auto`` fell back to the pure-torch kernels (``None`` otherwise).
    """

    def __init__(self, name: str, module: ModuleType, cuda: bool, fallback_reason: str | None = None) -> None:
        self.name = name
        self.cuda = cuda
        self.fallback_reason = fallback_reason
        for kernel in KERNEL_NAMES:
            setattr(self, kernel, getattr(module, kernel))

    def supports(self, device_type: str) -> bool:
        return device_type == "cpu" or self.name == "torch" or self.cuda


TORCH_KERNELS = Kernels("torch", compress, cuda=True)


def select_kernels(choice: str, manifest_path: str | os.PathLike | None, device_type: str = "cpu") -> Kernels:
    """Resolve ``choice`` (``auto`` | ``torch`` | ``extension``) to a :class:`Kernels`.

    ``extension`` requires a loadable build for ``device_type``; ``auto`` falls back to the
    reference (and logs why) when there is none.
    """
    if choice not in KERNEL_CHOICES:
        raise InputError(
            None, f"kernels must be one of {', '.join(KERNEL_CHOICES)}, got {choice!r}", "option --kernels"
        )
    if choice == "torch":
        return TORCH_KERNELS
    if manifest_path is None:
        if choice == "extension":
            raise InputError(None, "kernels 'extension' need a build manifest", "option --build-manifest")
        return TORCH_KERNELS
    try:
        module = load_extension(manifest_path)
    except (InputError, ImportError, OSError) as exc:
        if choice == "extension":
            raise InputError(manifest_path, f"the built kernels cannot be loaded ({exc})") from None
        _log.warning("using the pure-torch kernels: %s", exc)
        return Kernels("torch", compress, cuda=True, fallback_reason=str(exc))
    kernels = Kernels("extension", module, cuda=bool(module.has_cuda_kernels()))
    if not kernels.supports(device_type):
        if choice == "extension":
            raise InputError(
                manifest_path,
                f"the build has no CUDA kernels but the job runs on {device_type}",
                "key 'cuda'",
            )
        _log.warning("using the pure-torch kernels: the build has no CUDA kernels")
        return Kernels("torch", compress, cuda=True, fallback_reason="the build has no CUDA kernels")
    return kernels
