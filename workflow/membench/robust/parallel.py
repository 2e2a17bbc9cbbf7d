"""Parallel adversary generation on one node: P producer processes, one trainer (the shared-memory
transport; :mod:`membench.robust.distributed` carries the same protocol over torch.distributed).

Each producer holds its own copy of the model and attacks its share of every epoch's batches
(batch ``b`` goes to producer ``b mod P``) on the newest weights the trainer has published; the
trainer consumes the attacked batches in arrival order and publishes its weights every ``k`` steps.
A batch made with weight version ``v`` and trained at step ``t`` has staleness ``t - v``.

Transport (torch.multiprocessing, ``spawn``): the published weights are one flat float32 tensor in
shared memory with a version number, guarded by a lock; attacked batches travel through a bounded
queue (``queue_size``), so producers run at most that far ahead. They travel as NumPy arrays, pickled
through the queue's pipe, not as shared-memory tensors: passing a tensor's file descriptor needs the
producer to serve it while the trainer unpickles, and a trainer stopped by a signal mid-transfer left
the producer printing a broken-pipe traceback. The trainer opens each epoch by writing its batch order
to shared memory; producers wait for it.

Shutdown: every wait has a timeout. The trainer checks its producers while it waits and ends the
run with :class:`ProducerFailed` (naming the producer, its exit code and its error) when one dies;
on any exit it stops them, waits ``join_timeout_s`` and then terminates and kills what is left.
Producers ask the kernel to end them when the trainer process dies (``PR_SET_PDEATHSIG``), and also
leave on their own when their parent changes, so a trainer killed with SIGKILL leaves no orphan.
"""

from __future__ import annotations

import ctypes
import os
import queue as queue_module
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Iterator

import torch
import torch.multiprocessing as mp
from torch import nn

from membench.robust.attacks import attack
from membench.robust.models import build_model
from membench.robust.train import AdversarialBatch, TrainSettings, batch_generator

__all__ = ["flatten_weights", "load_flat_weights", "ModelSpec", "ParallelSource", "ProducerFailed"]

_CLOSED = -2
_POLL_S = 0.002
_PR_SET_PDEATHSIG = 1


class ProducerFailed(RuntimeError):
    """A producer died or stopped answering; the run ended."""


@dataclass(frozen=True)
class ModelSpec:
    """What a producer needs to build its own copy of the model."""

    name: str
    input_shape: tuple[int, ...]
    num_classes: int
    hidden_units: int


def _float_state(model: nn.Module) -> list[torch.Tensor]:
    """The floating-point tensors of the model's state (parameters and BatchNorm statistics)."""
    return [t for t in model.state_dict().values() if t.is_floating_point()]


def flatten_weights(model: nn.Module) -> torch.Tensor:
    return torch.cat([t.detach().reshape(-1).float().cpu() for t in _float_state(model)])


@torch.no_grad()
def load_flat_weights(model: nn.Module, flat: torch.Tensor) -> None:
    offset = 0
    for t in _float_state(model):
        t.copy_(flat[offset : offset + t.numel()].view_as(t))
        offset += t.numel()


