"""A real-bytes dataset from the ELF files on this machine: programs versus shared libraries.

Label: an ELF file with a program interpreter (``PT_INTERP``) is a program and gets the empty
family (class 0); one without is a shared library (family ``shared_library``, class 1). Both are
real compiler output, so the task exercises a byte-level model on real code, not on generated noise.
Files are copied (mode 0644, never executable) under their SHA-256 so the set is self-contained.
"""

from __future__ import annotations

import hashlib
import os
import struct
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import pandas as pd
from tqdm import tqdm

from membench.core import atomic
from membench.core.errors import InputError
from membench.core.validate import open_regular
from membench.data.bodmas import binary_name

__all__ = ["build_elf_set", "elf_kind", "ELF_MAGIC", "find_elf_files", "LIBRARY_FAMILY"]

ELF_MAGIC = b"\x7fELF"
_PT_INTERP = 3
LIBRARY_FAMILY = "shared_library"


def elf_kind(header: bytes) -> str | None:
    """``"program"``, ``"library"`` or ``None`` (not an ELF executable or shared object).

    ``header`` must hold the ELF header and program header table (the first few KiB).
    """
    if len(header) < 64 or header[:4] != ELF_MAGIC:
        return None
    is64 = header[4] == 2
    endian = "<" if header[5] == 1 else ">"
    e_type = struct.unpack_from(endian + "H", header, 16)[0]
    if e_type not in (2, 3):  # ET_EXEC, ET_DYN
        return None
    if is64:
        phoff = struct.unpack_from(endian + "Q", header, 32)[0]
        phentsize, phnum = struct.unpack_from(endian + "HH", header, 54)
    else:
        phoff = struct.unpack_from(endian + "I", header, 28)[0]
        phentsize, phnum = struct.unpack_from(endian + "HH", header, 42)
    for i in range(phnum):
        at = phoff + i * phentsize
        if at + 4 > len(header):
            break
        if struct.unpack_from(endian + "I", header, at)[0] == _PT_INTERP:
            return "program"
    return "library" if e_type == 3 else "program"


def find_elf_files(
    search_dirs: Iterable[str | os.PathLike], max_file_bytes: int
) -> Iterator[tuple[Path, str]]:
    """Yield ``(path, kind)`` for regular ELF files under ``search_dirs``, in sorted order.

    Symbolic links are skipped (they would repeat files); unreadable files and anything but
    regular files (named pipes, devices) are skipped.
    """
    for root in search_dirs:
        root = Path(root)
        if not root.is_dir():
            raise InputError(root, "search directory for ELF files does not exist")
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in sorted(filenames):
                path = Path(dirpath) / name
                try:
                    if (
                        path.is_symlink()
                        or not path.is_file()
                        or not 0 < path.stat().st_size <= max_file_bytes
                    ):
                        continue
                    with open_regular(path) as handle:
                        kind = elf_kind(handle.read(4096))
                except (InputError, OSError):
                    continue
                if kind is not None:
                    yield path, kind


def build_elf_set(
    outdir: str | os.PathLike,
    search_dirs: Iterable[str | os.PathLike],
    max_files: int = 200,
    max_file_bytes: int = 1 << 20,
    seed: int = 0,
) -> pd.DataFrame:
    """Copy up to ``max_files`` ELF files into ``outdir/binaries`` and write ``outdir/metadata.csv``.

    Programs and libraries are drawn in equal numbers where the machine has enough of each;
    the draw is seeded. Timestamps are the files' modification times (for fold 0's time split).
    """
    rng = np.random.default_rng(seed)
    found: dict[str, list[Path]] = {"program": [], "library": []}
    for path, kind in find_elf_files(search_dirs, max_file_bytes):
        found[kind].append(path)
    if not found["program"] or not found["library"]:
        raise InputError(
            ", ".join(map(str, search_dirs)),
            f"need both programs and shared libraries; found {len(found['program'])} and "
            f"{len(found['library'])}",
        )
    per_kind = max_files // 2
    chosen = []
    for kind, paths in found.items():
        take = min(per_kind, len(paths))
        for index in sorted(rng.choice(len(paths), size=take, replace=False)):
            chosen.append((paths[index], kind))
    outdir = Path(outdir)
    binaries = outdir / "binaries"
    binaries.mkdir(parents=True, exist_ok=True)
    rows, seen = [], set()
    for path, kind in tqdm(chosen, desc="copying ELF files", unit="file", mininterval=10):
        with open_regular(path) as handle:
            content = handle.read()
        sha = hashlib.sha256(content).hexdigest()
        if sha in seen:
            continue
        seen.add(sha)
        atomic.write_bytes(binaries / binary_name(sha), content)
        timestamp = pd.Timestamp(path.stat().st_mtime, unit="s", tz="UTC")
        rows.append(
            (sha, timestamp.strftime("%Y-%m-%d %H:%M:%S+00:00"), "" if kind == "program" else LIBRARY_FAMILY)
        )
    metadata = pd.DataFrame(rows, columns=["sha", "timestamp", "family"])
    atomic.write_csv(outdir / "metadata.csv", metadata)
    return metadata
