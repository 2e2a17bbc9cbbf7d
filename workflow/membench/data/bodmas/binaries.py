"""Reading raw binaries: plain or gzip-compressed, never executed."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

GZIP_MAGIC = b"\x1f\x8b"


def is_gzip(path: str | os.PathLike) -> bool:
    """True when the file starts with the gzip magic bytes."""
    with open(path, "rb") as handle:
        return handle.read(2) == GZIP_MAGIC


def content_size(path: str | os.PathLike) -> int:
    """Length in bytes of the binary's content (the uncompressed size for gzip files).

    For gzip the size is the ISIZE trailer (length modulo 2**32), which is exact for the
    single-member files that gzip writes and binaries of under 4 GiB.
    """
    path = Path(path)
    if not is_gzip(path):
        return path.stat().st_size
    with open(path, "rb") as handle:
        handle.seek(-4, os.SEEK_END)
        return int.from_bytes(handle.read(4), "little")


def read_prefix(path: str | os.PathLike, max_bytes: int) -> bytes:
    """Up to ``max_bytes`` bytes of the binary's content, decompressing gzip files."""
    opener = gzip.open if is_gzip(path) else open
    with opener(path, "rb") as handle:
        return handle.read(max_bytes)
