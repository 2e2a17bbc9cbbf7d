"""Measured points that one job drives, each in a fresh process: the time limit, the record, the
identity and the resume rule they share.

A point whose set is known before the run is a Snakemake job of its own (a sweep: a wildcard per
axis, see ``hotconv_sweep_point``). One job drives its points here when they depend on earlier
outcomes (the DIVISION largest-batch search) or are too many for a job each (GPUMemNet's
configurations); docs/DEVELOPING.md says why. Either way a point pays for its own process start,
device context and library handles, and an out-of-memory or crashed point loses no other.

A :class:`Point` is the record its process writes (atomically, once measured) and the identity of
the measurement (:func:`membench.core.checkpoint.run_identity`: what fixes the result, and the
code). :func:`measure` writes the identity beside the record before the process starts, so a
record beside an identity can only come from a measurement of it; :func:`is_measured` is the
resume rule of :mod:`membench.core.checkpoint` for points: a record of another identity is measured
again, and a file in its place that membench did not write is refused untouched.

How the process starts is the caller's, because it shapes what is measured: :class:`Fork` keeps the
parent's imports (torch is not imported again) and shares nothing the parent has not set up before
the fork, so a parent that never initialises CUDA gives each point a fresh CUDA context;
:class:`Command` runs a fresh interpreter (:func:`membench.core.processes.membench_command`).
"""

from __future__ import annotations

import multiprocessing
import subprocess
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

from membench.core import atomic
from membench.core.checkpoint import matches_identity
from membench.core.errors import InputError
from membench.core.validate import read_json_object

__all__ = ["Command", "Fork", "Outcome", "Point", "is_measured", "measure", "measure_many"]


@dataclass(frozen=True)
class Point:
    """One measured point: ``record``, the JSON file its process writes, and ``identity``, the
    :func:`~membench.core.checkpoint.run_identity` of its measurement."""

    record: Path
    identity: dict

    @property
    def identity_path(self) -> Path:
        """``.<record name>.identity`` beside the record: hidden and not ``*.json``, so a directory
        of records still holds one visible file per point."""
        return self.record.with_name(f".{self.record.name}.identity")


@dataclass(frozen=True)
class Fork:
    """Start the point as ``target(*args)`` in a forked child of this process."""

    target: Callable[..., object]
    args: tuple = ()


@dataclass(frozen=True)
class Command:
    """Start the point as the command line ``argv`` in a subprocess (a fresh interpreter)."""

    argv: Sequence[str]


@dataclass(frozen=True)
class Outcome:
    """A measurement: the point's ``record`` (``None`` when its process ended without writing one),
    the process's ``exit_code`` (negative: the signal that ended it), whether it ran past the time
    limit and was killed (``timed_out``), and ``wall_s`` from its start to its end."""

    record: dict | None
    exit_code: int | None
    timed_out: bool
    wall_s: float


def is_measured(point: Point) -> bool:
    """Whether ``point.record`` holds a measurement of ``point.identity``: written by membench and
    unchanged since, with the same identity beside it. A record of another identity (or one
    without an identity) is not: one warning line says what differs, and :func:`measure` replaces it."""
    if not atomic.written_by_membench(point.record):
        return False
    try:
        found = read_json_object(point.identity_path, missing="measure the point again")
    except InputError:
        found = None  # no readable identity: the point is measured again
    return matches_identity(found, point.identity, point.record)


def measure(point: Point, start: Fork | Command, timeout_s: float | None = None) -> Outcome:
    """Measure ``point`` in a fresh process started by ``start``, which writes ``point.record``.

    A previous record is removed first (one membench did not write, or that was changed since,
    raises :class:`InputError` and stays untouched), then the point's identity is written beside
    it. A process still running after ``timeout_s`` seconds (``None``: no limit), or when this one
    is interrupted, is killed: no point's process outlives the wait for it.
    """
    ((_, outcome),) = measure_many([(point, start)], timeout_s)
    return outcome


def measure_many(
    runs: Sequence[tuple[Point, Fork | Command]], timeout_s: float | None = None, at_once: int = 1
) -> Iterator[tuple[Point, Outcome]]:
    """Measure each ``(point, start)`` as :func:`measure` does, with up to ``at_once`` processes
    running side by side; yields ``(point, outcome)`` as each ends. Every process is started from
    the calling thread (a fork from a thread could inherit another thread's held lock). When the
    caller stops early or is interrupted, the processes still running are killed."""
    if at_once < 1:
        raise ValueError(f"at_once must be at least 1, got {at_once}")
    waiting = deque(runs)
    running: list[tuple[Point, _Process, float]] = []
    try:
        while waiting or running:
            while waiting and len(running) < at_once:
                point, start = waiting.popleft()
                atomic.check_replaceable(point.record)
                point.record.unlink(missing_ok=True)
                atomic.write_json(point.identity_path, point.identity)
                running.append((point, _Process(start), time.perf_counter()))
            time.sleep(_POLL_S)
            now = time.perf_counter()
            for run in list(running):
                point, process, begin = run
                timed_out = timeout_s is not None and now - begin > timeout_s
                if process.exit_code() is None and not timed_out:
                    continue
                running.remove(run)
                exit_code = process.stop()
                record = (
                    read_json_object(point.record, missing="its process wrote none")
                    if point.record.is_file()
                    else None
                )
                yield point, Outcome(record, exit_code, timed_out, time.perf_counter() - begin)
    finally:
        for _, process, _ in running:
            process.stop()


# How often running processes are checked: short beside any point's own start (a second or more).
_POLL_S = 0.02


class _Process:
    """A point's process, however it was started."""

    def __init__(self, start: Fork | Command) -> None:
        if isinstance(start, Fork):
            self._child = multiprocessing.get_context("fork").Process(target=start.target, args=start.args)
            self._child.start()
        else:
            self._child = subprocess.Popen([str(part) for part in start.argv])

    def exit_code(self) -> int | None:
        """The exit code once the process has ended (negative: the signal that ended it), else ``None``."""
        if isinstance(self._child, subprocess.Popen):
            return self._child.poll()
        return self._child.exitcode

    def stop(self) -> int | None:
        """Kill the process if it still runs, wait for it and return its exit code."""
        if self.exit_code() is None:
            self._child.kill()
        if isinstance(self._child, subprocess.Popen):
            return self._child.wait()
        self._child.join()
        return self._child.exitcode
