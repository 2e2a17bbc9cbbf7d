"""The validation layer's checks name the file, the line and what was expected."""

import contextlib
import os
import re
import socket
from pathlib import Path

import pandas as pd
import pytest

from membench.core import validate
from membench.core.checkpoint import load_checkpoint
from membench.core.errors import InputError
from membench.core.validate import (
    int_column,
    open_regular,
    read_csv_columns,
    read_json_object,
    readable_nonempty_file,
    regular_file,
    safe_join,
    unique_column,
)


def test_safe_join_accepts_plain_names(tmp_path):
    assert safe_join(tmp_path, "abc.exe", "list.csv", "line 2") == (tmp_path / "abc.exe").resolve()


@pytest.mark.parametrize("name", ["../secret", "a/../../b", "/etc/passwd", "~/x"])
def test_safe_join_rejects_escaping_names(tmp_path, name):
    with pytest.raises(InputError, match=r"list.csv, line 3: file name"):
        safe_join(tmp_path, name, "list.csv", "line 3")


def test_safe_join_rejects_symlink_out_of_directory(tmp_path):
    inside = tmp_path / "bins"
    inside.mkdir()
    (inside / "link.exe").symlink_to("/etc/hostname")
    with pytest.raises(InputError, match="resolves outside"):
        safe_join(inside, "link.exe", "list.csv", "line 2")


def test_csv_columns_missing_unknown_and_empty(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(InputError, match=r"x.csv, line 1: missing column\(s\) c"):
        read_csv_columns(path, ["a", "c"])
    with pytest.raises(InputError, match=r"unknown column\(s\) b"):
        read_csv_columns(path, ["a"])
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(InputError, match="empty.csv: file is empty"):
        read_csv_columns(empty, ["a"])
    with pytest.raises(InputError, match="missing.csv: file not found"):
        read_csv_columns(tmp_path / "missing.csv", ["a"])


def test_int_column_names_the_bad_line(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("a\n1\n2\nthree\n")
    frame = read_csv_columns(path, ["a"])
    with pytest.raises(InputError, match=r"x.csv, line 4: column a: 'three' is not an integer"):
        int_column(frame, "a", path)
    path.write_text("a\n1\n9\n")
    with pytest.raises(InputError, match=r"line 3: column a: 9 is above the maximum 5"):
        int_column(read_csv_columns(path, ["a"]), "a", path, 0, 5)


def test_unique_column_names_both_lines(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("sha\naa\nbb\naa\n")
    with pytest.raises(InputError, match=r"line 4: column sha: 'aa' repeats line 2"):
        unique_column(read_csv_columns(path, ["sha"]), "sha", path)


def test_readable_nonempty_file(tmp_path):
    (tmp_path / "empty.exe").write_bytes(b"")
    (tmp_path / "dir.exe").mkdir()
    with pytest.raises(InputError, match="is empty"):
        readable_nonempty_file(tmp_path / "empty.exe", "m.csv", "line 2")
    with pytest.raises(InputError, match=r"m.csv, line 2: binary .*dir.exe is a directory$"):
        readable_nonempty_file(tmp_path / "dir.exe", "m.csv", "line 2")
    with pytest.raises(InputError, match="does not exist"):
        readable_nonempty_file(tmp_path / "none.exe", "m.csv", "line 2")


def _special_files(tmp_path):
    """A named pipe, a directory, a socket and symbolic links to a pipe and to nothing."""
    os.mkfifo(tmp_path / "pipe.csv")
    (tmp_path / "dir.csv").mkdir()
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / "sock.csv"))
    (tmp_path / "link.csv").symlink_to(tmp_path / "pipe.csv")
    (tmp_path / "broken.csv").symlink_to(tmp_path / "none.csv")
    return server


NOT_REGULAR = [
    ("pipe.csv", r"is a named pipe \(FIFO\), not a regular file"),
    ("link.csv", r"is a named pipe \(FIFO\), not a regular file"),
    ("dir.csv", "is a directory"),
    ("sock.csv", "is a socket, not a regular file"),
    ("broken.csv", r"is a broken symbolic link \(its target does not exist\)"),
]


@pytest.mark.timeout(10)
@pytest.mark.parametrize("name,problem", NOT_REGULAR)
def test_readers_refuse_what_is_not_a_regular_file_without_blocking(tmp_path, name, problem):
    with contextlib.closing(_special_files(tmp_path)):
        path = tmp_path / name
        for read in (
            regular_file,
            open_regular,
            lambda p: read_csv_columns(p, ["a"]),
            lambda p: read_json_object(p, "missing"),
        ):
            with pytest.raises(InputError, match=f"^{re.escape(str(path))}: {problem}$"):
                read(path)


def test_a_device_and_a_missing_file_are_named(tmp_path):
    with pytest.raises(InputError, match=r"^/dev/null: is a character device, not a regular file$"):
        regular_file("/dev/null")
    with pytest.raises(InputError, match=r"none.json: does not exist$"):
        open_regular(tmp_path / "none.json")
    with pytest.raises(InputError, match=r"none.json: run the job first$"):
        read_json_object(tmp_path / "none.json", "run the job first")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their permissions")
def test_an_unreadable_file_is_named(tmp_path):
    path = tmp_path / "secret.json"
    path.write_text("{}")
    path.chmod(0)
    with pytest.raises(InputError, match=r"secret.json: is not readable \(permission denied\)$"):
        read_json_object(path, "missing")


def test_symbolic_links_to_regular_files_are_read(tmp_path):
    (tmp_path / "x.json").write_text('{"a": 1}')
    (tmp_path / "link.json").symlink_to(tmp_path / "x.json")
    assert regular_file(tmp_path / "link.json") == tmp_path / "link.json"
    assert read_json_object(tmp_path / "link.json", "missing") == {"a": 1}
    with open_regular(tmp_path / "link.json", "r", encoding="utf-8") as handle:
        assert handle.read() == '{"a": 1}'


@pytest.mark.timeout(10)
def test_a_pipe_swapped_in_after_the_check_does_not_block_the_open(tmp_path, monkeypatch):
    # The check passes (as it would have before the swap); the open must still refuse the pipe.
    os.mkfifo(tmp_path / "swapped.csv")
    monkeypatch.setattr(validate, "regular_file", lambda path, missing: Path(path))
    with pytest.raises(InputError, match=r"swapped.csv: is a named pipe \(FIFO\), not a regular file$"):
        open_regular(tmp_path / "swapped.csv")


def test_an_opened_regular_file_reads_blocking(tmp_path):
    (tmp_path / "x.bin").write_bytes(b"abc")
    with open_regular(tmp_path / "x.bin") as handle:
        assert os.get_blocking(handle.fileno()) and handle.read() == b"abc"


@pytest.mark.timeout(10)
def test_a_pipe_as_a_checkpoint_is_named_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "checkpoint.pt")
    with pytest.raises(InputError, match=r"checkpoint.pt: is a named pipe \(FIFO\), not a regular file$"):
        load_checkpoint(tmp_path / "checkpoint.pt")


