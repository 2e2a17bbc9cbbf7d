"""Atomic writes: all or nothing, no temporary files left behind."""

import json
import os

import pytest

from membench.core import atomic


def test_write_json_replaces_whole_file(tmp_path):
    path = tmp_path / "sub" / "metrics.json"
    atomic.write_json(path, {"a": 1, "nan": float("nan")})
    assert json.loads(path.read_text()) == {"a": 1, "nan": None}
    assert oct(path.stat().st_mode & 0o777) == oct(0o644)


def test_failed_write_keeps_old_content_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "table.csv"
    path.write_text("old\n")
    with pytest.raises(RuntimeError):
        with atomic.atomic_path(path) as tmp:
            tmp.write_text("partial")
            raise RuntimeError("killed mid-write")
    assert path.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["table.csv"]


def test_temporary_is_beside_target_so_rename_is_atomic(tmp_path):
    path = tmp_path / "x.bin"
    with atomic.atomic_path(path) as tmp:
        assert tmp.parent == path.parent
        assert not path.exists()
        tmp.write_bytes(b"data")
    assert path.read_bytes() == b"data"


def test_directory_is_replaced_whole_or_not_at_all(tmp_path):
    target = tmp_path / "db"
    with atomic.atomic_directory(target) as tmp:
        (tmp / "data").write_text("first")
    with pytest.raises(RuntimeError):
        with atomic.atomic_directory(target) as tmp:
            (tmp / "data").write_text("half")
            raise RuntimeError("killed mid-build")
    assert (target / "data").read_text() == "first"
    with atomic.atomic_directory(target) as tmp:
        (tmp / "data").write_text("second")
    assert (target / "data").read_text() == "second"
    assert sorted(os.listdir(tmp_path)) == ["db"]
