"""Binaries are checked when a fold is made: damaged gzip, empty content and files that are not
regular files give one-line errors naming the binary; nothing blocks."""

import gzip
import os
import re
import struct
import zlib

import pandas as pd
import pytest

from membench.cli import main
from membench.core.errors import InputError
from membench.data.bodmas import binaries
from membench.data.bodmas.binaries import content_size, read_prefix
from membench.data.bodmas.folds import FoldSpec, make_fold, read_fold, read_metadata
from membench.data.bodmas.stats import read_class_names

CONTENT = b"MZ" + bytes(range(256)) * 40
PACKED = gzip.compress(CONTENT, mtime=0)


def _with_trailer(crc: int, size: int) -> bytes:
    """``PACKED`` with its CRC-32 and length trailer replaced."""
    return PACKED[:-8] + struct.pack("<II", crc, size)


DAMAGED = {
    "truncated": (PACKED[: len(PACKED) // 2], r"truncated: the compressed data ends before its end marker"),
    "two bytes": (b"\x1f\x8b", r"truncated: the compressed data ends before its end marker"),
    "wrong CRC": (_with_trailer(zlib.crc32(CONTENT) ^ 1, len(CONTENT)), r"CRC check failed"),
    "trailer says 0": (_with_trailer(zlib.crc32(CONTENT), 0), r"Incorrect length of data produced"),
    "trailing garbage": (PACKED + b"junk", r"Not a gzipped file"),
}


def _first_binary(metadata):
    sha = pd.read_csv(metadata)["sha"][0]
    return sha, f"{sha}.exe"


def _fold_error(metadata, binaries_dir, outdir) -> str:
    with pytest.raises(InputError) as raised:
        make_fold(metadata, binaries_dir, "tiny", 0, outdir, FoldSpec(folds=2))
    message = str(raised.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("name", DAMAGED)
def test_damaged_gzip_is_named_when_the_fold_is_made(tiny_dataset, tmp_path, name):
    metadata, binaries_dir = tiny_dataset
    _, file_name = _first_binary(metadata)
    data, reason = DAMAGED[name]
    (binaries_dir / file_name).write_bytes(data)
    message = _fold_error(metadata, binaries_dir, tmp_path / "folds")
    assert message.startswith(
        f"{metadata}, line 2: binary {binaries_dir.resolve() / file_name} is a damaged gzip file ("
    )
    assert re.search(reason, message)
    assert not (tmp_path / "folds").exists()


def test_gzip_of_nothing_is_refused_like_an_empty_file(tiny_dataset, tmp_path):
    metadata, binaries_dir = tiny_dataset
    _, file_name = _first_binary(metadata)
    (binaries_dir / file_name).write_bytes(gzip.compress(b"", mtime=0))
    message = _fold_error(metadata, binaries_dir, tmp_path / "folds")
    assert message.endswith(
        f"binary {binaries_dir.resolve() / file_name} is empty once decompressed (a gzip of no bytes)"
    )


def test_file_size_is_the_decompressed_size_not_the_trailer(tiny_dataset, tmp_path):
    metadata, binaries_dir = tiny_dataset
    sha, file_name = _first_binary(metadata)
    (binaries_dir / file_name).write_bytes(PACKED)
    frame = read_metadata(metadata, binaries_dir).set_index("sha")
    assert frame.loc[sha, "File_Size"] == len(CONTENT)
    make_fold(metadata, binaries_dir, "tiny", 0, tmp_path, FoldSpec(folds=2))
    folds = pd.concat(
        pd.read_csv(tmp_path / f"{split}_tiny_fold_0.csv") for split in ("train", "val", "test")
    )
    assert folds.set_index("FileName").loc[file_name, "File_Size"] == len(CONTENT)


def test_concatenated_members_are_one_content(tmp_path):
    path = tmp_path / "two.exe"
    path.write_bytes(PACKED + gzip.compress(b"tail", mtime=0) + b"\0" * 8)  # zero padding is allowed
    assert content_size(path) == len(CONTENT) + 4
    assert read_prefix(path, len(CONTENT) + 10) == CONTENT + b"tail"


def test_decompressed_size_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(binaries, "MAX_CONTENT_BYTES", 3 * 2**20)
    path = tmp_path / "bomb.exe"
    path.write_bytes(gzip.compress(bytes(4 * 2**20), mtime=0))
    with pytest.raises(
        InputError,
        match=rf"^{re.escape(str(path))}: decompresses to more than {3 * 2**20} bytes,"
        r" the limit of a binary$",
    ):
        content_size(path)


@pytest.mark.parametrize("name", ["truncated", "two bytes"])
def test_reading_a_damaged_gzip_names_the_file(tmp_path, name):
    path = tmp_path / "x.exe"
    path.write_bytes(DAMAGED[name][0])
    with pytest.raises(InputError, match=rf"^{re.escape(str(path))}: is a damaged gzip file \(truncated"):
        read_prefix(path, 10**6)


@pytest.mark.timeout(20)
def test_a_pipe_named_like_a_binary_does_not_block(tiny_dataset, tmp_path):
    metadata, binaries_dir = tiny_dataset
    _, file_name = _first_binary(metadata)
    (train, _, _) = make_fold(metadata, binaries_dir, "tiny", 1, tmp_path, FoldSpec(folds=2))
    for pipe_name in (file_name, pd.read_csv(train)["FileName"][0]):
        (binaries_dir / pipe_name).unlink()
        os.mkfifo(binaries_dir / pipe_name)
    message = _fold_error(metadata, binaries_dir, tmp_path / "folds")
    assert message.endswith(
        f"binary {binaries_dir.resolve() / file_name} is a named pipe (FIFO), not a regular file"
    )
    with pytest.raises(InputError, match=r"line 2: binary .* is a named pipe \(FIFO\), not a regular file$"):
        read_fold(train, binaries_dir)


@pytest.mark.timeout(20)
def test_pipes_and_directories_as_tables_do_not_block(tiny_dataset, tmp_path):
    _, binaries_dir = tiny_dataset
    os.mkfifo(tmp_path / "pipe.csv")
    (tmp_path / "dir.csv").mkdir()
    for name, problem in (
        ("pipe.csv", r"is a named pipe \(FIFO\), not a regular file"),
        ("dir.csv", "is a directory"),
    ):
        path = tmp_path / name
        for read in (
            lambda: read_metadata(path, binaries_dir),
            lambda: read_fold(path, binaries_dir),
            lambda: read_class_names(path),
        ):
            with pytest.raises(InputError, match=f"^{re.escape(str(path))}: {problem}$"):
                read()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("damage", ["pipe", "truncated gzip"])
def test_bodmas_fold_command_names_the_binary_in_one_line(tiny_dataset, tmp_path, capsys, damage):
    metadata, binaries_dir = tiny_dataset
    _, file_name = _first_binary(metadata)
    binary = binaries_dir / file_name
    binary.unlink()
    if damage == "pipe":
        os.mkfifo(binary)
    else:
        binary.write_bytes(DAMAGED["truncated"][0])
    code = main(
        [
            "bodmas",
            "fold",
            "--metadata",
            str(metadata),
            "--binaries",
            str(binaries_dir),
            "--dataset",
            "tiny",
            "--fold",
            "0",
            "--outdir",
            str(tmp_path / "folds"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert err.splitlines()[-1].startswith(
        f"membench bodmas: error: {metadata}, line 2: binary {binary.resolve()} is a"
    )
