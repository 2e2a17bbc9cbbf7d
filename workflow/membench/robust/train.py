"""Adversarial training: the epoch loop shared by the sequential and the parallel trainers.

The loop draws adversarial batches from a *batch source* (sequential: the trainer attacks each
batch itself on its current weights; parallel: producer processes attack on possibly stale weights,
see :mod:`membench.robust.parallel`), takes one optimiser step per batch, records per-batch
staleness (trainer step minus the weight version the batch was made with), runs the
catastrophic-overfitting guard at the end of every epoch and checkpoints, so a killed run resumes
at the last finished epoch with the same result.
"""

from __future__ import annotations

import copy
import math
import os
import sys
from dataclasses import dataclass, field
from typing import Iterator, Protocol

import torch
from torch import nn
from torch.nn import functional as F
from tqdm import tqdm

from membench.core.checkpoint import resume_checkpoint, save_checkpoint
from membench.core.timing import Timer
from membench.robust.attacks import attack, evaluate

__all__ = [
    "AdversarialBatch",
    "batch_generator",
    "BatchSource",
    "epoch_batches",
    "make_optimizer",
    "SequentialSource",
    "train",
    "TrainResult",
    "TrainSettings",
]


@dataclass(frozen=True)
class TrainSettings:
    """What a training run does; stored in its checkpoint so a resume must match it.

    ``alpha`` is the training attack's step size, ``steps`` its number of steps (1 for FGSM-RS).
    The guard attacks the first ``guard_samples`` training samples with PGD-``guard_steps`` after
    every epoch; a fall of its robust accuracy below ``(1 - guard_drop)`` times the best so far (the
    cliff of catastrophic overfitting, not the noise of early epochs) restores the last good weights
    and then shrinks ``alpha`` by ``guard_shrink`` or stops.
    ``max_staleness`` (parallel runs) bounds trainer step minus weight version: an older batch is
    attacked again by the trainer on current weights.
    """

    attack: str
    eps: float
    steps: int
    alpha: float
    epochs: int
    batch_size: int
    learning_rate: float
    optimizer: str = "adam"
    learning_rate_schedule: str = "cyclic"
    momentum: float = 0.9
    weight_decay: float = 0.0
    seed: int = 0
    guard_steps: int = 10
    guard_samples: int = 256
    guard_drop: float = 0.5
    guard_action: str = "shrink"
    guard_shrink: float = 0.5
    max_staleness: int | None = None


@dataclass
class AdversarialBatch:
    """One attacked batch: its index in the epoch, images, labels, and the weight version used
    (``None``: made on the trainer's current weights)."""

    batch: int
    x_adv: torch.Tensor
    y: torch.Tensor
    version: int | None = None
    producer: int = -1


class BatchSource(Protocol):
    def start(self, model: nn.Module, step: int, alpha: float) -> None: ...

    def epoch(
        self, epoch: int, batches: list[torch.Tensor], model: nn.Module
    ) -> Iterator[AdversarialBatch]: ...

    def after_step(self, model: nn.Module, step: int, alpha: float, force: bool = False) -> None: ...


@dataclass
class TrainResult:
    """What the loop did: one row per epoch, one staleness value per trained batch."""

    history: list[dict] = field(default_factory=list)
    staleness: list[int] = field(default_factory=list)
    train_wall_s: float = 0.0
    trained_samples: int = 0
    regenerated_batches: int = 0
    guard_events: int = 0
    guard_stopped: bool = False
    alpha: float = 0.0
    epochs_done: int = 0
    resumed_from_epoch: int = 0


def epoch_batches(num_samples: int, batch_size: int, seed: int, epoch: int) -> list[torch.Tensor]:
    """Sample indices of each batch of ``epoch``: a seeded permutation cut into batches."""
    generator = torch.Generator().manual_seed(seed * 7919 + epoch)
    return list(torch.randperm(num_samples, generator=generator).split(batch_size))


def batch_generator(seed: int, epoch: int, batch: int) -> torch.Generator:
    """The random stream of one batch's attack, the same whichever process attacks it."""
    return torch.Generator().manual_seed(seed * 1_000_003 + epoch * 10_007 + batch)


class SequentialSource:
    """The trainer attacks each batch itself, on its current weights (staleness 0)."""

    def __init__(
        self, x: torch.Tensor, y: torch.Tensor, settings: TrainSettings, device: torch.device
    ) -> None:
        self.x, self.y, self.settings, self.device = x, y, settings, device
        self.alpha = settings.alpha

    def start(self, model: nn.Module, step: int, alpha: float) -> None:
        self.alpha = alpha

    def epoch(self, epoch: int, batches: list[torch.Tensor], model: nn.Module) -> Iterator[AdversarialBatch]:
        s = self.settings
        for b, idx in enumerate(batches):
            x, y = self.x[idx].to(self.device), self.y[idx].to(self.device)
            x_adv = attack(
                s.attack, model, x, y, s.eps, self.alpha, s.steps, batch_generator(s.seed, epoch, b)
            )
            yield AdversarialBatch(b, x_adv, y)

    def after_step(self, model: nn.Module, step: int, alpha: float, force: bool = False) -> None:
        self.alpha = alpha


