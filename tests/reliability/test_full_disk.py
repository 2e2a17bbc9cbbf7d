"""A full disk during a table, LMDB, checkpoint or metrics write: the previous file is intact and
the error names the path. Each test writes onto a small tmpfs (needs root and mount; skips without)."""

from __future__ import annotations

import os
import subprocess
import uuid

import faults
import lmdb
import pandas as pd
import pytest
import torch

from membench.cli import main
from membench.core import atomic
from membench.core.checkpoint import load_checkpoint, save_checkpoint
from membench.core.errors import InputError
from membench.core.metrics import job_record, read_metrics, write_job_outputs
from membench.core.tables import write_table
from membench.data.images.folder import folder_to_lmdb
from membench.data.images.lmdb_store import check_lmdb, read_metadata

DEVICE_BYTES = 8 * 2**20
SPARE_BYTES = 64 * 2**10


@pytest.fixture
def small_disk(tmp_path):
    """A fresh 8 MiB tmpfs, unmounted afterwards."""
    mountpoint = tmp_path / f"tmpfs-{uuid.uuid4().hex[:8]}"
    mountpoint.mkdir()
    try:
        result = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={DEVICE_BYTES}", "tmpfs", str(mountpoint)],
            capture_output=True,
            text=True,
        )
    except OSError as exc:  # no mount command
        pytest.skip(f"cannot mount a tmpfs here ({exc})")
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({result.stderr.strip() or result.returncode})")
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], check=False)


def _fill(disk, spare_bytes=SPARE_BYTES):
    """Leave only ``spare_bytes`` free on ``disk``."""
    stats = os.statvfs(disk)
    free = stats.f_bavail * stats.f_frsize
    (disk / "filler").write_bytes(bytes(max(free - spare_bytes, 0)))


def _snapshot(directory):
    return {p.name: p.read_bytes() for p in directory.iterdir() if p.is_file() and p.name != "filler"}


def _expect_full(call, path):
    with pytest.raises(InputError, match="no space left on the device") as error:
        call()
    assert str(path) in str(error.value)
    faults.log_fault(path.name, "ENOSPC", 1)
    faults.record_survived()


def test_table_write_on_a_full_disk_keeps_the_previous_table(small_disk):
    csv, parquet = small_disk / "table.csv", small_disk / "table.parquet"
    write_table(pd.DataFrame({"a": [1, 2]}), csv, parquet)
    before = _snapshot(small_disk)
    _fill(small_disk)
    big = pd.DataFrame({"a": range(200_000), "b": ["x" * 20] * 200_000})
    _expect_full(lambda: write_table(big, csv, parquet), csv)
    assert _snapshot(small_disk) == before


def test_table_command_on_a_full_disk_is_one_line_and_exit_2(small_disk, tmp_path, capsys):
    metrics = []
    for seed in range(3):
        record = job_record("test", "v", "d", torch.device("cpu"), seed, 1)
        record.update(wall_s=1.0, padding="y" * 40_000)
        metrics.append(write_job_outputs(tmp_path / f"job{seed}", record))
    _fill(small_disk, spare_bytes=16 * 2**10)
    code = main(["table", "metrics", "--out", str(small_disk / "t.csv"), *map(str, metrics)])
    err = capsys.readouterr().err
    assert (
        code == 2 and "no space left" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    )
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler"]


def test_metrics_write_on_a_full_disk_keeps_the_previous_metrics(small_disk):
    record = job_record("test", "v", "d", torch.device("cpu"), 0, 1)
    record["wall_s"] = 1.0
    write_job_outputs(small_disk / "job", record)
    before = _snapshot(small_disk / "job")
    _fill(small_disk)
    record["padding"] = "z" * (2 * SPARE_BYTES)
    _expect_full(lambda: write_job_outputs(small_disk / "job", record), small_disk / "job" / "metrics.json")
    assert (
        _snapshot(small_disk / "job") == before
        and read_metrics(small_disk / "job" / "metrics.json")["wall_s"] == 1.0
    )


def test_checkpoint_write_on_a_full_disk_keeps_the_previous_checkpoint(small_disk):
    path = small_disk / "checkpoint.pt"
    save_checkpoint(path, {"epoch": 1, "weights": torch.ones(10)})
    _fill(small_disk)
    _expect_full(lambda: save_checkpoint(path, {"epoch": 2, "weights": torch.ones(2**16)}), path)
    state = load_checkpoint(path)
    assert state["epoch"] == 1 and torch.equal(state["weights"], torch.ones(10))
    assert sorted(p.name for p in small_disk.iterdir()) == [atomic.LEDGER_NAME, "checkpoint.pt", "filler"]


def test_lmdb_build_on_a_full_disk_keeps_the_previous_lmdb(small_disk, tmp_path):
    from membench.data.images.generate import DigitsSpec, generate_digits_folder

    generate_digits_folder(
        tmp_path / "folder",
        DigitsSpec(image_size=16, min_digit_size=10, max_digit_size=14, images_per_class=4),
    )
    out = small_disk / "train.lmdb"
    folder_to_lmdb(tmp_path / "folder", "train", out)
    count = read_metadata(out)[0]
    for index in range(200):  # a bigger folder than the space left
        (tmp_path / "folder" / "train" / "0" / f"big{index}.png").write_bytes(
            (tmp_path / "folder" / "train" / "0").glob("*.png").__next__().read_bytes() + bytes(4096)
        )
    _fill(small_disk, spare_bytes=256 * 2**10)
    _expect_full(lambda: folder_to_lmdb(tmp_path / "folder", "train", out, verify=False), out)
    assert read_metadata(out)[0] == count and check_lmdb(out) == count
    with lmdb.open(str(out), readonly=True, lock=False) as env:
        assert env.stat()["entries"] == count + 3
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler", "train.lmdb"]
