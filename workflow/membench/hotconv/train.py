"""One training loop for the four variants, evaluation, and the training job around them.

The loop is the same for every variant: ``loss.backward()`` fills the gradients (by autograd, or by
HotConv's hand-written backward), AdamW steps. Class-balanced cross entropy, early stopping on the
validation loss, the best model kept, and a checkpoint after every epoch so a killed job resumes
where it stopped (the shuffling of epoch e is seeded by ``seed`` and e, so a resumed job sees the
same batches as an uninterrupted one).

Memory is measured where HotConv measured it: after the first ``memory_probe_steps`` optimizer
steps of every epoch (phase ``train_probe``) and after validation (phase ``val``), and as the peak
over the whole job.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.metrics import accuracy_score, confusion_matrix, f1_score, roc_auc_score
from tqdm import tqdm

from membench.core.checkpoint import code_version, resume_checkpoint, run_identity, save_checkpoint
from membench.core.errors import InputError
from membench.core.meter import Meter
from membench.core.metrics import job_record, write_job_outputs
from membench.core.seeding import seeded
from membench.core.timing import Timer
from membench.core.validate import int_column, read_csv_columns
from membench.data.bodmas.folds import read_fold
from membench.hotconv.data import ByteDataset, make_loader
from membench.hotconv.models import MalConvNet, ModelSpec

__all__ = [
    "CHECKPOINT_NAME",
    "class_weights",
    "classification_metrics",
    "FoldFiles",
    "predict",
    "read_num_classes",
    "train_epoch",
    "train_job",
    "TrainSpec",
]

log = logging.getLogger(__name__)

CHECKPOINT_NAME = "checkpoint.pt"


@dataclass(frozen=True)
class TrainSpec:
    """Training settings (config keys as in the original HotConv where it had them).

    ``max_len`` bytes are read per file; ``early_stopping_patience`` epochs without a lower
    validation loss stop training; ``memory_probe_steps`` first steps of each epoch form the
    ``train_probe`` phase; ``sort_by_size`` feeds the largest files first (memory-measurement order).
    """

    epochs: int = 6
    batch_size: int = 16
    max_len: int = 32768
    learning_rate: float = 0.01
    early_stopping_patience: int = 2
    num_workers: int = 0
    memory_probe_steps: int = 5
    sort_by_size: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        for key in ("epochs", "batch_size", "max_len", "early_stopping_patience"):
            if getattr(self, key) < 1:
                raise InputError(
                    None, f"{key} must be a positive integer, got {getattr(self, key)}", f"key '{key}'"
                )
        if self.learning_rate <= 0:
            raise InputError(
                None, f"learning_rate must be positive, got {self.learning_rate}", "key 'learning_rate'"
            )
        if self.num_workers < 0 or self.memory_probe_steps < 0:
            raise InputError(
                None, "num_workers and memory_probe_steps must not be negative", "key 'num_workers'"
            )


@dataclass(frozen=True)
class FoldFiles:
    """The inputs of one training job: a fold's split CSVs, its class table and binaries."""

    train: str
    val: str
    test: str
    classes: str
    binaries: str


def read_num_classes(classes_csv: str | os.PathLike) -> int:
    """Number of classes in a ``classes.csv`` (Label, Name, Count) whose labels are 0..N-1."""
    path = Path(classes_csv)
    frame = read_csv_columns(path, ("Label", "Name", "Count"))
    labels = sorted(int_column(frame, "Label", path, 0))
    if labels != list(range(len(labels))) or len(labels) < 2:
        raise InputError(path, f"labels must be 0..N-1 with N >= 2, found {labels}", "column Label")
    return len(labels)


def class_weights(labels: np.ndarray, num_classes: int) -> torch.Tensor:
    """Balanced class weights n / (C * n_c) (float32, shape (C,)); absent classes weigh as one sample."""
    counts = np.bincount(labels, minlength=num_classes).clip(min=1)
    return torch.tensor(len(labels) / (num_classes * counts), dtype=torch.float32)


def train_epoch(
    model, loader, optimizer, weights, device, meter: Meter, probe_steps: int, desc: str = ""
) -> float:
    """One pass over ``loader``; returns the mean (class-weighted) training loss per sample.

    The first ``probe_steps`` steps run in meter phase ``train_probe``, the rest in ``train``.
    """
    model.train()
    total, seen = 0.0, 0
    batches = iter(tqdm(loader, desc=desc, leave=False, disable=None))
    for phase, limit in (("train_probe", probe_steps), ("train", None)):
        if limit == 0:
            continue
        with meter.phase(phase):
            for step, (tokens, labels) in enumerate(meter.batches(batches)):
                labels = labels.to(device)
                with meter.saved_activations([*model.parameters(), tokens]):
                    loss = F.cross_entropy(model(tokens), labels, weight=weights)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                total += loss.item() * len(labels)
                seen += len(labels)
                if limit is not None and step + 1 >= limit:
                    break
    return total / max(seen, 1)


