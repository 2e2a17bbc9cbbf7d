"""The validation layer's checks name the file, the line and what was expected."""

import pytest

from membench.core.errors import InputError
from membench.core.validate import int_column, read_csv_columns, readable_nonempty_file, safe_join, unique_column


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
    with pytest.raises(InputError, match="is not readable"):
        readable_nonempty_file(tmp_path / "dir.exe", "m.csv", "line 2")
    with pytest.raises(InputError, match="does not exist"):
        readable_nonempty_file(tmp_path / "none.exe", "m.csv", "line 2")
