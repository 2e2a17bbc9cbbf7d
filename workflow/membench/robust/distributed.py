"""Parallel adversary generation over torch.distributed: rank 0 trains, ranks 1..P produce.

The same protocol as :mod:`membench.robust.parallel` (batch ``b`` of an epoch goes to producer
``b mod P``, weights published every ``k`` steps as one flat float32 tensor with its version,
staleness bounded and every batch checked by :func:`membench.robust.train.train`), carried by
point-to-point messages of a process group (gloo on CPUs, NCCL on GPUs) instead of shared memory
and a queue, so the producers may sit on other nodes. One process per rank, started by ``torchrun``
on one node or by ``srun`` across nodes (:func:`membench.core.distributed.process_group`).

Messages, each a float64 header of four numbers then, for some, a payload:

- trainer -> producer: ``EPOCH`` (epoch, samples; payload: the epoch's sample order),
  ``WEIGHTS`` (version, alpha; payload: the flat weights), ``CREDIT`` (the trainer took one of the
  producer's batches), ``CLOSE``;
- producer -> trainer: a batch (epoch, batch index, producer, weight version; payload: the
  attacked inputs), or ``FAILED`` (payload: the producer's error text).

Credits bound the batches a producer has sent and the trainer not yet taken (``queue_size`` over
all producers, at least one each), as the queue does on one node. Every wait ends within
``timeout_s`` (the trainer's own deadline for the next batch, the group's timeout for the rest); a
producer whose connection breaks (its process died) or that reports an error ends the run with
:class:`ProducerFailed`; a producer whose trainer is gone ends with :class:`TrainerGone`.
"""

from __future__ import annotations

import queue as queue_module
import threading
import time
import traceback
from typing import Iterator

import torch
import torch.distributed as dist
from torch import nn

from membench.robust.attacks import attack
from membench.robust.models import build_model
from membench.robust.parallel import ModelSpec, ProducerFailed, flatten_weights, load_flat_weights
from membench.robust.train import AdversarialBatch, TrainSettings, batch_generator

__all__ = ["DistributedSource", "FAILED", "run_producer", "TRAINER", "TrainerGone"]

EPOCH, WEIGHTS, CREDIT, CLOSE = 1.0, 2.0, 3.0, 4.0
FAILED = -1.0
_TAG_CONTROL, _TAG_CONTROL_PAYLOAD, _TAG_BATCH, _TAG_BATCH_PAYLOAD = 1, 2, 3, 4
_POLL_S = 0.001
TRAINER = 0


class TrainerGone(RuntimeError):
    """A producer lost its trainer (closed connection or timeout)."""


def _header(*values: float) -> torch.Tensor:
    return torch.tensor(list(values) + [0.0] * (4 - len(values)), dtype=torch.float64)


def _wait(work, what: str, failure) -> None:
    """Wait for ``work``; the group's timeout (``timeout_s``) or a broken connection raise ``failure``.

    A blocking wait is the only one that notices a dead peer (``is_completed`` stays False), and a
    wait given its own timeout closes the connection when it expires, so it cannot poll.
    """
    try:
        work.wait()
    except RuntimeError as exc:
        raise failure(f"{what}: {exc}") from None