@torch.no_grad()
def predict(model, loader, weights, device) -> tuple[float, np.ndarray, np.ndarray]:
    """Mean loss, labels (N,) int64 and class probabilities (N, C) float64 over ``loader``."""
    model.eval()
    total, labels_all, probs_all = 0.0, [], []
    for tokens, labels in loader:
        labels = labels.to(device)
        logits = model(tokens)
        total += F.cross_entropy(logits, labels, weight=weights).item() * len(labels)
        labels_all.append(labels.cpu().numpy())
        probs_all.append(torch.softmax(logits.double(), dim=1).cpu().numpy())
    labels = np.concatenate(labels_all)
    return total / max(len(labels), 1), labels, np.concatenate(probs_all)


def classification_metrics(labels: np.ndarray, probs: np.ndarray, num_classes: int) -> dict[str, object]:
    """Accuracy, weighted F1, ROC-AUC and the confusion matrix (a JSON list of rows, true x predicted).

    ROC-AUC is binary (probability of class 1) for two classes and macro one-vs-rest otherwise;
    ``None`` where it is undefined (a class missing from ``labels``).
    """
    predicted = probs.argmax(axis=1)
    classes = list(range(num_classes))
    if len(np.unique(labels)) < num_classes:
        roc_auc = None
    elif num_classes == 2:
        roc_auc = float(roc_auc_score(labels, probs[:, 1]))
    else:
        roc_auc = float(roc_auc_score(labels, probs, multi_class="ovr", average="macro", labels=classes))
    majority = np.bincount(labels, minlength=num_classes).max() / max(len(labels), 1)
    return {
        "test_accuracy": float(accuracy_score(labels, predicted)),
        "f1_weighted": float(
            f1_score(labels, predicted, average="weighted", labels=classes, zero_division=0)
        ),
        "roc_auc": roc_auc,
        "majority_accuracy": float(majority),
        "confusion_matrix": json.dumps(confusion_matrix(labels, predicted, labels=classes).tolist()),
    }


