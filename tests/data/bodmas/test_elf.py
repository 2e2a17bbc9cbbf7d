"""The ELF set builder: program/library labels from crafted ELF headers."""

import struct

import pandas as pd
import pytest

from membench.core.errors import InputError
from membench.data.bodmas.elf import LIBRARY_FAMILY, build_elf_set, elf_kind


def _elf64(e_type: int, with_interp: bool, payload: bytes = b"") -> bytes:
    """A minimal little-endian ELF64 header with one program header (PT_INTERP or PT_LOAD)."""
    header = bytearray(64)
    header[:4] = b"\x7fELF"
    header[4], header[5], header[6] = 2, 1, 1
    struct.pack_into("<H", header, 16, e_type)
    struct.pack_into("<Q", header, 32, 64)  # e_phoff
    struct.pack_into("<HH", header, 54, 56, 1)  # e_phentsize, e_phnum
    program_header = bytearray(56)
    struct.pack_into("<I", program_header, 0, 3 if with_interp else 1)
    return bytes(header + program_header) + payload


def test_elf_kind():
    assert elf_kind(_elf64(3, with_interp=True)) == "program"  # position-independent executable
    assert elf_kind(_elf64(2, with_interp=False)) == "program"  # static executable
    assert elf_kind(_elf64(3, with_interp=False)) == "library"
    assert elf_kind(_elf64(1, with_interp=False)) is None  # relocatable object
    assert elf_kind(b"MZ" + bytes(100)) is None
    assert elf_kind(b"\x7fELF") is None


def test_build_elf_set_labels_and_copies(tmp_path):
    source = tmp_path / "usr"
    (source / "bin").mkdir(parents=True)
    (source / "lib").mkdir()
    for i in range(4):
        (source / "bin" / f"prog{i}").write_bytes(_elf64(3, True, bytes([i]) * 100))
        (source / "lib" / f"lib{i}.so").write_bytes(_elf64(3, False, bytes([i]) * 200))
    (source / "bin" / "script.sh").write_text("#!/bin/sh\n")
    (source / "bin" / "alias").symlink_to(source / "bin" / "prog0")
    metadata = build_elf_set(tmp_path / "out", [source], max_files=6, seed=1)
    assert len(metadata) == 6
    assert (metadata["family"] == "").sum() == 3 and (metadata["family"] == LIBRARY_FAMILY).sum() == 3
    written = pd.read_csv(tmp_path / "out" / "metadata.csv", keep_default_na=False)
    assert list(written["sha"]) == list(metadata["sha"])
    for sha in metadata["sha"]:
        copy = tmp_path / "out" / "binaries" / f"{sha}.exe"
        assert copy.read_bytes()[:4] == b"\x7fELF"
        assert copy.stat().st_mode & 0o111 == 0
    again = build_elf_set(tmp_path / "again", [source], max_files=6, seed=1)
    assert list(again["sha"]) == list(metadata["sha"])


def test_build_elf_set_needs_both_kinds(tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "prog").write_bytes(_elf64(3, True))
    with pytest.raises(InputError, match="need both programs and shared libraries; found 1 and 0"):
        build_elf_set(tmp_path / "out", [tmp_path / "bin"])
    with pytest.raises(InputError, match="search directory for ELF files does not exist"):
        build_elf_set(tmp_path / "out", [tmp_path / "nowhere"])
