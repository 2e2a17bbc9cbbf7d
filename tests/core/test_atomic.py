"""Atomic writes: all or nothing, no temporary files left behind."""

import json
import os

import pytest

from membench.core import atomic
from membench.core.errors import InputError


def test_write_json_replaces_whole_file(tmp_path):
    path = tmp_path / "sub" / "metrics.json"
    atomic.write_json(path, {"a": 1, "nan": float("nan")})
    assert json.loads(path.read_text()) == {"a": 1, "nan": None}
    assert oct(path.stat().st_mode & 0o777) == oct(0o644)


def test_failed_write_keeps_old_content_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "table.csv"
    atomic.write_text(path, "old\n")
    with pytest.raises(RuntimeError):
        with atomic.atomic_path(path) as tmp:
            tmp.write_text("partial")
            raise RuntimeError("killed mid-write")
    assert path.read_text() == "old\n"
    assert sorted(os.listdir(tmp_path)) == [atomic.LEDGER_NAME, "table.csv"]


def test_temporary_is_beside_target_so_rename_is_atomic(tmp_path):
    path = tmp_path / "x.bin"
    with atomic.atomic_path(path) as tmp:
        assert tmp.parent == path.parent
        assert not path.exists()
        tmp.write_bytes(b"data")
    assert path.read_bytes() == b"data"


def test_directory_is_replaced_whole_or_not_at_all(tmp_path):
    target = tmp_path / "db"
    with atomic.atomic_directory(target, "db") as tmp:
        (tmp / "data").write_text("first")
    with pytest.raises(RuntimeError):
        with atomic.atomic_directory(target, "db") as tmp:
            (tmp / "data").write_text("half")
            raise RuntimeError("killed mid-build")
    assert (target / "data").read_text() == "first"
    with atomic.atomic_directory(target, "db") as tmp:
        (tmp / "data").write_text("second")
    assert (target / "data").read_text() == "second"
    assert sorted(os.listdir(tmp_path)) == ["db"]
    assert atomic.output_kind(target) == "db"


def _tree(root):
    return sorted(
        (str(p.relative_to(root)), p.read_bytes() if p.is_file() else None) for p in root.rglob("*")
    )


@pytest.mark.parametrize("make", ["user_directory", "user_file", "other_kind", "empty_directory", "symlink"])
def test_directory_refuses_a_target_it_did_not_create_and_touches_nothing(tmp_path, make):
    target = tmp_path / "out"
    if make == "user_file":
        target.write_text("precious")
    elif make == "symlink":
        (tmp_path / "elsewhere").mkdir()
        target.symlink_to(tmp_path / "elsewhere")
    else:
        target.mkdir()
        if make == "user_directory":
            (target / "photo.png").write_bytes(b"precious")
        elif make == "other_kind":
            atomic.write_json(target / atomic.OUTPUT_MARKER, {"kind": "image-lmdb"})
    before = _tree(tmp_path)
    with pytest.raises(InputError, match="refusing to replace") as error:
        with atomic.atomic_directory(target, "digits-image-folder") as tmp:
            (tmp / "x").write_text("new")
    assert str(target) in str(error.value)
    assert _tree(tmp_path) == before


def test_directory_refuses_an_output_that_is_or_holds_an_input(tmp_path):
    data = tmp_path / "data"
    with atomic.atomic_directory(data, "db") as tmp:
        (tmp / "train").mkdir()
    before = _tree(tmp_path)
    for target, inputs, relation in (
        (data, [data / "train"], "contains"),
        (data / "train", [data / "train"], "is"),
    ):
        with pytest.raises(InputError, match=f"{relation} the input"):
            with atomic.atomic_directory(target, "db", inputs=inputs):
                pass
    assert _tree(tmp_path) == before


def test_file_writer_refuses_an_input_or_a_directory(tmp_path):
    source = tmp_path / "metrics.json"
    source.write_text("{}")
    with pytest.raises(InputError, match="is the input"):
        with atomic.atomic_path(source, inputs=[source]):
            pass
    (tmp_path / "dir").mkdir()
    with pytest.raises(InputError, match="existing directory"):
        atomic.write_text(tmp_path / "dir", "x")
    assert source.read_text() == "{}" and sorted(os.listdir(tmp_path)) == ["dir", "metrics.json"]


def test_new_outputs_follow_the_umask_not_0700(tmp_path):
    previous = os.umask(0o027)
    try:
        with atomic.atomic_directory(tmp_path / "db", "db") as tmp:
            (tmp / "data").write_text("x")
        atomic.write_text(tmp_path / "file.txt", "x")
    finally:
        os.umask(previous)
    assert oct((tmp_path / "db").stat().st_mode & 0o777) == oct(0o750)
    assert oct((tmp_path / "file.txt").stat().st_mode & 0o777) == oct(0o640)


def test_temporaries_of_killed_writers_are_removed_by_the_next_write(tmp_path):
    import socket
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    host = socket.gethostname()
    dead_dir = tmp_path / f".db.{host}.{child.pid}.abc"
    dead_dir.mkdir()
    (dead_dir / "data.mdb").write_bytes(b"half")
    dead_file = tmp_path / f".table.csv.{host}.{child.pid}.xyz.csv"
    dead_file.write_text("half")
    live = tmp_path / f".db.{host}.{os.getpid()}.live"
    live.mkdir()
    other_host = tmp_path / f".db.elsewhere.{child.pid}.abc"
    other_host.mkdir()
    with atomic.atomic_directory(tmp_path / "db", "db"):
        pass
    atomic.write_text(tmp_path / "table.csv", "whole")
    assert sorted(os.listdir(tmp_path)) == sorted(
        ["db", "table.csv", atomic.LEDGER_NAME, live.name, other_host.name]
    )


