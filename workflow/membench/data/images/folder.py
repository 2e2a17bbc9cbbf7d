"""ImageFolder (``root/<split>/<class>/<image>``) to one LMDB per split."""

from __future__ import annotations

import os
from pathlib import Path

from membench.core.errors import InputError
from membench.core.validate import open_regular, regular_file
from membench.data.images.lmdb_store import write_lmdb
from membench.data.images.transforms import decode_image

__all__ = ["folder_to_lmdb", "IMAGE_SUFFIXES", "scan_image_folder"]

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".ppm", ".tif", ".tiff", ".webp")


def scan_image_folder(split_dir: str | os.PathLike) -> tuple[list[tuple[Path, int]], list[str]]:
    """List ``(image file, label)`` of one split and its sorted class names.

    Classes are the sub-directories in sorted order; images are the entries with an image suffix
    that are not directories, sorted by name within their class. Raises :class:`InputError` for a
    missing split, a split without classes, a class without images, or an image that is not a
    regular file (a named pipe, a broken symbolic link: named, not skipped).
    """
    split_dir = Path(split_dir)
    if not split_dir.is_dir():
        raise InputError(split_dir, "split directory not found (expected root/<split>/<class>/<image>)")
    classes = sorted(p.name for p in split_dir.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not classes:
        raise InputError(split_dir, "no class directories (expected root/<split>/<class>/<image>)")
    items = []
    for label, name in enumerate(classes):
        files = sorted(
            p for p in (split_dir / name).iterdir() if not p.is_dir() and p.suffix.lower() in IMAGE_SUFFIXES
        )
        if not files:
            raise InputError(
                split_dir / name, f"class directory holds no images ({', '.join(IMAGE_SUFFIXES)})"
            )
        items.extend((regular_file(f), label) for f in files)
    return items, classes


def _checked_bytes(file: Path, verify: bool) -> bytes:
    with open_regular(file) as handle:
        data = handle.read()
    if not data:
        raise InputError(file, "is empty (expected an image file)")
    if verify:
        # Decoding every pixel (not PIL's header-only verify()) is what catches a truncated JPEG.
        decode_image(data, file, problem="the image file's bytes")
    return data


def folder_to_lmdb(
    root: str | os.PathLike, split: str, out_dir: str | os.PathLike, verify: bool = True
) -> Path:
    """Write ``root/<split>`` as an image LMDB at ``out_dir`` (atomic); return ``out_dir``.

    The encoded image bytes are stored as they are on disk (no re-encoding); ``verify`` checks
    that each file parses as an image first, naming the file that does not.
    """
    split_dir = Path(root) / split
    items, classes = scan_image_folder(split_dir)
    total_bytes = sum(f.stat().st_size for f, _ in items)
    records = ((label, _checked_bytes(f, verify)) for f, label in items)
    return write_lmdb(
        out_dir, records, len(items), classes, total_bytes, description=f"{split} -> lmdb", inputs=[split_dir]
    )
