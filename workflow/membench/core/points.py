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
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from membench.core import atomic
from membench.core.checkpoint import matches_identity
from membench.core.errors import InputError
from membench.core.validate import read_json_object

__all__ = ["Command", "Fork", "Outcome", "Point", "is_measured", "measure"]


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
    atomic.check_replaceable(point.record)
    point.record.unlink(missing_ok=True)
    atomic.write_json(point.identity_path, point.identity)
    begin = time.perf_counter()
    if isinstance(start, Fork):
        exit_code, timed_out = _run_forked(start, timeout_s)
    else:
        exit_code, timed_out = _run_command(start, timeout_s)
    wall_s = time.perf_counter() - begin
    record = (
        read_json_object(point.record, missing="its process wrote none") if point.record.is_file() else None
    )
    return Outcome(record, exit_code, timed_out, wall_s)


def _run_forked(start: Fork, timeout_s: float | None) -> tuple[int | None, bool]:
    child = multiprocessing.get_context("fork").Process(target=start.target, args=start.args)
    child.start()
    try:
        child.join(timeout_s)
    finally:
        timed_out = child.is_alive()
        if timed_out:
            child.kill()
            child.join()
    return child.exitcode, timed_out


def _run_command(start: Command, timeout_s: float | None) -> tuple[int | None, bool]:
    child = subprocess.Popen([str(part) for part in start.argv])
    timed_out = False
    try:
        child.wait(timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    return child.returncode, timed_out