def test_a_file_membench_wrote_is_replaced_and_a_foreign_one_refused_untouched(tmp_path):
    ours = tmp_path / "ours.csv"
    atomic.write_text(ours, "first\n")
    atomic.write_text(ours, "second\n")
    assert ours.read_text() == "second\n"
    theirs = tmp_path / "theirs.csv"
    theirs.write_text("user data\n")
    with pytest.raises(InputError, match="theirs.csv: exists and is not written by membench"):
        atomic.write_text(theirs, "x")
    assert theirs.read_text() == "user data\n"


def test_a_file_changed_after_membench_wrote_it_is_refused(tmp_path):
    path = tmp_path / "table.csv"
    atomic.write_text(path, "ours\n")
    path.write_text("edited by hand, longer\n")
    with pytest.raises(InputError, match="or was changed since"):
        atomic.write_text(path, "x")
    assert path.read_text() == "edited by hand, longer\n"


@pytest.mark.parametrize("make", ["fifo", "symlink"])
def test_a_special_file_or_link_at_the_target_is_refused(tmp_path, make):
    target = tmp_path / "out.csv"
    if make == "fifo":
        os.mkfifo(target)
    else:
        atomic.write_text(tmp_path / "real.csv", "ours\n")
        target.symlink_to(tmp_path / "real.csv")
    with pytest.raises(InputError, match="refusing to replace it"):
        atomic.write_text(target, "x")
    assert target.is_fifo() if make == "fifo" else target.is_symlink()


def test_protected_inputs_are_refused_by_every_write_in_the_context(tmp_path):
    source = tmp_path / "data.csv"
    atomic.write_text(source, "input\n")
    hard_link = tmp_path / "link.csv"
    os.link(source, hard_link)
    with atomic.protect_inputs([source]):
        for target in (source, hard_link):
            with pytest.raises(InputError, match="is the input"):
                atomic.write_text(target, "x")
        with pytest.raises(InputError, match="contains the input"):
            with atomic.atomic_directory(tmp_path, "db"):
                pass
        atomic.write_text(tmp_path / "other.csv", "fine\n")
    atomic.write_text(source, "outside the context\n")
    assert source.read_text() == "outside the context\n"


def test_a_user_file_added_to_a_previous_directory_output_is_never_deleted(tmp_path):
    target = tmp_path / "db"
    with atomic.atomic_directory(target, "db") as tmp:
        (tmp / "data.mdb").write_bytes(b"records")
    with atomic.atomic_directory(target, "db") as tmp:  # a previous output holding only its own files
        (tmp / "data.mdb").write_bytes(b"records v2")
    (target / "notes.txt").write_text("mine\n")
    with pytest.raises(InputError, match="holds notes.txt, which membench did not write there"):
        with atomic.atomic_directory(target, "db") as tmp:
            (tmp / "data.mdb").write_bytes(b"v3")
    assert (target / "notes.txt").read_text() == "mine\n"
    assert (target / "data.mdb").read_bytes() == b"records v2"
    (target / "notes.txt").unlink()
    (target / "data.mdb").write_bytes(b"changed by hand")
    with pytest.raises(InputError, match="holds data.mdb"):
        with atomic.atomic_directory(target, "db"):
            pass


def test_a_torn_ledger_line_makes_its_file_foreign_not_a_crash(tmp_path):
    path = tmp_path / "table.csv"
    atomic.write_text(path, "ours\n")
    with open(tmp_path / atomic.LEDGER_NAME, "a") as ledger:
        ledger.write('{"name": "table.csv", "si')
    assert atomic.written_by_membench(path)
    (tmp_path / atomic.LEDGER_NAME).write_text("not json\n")
    assert not atomic.written_by_membench(path)


def test_an_output_below_a_file_is_a_one_line_error_naming_it(tmp_path):
    (tmp_path / "notes.txt").write_text("mine\n")
    with pytest.raises(InputError, match=r"x\.csv: cannot create its directory .*notes\.txt"):
        atomic.write_text(tmp_path / "notes.txt" / "sub" / "x.csv", "x")
    with pytest.raises(InputError, match="cannot create its directory"):
        with atomic.atomic_directory(tmp_path / "notes.txt" / "db", "db"):
            pass
    assert (tmp_path / "notes.txt").read_text() == "mine\n"


def test_a_long_ledger_is_compacted_to_the_files_that_are_still_there(tmp_path, monkeypatch):
    for round_ in range(3):
        for name in ("a.csv", "b.csv", "gone.csv"):
            atomic.write_text(tmp_path / name, f"{round_}\n")
    (tmp_path / "gone.csv").unlink()
    monkeypatch.setattr(atomic, "_LEDGER_COMPACT_BYTES", 100)  # the next write finds the ledger long
    atomic.write_text(tmp_path / "a.csv", "last\n")
    names = [json.loads(line)["name"] for line in (tmp_path / atomic.LEDGER_NAME).read_text().splitlines()]
    assert sorted(names) == ["a.csv", "b.csv"]
    assert atomic.written_by_membench(tmp_path / "a.csv") and atomic.written_by_membench(tmp_path / "b.csv")