class _Outbox:
    """Sends in flight: their buffers stay alive until sent, and a failed send is an error."""

    def __init__(self, failure) -> None:
        self.pending: list[tuple[object, tuple[torch.Tensor, ...], int]] = []
        self.failure = failure

    def send(self, peer: int, tag_tensors: list[tuple[int, torch.Tensor]]) -> None:
        self.prune()
        for tag, tensor in tag_tensors:
            try:
                work = dist.isend(tensor, peer, tag=tag)
            except RuntimeError as exc:  # the connection to ``peer`` is already broken
                raise self.failure(peer, exc) from None
            self.pending.append((work, (tensor,), peer))

    def prune(self) -> None:
        still = []
        for work, buffers, peer in self.pending:
            if work.is_completed():
                try:
                    work.wait()
                except RuntimeError as exc:
                    raise self.failure(peer, exc) from None
            else:
                still.append((work, buffers, peer))
        self.pending = still

    def flush(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while self.pending and time.monotonic() < deadline:
            self.prune()
            time.sleep(_POLL_S)


def _producer_lost(rank: int, exc: object) -> ProducerFailed:
    return ProducerFailed(f"producer rank {rank} lost (its process died or its node is unreachable): {exc}")


class DistributedSource:
    """Batch source of :func:`membench.robust.train.train` on rank 0 of a process group whose other
    ranks run :func:`run_producer`. Use as a context manager; leaving it closes the producers.

    A thread per producer blocks on that producer's next message header (the one wait that sees a
    dead peer at once) and hands it to the trainer through a queue the trainer reads with a
    timeout. ``queue_size`` is shared out as credits: batches a producer may have sent that the
    trainer has not taken.
    """

    def __init__(
        self,
        spec: ModelSpec,
        y_train: torch.Tensor,
        producers: int,
        publish_every: int,
        queue_size: int,
        timeout_s: float,
        comm_device: str = "cpu",
        join_timeout_s: float = 10.0,
    ) -> None:
        self.spec, self.y_train = spec, y_train
        self.producers, self.publish_every = producers, publish_every
        self.credits = max(1, queue_size // producers)
        self.timeout_s, self.join_timeout_s = timeout_s, join_timeout_s
        self.comm_device = torch.device(comm_device)
        self.wait_s = 0.0
        self.startup_s = 0.0
        self._outbox = _Outbox(_producer_lost)
        self._arrivals: queue_module.Queue = queue_module.Queue()

    def __enter__(self) -> "DistributedSource":
        start = time.perf_counter()
        for rank in range(1, self.producers + 1):
            self._watch(rank)
        self._control(CREDIT, self.credits)
        self.startup_s = time.perf_counter() - start
        return self

    def __exit__(self, *exc) -> None:
        """Tell every producer to stop; after a clean run, wait up to ``join_timeout_s`` until each has
        been told (after a failure a producer learns it from the closed connection as well)."""
        for rank in range(1, self.producers + 1):
            try:
                self._outbox.send(rank, [(_TAG_CONTROL, _header(CLOSE).to(self.comm_device))])
            except ProducerFailed:
                if exc[0] is None:
                    raise
        if exc[0] is None:
            self._outbox.flush(self.join_timeout_s)

    def _watch(self, rank: int) -> None:
        header = torch.empty(4, dtype=torch.float64, device=self.comm_device)
        work = dist.irecv(header, rank, tag=_TAG_BATCH)

        def wait() -> None:
            try:
                work.wait()
                self._arrivals.put((rank, header.cpu(), None))
            except RuntimeError as exc:
                self._arrivals.put((rank, None, exc))

        threading.Thread(target=wait, name=f"membench-producer-{rank}-watch", daemon=True).start()

    def _control(
        self, kind: float, a: float = 0.0, b: float = 0.0, payload: torch.Tensor | None = None
    ) -> None:
        for rank in range(1, self.producers + 1):
            messages = [(_TAG_CONTROL, _header(kind, a, b).to(self.comm_device))]
            if payload is not None:
                messages.append((_TAG_CONTROL_PAYLOAD, payload.to(self.comm_device)))
            self._outbox.send(rank, messages)

    # -- the batch-source protocol ---------------------------------------------------------------
    def start(self, model: nn.Module, step: int, alpha: float) -> None:
        self.after_step(model, step, alpha, force=True)

    def after_step(self, model: nn.Module, step: int, alpha: float, force: bool = False) -> None:
        """Send the trainer's weights as version ``step`` to every producer when k divides ``step``."""
        if force or step % self.publish_every == 0:
            self._control(WEIGHTS, step, alpha, flatten_weights(model))

    def epoch(self, epoch: int, batches: list[torch.Tensor], model: nn.Module) -> Iterator[AdversarialBatch]:
        order = torch.cat(batches)
        self._control(EPOCH, epoch, len(order), order)
        for _ in range(len(batches)):
            got_epoch, b, rank, version, x_adv = self._next_batch(batches)
            if got_epoch != epoch:
                raise RuntimeError(
                    f"producer {rank} sent batch {b} of epoch {got_epoch} during epoch {epoch}"
                )
            yield AdversarialBatch(b, x_adv, self.y_train[batches[b]], version, rank - 1)

    def _next_batch(self, batches: list[torch.Tensor]):
        start = time.perf_counter()
        deadline = time.monotonic() + self.timeout_s
        while True:
            self._outbox.prune()
            try:
                rank, header, error = self._arrivals.get(timeout=0.05)
                break
            except queue_module.Empty:
                if time.monotonic() > deadline:
                    raise ProducerFailed(
                        f"no attacked batch from any producer within {self.timeout_s:g} s"
                    ) from None
        if error is not None:
            raise _producer_lost(rank, error)
        epoch, b, _, version = (int(v) for v in header.tolist())
        if header[0] == FAILED:
            text = torch.empty(int(header[1]), dtype=torch.uint8, device=self.comm_device)
            _wait(
                dist.irecv(text, rank, tag=_TAG_BATCH_PAYLOAD),
                f"error report of producer rank {rank}",
                ProducerFailed,
            )
            raise ProducerFailed(f"producer rank {rank} failed: {bytes(text.cpu().tolist()).decode()}")
        if not 0 <= b < len(batches):
            raise RuntimeError(f"producer {rank} sent batch {b}, which epoch {epoch} does not have")
        x_adv = torch.empty((len(batches[b]), *self.spec.input_shape), device=self.comm_device)
        _wait(
            dist.irecv(x_adv, rank, tag=_TAG_BATCH_PAYLOAD),
            f"batch {b}",
            lambda text: _producer_lost(rank, text),
        )
        self.wait_s += time.perf_counter() - start
        self._watch(rank)
        self._outbox.send(rank, [(_TAG_CONTROL, _header(CREDIT, 1).to(self.comm_device))])
        return epoch, b, rank, version, x_adv.cpu()


class _Producer:
    """One producer rank: its model copy, credits, and the trainer's control messages."""

    def __init__(
        self,
        rank: int,
        spec: ModelSpec,
        settings: TrainSettings,
        device: torch.device,
        comm_device: torch.device,
    ) -> None:
        self.rank, self.device, self.comm_device = rank, device, comm_device
        self.model = build_model(
            spec.name, spec.input_shape, spec.num_classes, spec.hidden_units, settings.seed
        )
        self.model.to(device).train()
        self.num_weights = len(flatten_weights(self.model))
        self.version, self.alpha, self.credits = -1, settings.alpha, 0
        self.epochs: list[tuple[int, torch.Tensor]] = []
        self.closed = False
        self.outbox = _Outbox(
            lambda peer, exc: TrainerGone(f"lost the trainer (rank 0) while sending a batch: {exc}")
        )
        self._post()

    def _post(self) -> None:
        self.header = torch.empty(4, dtype=torch.float64, device=self.comm_device)
        self.work = dist.irecv(self.header, TRAINER, tag=_TAG_CONTROL)

    def _payload(self, tensor: torch.Tensor, what: str) -> torch.Tensor:
        _wait(
            dist.irecv(tensor, TRAINER, tag=_TAG_CONTROL_PAYLOAD),
            f"lost the trainer (rank 0) while receiving {what}",
            TrainerGone,
        )
        return tensor.cpu()

    def poll(self, block: bool) -> bool:
        """Take one control message (waiting for it when ``block``); False if none had come."""
        if not block and not self.work.is_completed():
            return False
        _wait(self.work, "lost the trainer (rank 0) while waiting for its messages", TrainerGone)
        kind, a, b, _ = self.header.cpu().tolist()
        if kind == WEIGHTS:
            flat = self._payload(torch.empty(self.num_weights, device=self.comm_device), "weights")
            load_flat_weights(self.model, flat.to(self.device))
            self.version, self.alpha = int(a), b
        elif kind == EPOCH:
            order = torch.empty(int(b), dtype=torch.int64, device=self.comm_device)
            self.epochs.append((int(a), self._payload(order, "epoch order")))
        elif kind == CREDIT:
            self.credits += int(a)
        else:
            self.closed = True
        self._post()
        return True

    def drain(self) -> None:
        while not self.closed and self.poll(block=False):
            pass

    def send_batch(self, epoch: int, b: int, x_adv: torch.Tensor) -> None:
        self.outbox.send(
            TRAINER,
            [
                (_TAG_BATCH, _header(epoch, b, self.rank, self.version).to(self.comm_device)),
                (_TAG_BATCH_PAYLOAD, x_adv.to(self.comm_device).contiguous()),
            ],
        )
        self.credits -= 1


def run_producer(
    rank: int,
    producers: int,
    spec: ModelSpec,
    settings: TrainSettings,
    x_train: torch.Tensor,
    y_train: torch.Tensor,
    device: torch.device,
    comm_device: torch.device,
) -> None:
    """Producer rank ``rank`` (1..P): attack batch b of every epoch the trainer opens when
    b mod P = rank - 1, on the newest weights received, until the trainer closes the run."""
    try:
        producer = _Producer(rank, spec, settings, device, comm_device)
        while True:
            while not producer.epochs and not producer.closed:
                producer.poll(block=True)
            if producer.closed:
                break
            epoch, order = producer.epochs.pop(0)
            batches = order.split(settings.batch_size)
            for b in range(rank - 1, len(batches), producers):
                producer.drain()
                while producer.credits < 1 and not producer.closed:
                    producer.poll(block=True)
                if producer.closed:
                    break
                idx = batches[b]
                x, y = x_train[idx].to(device), y_train[idx].to(device)
                x_adv = attack(
                    settings.attack,
                    producer.model,
                    x,
                    y,
                    settings.eps,
                    producer.alpha,
                    settings.steps,
                    batch_generator(settings.seed, epoch, b),
                )
                producer.send_batch(epoch, b, x_adv)
    except TrainerGone:
        raise
    except Exception:
        text = torch.tensor(list(traceback.format_exc().strip().splitlines()[-1].encode()), dtype=torch.uint8)
        work = [
            dist.isend(_header(FAILED, len(text)).to(comm_device), TRAINER, tag=_TAG_BATCH),
            dist.isend(text.to(comm_device), TRAINER, tag=_TAG_BATCH_PAYLOAD),
        ]
        for w in work:
            _wait(w, "lost the trainer (rank 0) while reporting this error", TrainerGone)
        raise
