"""Parallel adversary generation: each batch exactly once, staleness bounded, a dying producer
ends the run with a clear error and leaves no process behind."""

import os
import signal
import time

import pytest
import torch

from membench.core.checkpoint import run_identity
from membench.robust.models import build_model
from membench.robust.parallel import ModelSpec, ParallelSource, ProducerFailed
from membench.robust.train import TrainSettings, epoch_batches, train

pytestmark = pytest.mark.slow

SETTINGS = TrainSettings(
    attack="pgd",
    eps=0.1,
    steps=2,
    alpha=0.05,
    epochs=2,
    batch_size=16,
    learning_rate=0.01,
    guard_steps=2,
    guard_samples=32,
    max_staleness=3,
)
SPEC = ModelSpec("mlp", (1, 8, 8), 10, 16)


def _gone(pid: int, timeout_s: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as handle:
                if handle.read().split(")")[-1].split()[0] in ("Z", "X"):
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.1)
    return False


def _source(digits, settings=SETTINGS, producers=2, publish_every=2, timeout_s=60.0):
    return ParallelSource(
        SPEC,
        digits.x_train[:160],
        digits.y_train[:160],
        settings,
        producers,
        publish_every,
        queue_size=2,
        timeout_s=timeout_s,
    )


def test_every_batch_once_per_epoch_and_staleness_within_bound(digits, tmp_path):
    x, y = digits.x_train[:160], digits.y_train[:160]
    model = build_model(SPEC.name, SPEC.input_shape, SPEC.num_classes, SPEC.hidden_units, seed=0)
    with _source(digits) as source:
        pids = [p.pid for p in source.processes]
        result = train(
            model, x, y, SETTINGS, source, tmp_path / "ckpt.pt", torch.device("cpu"), run_identity({})
        )
        batches = epoch_batches(160, 16, SETTINGS.seed, 5)
        arrived = [(item.batch, item.producer) for item in source.epoch(5, batches, model)]
    assert sorted(b for b, _ in arrived) == list(range(10))
    assert all(producer == batch % 2 for batch, producer in arrived)
    assert len(result.staleness) == 2 * 10 and max(result.staleness) <= SETTINGS.max_staleness
    assert all(_gone(pid) for pid in pids)


def test_a_failing_producer_ends_the_run_with_its_error(digits, tmp_path):
    broken = TrainSettings(**{**SETTINGS.__dict__, "attack": "no-such-attack"})
    model = build_model(SPEC.name, SPEC.input_shape, SPEC.num_classes, SPEC.hidden_units, seed=0)
    with pytest.raises(
        ProducerFailed, match=r"producer \d \(pid \d+\) died with exit code 1: .*unknown attack"
    ):
        with _source(digits, broken) as source:
            pids = [p.pid for p in source.processes]
            train(
                model,
                digits.x_train[:160],
                digits.y_train[:160],
                broken,
                source,
                tmp_path / "c.pt",
                torch.device("cpu"),
                run_identity({}),
            )
    assert all(_gone(pid) for pid in pids)


def test_a_killed_producer_ends_the_run_cleanly(digits, tmp_path):
    model = build_model(SPEC.name, SPEC.input_shape, SPEC.num_classes, SPEC.hidden_units, seed=0)
    with pytest.raises(ProducerFailed, match=r"producer 1 \(pid \d+\) died with exit code -9"):
        with _source(digits) as source:
            pids = [p.pid for p in source.processes]
            os.kill(pids[1], signal.SIGKILL)
            train(
                model,
                digits.x_train[:160],
                digits.y_train[:160],
                SETTINGS,
                source,
                tmp_path / "k.pt",
                torch.device("cpu"),
                run_identity({}),
            )
    assert all(_gone(pid) for pid in pids)


def test_a_silent_producer_times_out(digits):
    """No batch within timeout_s is an error, not a hang (the epoch is never opened for them)."""
    model = build_model(SPEC.name, SPEC.input_shape, SPEC.num_classes, SPEC.hidden_units, seed=0)
    with _source(digits, timeout_s=1.0) as source:
        pids = [p.pid for p in source.processes]
        for process in source.processes:
            os.kill(process.pid, signal.SIGSTOP)
        try:
            with pytest.raises(ProducerFailed, match="no attacked batch from any producer within 1 s"):
                next(iter(source.epoch(0, epoch_batches(160, 16, 0, 0), model)))
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
    assert all(_gone(pid) for pid in pids)
