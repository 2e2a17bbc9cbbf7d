"""The one digits loader: scikit-learn's 1,797 images with their labels, as both users read them."""

import numpy as np

from membench.data.digits import digits_arrays


def test_digits_are_8x8_intensities_0_to_16_with_every_label():
    images, labels = digits_arrays()
    assert images.shape == (1797, 8, 8) and labels.shape == (1797,) and labels.dtype == np.int64
    assert images.min() == 0 and images.max() == 16 and np.array_equal(images, np.rint(images))
    assert np.bincount(labels).min() >= 170 and set(labels.tolist()) == set(range(10))
