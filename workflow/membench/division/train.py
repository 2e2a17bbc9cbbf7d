"""Accuracy runs: SGD with momentum and a cosine schedule, checkpointed every epoch so a killed
run resumes where it stopped, with the same data order and rounding noise."""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from membench.core.checkpoint import resume_checkpoint, save_checkpoint
from membench.core.distributed import SINGLE_PROCESS, Ranks, data_parallel, per_process_batch
from membench.core.meter import Meter
from membench.core.seeding import seeded
from membench.core.timing import Timer
from membench.division.bench import make_optimizer, training_step
from membench.division.functions import CompressionContext
from membench.division.precision import Precision

__all__ = ["checkpoint_file", "evaluate", "train_model", "TrainSpec"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainSpec:
    """Hyper-parameters of an accuracy run (learning rate follows a per-step cosine to 0)."""

    epochs: int = 8
    batch_size: int = 64
    learning_rate: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 5e-4
    num_workers: int = 0
    seed: int = 0
    amp: str = "none"


def _loader(
    dataset: Dataset, spec: TrainSpec, shuffle: bool, epoch: int, ranks: Ranks = SINGLE_PROCESS
) -> DataLoader:
    if shuffle and ranks.world_size > 1:
        # Each process takes its own 1/world_size of the epoch, in one seeded order for all.
        sampler = DistributedSampler(
            dataset,
            num_replicas=ranks.world_size,
            rank=ranks.rank,
            shuffle=True,
            seed=spec.seed,
            drop_last=True,
        )
        sampler.set_epoch(epoch)
        return DataLoader(
            dataset,
            batch_size=per_process_batch(spec.batch_size, ranks),
            sampler=sampler,
            drop_last=True,
            num_workers=spec.num_workers,
            persistent_workers=False,
        )
    generator = torch.Generator().manual_seed(spec.seed * 100003 + epoch)
    return DataLoader(
        dataset,
        batch_size=spec.batch_size,
        shuffle=shuffle,
        drop_last=shuffle,
        num_workers=spec.num_workers,
        generator=generator,
        persistent_workers=False,
    )


@torch.no_grad()
def evaluate(model: nn.Module, loader: DataLoader, device: torch.device) -> tuple[float, float]:
    """``(accuracy as a fraction, mean cross-entropy)`` of ``model`` in eval mode over ``loader``."""
    model.eval()
    correct, total, loss_sum = 0, 0, 0.0
    for inputs, targets in loader:
        inputs, targets = inputs.to(device), targets.to(device)
        logits = model(inputs)
        loss_sum += float(nn.functional.cross_entropy(logits, targets, reduction="sum"))
        correct += int((logits.argmax(1) == targets).sum())
        total += targets.numel()
    return correct / max(total, 1), loss_sum / max(total, 1)


@dataclass
class _Run:
    """What an accuracy run steps, and its checkpoint holds."""

    model: nn.Module
    context: CompressionContext | None
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    precision: Precision
    trained: nn.Module  # the model as the steps call it: data-parallel under torchrun


def train_model(
    model: nn.Module,
    context: CompressionContext | None,
    train_set: Dataset,
    val_set: Dataset,
    spec: TrainSpec,
    device: torch.device,
    meter: Meter,
    checkpoint_path: str | os.PathLike,
    identity: dict,
    ranks: Ranks = SINGLE_PROCESS,
) -> list[dict[str, float | str]]:
    """Train for ``spec.epochs`` epochs, evaluating after each; return the per-epoch history
    (``epoch``, ``learning_rate``, ``train_loss``, ``val_accuracy``, ``val_loss``, ``epoch_s``: the training
    epoch's wall time, ``load_1m_max``: the 1-minute load average around it, ``timing_setting`` and
    ``timing_process``: where it was timed, see :mod:`membench.core.timing`).

    Training steps run in meter phase ``train`` (saved activations counted), evaluation in ``eval``.
    The checkpoint at ``checkpoint_path`` is resumed from when present and written by a run of the
    same ``identity`` (:func:`membench.core.checkpoint.run_identity`: options, input data and
    code); a checkpoint of another run is ignored and overwritten. It is rewritten every epoch.

    Under ``torchrun`` (``ranks.world_size`` > 1) the model is trained data-parallel: each process
    takes ``batch_size / world_size`` images of every global batch and gradients are averaged;
    every process evaluates, and only the main process writes the checkpoint.
    """
    # Data augmentation draws from the global generator: the whole run is seeded, so that its data
    # and rounding noise repeat, and the caller's random state is left as it was.
    with seeded(spec.seed, device):
        run = _start(model, context, train_set, spec, device, ranks)
        history = _resume(run, checkpoint_path, identity, device)
        val_loader = _loader(val_set, spec, shuffle=False, epoch=0)
        timer = Timer("epoch", device=device)
        for epoch in range(len(history), spec.epochs):
            history.append(_train_epoch(run, train_set, val_loader, spec, epoch, device, meter, timer, ranks))
            _log.info("epoch %d/%d: %s", epoch + 1, spec.epochs, history[-1])
            if ranks.is_main:
                save_checkpoint(
                    checkpoint_path,
                    _checkpoint_state(run, history),
                    identity,
                    finished=len(history) == spec.epochs,
                )
    return history


def _start(
    model: nn.Module,
    context: CompressionContext | None,
    train_set: Dataset,
    spec: TrainSpec,
    device: torch.device,
    ranks: Ranks,
) -> _Run:
    """A fresh run: the optimiser with its per-step cosine schedule, the precision, the data-parallel
    model."""
    optimizer = make_optimizer(model, spec.learning_rate, spec.momentum, spec.weight_decay)
    precision = Precision(spec.amp, device)
    trained = data_parallel(model, ranks, device)
    steps_per_epoch = len(_loader(train_set, spec, shuffle=True, epoch=0, ranks=ranks))
    if steps_per_epoch == 0:
        raise ValueError(f"batch size {spec.batch_size} exceeds the {len(train_set)} training images")
    steps = spec.epochs * steps_per_epoch
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: 0.5 * (1 + math.cos(math.pi * min(step, steps) / steps))
    )
    return _Run(model, context, optimizer, scheduler, precision, trained)


