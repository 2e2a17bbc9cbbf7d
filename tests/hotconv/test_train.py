"""The training job: a valid metrics.json, resume after a kill, evaluation metrics."""

from __future__ import annotations

import json
import logging
import os
import platform

import numpy as np
import pytest
import torch

from membench.core.checkpoint import load_checkpoint
from membench.core.metrics import read_metrics
from membench.core.timing import TIMING_FIELDS
from membench.hotconv import train as train_module
from membench.hotconv.models import ModelSpec
from membench.hotconv.train import TrainSpec, class_weights, classification_metrics, train_job
from membench.report.views import TABLE_VIEWS

CPU = torch.device("cpu")


def _specs(variant="hotconv_eco", epochs=2, patience=3):
    model = ModelSpec(
        variant, 2, num_filters=8, window_size=16, stride=16, fp_slice_size=256, fp2_slice_size=32
    )
    return model, TrainSpec(
        epochs=epochs,
        batch_size=8,
        max_len=4096,
        learning_rate=0.01,
        early_stopping_patience=patience,
        memory_probe_steps=1,
        seed=0,
    )


def test_tiny_training_run_writes_a_valid_metrics_file(tiny_fold, tmp_path):
    model_spec, train_spec = _specs("hotconv")
    path = train_job(
        tiny_fold,
        model_spec,
        train_spec,
        "tiny",
        1,
        tmp_path,
        CPU,
        sample_interval_s=0.0,
        trace_live_tensors=True,
    )
    record = read_metrics(path)
    assert record["system"] == "hotconv" and record["variant"] == "hotconv" and record["fold"] == 1
    assert record["epochs_run"] == 2 and len(json.loads(record["val_loss_per_epoch"])) == 2
    assert 0.0 <= record["test_accuracy"] <= 1.0 and 0.0 <= record["f1_weighted"] <= 1.0
    matrix = np.array(json.loads(record["confusion_matrix"]))
    assert matrix.shape == (2, 2) and matrix.sum() == record["test_samples"]
    assert record["train_probe_peak_tensor_mib"] > 0 and record["val_peak_tensor_mib"] > 0
    assert record["activation_mib"] > 0 and record["time_median_s"] > 0 and record["time_unit"] == "epoch"
    assert set(TIMING_FIELDS) <= set(record) and record["time_samples"] == 1  # two epochs, the first excluded
    assert record["time_median_s"] == json.loads(record["epoch_s_per_epoch"])[1]
    assert (tmp_path / "memlog.csv").exists()
    state = load_checkpoint(tmp_path / "checkpoint.pt")
    assert state["epoch"] == 2 and state["best_epoch"] in (1, 2)


def test_train_command_times_the_epochs_on_reused_memory(tiny_fold, tmp_path):
    from membench.cli import main

    model = ["--num-filters", "8", "--window-size", "16", "--stride", "16", "--fp-slice-size", "256"]
    assert (
        main(
            [
                "hotconv",
                "train",
                "--variant",
                "hotconv_eco",
                "--train",
                tiny_fold.train,
                "--val",
                tiny_fold.val,
                "--test",
                tiny_fold.test,
                "--classes",
                tiny_fold.classes,
                "--binaries",
                tiny_fold.binaries,
                "--dataset",
                "tiny",
                "--fold",
                "1",
                "--outdir",
                str(tmp_path),
                "--epochs",
                "1",
                "--batch-size",
                "8",
                "--max-len",
                "4096",
                "--fp2-slice-size",
                "32",
                *model,
                "--device",
                "cpu",
                "--sample-interval-s",
                "0",
            ]
        )
        == 0
    )
    record = read_metrics(tmp_path / "metrics.json")
    assert record["malloc_keeps_freed"] is (platform.libc_ver()[0] == "glibc")


def test_the_report_view_lists_only_fields_a_training_job_writes(tiny_fold, tmp_path):
    model_spec, train_spec = _specs("hotconv", epochs=1)
    record = read_metrics(
        train_job(
            tiny_fold,
            model_spec,
            train_spec,
            "tiny",
            1,
            tmp_path,
            CPU,
            sample_interval_s=0.0,
            trace_allocator=True,
            trace_saved_activations=True,
        )
    )
    # kernels: only jobs that run compiled kernels record it (the views leave out what a run lacks).
    assert set(TABLE_VIEWS["hotconv"].columns) - set(record) - {"kernels"} == set()


def test_variants_follow_the_same_trajectory(tiny_fold, tmp_path):
    losses = {}
    for variant in ("malconv", "hotconv_eco"):
        model_spec, train_spec = _specs(variant)
        record = read_metrics(
            train_job(
                tiny_fold, model_spec, train_spec, "tiny", 1, tmp_path / variant, CPU, sample_interval_s=0.0
            )
        )
        losses[variant] = json.loads(record["train_loss_per_epoch"])
    np.testing.assert_allclose(losses["hotconv_eco"], losses["malconv"], rtol=1e-4)


