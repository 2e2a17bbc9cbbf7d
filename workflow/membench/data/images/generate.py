"""The default image data: scikit-learn's handwritten digits drawn as small RGB PNG images."""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from membench.core import atomic
from membench.core.errors import InputError
from membench.data.digits import digits_arrays

__all__ = ["DigitsSpec", "draw_digit", "generate_digits_folder", "OUTPUT_KIND"]

OUTPUT_KIND = "digits-image-folder"


@dataclass(frozen=True)
class DigitsSpec:
    """How the 8x8 digits become ``image_size`` x ``image_size`` images.

    Each digit is scaled to a random size in [``min_digit_size``, ``max_digit_size``] pixels, placed
    at the centre shifted by up to ``max_shift`` pixels each way, drawn in a random dark background
    colour (channels up to ``background_max``) and a random light foreground colour (channels from
    ``foreground_min``), and noised with Gaussian noise of ``noise_std``
    (0..255 units); ``val_fraction`` of each class goes to ``val``. ``images_per_class`` > 0 keeps
    only that many digits of each class (0: all, about 180).
    """

    image_size: int = 32
    min_digit_size: int = 20
    max_digit_size: int = 26
    max_shift: int = 3
    background_max: float = 100.0
    foreground_min: float = 155.0
    noise_std: float = 12.0
    val_fraction: float = 0.2
    images_per_class: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.min_digit_size <= self.max_digit_size <= self.image_size:
            raise InputError(
                None,
                f"digit sizes must satisfy 1 <= min_digit_size ({self.min_digit_size}) <= max_digit_size"
                f" ({self.max_digit_size}) <= image_size ({self.image_size})",
                "key 'images.datasets.<name>'",
            )


def draw_digit(digit: np.ndarray, spec: DigitsSpec, rng: np.random.Generator) -> np.ndarray:
    """One 8x8 digit (values 0..16) drawn as uint8 (image_size, image_size, 3)."""
    size = int(rng.integers(spec.min_digit_size, spec.max_digit_size + 1))
    glyph = Image.fromarray((digit * (255.0 / 16.0)).astype(np.uint8)).resize((size, size), Image.BILINEAR)
    alpha = np.zeros((spec.image_size, spec.image_size), dtype=np.float32)
    centre = (spec.image_size - size) // 2
    top, left = np.clip(
        centre + rng.integers(-spec.max_shift, spec.max_shift + 1, size=2), 0, spec.image_size - size
    )
    alpha[top : top + size, left : left + size] = np.asarray(glyph, dtype=np.float32) / 255.0
    background = rng.uniform(0.0, spec.background_max, size=3)
    foreground = rng.uniform(spec.foreground_min, 255.0, size=3)
    image = alpha[:, :, None] * foreground + (1 - alpha[:, :, None]) * background
    image += rng.normal(0.0, spec.noise_std, size=image.shape)
    return np.clip(np.rint(image), 0, 255).astype(np.uint8)


def generate_digits_folder(outdir: str | os.PathLike, spec: DigitsSpec) -> dict[str, int]:
    """Write ``outdir/{train,val}/<digit>/<index>.png``; return images per split.

    Depends only on ``spec`` (seeded). The folder is written whole into a temporary directory and
    renamed onto ``outdir``; an existing ``outdir`` that is not a previous digits folder is refused.
    """
    rng = np.random.default_rng(spec.seed)
    images, labels = digits_arrays()
    counts = {"train": 0, "val": 0}
    with atomic.atomic_directory(outdir, OUTPUT_KIND) as tmp_dir:
        _draw_all(tmp_dir, images, labels, spec, rng, counts)
    return counts


def _draw_all(
    outdir: Path,
    images: np.ndarray,
    labels: np.ndarray,
    spec: DigitsSpec,
    rng: np.random.Generator,
    counts: dict[str, int],
) -> None:
    for label in range(10):
        indices = np.flatnonzero(labels == label)
        rng.shuffle(indices)
        if spec.images_per_class > 0:
            indices = indices[: spec.images_per_class]
        val_count = int(round(len(indices) * spec.val_fraction))
        for rank, index in enumerate(indices):
            split = "val" if rank < val_count else "train"
            buffer = io.BytesIO()
            Image.fromarray(draw_digit(images[index], spec, rng)).save(buffer, format="PNG")
            path = outdir / split / str(label) / f"{index:05d}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(buffer.getvalue())
            counts[split] += 1