@pytest.mark.parametrize(
    "text, problem",
    [
        (str(2**63), f"{2**63} is out of range \\(expected 0 to {2**63 - 1}\\)"),
        (str(-(2**63) - 1), f"{-(2**63) - 1} is out of range"),
        ("1e30", "1e30 is out of range"),
        ("9" * 5000, "9999999999.* is out of range"),
        ("inf", "'inf' is not an integer"),
        ("nan", "'nan' is not an integer"),
    ],
)
def test_int_column_reports_a_value_beyond_int64_as_written(text, problem):
    frame = pd.DataFrame({"a": ["1", text]})
    with pytest.raises(InputError, match=f"x.csv, line 3: column a: {problem}"):
        int_column(frame, "a", "x.csv", minimum=0)
    assert int_column(pd.DataFrame({"a": [str(2**63 - 1), " 3.0", "1e3"]}), "a", "x.csv").tolist() == [
        2**63 - 1,
        3,
        1000,
    ]


def test_a_yaml_file_that_does_not_parse_is_one_line_naming_it(tmp_path):
    good, bad, binary = tmp_path / "good.yaml", tmp_path / "bad.yaml", tmp_path / "binary.yaml"
    good.write_text("rows: [1, 2]\n")
    bad.write_text("rows: [1, 2\nnext: 3\n")
    binary.write_bytes(b"rows: \xff\xfe\n")
    assert validate.read_yaml(good, "missing") == {"rows": [1, 2]}
    with pytest.raises(InputError, match=r"bad\.yaml: not valid YAML \(") as error:
        validate.read_yaml(bad, "missing")
    assert "\n" not in str(error.value)
    with pytest.raises(InputError, match=r"binary\.yaml: not valid YAML \(not UTF-8 text\)"):
        validate.read_yaml(binary, "missing")
    with pytest.raises(InputError, match="write it first"):
        validate.read_yaml(tmp_path / "absent.yaml", "write it first")
