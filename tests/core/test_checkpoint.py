"""The one resume rule: a checkpoint is resumed only by a run of the same options, inputs and code."""

from __future__ import annotations

import logging
import os

import pytest
import torch

from membench.core import checkpoint
from membench.core.checkpoint import (
    code_version,
    resume_checkpoint,
    run_identity,
    save_checkpoint,
    tensors_sha256,
)
from membench.core.errors import InputError


@pytest.fixture
def inputs(tmp_path):
    data = tmp_path / "fold.csv"
    data.write_text("sha,label\na,0\n")
    binaries = tmp_path / "binaries"
    binaries.mkdir()
    (binaries / "a.exe").write_bytes(b"MZ")
    return data, binaries


def _saved(tmp_path, identity):
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, {"epoch": 3, "weights": torch.arange(4.0)}, identity)
    return path


def test_same_identity_resumes_even_when_the_inputs_moved(tmp_path, inputs):
    data, binaries = inputs
    path = _saved(tmp_path, run_identity({"epochs": 3}, inputs, code="v1"))
    moved = tmp_path / "moved"
    moved.mkdir()
    os.replace(data, moved / "fold.csv")
    state = resume_checkpoint(path, run_identity({"epochs": 3}, (moved / "fold.csv", binaries), code="v1"))
    assert state["epoch"] == 3 and torch.equal(state["weights"], torch.arange(4.0))


@pytest.mark.parametrize("change", ["options", "file content", "directory", "code", "no identity"])
def test_any_difference_starts_over_with_one_line_naming_it(tmp_path, inputs, caplog, change):
    data, binaries = inputs
    identity = run_identity({"epochs": 3, "lr": 0.1}, inputs, code="v1")
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, {"epoch": 3}, None if change == "no identity" else identity)
    options, code = {"epochs": 3, "lr": 0.1}, "v1"
    if change == "options":
        options = {"epochs": 4, "lr": 0.1}
    elif change == "file content":
        data.write_text("sha,label\na,1\n")
    elif change == "directory":
        (binaries / "b.exe").write_bytes(b"MZ")
    elif change == "code":
        code = "v2"
    with caplog.at_level(logging.WARNING, logger=checkpoint.__name__):
        assert resume_checkpoint(path, run_identity(options, inputs, code)) is None
    expected = {
        "options": "options changed: epochs",
        "file content": "input files changed: fold.csv",
        "directory": "input files changed: binaries",
        "code": "the code changed",
        "no identity": "records no run identity",
    }[change]
    assert len(caplog.records) == 1 and expected in caplog.text and "the run starts over" in caplog.text


def test_a_finished_run_is_not_resumed_so_that_a_rerun_measures_again(tmp_path, inputs, caplog):
    identity = run_identity({"epochs": 3}, inputs, code="v1")
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, {"epoch": 2}, identity)
    assert resume_checkpoint(path, identity)["epoch"] == 2
    save_checkpoint(path, {"epoch": 3}, identity, finished=True)
    with caplog.at_level(logging.INFO, logger="membench.core.checkpoint"):
        assert resume_checkpoint(path, identity) is None
    assert caplog.messages == [
        f"{path}: the run finished; it runs again, so that its figures are measured again"
    ]
    assert path.exists()  # kept until the new run's first epoch replaces it


def test_an_identity_of_command_line_paths_loads_without_pickled_classes(tmp_path, inputs):
    from membench.core.options import InputDir, InputFile

    data, binaries = inputs
    identity = run_identity({"path": InputFile(data)}, (InputFile(data), InputDir(binaries)), code="v1")
    path = _saved(tmp_path, identity)
    assert resume_checkpoint(path, identity)["epoch"] == 3


def test_code_version_follows_every_source_file(tmp_path, monkeypatch):
    package = tmp_path / "membench_like" / "system"
    package.mkdir(parents=True)
    (package / "a.py").write_text("x = 1\n")
    (package / "k.cpp").write_text("int f();\n")
    monkeypatch.setattr(checkpoint, "_PACKAGE_ROOT", tmp_path / "membench_like")
    before = code_version("system")
    (package / "k.cpp").write_text("int f(int);\n")
    assert code_version("system") != before
    assert len(code_version("core")) == 64  # an absent package hashes to a constant, not an error


def test_the_real_packages_have_distinct_versions():
    assert code_version("core", "hotconv") != code_version("core", "division")


def test_tensors_are_identified_by_dtype_shape_and_bytes():
    x = torch.arange(6, dtype=torch.float32)
    assert tensors_sha256(x) == tensors_sha256(x.clone())
    assert tensors_sha256(x) != tensors_sha256(x.reshape(2, 3))
    assert tensors_sha256(x) != tensors_sha256(x.double())
    assert tensors_sha256(x) != tensors_sha256(x + 1)


def test_an_input_that_cannot_be_identified_is_a_one_line_error(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="named pipe"):
        run_identity({}, [fifo])
    with pytest.raises(InputError, match="cannot be read"):
        run_identity({}, [tmp_path / "missing.csv"])


class _Pickled:
    pass


@pytest.mark.parametrize("content", ["pickled object", "garbage"])
def test_a_pickled_or_foreign_checkpoint_is_refused_without_torchs_advice_to_unpickle_it(tmp_path, content):
    path = tmp_path / "ckpt.pt"
    if content == "garbage":
        path.write_bytes(b"not a checkpoint at all")
    else:
        torch.save({"epoch": 1, "extra": _Pickled()}, path)
    with pytest.raises(InputError) as error:
        checkpoint.load_checkpoint(path)
    assert str(error.value) == (
        f"{path}: not a membench checkpoint: it holds pickled objects other than tensors and "
        "plain values, or is damaged; membench never loads pickled code"
    )