def _resume(
    run: _Run, checkpoint_path: str | os.PathLike, identity: dict, device: torch.device
) -> list[dict[str, float]]:
    """Load the checkpoint of a run of the same ``identity`` into ``run`` and torch's generator; return
    the history of its epochs (empty when there is none to resume)."""
    state = resume_checkpoint(checkpoint_path, identity, map_location=device)
    if state is None:
        return []
    run.model.load_state_dict(state["model"])
    run.optimizer.load_state_dict(state["optimizer"])
    run.scheduler.load_state_dict(state["scheduler"])
    if run.context is not None:
        run.context.load_state_dict(state["compression"])
    if run.precision.scaler is not None and state.get("grad_scaler"):
        run.precision.scaler.load_state_dict(state["grad_scaler"])
    torch.set_rng_state(state["torch_rng"])
    _log.info("resumed from %s at epoch %d", checkpoint_path, int(state["epoch"]))
    return [
        {**dict(zip(state["history_columns"], row)), **dict(zip(state["history_text_columns"], text))}
        for row, text in zip(state["history"].tolist(), state["history_text"])
    ]


def _train_epoch(
    run: _Run,
    train_set: Dataset,
    val_loader: DataLoader,
    spec: TrainSpec,
    epoch: int,
    device: torch.device,
    meter: Meter,
    timer: Timer,
    ranks: Ranks,
) -> dict[str, float]:
    """Train epoch ``epoch`` (from 0; meter phase ``train``, a sample of ``timer``), then evaluate
    (phase ``eval``); return the epoch's history row."""
    run.model.train()
    learning_rate = run.optimizer.param_groups[0]["lr"]
    loss_sum, steps = 0.0, 0
    with timer.sample(), meter.phase("train"):
        for inputs, targets in meter.batches(
            _loader(train_set, spec, shuffle=True, epoch=epoch, ranks=ranks)
        ):
            loss_sum += training_step(
                run.trained, run.optimizer, inputs.to(device), targets.to(device), meter, run.precision
            )
            run.scheduler.step()
            steps += 1
    with meter.phase("eval"):
        val_accuracy, val_loss = evaluate(run.model, val_loader, device)
    return {
        "epoch": epoch + 1,
        "learning_rate": learning_rate,
        "train_loss": loss_sum / max(steps, 1),
        "val_accuracy": val_accuracy,
        "val_loss": val_loss,
        "epoch_s": timer.samples_s[-1],
        "load_1m_max": timer.last_load_1m,
        "timing_setting": timer.setting,
        "timing_process": timer.process,
    }


def _checkpoint_state(run: _Run, history: list[dict[str, float]]) -> dict:
    """What the checkpoint after the last epoch of ``history`` holds: the run, torch's generator
    (the next epoch's augmentation) and the history."""
    columns = [c for c in history[0] if not isinstance(history[0][c], str)]
    text_columns = [c for c in history[0] if isinstance(history[0][c], str)]
    return {
        "model": run.model.state_dict(),
        "optimizer": run.optimizer.state_dict(),
        "scheduler": run.scheduler.state_dict(),
        "compression": {} if run.context is None else run.context.state_dict(),
        "grad_scaler": {} if run.precision.scaler is None else run.precision.scaler.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "epoch": len(history),
        "history_columns": columns,
        "history": torch.tensor([[row[c] for c in columns] for row in history], dtype=torch.float64),
        "history_text_columns": text_columns,
        "history_text": [[row[c] for c in text_columns] for row in history],
    }


def checkpoint_file(outdir: str | os.PathLike) -> Path:
    """Where an accuracy run in ``outdir`` keeps its checkpoint."""
    return Path(outdir) / "checkpoint.pt"