def _die_with_parent() -> None:
    """Ask Linux to send SIGTERM when the trainer dies (best effort elsewhere)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


class _Abandoned(Exception):
    """The trainer is gone or asked us to stop."""


def _wait(condition, stop, parent_pid: int, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value is not None:
            return value
        if stop.is_set() or os.getppid() != parent_pid:
            raise _Abandoned()
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} from the trainer within {timeout_s:g} s")
        time.sleep(_POLL_S)


def _producer_main(
    rank: int,
    producers: int,
    spec: ModelSpec,
    settings: TrainSettings,
    device: str,
    threads: int,
    x_train: torch.Tensor,
    y_train: torch.Tensor,
    shared: dict,
    batches_queue,
    errors,
    stop,
    parent_pid: int,
    timeout_s: float,
) -> None:
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the trainer handles Ctrl-C and stops us
    try:
        torch.set_num_threads(threads)  # this process's own entry point: its threads are its own to set
        model = build_model(
            spec.name, spec.input_shape, spec.num_classes, spec.hidden_units, settings.seed
        ).to(device)
        model.train()
        with shared["lock"]:
            shared["ready"].value += 1
        version, last_epoch = -1, -1  # epochs count from 0; -1 means none opened yet
        while True:
            epoch = _wait(
                lambda: e if (e := shared["epoch"].value) != last_epoch else None,
                stop,
                parent_pid,
                timeout_s,
                "next epoch",
            )
            if epoch == _CLOSED:
                return
            last_epoch = epoch
            batches = shared["order"].clone().split(settings.batch_size)
            for b in range(rank, len(batches), producers):
                with shared["lock"]:
                    if shared["version"].value != version:
                        load_flat_weights(model, shared["weights"])
                        version = shared["version"].value
                    alpha = shared["alpha"].value
                idx = batches[b]
                x, y = x_train[idx].to(device), y_train[idx].to(device)
                x_adv = attack(
                    settings.attack,
                    model,
                    x,
                    y,
                    settings.eps,
                    alpha,
                    settings.steps,
                    batch_generator(settings.seed, epoch, b),
                ).cpu()
                item = (epoch, b, rank, version, x_adv.numpy())

                def put():
                    try:
                        batches_queue.put(item, timeout=0.1)
                        return True
                    except queue_module.Full:
                        return None

                _wait(put, stop, parent_pid, timeout_s, "room in the batch queue")
    except _Abandoned:
        batches_queue.cancel_join_thread()
    except BaseException:
        errors.put((rank, traceback.format_exc()))
        batches_queue.cancel_join_thread()
        sys.exit(1)


class ParallelSource:
    """Batch source of :func:`membench.robust.train.train` backed by ``producers`` processes.

    Use as a context manager: entering starts the producers, leaving stops them (always).
    ``publish_every`` is k; ``queue_size`` bounds the attacked batches waiting for the trainer;
    ``timeout_s`` bounds every wait for a batch (trainer), an epoch or queue room (producers);
    ``startup_timeout_s`` bounds the producers' start (a spawned process imports torch afresh).
    """

    def __init__(
        self,
        spec: ModelSpec,
        x_train: torch.Tensor,
        y_train: torch.Tensor,
        settings: TrainSettings,
        producers: int,
        publish_every: int,
        queue_size: int,
        timeout_s: float,
        device: str = "cpu",
        threads_per_producer: int = 1,
        join_timeout_s: float = 10.0,
        startup_timeout_s: float = 600.0,
    ) -> None:
        self.spec, self.settings = spec, settings
        self.x_train, self.y_train = x_train, y_train
        self.producers, self.publish_every, self.queue_size = producers, publish_every, queue_size
        self.timeout_s, self.join_timeout_s, self.startup_timeout_s = (
            timeout_s,
            join_timeout_s,
            startup_timeout_s,
        )
        self.device, self.threads_per_producer = device, threads_per_producer
        self.wait_s = 0.0
        self.startup_s = 0.0
        self.processes: list = []
        self._context = mp.get_context("spawn")

    # -- lifecycle -----------------------------------------------------------------------------
    def __enter__(self) -> "ParallelSource":
        start = time.perf_counter()
        ctx = self._context
        model = build_model(
            self.spec.name,
            self.spec.input_shape,
            self.spec.num_classes,
            self.spec.hidden_units,
            self.settings.seed,
        )
        self.shared = {
            "weights": flatten_weights(model).share_memory_(),
            "version": ctx.Value("q", -1, lock=False),
            "alpha": ctx.Value("d", self.settings.alpha, lock=False),
            "epoch": ctx.Value("q", -1, lock=False),
            "order": torch.zeros(len(self.x_train), dtype=torch.int64).share_memory_(),
            "ready": ctx.Value("q", 0, lock=False),
            "lock": ctx.Lock(),
        }
        self.queue = ctx.Queue(maxsize=self.queue_size)
        self.errors = ctx.Queue()
        self.stop = ctx.Event()
        x_train, y_train = self.x_train.share_memory_(), self.y_train.share_memory_()
        try:
            for rank in range(self.producers):
                process = ctx.Process(
                    target=_producer_main,
                    name=f"membench-producer-{rank}",
                    daemon=True,
                    args=(
                        rank,
                        self.producers,
                        self.spec,
                        self.settings,
                        self.device,
                        self.threads_per_producer,
                        x_train,
                        y_train,
                        self.shared,
                        self.queue,
                        self.errors,
                        self.stop,
                        os.getpid(),
                        self.timeout_s,
                    ),
                )
                process.start()
                self.processes.append(process)
                print(f"producer {rank} pid {process.pid}", file=sys.stderr, flush=True)
            self._wait_until_ready()
        except BaseException:
            self.close()
            raise
        self.startup_s = time.perf_counter() - start
        return self

    def _wait_until_ready(self) -> None:
        """Wait until every producer has built its model, so start-up is not charged to training."""
        deadline = time.monotonic() + self.startup_timeout_s
        while self.shared["ready"].value < self.producers:
            self._check_producers()
            if time.monotonic() > deadline:
                raise ProducerFailed(f"producers not ready within {self.startup_timeout_s:g} s")
            time.sleep(0.01)

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Stop every producer: ask, wait ``join_timeout_s``, then terminate and kill."""
        self.stop.set()
        self.shared["epoch"].value = _CLOSED
        deadline = time.monotonic() + self.join_timeout_s
        for process in self.processes:
            while process.is_alive() and time.monotonic() < deadline:
                self._drain()
                process.join(timeout=0.05)
        for process in self.processes:
            if process.is_alive():
                process.terminate()
                process.join(timeout=2.0)
            if process.is_alive():
                process.kill()
                process.join(timeout=2.0)
        self.queue.cancel_join_thread()
        self.queue.close()
        self.errors.close()

    def _drain(self) -> None:
        try:
            while True:
                self.queue.get_nowait()
        except (queue_module.Empty, OSError, ValueError):
            pass

    # -- the batch-source protocol ---------------------------------------------------------------
    def start(self, model: nn.Module, step: int, alpha: float) -> None:
        self.after_step(model, step, alpha, force=True)

    def after_step(self, model: nn.Module, step: int, alpha: float, force: bool = False) -> None:
        """Publish the trainer's weights as version ``step`` when ``step`` is a multiple of k."""
        if force or step % self.publish_every == 0:
            flat = flatten_weights(model)
            with self.shared["lock"]:
                self.shared["weights"].copy_(flat)
                self.shared["version"].value = step
                self.shared["alpha"].value = alpha

    def epoch(self, epoch: int, batches: list[torch.Tensor], model: nn.Module) -> Iterator[AdversarialBatch]:
        self.shared["order"].copy_(torch.cat(batches))
        self.shared["epoch"].value = epoch
        for _ in range(len(batches)):
            got_epoch, b, rank, version, x_adv = self._next_batch()
            if got_epoch != epoch:
                raise RuntimeError(
                    f"producer {rank} sent batch {b} of epoch {got_epoch} during epoch {epoch}"
                )
            yield AdversarialBatch(b, torch.from_numpy(x_adv), self.y_train[batches[b]], version, rank)

    def _next_batch(self):
        start = time.perf_counter()
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                item = self.queue.get(timeout=0.05)
                self.wait_s += time.perf_counter() - start
                return item
            except queue_module.Empty:
                pass
            self._check_producers()
            if time.monotonic() > deadline:
                raise ProducerFailed(f"no attacked batch from any producer within {self.timeout_s:g} s")

    def _check_producers(self) -> None:
        for rank, process in enumerate(self.processes):
            if not process.is_alive():
                detail = ""
                try:
                    while True:
                        error_rank, text = self.errors.get(timeout=0.5)
                        if error_rank == rank:
                            detail = ": " + text.strip().splitlines()[-1]
                            break
                except queue_module.Empty:
                    pass
                raise ProducerFailed(
                    f"producer {rank} (pid {process.pid}) died with exit code {process.exitcode}{detail}"
                )
