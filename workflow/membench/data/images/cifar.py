"""CIFAR-10/100 python batches to image LMDBs.

The python batches (``data_batch_1`` ... ``test_batch``; ``train``/``test`` for CIFAR-100) are
pickles, and unpickling runs whatever callable the file names. They are read here with a
restricted unpickler that resolves only the globals a plain dict of numpy arrays, lists, bytes
and strings needs (numpy's array reconstruction and dtype) and refuses every other global, so a
tampered file fails with :class:`InputError` instead of executing code. The arrays are then
checked (uint8, N x 3072, labels in range) and each image is stored PNG-encoded.
"""

from __future__ import annotations

import io
import math
import os
import pickle
from pathlib import Path

import numpy as np
from PIL import Image

from membench.core.errors import InputError
from membench.core.validate import open_regular
from membench.data.images.lmdb_store import write_lmdb

__all__ = ["cifar_arrays", "CIFAR_FILES", "cifar_to_lmdb", "load_cifar_batch"]

CIFAR_FILES = {
    "cifar10": {
        "train": [f"data_batch_{i}" for i in range(1, 6)],
        "test": ["test_batch"],
        "meta": "batches.meta",
    },
    "cifar100": {"train": ["train"], "test": ["test"], "meta": "meta"},
}
_ALLOWED_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("_codecs", "encode"),
}


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, handle, file_bytes: int, **options) -> None:
        super().__init__(handle, **options)
        self.file_bytes = file_bytes

    def find_class(self, module: str, name: str):
        if (module, name) not in _ALLOWED_GLOBALS:
            raise pickle.UnpicklingError(f"global {module}.{name} is not allowed in a CIFAR batch")
        found = super().find_class(module, name)
        return _reconstruct_within(found, self.file_bytes) if name == "_reconstruct" else found


def _reconstruct_within(reconstruct, file_bytes: int):
    """numpy's ``_reconstruct``, refusing an array larger than the file: it allocates the shape it
    is given at once (a 63-byte pickle can ask for 8 TiB), while a pickled array asks for none and
    takes its data from the file's own bytes afterwards."""

    def checked(subtype, shape, dtype):
        try:
            nbytes = math.prod(int(n) for n in shape) * np.dtype(dtype).itemsize
        except (TypeError, ValueError) as exc:
            raise pickle.UnpicklingError(f"malformed array header ({exc})") from None
        if nbytes > file_bytes:
            raise pickle.UnpicklingError(
                f"an array of {nbytes} bytes declared in a file of {file_bytes} bytes"
            )
        return reconstruct(subtype, shape, dtype)

    return checked


def load_cifar_batch(path: str | os.PathLike) -> dict:
    """Read one CIFAR python batch with the restricted unpickler; keys decoded to str."""
    path = Path(path)
    with open_regular(path, missing="CIFAR batch file not found") as handle:
        try:
            obj = _RestrictedUnpickler(handle, os.fstat(handle.fileno()).st_size, encoding="bytes").load()
        except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, LookupError) as exc:
            raise InputError(path, f"not a plain CIFAR python batch ({exc})") from None
    if not isinstance(obj, dict):
        raise InputError(path, f"expected a dict, found {type(obj).__name__}")
    return {(k.decode() if isinstance(k, bytes) else str(k)): v for k, v in obj.items()}


def _names(meta: dict, key: str, path) -> list[str]:
    names = meta.get(key)
    if not isinstance(names, list) or not names:
        raise InputError(path, "missing list of class names", f"key {key!r}")
    return [n.decode() if isinstance(n, bytes) else str(n) for n in names]


def _images_and_labels(batch: dict, label_key: str, num_classes: int, path) -> tuple[np.ndarray, list[int]]:
    data, labels = batch.get("data"), batch.get(label_key)
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        raise InputError(path, "expected uint8 array of shape (N, 3072)", "key 'data'")
    if not isinstance(labels, list) or len(labels) != data.shape[0]:
        raise InputError(path, f"expected a list of {data.shape[0]} labels", f"key {label_key!r}")
    for i, label in enumerate(labels):
        if not isinstance(label, int) or not 0 <= label < num_classes:
            raise InputError(
                path, f"label {label!r} at position {i} outside 0..{num_classes - 1}", f"key {label_key!r}"
            )
    return data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1), labels


def _png(image: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return buffer.getvalue()


def _read_split(batch_dir, variant: str, split: str) -> tuple[list[tuple[np.ndarray, list[int]]], list[str]]:
    batch_dir = Path(batch_dir)
    files = CIFAR_FILES[variant]
    meta_path = batch_dir / files["meta"]
    meta = load_cifar_batch(meta_path)
    classes = _names(meta, "label_names" if variant == "cifar10" else "fine_label_names", meta_path)
    label_key = "labels" if variant == "cifar10" else "fine_labels"
    parts = []
    for name in files[split]:
        path = batch_dir / name
        parts.append(_images_and_labels(load_cifar_batch(path), label_key, len(classes), path))
    return parts, classes


def cifar_arrays(
    batch_dir: str | os.PathLike, variant: str, split: str
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The ``split`` (``train`` or ``test``) of CIFAR ``variant`` in ``batch_dir`` as arrays:
    images ``(N, 32, 32, 3)`` uint8, labels ``(N,)`` int64, and the class names."""
    if variant not in CIFAR_FILES:
        raise InputError(
            None, f"variant must be one of {', '.join(CIFAR_FILES)}, got {variant!r}", "option --variant"
        )
    parts, classes = _read_split(batch_dir, variant, split)
    images = np.concatenate([images for images, _ in parts])
    labels = np.concatenate([np.asarray(labels, dtype=np.int64) for _, labels in parts])
    return images, labels, classes


def cifar_to_lmdb(batch_dir: str | os.PathLike, variant: str, split: str, out_dir: str | os.PathLike) -> Path:
    """Convert the ``split`` (``train`` or ``test``) batches of CIFAR ``variant`` (``cifar10`` or
    ``cifar100``, fine labels) in ``batch_dir`` to an image LMDB at ``out_dir``."""
    if variant not in CIFAR_FILES:
        raise InputError(
            None, f"variant must be one of {', '.join(CIFAR_FILES)}, got {variant!r}", "option --variant"
        )
    if split not in ("train", "test"):
        raise InputError(None, f"split must be train or test, got {split!r}", "option --split")
    parts, classes = _read_split(batch_dir, variant, split)
    count = sum(len(labels) for _, labels in parts)
    records = ((label, _png(image)) for images, labels in parts for image, label in zip(images, labels))
    batch_dir, files = Path(batch_dir), CIFAR_FILES[variant]
    inputs = [batch_dir / files["meta"]] + [batch_dir / name for name in files[split]]
    return write_lmdb(
        out_dir,
        records,
        count,
        classes,
        count * 3200,
        description=f"{variant} {split} -> lmdb",
        inputs=inputs,
    )
