"""scikit-learn's handwritten digits: 1,797 real 8x8 images that ship with the package, so the
default runs need no download. The one loader of the default image data (:mod:`membench.data.images.generate`
draws them as RGB images) and of the robust system's ``digits`` source."""

from __future__ import annotations

import numpy as np

__all__ = ["digits_arrays"]


def digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """The digits in scikit-learn's order: images ``(1797, 8, 8)`` float64 with values 0..16 (ink
    intensity), labels ``(1797,)`` int64 in 0..9."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    return digits.images, digits.target.astype(np.int64)
