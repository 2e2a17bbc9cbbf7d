"""The reference beliefs a bench job compares with: read only from a regular file holding a float array."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

from membench.appclass.bench import read_reference_beliefs
from membench.core.errors import InputError


def test_saved_beliefs_are_read_back(tmp_path):
    beliefs = np.linspace(-3.0, 0.0, 12).reshape(3, 4)
    np.save(tmp_path / "ref.npy", beliefs)
    np.testing.assert_array_equal(read_reference_beliefs(tmp_path / "ref.npy"), beliefs)


@pytest.mark.timeout(10)
def test_a_pipe_directory_or_missing_file_is_named_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "pipe.npy")
    (tmp_path / "dir.npy").mkdir()
    for name, problem in (
        ("pipe.npy", r"is a named pipe \(FIFO\), not a regular file"),
        ("dir.npy", "is a directory"),
        ("none.npy", r"reference beliefs not found \(run the reference variant with --out-npy first\)"),
    ):
        with pytest.raises(InputError, match=f"^{re.escape(str(tmp_path / name))}: {problem}$"):
            read_reference_beliefs(tmp_path / name)


@pytest.mark.parametrize(
    "content, problem",
    [
        (b"not an array", "not a NumPy .npy array"),
        (None, "expected a floating-point array, found dtype int64"),
    ],
)
def test_other_content_is_refused(tmp_path, content, problem):
    path = tmp_path / "ref.npy"
    if content is None:
        np.save(path, np.arange(3, dtype=np.int64))
    else:
        path.write_bytes(content)
    with pytest.raises(InputError, match=re.escape(problem)):
        read_reference_beliefs(path)
