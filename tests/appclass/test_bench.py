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


def test_phase_times_leave_out_the_warm_up_repeat_as_the_repeat_time_does():
    from types import SimpleNamespace

    import torch

    from membench.appclass import bench
    from membench.appclass.bench import BenchSpec

    spec = BenchSpec(implementation="torch", device="cpu", threads=1, precision="float32", repeats=3)
    graph = SimpleNamespace(num_nodes=4, num_edges=6)
    phase_ms = {"read": [50.0, 5.0, 7.0], "init": [90.0, 10.0, 12.0], "iterations": [70.0, 20.0, 22.0]}
    repeats = bench._Repeats(graph, graph, np.zeros(1), phase_ms, 0, None, None)
    summary = {"init_peak_rss_mib": 1.0, "iterations_peak_rss_mib": 1.0}
    figures = bench._run_figures(spec, torch.device("cpu"), repeats, summary)
    assert (figures["read_ms"], figures["init_ms"], figures["iterations_ms"]) == (6.0, 11.0, 21.0)
    assert figures["total_ms"] == 32.0
