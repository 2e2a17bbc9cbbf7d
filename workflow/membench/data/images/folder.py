"""ImageFolder (``root/<split>/<class>/<image>``) to one LMDB per split."""

from __future__ import annotations

import os
from pathlib import Path

from membench.core.errors import InputError
from membench.core.validate import readable_nonempty_file
from membench.data.images.lmdb_store import write_lmdb
from membench.data.images.transforms import decode_image

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".ppm", ".tif", ".tiff", ".webp")


def scan_image_folder(split_dir: str | os.PathLike) -> tuple[list[tuple[Path, int]], list[str]]:
    """List ``(image file, label)`` of one split and its sorted class names.

    Classes are the sub-directories in sorted order; images are the files with an image suffix,
    sorted by name within their class. Raises :class:`InputError` for a missing split, a split
    without classes, or a class without images.
    """
    split_dir = Path(split_dir)
    if not split_dir.is_dir():
        raise InputError(split_dir, "split directory not found (expected root/<split>/<class>/<image>)")
    classes = sorted(p.name for p in split_dir.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not classes:
        raise InputError(split_dir, "no class directories (expected root/<split>/<class>/<image>)")
    items = []
    for label, name in enumerate(classes):
        files = sorted(p for p in (split_dir / name).iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
        if not files:
            raise InputError(split_dir / name, f"class directory holds no images ({', '.join(IMAGE_SUFFIXES)})")
        items.extend((f, label) for f in files)
    return items, classes


def _checked_bytes(file: Path, verify: bool) -> bytes:
    readable_nonempty_file(file, file, "image file")
    data = file.read_bytes()
    if verify:
        # Decoding every pixel (not PIL's header-only verify()) is what catches a truncated JPEG.
        decode_image(data, file, problem="the image file's bytes")
    return data


def folder_to_lmdb(root: str | os.PathLike, split: str, out_dir: str | os.PathLike, verify: bool = True) -> Path:
    """Write ``root/<split>`` as an image LMDB at ``out_dir`` (atomic); return ``out_dir``.

    The encoded image bytes are stored as they are on disk (no re-encoding); ``verify`` checks
    that each file parses as an image first, naming the file that does not.
    """
    split_dir = Path(root) / split
    items, classes = scan_image_folder(split_dir)
    total_bytes = sum(f.stat().st_size for f, _ in items)
    records = ((label, _checked_bytes(f, verify)) for f, label in items)
    return write_lmdb(out_dir, records, len(items), classes, total_bytes, description=f"{split} -> lmdb", inputs=[split_dir])