def test_killed_job_resumes_to_the_same_result(tiny_fold, tmp_path, monkeypatch):
    model_spec, train_spec = _specs(epochs=3)
    uninterrupted = read_metrics(
        train_job(tiny_fold, model_spec, train_spec, "tiny", 1, tmp_path / "a", CPU, sample_interval_s=0.0)
    )

    real_save = train_module.save_checkpoint

    def save_then_die(path, state, identity, **options):
        real_save(path, state, identity, **options)
        if state["epoch"] == 2:
            raise KeyboardInterrupt  # killed after the checkpoint of epoch 2

    monkeypatch.setattr(train_module, "save_checkpoint", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        train_job(tiny_fold, model_spec, train_spec, "tiny", 1, tmp_path / "b", CPU, sample_interval_s=0.0)
    assert not (tmp_path / "b" / "metrics.json").exists()
    monkeypatch.setattr(train_module, "save_checkpoint", real_save)
    resumed = read_metrics(
        train_job(tiny_fold, model_spec, train_spec, "tiny", 1, tmp_path / "b", CPU, sample_interval_s=0.0)
    )
    assert resumed["resumed_from_epoch"] == 2 and uninterrupted["resumed_from_epoch"] == 0
    assert resumed["train_loss_per_epoch"] == uninterrupted["train_loss_per_epoch"]
    assert resumed["test_accuracy"] == uninterrupted["test_accuracy"] and resumed[
        "test_loss"
    ] == pytest.approx(uninterrupted["test_loss"])


def test_a_rerun_on_changed_data_trains_anew_instead_of_resuming(fold_copy, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="membench.core.checkpoint")
    model_spec, train_spec = _specs(epochs=2)
    first = read_metrics(
        train_job(fold_copy, model_spec, train_spec, "tiny", 1, tmp_path / "job", CPU, sample_interval_s=0.0)
    )
    same = read_metrics(
        train_job(fold_copy, model_spec, train_spec, "tiny", 1, tmp_path / "job", CPU, sample_interval_s=0.0)
    )
    # A finished run is trained and timed again, not read back from its checkpoint.
    assert same["resumed_from_epoch"] == 0 and same["epochs_run"] == 2
    assert same["test_accuracy"] == first["test_accuracy"]
    assert "the run finished; it runs again" in caplog.text
    with open(fold_copy.train) as handle:
        lines = handle.readlines()
    with open(fold_copy.train, "w") as handle:  # the fold re-split: one training file fewer
        handle.writelines(lines[:-1])
    changed = read_metrics(
        train_job(fold_copy, model_spec, train_spec, "tiny", 1, tmp_path / "job", CPU, sample_interval_s=0.0)
    )
    assert changed["resumed_from_epoch"] == 0 and changed["epochs_run"] == 2
    assert changed["train_samples"] == first["train_samples"] - 1
    assert f"input files changed: {os.path.basename(fold_copy.train)}" in caplog.text


def test_early_stopping_keeps_the_best_model(tiny_fold, tmp_path):
    model_spec, train_spec = _specs(epochs=30, patience=1)
    train_spec = TrainSpec(**{**train_spec.__dict__, "learning_rate": 0.05})
    record = read_metrics(
        train_job(tiny_fold, model_spec, train_spec, "tiny", 1, tmp_path, CPU, sample_interval_s=0.0)
    )
    val_losses = json.loads(record["val_loss_per_epoch"])
    assert record["stopped_early"] and record["epochs_run"] < 30
    assert record["best_val_loss"] == min(val_losses) == val_losses[record["best_epoch"] - 1]
    assert record["epochs_run"] == record["best_epoch"] + 1


def test_classification_metrics_binary_and_multiclass():
    labels = np.array([0, 0, 1, 1])
    binary = classification_metrics(labels, np.array([[0.9, 0.1], [0.4, 0.6], [0.3, 0.7], [0.2, 0.8]]), 2)
    assert binary["test_accuracy"] == 0.75 and binary["roc_auc"] == 1.0 and binary["majority_accuracy"] == 0.5
    assert json.loads(binary["confusion_matrix"]) == [[1, 1], [0, 2]]
    multi = classification_metrics(np.array([0, 1, 2]), np.eye(3), 3)
    assert multi["test_accuracy"] == 1.0 and multi["roc_auc"] == 1.0 and multi["f1_weighted"] == 1.0
    missing_class = classification_metrics(np.array([0, 0]), np.array([[0.6, 0.4], [0.7, 0.3]]), 2)
    assert missing_class["roc_auc"] is None


def test_class_weights_balance_the_classes():
    weights = class_weights(np.array([0, 0, 0, 1]), 3)
    assert weights.tolist() == pytest.approx([4 / 9, 4 / 3, 4 / 3])


def test_the_classes_of_the_test_split_are_counted_not_the_models(fold_copy, tmp_path):
    import pandas as pd

    test = pd.read_csv(fold_copy.test)
    test[test["Label"] == test["Label"].iloc[0]].to_csv(fold_copy.test, index=False)
    model_spec, train_spec = _specs(epochs=1)
    record = read_metrics(
        train_job(fold_copy, model_spec, train_spec, "tiny", 1, tmp_path, CPU, sample_interval_s=0.0)
    )
    assert record["num_classes"] == 2 and record["test_classes"] == 1
