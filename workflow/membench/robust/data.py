"""Datasets of the robust system as tensors of images in [0, 1].

``digits``: scikit-learn's 8x8 handwritten digits (1,797 real images that ship with the package),
split into train and test, stratified, with a fixed seed. ``mnist``: the idx files in a user's
directory. ``cifar10``: the python batches in a user's directory, read with the restricted
unpickler of :mod:`membench.data.images.cifar`. Bad files raise :class:`InputError` naming the file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import torch

from membench.core.errors import InputError
from membench.data.digits import digits_arrays
from membench.data.images.cifar import cifar_arrays
from membench.data.images.mnist import mnist_arrays
from membench.robust.options import SOURCES

__all__ = ["Dataset", "load_dataset"]


@dataclass(frozen=True)
class Dataset:
    """Train and test images ``(N, C, H, W)`` float32 in [0, 1] with int64 labels ``(N,)``."""

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])


def _digits(test_fraction: float, seed: int) -> tuple[np.ndarray, ...]:
    from sklearn.model_selection import train_test_split

    images, labels = digits_arrays()
    return train_test_split(
        (images / 16.0).astype(np.float32)[:, None],
        labels,
        test_size=test_fraction,
        stratify=labels,
        random_state=seed,
    )


def load_dataset(
    source: str,
    root: str | os.PathLike | None = None,
    *,
    test_fraction: float = 0.2,
    seed: int = 0,
    train_limit: int | None = None,
    test_limit: int | None = None,
) -> Dataset:
    """Load dataset ``source`` (``digits``, or ``mnist`` / ``cifar10`` from directory ``root``).

    ``test_fraction`` and ``seed`` shape the digits split; ``train_limit`` / ``test_limit`` keep the
    first samples of each split (for quick runs).
    """
    if source == "digits":
        x_train, x_test, y_train, y_test = _digits(test_fraction, seed)
    elif source in ("mnist", "cifar10"):
        if root is None:
            raise InputError(None, f"dataset source {source} needs a root directory", "option --root")
        if not os.path.isdir(root):
            raise InputError(root, f"{source} root is not a directory")
        if source == "mnist":
            (train_images, y_train), (test_images, y_test) = (
                mnist_arrays(root, s) for s in ("train", "test")
            )
            x_train, x_test = (
                images[:, None].astype(np.float32) / 255 for images in (train_images, test_images)
            )
        else:
            train_images, y_train, _ = cifar_arrays(root, "cifar10", "train")
            test_images, y_test, _ = cifar_arrays(root, "cifar10", "test")
            x_train, x_test = (
                images.transpose(0, 3, 1, 2).astype(np.float32) / 255
                for images in (train_images, test_images)
            )
    else:
        raise InputError(
            None,
            f"unknown dataset source {source!r}; expected one of {', '.join(SOURCES)}",
            "option --source",
        )
    x_train, y_train = x_train[:train_limit], y_train[:train_limit]
    x_test, y_test = x_test[:test_limit], y_test[:test_limit]
    for split, x in (("train", x_train), ("test", x_test)):
        if len(x) == 0:
            raise InputError(root, f"the {split} split of {source} is empty")
    return Dataset(
        source,
        torch.from_numpy(np.ascontiguousarray(x_train)),
        torch.from_numpy(y_train),
        torch.from_numpy(np.ascontiguousarray(x_test)),
        torch.from_numpy(y_test),
        10,
    )