def train_job(
    files: FoldFiles,
    model_spec: ModelSpec,
    train_spec: TrainSpec,
    dataset: str,
    fold: int,
    outdir: str | os.PathLike,
    device: torch.device,
    *,
    sample_interval_s: float = 0.05,
    trace_live_tensors: bool = False,
    trace_allocator: bool = False,
    trace_saved_activations: bool = True,
    grid_intensity_g_per_kwh: float = 475.0,
    malloc_keeps_freed: bool = False,
) -> Path:
    """Train, early-stop, test the best model, and write metrics.json, memlog.csv and the checkpoint.

    Resumes from ``outdir/checkpoint.pt`` when it was written by a run of the same settings, input
    files and code (:func:`membench.core.checkpoint.resume_checkpoint`); any other checkpoint is
    replaced. ``malloc_keeps_freed`` is recorded: whether the command keeps freed memory for reuse
    (:func:`membench.core.malloc.keep_freed_memory`) while the epochs are timed. Returns the path of
    ``metrics.json``.
    """
    start = time.perf_counter()
    outdir = Path(outdir)
    splits = {
        name: read_fold(path, files.binaries, model_spec.num_classes)
        for name, path in (("train", files.train), ("val", files.val), ("test", files.test))
    }
    for name, frame in splits.items():
        if frame.empty:
            raise InputError(
                getattr(files, name), f"the {name} split is empty; training needs train, val and test rows"
            )
    data = {name: ByteDataset.from_fold(frame, train_spec.max_len) for name, frame in splits.items()}
    weights = class_weights(splits["train"]["Label"].to_numpy(), model_spec.num_classes).to(device)

    with seeded(train_spec.seed):
        model = MalConvNet(model_spec).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=train_spec.learning_rate)
    settings = {**asdict(model_spec), **asdict(train_spec), "dataset": dataset, "fold": fold}
    identity = run_identity(
        settings,
        (files.train, files.val, files.test, files.classes, files.binaries),
        code_version("core", "data", "hotconv"),
    )
    state = _resume(outdir / CHECKPOINT_NAME, identity, model, optimizer)
    resumed_from = state["epoch"]
    timer = Timer("epoch", threads=torch.get_num_threads() + train_spec.num_workers, device=device)
    for timed in zip(
        state["epoch_s"],
        state["epoch_load_1m_max"],
        state["epoch_timing_setting"],
        state["epoch_timing_process"],
    ):
        timer.add(*timed)

    def loader(name: str, epoch: int):
        return make_loader(
            data[name],
            train_spec.batch_size,
            model_spec.fp_slice_size,
            shuffle=name == "train" and not train_spec.sort_by_size,
            seed=train_spec.seed * 100003 + epoch,
            sort_by_size=train_spec.sort_by_size,
            num_workers=train_spec.num_workers,
        )

    with Meter(
        device,
        sample_interval_s=sample_interval_s,
        trace_live_tensors=trace_live_tensors,
        trace_allocator=trace_allocator,
        trace_saved_activations=trace_saved_activations,
        grid_intensity_g_per_kwh=grid_intensity_g_per_kwh,
    ) as meter:
        while state["epoch"] < train_spec.epochs and not state["stopped_early"]:
            epoch = state["epoch"] + 1
            with timer.sample():
                train_loss = train_epoch(
                    model,
                    loader("train", epoch),
                    optimizer,
                    weights,
                    device,
                    meter,
                    train_spec.memory_probe_steps,
                    desc=f"{model_spec.variant} epoch {epoch}",
                )
            epoch_s = timer.samples_s[-1]
            with meter.phase("val"):
                val_loss, _, _ = predict(model, loader("val", epoch), weights, device)
            _record_epoch(
                state,
                model,
                optimizer,
                epoch,
                train_loss,
                val_loss,
                timer,
                train_spec.early_stopping_patience,
            )
            finished = state["epoch"] >= train_spec.epochs or state["stopped_early"]
            save_checkpoint(outdir / CHECKPOINT_NAME, state, identity, finished=finished)
            log.info(
                "%s epoch %d: train loss %.4f, val loss %.4f, %.1f s%s",
                model_spec.variant,
                epoch,
                train_loss,
                val_loss,
                epoch_s,
                " (best)" if state["best_epoch"] == epoch else "",
            )
        model.load_state_dict(state["best_model"])
        with meter.phase("test"):
            test_loss, labels, probs = predict(model, loader("test", 0), weights, device)

    record = job_record(
        "hotconv", model_spec.variant, dataset, device, train_spec.seed, train_spec.batch_size
    )
    record.update(meter.summary())
    record.update(timer.fields())
    record.update(classification_metrics(labels, probs, model_spec.num_classes))
    record.update(
        fold=fold,
        num_classes=model_spec.num_classes,
        max_len=train_spec.max_len,
        num_filters=model_spec.num_filters,
        window_size=model_spec.window_size,
        stride=model_spec.stride,
        fp_slice_size=model_spec.fp_slice_size,
        fp2_slice_size=model_spec.fp2_slice_size,
        learning_rate=train_spec.learning_rate,
        epochs=train_spec.epochs,
        early_stopping_patience=train_spec.early_stopping_patience,
        train_samples=len(data["train"]),
        val_samples=len(data["val"]),
        test_samples=len(data["test"]),
        test_classes=len(np.unique(labels)),
        epochs_run=state["epoch"],
        best_epoch=state["best_epoch"],
        stopped_early=state["stopped_early"],
        resumed_from_epoch=resumed_from,
        test_loss=test_loss,
        best_val_loss=state["best_val_loss"],
        epoch_s_per_epoch=json.dumps(state["epoch_s"]),
        train_loss_per_epoch=json.dumps(state["train_loss"]),
        val_loss_per_epoch=json.dumps(state["val_loss"]),
        malloc_keeps_freed=malloc_keeps_freed,
        wall_s=time.perf_counter() - start,
    )
    return write_job_outputs(outdir, record, meter.memlog())


def _resume(path: Path, identity: dict, model, optimizer) -> dict:
    state = resume_checkpoint(path, identity)
    if state is None:
        return {
            "epoch": 0,
            "stopped_early": False,
            "best_epoch": 0,
            "best_val_loss": float("inf"),
            "epochs_without_improvement": 0,
            "best_model": _copy_state(model),
            "train_loss": [],
            "val_loss": [],
            "epoch_s": [],
            "epoch_load_1m_max": [],
            "epoch_timing_setting": [],
            "epoch_timing_process": [],
        }
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    log.info("resuming after epoch %d from %s", state["epoch"], path)
    return state


def _record_epoch(state, model, optimizer, epoch, train_loss, val_loss, timer: Timer, patience) -> None:
    """Count ``epoch``, timed by ``timer``'s last sample, into ``state``."""
    state["epoch"] = epoch
    state["train_loss"].append(train_loss)
    state["val_loss"].append(val_loss)
    state["epoch_s"].append(timer.samples_s[-1])
    state["epoch_load_1m_max"].append(timer.last_load_1m)
    state["epoch_timing_setting"].append(timer.setting)
    state["epoch_timing_process"].append(timer.process)
    if val_loss < state["best_val_loss"]:
        state.update(
            best_val_loss=val_loss,
            best_epoch=epoch,
            epochs_without_improvement=0,
            best_model=_copy_state(model),
        )
    else:
        state["epochs_without_improvement"] += 1
    state["stopped_early"] = state["epochs_without_improvement"] >= patience
    state["model"] = model.state_dict()
    state["optimizer"] = optimizer.state_dict()


def _copy_state(model) -> dict[str, torch.Tensor]:
    return {key: value.detach().clone() for key, value in model.state_dict().items()}
