"""Reading raw binaries: plain or gzip-compressed, never executed.

A binary is gzip-compressed when it starts with the gzip magic bytes. A gzip binary may hold
several concatenated members, as ``gzip -d`` accepts: its content is all of them, decompressed in
order; zero bytes after the last member (padding) are ignored, any other trailing bytes make it
damaged. Every read goes through :func:`membench.core.validate.open_regular`, so a named pipe or
device in the binaries directory is refused instead of blocking.
"""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path
from typing import IO

from membench.core.errors import InputError
from membench.core.validate import open_regular

__all__ = ["content_size", "GZIP_MAGIC", "is_gzip", "MAX_CONTENT_BYTES", "read_prefix"]

GZIP_MAGIC = b"\x1f\x8b"
# The largest decompressed binary accepted (2 GiB): far above real executables, and a bound on
# the work a gzip bomb can make the check do. It is also below 4 GiB, so gzip's size trailer
# (the length modulo 2**32) is exact for every accepted file.
MAX_CONTENT_BYTES = 2 * 2**30
_CHUNK_BYTES = 2**20
# What a damaged gzip stream raises while it is decompressed.
_GZIP_ERRORS = (EOFError, zlib.error, gzip.BadGzipFile)


def is_gzip(path: str | os.PathLike) -> bool:
    """True when the file starts with the gzip magic bytes."""
    with open_regular(path) as handle:
        return _starts_gzip(handle)


def content_size(path: str | os.PathLike) -> int:
    """Length in bytes of the binary's content, after checking it (for the fold's ``File_Size``).

    A gzip binary is decompressed in chunks to its end (never held in memory whole): its size is
    the bytes it really decompresses to, not its trailer's claim, and each member's CRC and length
    trailer must match. Raises :class:`InputError` naming ``path`` when it is not a readable regular
    file, is empty (also once decompressed), is damaged or truncated gzip, or decompresses to more
    than :data:`MAX_CONTENT_BYTES`.
    """
    path = Path(path)
    try:
        with open_regular(path) as handle:
            if _starts_gzip(handle):
                size = _decompressed_size(handle, path)
                empty = "is empty once decompressed (a gzip of no bytes)"
            else:
                size = os.fstat(handle.fileno()).st_size
                empty = "is empty"
    except _GZIP_ERRORS as exc:
        raise InputError(path, f"is a damaged gzip file ({_reason(exc)})") from None
    except OSError as exc:
        raise InputError(path, f"cannot be read ({exc.strerror or exc})") from None
    if size == 0:
        raise InputError(path, empty)
    return size


def read_prefix(path: str | os.PathLike, max_bytes: int) -> bytes:
    """Up to ``max_bytes`` bytes of the binary's content, decompressing gzip files.

    Any read error (damaged gzip, an I/O error, a file that is no longer a regular file) raises
    :class:`InputError` naming ``path``.
    """
    try:
        with open_regular(path) as handle:
            if not _starts_gzip(handle):
                return handle.read(max_bytes)
            with gzip.GzipFile(fileobj=handle, mode="rb") as stream:
                return stream.read(max_bytes)
    except _GZIP_ERRORS as exc:
        raise InputError(path, f"is a damaged gzip file ({_reason(exc)})") from None
    except OSError as exc:
        raise InputError(path, f"cannot be read ({exc.strerror or exc})") from None


def _starts_gzip(handle: IO[bytes]) -> bool:
    """Whether the open file starts with the gzip magic; leaves it at its start."""
    magic = handle.read(len(GZIP_MAGIC))
    handle.seek(0)
    return magic == GZIP_MAGIC


def _decompressed_size(handle: IO[bytes], path: Path) -> int:
    """Decompress every member to its end, checking the trailers; return the total size."""
    size = 0
    with gzip.GzipFile(fileobj=handle, mode="rb") as stream:
        while chunk := stream.read(_CHUNK_BYTES):
            size += len(chunk)
            if size > MAX_CONTENT_BYTES:
                raise InputError(
                    path, f"decompresses to more than {MAX_CONTENT_BYTES} bytes, the limit of a binary"
                )
    return size


def _reason(exc: BaseException) -> str:
    """A one-line reason for a decompression error."""
    if isinstance(exc, EOFError):
        return "truncated: the compressed data ends before its end marker"
    return " ".join(str(exc).split()) or type(exc).__name__
