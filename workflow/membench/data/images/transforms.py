"""Image decoding (PIL) and the few tensor transforms the image jobs use.

Random transforms draw from torch's default generator, which a DataLoader seeds per worker from
its own (explicitly seeded) generator; with ``num_workers=0`` the job seeds it at start.
"""

from __future__ import annotations

import io
import warnings

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from membench.core.errors import InputError

__all__ = ["decode_image", "EvalTransform", "to_tensor", "TrainTransform"]


def decode_image(
    image_bytes: bytes, path, where: str | None = None, problem: str = "corrupt record: image bytes"
) -> Image.Image:
    """Decode encoded image bytes to an RGB PIL image (every pixel read, so a truncated file fails).

    Raises :class:`InputError` naming ``path`` and ``where`` when the bytes are not an image, are
    truncated, or declare more pixels than PIL's decompression-bomb limit (``Image.MAX_IMAGE_PIXELS``).
    """
    try:
        with warnings.catch_warnings():
            # PIL only warns between MAX_IMAGE_PIXELS and twice that; both are refused here.
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(image_bytes)) as image:
                return image.convert("RGB")
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise InputError(path, f"{problem} declare too many pixels ({exc})", where) from None
    except Exception as exc:  # PIL raises many types (OSError, SyntaxError, struct.error, ...) on bad bytes
        raise InputError(
            path, f"{problem} do not decode as an image ({type(exc).__name__}: {exc})", where
        ) from None


def to_tensor(image: Image.Image) -> torch.Tensor:
    """RGB PIL image to float32 (3, H, W) in [0, 1]."""
    array = np.asarray(image, dtype=np.uint8)
    return torch.from_numpy(array.copy()).permute(2, 0, 1).to(torch.float32).div_(255.0)


class TrainTransform:
    """Resize to ``size`` (if needed), random crop after ``padding`` zero padding, optional horizontal
    flip, per-channel normalisation: PIL image -> float32 (3, size, size)."""

    def __init__(self, size: int, mean, std, padding: int = 4, flip: bool = True) -> None:
        self.size, self.padding, self.flip = size, padding, flip
        self.mean = torch.tensor(mean, dtype=torch.float32)[:, None, None]
        self.std = torch.tensor(std, dtype=torch.float32)[:, None, None]

    def __call__(self, image: Image.Image) -> torch.Tensor:
        x = to_tensor(_resized(image, self.size))
        if self.padding:
            x = F.pad(x, (self.padding,) * 4)
            top, left = torch.randint(0, 2 * self.padding + 1, (2,)).tolist()
            x = x[:, top : top + self.size, left : left + self.size]
        if self.flip and bool(torch.rand(()) < 0.5):
            x = x.flip(2)
        return (x - self.mean) / self.std


class EvalTransform:
    """Resize to ``size`` (if needed) and normalise: PIL image -> float32 (3, size, size)."""

    def __init__(self, size: int, mean, std) -> None:
        self.size = size
        self.mean = torch.tensor(mean, dtype=torch.float32)[:, None, None]
        self.std = torch.tensor(std, dtype=torch.float32)[:, None, None]

    def __call__(self, image: Image.Image) -> torch.Tensor:
        return (to_tensor(_resized(image, self.size)) - self.mean) / self.std


def _resized(image: Image.Image, size: int) -> Image.Image:
    if image.size == (size, size):
        return image
    return image.resize((size, size), Image.BILINEAR)