def make_optimizer(model: nn.Module, settings: TrainSettings, steps_per_epoch: int):
    """Optimiser and per-step learning-rate schedule (``cyclic``: linear 0 -> learning_rate over the first 2/5
    of the steps, then back to 0, as Wong et al.)."""
    if settings.optimizer == "adam":
        optimizer = torch.optim.Adam(
            model.parameters(), lr=settings.learning_rate, weight_decay=settings.weight_decay
        )
    else:
        optimizer = torch.optim.SGD(
            model.parameters(),
            lr=settings.learning_rate,
            momentum=settings.momentum,
            weight_decay=settings.weight_decay,
        )
    total = max(1, settings.epochs * steps_per_epoch)
    peak = 0.4 * total

    def factor(step: int) -> float:
        if settings.learning_rate_schedule == "constant":
            return 1.0
        return step / peak if step < peak else max(0.0, (total - step) / (total - peak))

    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def train(
    model: nn.Module,
    x_train: torch.Tensor,
    y_train: torch.Tensor,
    settings: TrainSettings,
    source: BatchSource,
    checkpoint_path: str | os.PathLike,
    device: torch.device,
    identity: dict,
) -> TrainResult:
    """Train ``model`` adversarially for ``settings.epochs`` epochs on batches from ``source``.

    Resumes from ``checkpoint_path`` when it holds a finished epoch of a run of the same ``identity``
    (:func:`membench.core.checkpoint.run_identity`: settings, data and code); writes it after every
    epoch. Every batch of an epoch is trained on exactly once (checked).
    """
    run = _start(model, settings, len(x_train))
    _resume(run, checkpoint_path, identity)
    x_guard, y_guard = x_train[: settings.guard_samples], y_train[: settings.guard_samples]
    model.train()
    source.start(model, run.step, run.result.alpha)
    epochs = range(run.result.epochs_done, 0 if run.result.guard_stopped else settings.epochs)
    timer = Timer("epoch", device=device)
    for epoch in tqdm(epochs, desc="epochs", file=sys.stderr, disable=None):
        with timer.sample():
            figures = _train_epoch(run, x_train, settings, source, epoch, device)
        # The guard's attack and its decision are not training time.
        event, guard_accuracy = _guard(run, x_guard.to(device), y_guard.to(device), settings, source, epoch)
        _record_epoch(run.result, epoch, figures, len(x_train), timer, guard_accuracy, event)
        finished = run.result.guard_stopped or run.result.epochs_done >= settings.epochs
        save_checkpoint(checkpoint_path, _checkpoint_state(run), identity, finished=finished)
        if run.result.guard_stopped:
            break
    return run.result


