"""Accuracy runs: learning happens, and a killed run resumes to the same result."""

from __future__ import annotations

import pytest
import torch

from membench.core.checkpoint import run_identity
from membench.core.meter import Meter
from membench.data.images.folder import folder_to_lmdb
from membench.data.images.generate import DigitsSpec, generate_digits_folder
from membench.data.images.lmdb_store import ImageLMDB
from membench.data.images.transforms import EvalTransform, TrainTransform
from membench.division.bench import prepare_model
from membench.division.kernels import TORCH_KERNELS
from membench.division.options import MethodSpec
from membench.division.train import TrainSpec, train_model

_MEAN, _STD = (0.2, 0.2, 0.2), (0.3, 0.3, 0.3)


@pytest.fixture(scope="module")
def digits_lmdbs(tmp_path_factory):
    root = tmp_path_factory.mktemp("digits")
    generate_digits_folder(
        root / "folder",
        DigitsSpec(
            image_size=16,
            min_digit_size=12,
            max_digit_size=14,
            max_shift=1,
            val_fraction=0.25,
            images_per_class=40,
        ),
    )
    return {split: folder_to_lmdb(root / "folder", split, root / split) for split in ("train", "val")}


def _run(lmdbs, checkpoint, epochs, method="division", batch_size=64, identity=""):
    train_set = ImageLMDB(lmdbs["train"], TrainTransform(16, _MEAN, _STD, padding=1, flip=False))
    val_set = ImageLMDB(lmdbs["val"], EvalTransform(16, _MEAN, _STD))
    cpu = torch.device("cpu")
    model, context = prepare_model("resnet18", method, 10, cpu, MethodSpec(), TORCH_KERNELS, 0, width=4)
    spec = TrainSpec(epochs=epochs, batch_size=batch_size, learning_rate=0.05, seed=0)
    with Meter(cpu, sample_interval_s=0) as meter:
        history = train_model(
            model, context, train_set, val_set, spec, cpu, meter, checkpoint, run_identity({"run": identity})
        )
    return history, model, meter.summary()


def test_resumed_run_equals_uninterrupted_run(digits_lmdbs, tmp_path):
    straight, straight_model, summary = _run(digits_lmdbs, tmp_path / "a.pt", epochs=2)
    assert summary["train_activation_mib"] > 0 and summary["eval_wall_s"] > 0
    assert int(torch.load(tmp_path / "a.pt", weights_only=True)["epoch"]) == 2
    history, model, _ = _run_interrupted(digits_lmdbs, tmp_path / "c.pt")
    deterministic = ("epoch", "learning_rate", "train_loss", "val_accuracy", "val_loss")
    assert [[h[k] for k in deterministic] for h in history] == [
        [h[k] for k in deterministic] for h in straight
    ]
    for a, b in zip(model.state_dict().values(), straight_model.state_dict().values()):
        assert torch.equal(a, b)


def _run_interrupted(lmdbs, checkpoint):
    import membench.division.train as train

    calls = {"n": 0}
    original = train.save_checkpoint

    def save_then_die(path, state, identity, **options):
        original(path, state, identity, **options)
        calls["n"] += 1
        if calls["n"] == 1:
            raise KeyboardInterrupt

    train.save_checkpoint = save_then_die
    try:
        with pytest.raises(KeyboardInterrupt):
            _run(lmdbs, checkpoint, epochs=2)
    finally:
        train.save_checkpoint = original
    return _run(lmdbs, checkpoint, epochs=2)


def test_checkpoint_of_another_configuration_is_not_resumed(digits_lmdbs, tmp_path):
    history, _, _ = _run(digits_lmdbs, tmp_path / "e.pt", epochs=1)
    assert len(history) == 1 and history[0]["epoch_s"] > 0 and history[0]["load_1m_max"] >= 0
    longer, _, _ = _run(digits_lmdbs, tmp_path / "e.pt", epochs=2, identity="two epochs")
    assert [h["epoch"] for h in longer] == [1, 2]  # started over, did not continue the 1-epoch run


def test_training_learns_the_digits(digits_lmdbs, tmp_path):
    history, _, _ = _run(digits_lmdbs, tmp_path / "d.pt", epochs=4, method="division", batch_size=32)
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    assert history[-1]["val_accuracy"] > 0.2  # chance is 0.1 (sd 0.03 on 100 images)


@pytest.mark.slow
def test_data_parallel_run_under_torchrun(digits_lmdbs, tmp_path):
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in {"RANK", "WORLD_SIZE", "LOCAL_RANK"}}
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "membench.cli",
        "division",
        "train",
        "--outdir",
        str(tmp_path),
        "--model",
        "resnet18",
        "--width",
        "4",
        "--variant",
        "division",
        "--dataset",
        "digits",
        "--train-lmdb",
        str(digits_lmdbs["train"]),
        "--val-lmdb",
        str(digits_lmdbs["val"]),
        "--image-size",
        "16",
        "--epochs",
        "1",
        "--batch-size",
        "32",
        "--kernels",
        "torch",
        "--device",
        "cpu",
        "--sample-interval-s",
        "0",
    ]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["world_size"] == 2 and metrics["batch_size"] == 32
    assert metrics["val_accuracy"] >= 0 and (tmp_path / "history.csv").exists()
    assert metrics["time_unit"] == "epoch" and metrics["time_samples"] == 1 and metrics["timing_flag"]


def test_the_classes_of_the_validation_split_are_counted_not_the_models(digits_lmdbs, tmp_path):
    import json

    from membench.cli import main
    from membench.data.images.lmdb_store import write_lmdb

    # The validation LMDB's images of its first class only, under the same ten class names.
    val = ImageLMDB(digits_lmdbs["val"])
    records = [record for record in map(val.read_record, range(len(val))) if record[0] == 0]
    one_class = write_lmdb(
        tmp_path / "val", records, len(records), val.classes, sum(len(image) for _, image in records)
    )
    arguments = ["--outdir", str(tmp_path / "job"), "--model", "resnet18", "--width", "4", "--variant"]
    arguments += ["vanilla", "--dataset", "digits", "--train-lmdb", str(digits_lmdbs["train"])]
    arguments += ["--val-lmdb", str(one_class), "--image-size", "16", "--epochs", "1", "--batch-size", "32"]
    arguments += ["--device", "cpu", "--sample-interval-s", "0"]
    assert main(["division", "train", *arguments]) == 0
    metrics = json.loads((tmp_path / "job" / "metrics.json").read_text())
    assert metrics["num_classes"] == 10 and metrics["val_classes"] == 1
