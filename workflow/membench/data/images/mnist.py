"""MNIST in its standard idx format (``train-images-idx3-ubyte`` etc., optionally gzipped).

An idx file is a big-endian header (two zero bytes, a type code, the number of dimensions, then
one uint32 per dimension) followed by the values. Only the unsigned-byte type MNIST uses is read;
every size is checked against the header before the values are trusted.
"""

from __future__ import annotations

import gzip
import math
import os
import zlib
from pathlib import Path

import numpy as np

from membench.core.errors import InputError
from membench.core.validate import open_regular

__all__ = ["mnist_arrays", "MNIST_FILES", "read_idx"]

MNIST_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
_UBYTE = 0x08


def _find(root: Path, name: str) -> Path:
    for candidate in (root / name, root / f"{name}.gz"):
        if os.path.lexists(candidate):  # whatever it is: read_idx says what is wrong with it
            return candidate
    raise InputError(root / name, "MNIST file not found (looked for it with and without .gz)")


def read_idx(path: str | os.PathLike, ndim: int) -> np.ndarray:
    """The unsigned-byte array of ``ndim`` dimensions stored in idx file ``path``."""
    path = Path(path)
    try:
        with open_regular(path) as handle:
            if path.suffix == ".gz":
                with gzip.GzipFile(fileobj=handle) as stream:
                    raw = stream.read()
            else:
                raw = handle.read()
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(path, f"unreadable idx file ({exc})") from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise InputError(path, "not an idx file (expected two zero bytes at the start)", "header")
    if raw[2] != _UBYTE:
        raise InputError(path, f"idx type code 0x{raw[2]:02x} is not unsigned byte (0x08)", "header")
    if raw[3] != ndim:
        raise InputError(path, f"expected {ndim} dimensions, the header says {raw[3]}", "header")
    header_bytes = 4 + 4 * ndim
    if len(raw) < header_bytes:
        raise InputError(path, "file ends inside the header", "header")
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    expected = header_bytes + math.prod(
        shape
    )  # exact: numpy's product wraps at 2**64 (2**31 x 2**31 x 4 is 0)
    if len(raw) != expected:
        raise InputError(
            path, f"header announces shape {shape} ({expected} bytes) but the file has {len(raw)} bytes"
        )
    return np.frombuffer(raw, dtype=np.uint8, offset=header_bytes).reshape(shape)


def mnist_arrays(root: str | os.PathLike, split: str) -> tuple[np.ndarray, np.ndarray]:
    """The ``split`` (``train`` or ``test``) of MNIST in directory ``root``: images ``(N, 28, 28)``
    uint8 and labels ``(N,)`` int64 in 0..9."""
    root = Path(root)
    image_name, label_name = MNIST_FILES[split]
    image_path, label_path = _find(root, image_name), _find(root, label_name)
    images, labels = read_idx(image_path, 3), read_idx(label_path, 1)
    if len(images) != len(labels):
        raise InputError(label_path, f"{len(labels)} labels for {len(images)} images in {image_path}")
    if len(labels) and labels.max() > 9:
        i = int(labels.argmax())
        raise InputError(label_path, f"label {labels[i]} outside 0..9", f"item {i}")
    return images, labels.astype(np.int64)