@dataclass
class _Run:
    """What the loop updates, and its checkpoint holds: the model, its optimiser and schedule, the
    result so far, the optimiser steps taken, and the guard's best accuracy and last good state."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    result: TrainResult
    good_state: dict
    step: int = 0
    guard_best: float = -1.0


@dataclass
class _EpochFigures:
    """One epoch's training: summed loss and correct predictions over its samples, each batch's staleness."""

    loss_sum: float = 0.0
    correct: float = 0.0
    staleness: list[int] = field(default_factory=list)


def _snapshot(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """Copies of the weights and the optimiser state: what the guard restores."""
    return {"model": copy.deepcopy(model.state_dict()), "optimizer": copy.deepcopy(optimizer.state_dict())}


def _start(model: nn.Module, settings: TrainSettings, samples: int) -> _Run:
    optimizer, scheduler = make_optimizer(model, settings, math.ceil(samples / settings.batch_size))
    return _Run(model, optimizer, scheduler, TrainResult(alpha=settings.alpha), _snapshot(model, optimizer))


def _resume(run: _Run, checkpoint_path: str | os.PathLike, identity: dict) -> None:
    """Load the checkpoint of a run of the same ``identity`` into ``run``, if there is one."""
    state = resume_checkpoint(checkpoint_path, identity)
    if state is None:
        return
    run.model.load_state_dict(state["model"])
    run.optimizer.load_state_dict(state["optimizer"])
    run.scheduler.load_state_dict(state["scheduler"])
    run.good_state = {"model": state["good_model"], "optimizer": state["good_optimizer"]}
    run.step, run.guard_best = state["step"], state["guard_best"]
    run.result = TrainResult(
        history=state["history"],
        staleness=state["staleness"].tolist(),
        train_wall_s=state["train_wall_s"],
        trained_samples=state["trained_samples"],
        regenerated_batches=state["regenerated_batches"],
        guard_events=state["guard_events"],
        guard_stopped=state["guard_stopped"],
        alpha=state["alpha"],
        epochs_done=state["epochs_done"],
        resumed_from_epoch=state["epochs_done"],
    )


def _train_epoch(
    run: _Run, x_train: torch.Tensor, s: TrainSettings, source: BatchSource, epoch: int, device: torch.device
) -> _EpochFigures:
    """One optimiser step on each batch of ``epoch``, in the order ``source`` delivers them; a batch
    staler than ``max_staleness`` is attacked again on the current weights."""
    batches = epoch_batches(len(x_train), s.batch_size, s.seed, epoch)
    seen = [False] * len(batches)
    figures = _EpochFigures()
    for item in source.epoch(epoch, batches, run.model):
        if seen[item.batch]:
            raise RuntimeError(f"epoch {epoch}: batch {item.batch} arrived twice")
        seen[item.batch] = True
        staleness = 0 if item.version is None else run.step - item.version
        x_adv, y = item.x_adv.to(device), item.y.to(device)
        if s.max_staleness is not None and staleness > s.max_staleness:
            x_adv = attack(
                s.attack,
                run.model,
                x_train[batches[item.batch]].to(device),
                y,
                s.eps,
                run.result.alpha,
                s.steps,
                batch_generator(s.seed, epoch, item.batch),
            )
            run.result.regenerated_batches += 1
            staleness = 0
        figures.staleness.append(staleness)
        loss, correct = _step(run, x_adv, y)
        figures.loss_sum += loss * len(y)
        figures.correct += correct
        source.after_step(run.model, run.step, run.result.alpha)
    if not all(seen):
        raise RuntimeError(
            f"epoch {epoch}: batches {[b for b, s_ in enumerate(seen) if not s_]} never arrived"
        )
    return figures


def _step(run: _Run, x_adv: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """One optimiser step on an attacked batch; its mean loss and how many it classified correctly."""
    logits = run.model(x_adv)
    loss = F.cross_entropy(logits, y)
    run.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    run.optimizer.step()
    run.scheduler.step()
    run.step += 1
    return loss.item(), float((logits.argmax(1) == y).sum())


def _guard(
    run: _Run, x_guard: torch.Tensor, y_guard: torch.Tensor, s: TrainSettings, source: BatchSource, epoch: int
) -> tuple[str, float]:
    """The catastrophic-overfitting guard after ``epoch``: ``(event, robust accuracy)``. A cliff restores
    the last good state and shrinks alpha or stops (the event names which); otherwise this state is good."""
    _, accuracy = evaluate(run.model, x_guard, y_guard, s.eps, s.guard_steps, 1, seed=s.seed + epoch)
    if accuracy < (1 - s.guard_drop) * run.guard_best:
        run.result.guard_events += 1
        run.model.load_state_dict(run.good_state["model"])
        run.optimizer.load_state_dict(run.good_state["optimizer"])
        if s.guard_action == "shrink":
            run.result.alpha *= s.guard_shrink
        else:
            run.result.guard_stopped = True
        source.after_step(run.model, run.step, run.result.alpha, force=True)
        return s.guard_action, accuracy
    run.guard_best = max(run.guard_best, accuracy)
    run.good_state = _snapshot(run.model, run.optimizer)
    return "", accuracy


def _record_epoch(
    result: TrainResult,
    epoch: int,
    figures: _EpochFigures,
    samples: int,
    timer: Timer,
    guard_accuracy: float,
    event: str,
) -> None:
    """Count ``epoch`` (from 0; ``samples`` trained, timed by ``timer``'s last sample) into ``result``
    and add its history row."""
    epoch_wall_s = timer.samples_s[-1]
    result.train_wall_s += epoch_wall_s
    result.trained_samples += samples
    result.staleness.extend(figures.staleness)
    result.epochs_done = epoch + 1
    result.history.append(
        {
            "epoch": epoch + 1,
            "train_loss": figures.loss_sum / samples,
            "train_adv_accuracy": figures.correct / samples,
            "guard_robust_accuracy": guard_accuracy,
            "guard_event": event,
            "alpha": result.alpha,
            "epoch_wall_s": epoch_wall_s,
            "load_1m_max": timer.last_load_1m,
            "timing_setting": timer.setting,
            "timing_process": timer.process,
            "staleness_mean": sum(figures.staleness) / len(figures.staleness),
            "staleness_max": max(figures.staleness),
        }
    )


def _checkpoint_state(run: _Run) -> dict:
    """What the checkpoint after an epoch holds: everything :func:`_resume` reads back."""
    result = run.result
    return {
        "model": run.model.state_dict(),
        "optimizer": run.optimizer.state_dict(),
        "scheduler": run.scheduler.state_dict(),
        "good_model": run.good_state["model"],
        "good_optimizer": run.good_state["optimizer"],
        "step": run.step,
        "guard_best": run.guard_best,
        "history": result.history,
        "staleness": torch.tensor(result.staleness, dtype=torch.int64),
        "train_wall_s": result.train_wall_s,
        "trained_samples": result.trained_samples,
        "regenerated_batches": result.regenerated_batches,
        "guard_events": result.guard_events,
        "guard_stopped": result.guard_stopped,
        "alpha": result.alpha,
        "epochs_done": result.epochs_done,
    }
