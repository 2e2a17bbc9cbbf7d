"""Fault-injection harness: kill a job at seeded random points, rerun it, compare with a clean run.

Reusable by any system's tests (``import faults``; ``tests/`` is on pytest's ``pythonpath``)::

    command = faults.membench("hotconv", "train", ..., "--outdir", str(outdir))
    reference = faults.run(faults.membench(..., "--outdir", str(clean)))
    outcome = faults.kill_and_rerun(command, delays_s=faults.kill_delays(seed, 3, reference.wall_s),
                                    check_after_kill=lambda: faults.assert_metrics_absent_or_complete(outdir),
                                    started=lambda: (outdir / "checkpoint.pt").exists())
    assert faults.comparable(read_metrics(outdir / "metrics.json")) == faults.comparable(clean_metrics)

Each kill is SIGKILL (or the signal given) to the job's whole process group, so DataLoader
workers and torchrun children die with it, as under a scheduler's kill. ``FAULT_LOG`` collects
one row per injected fault; ``tests/reliability/conftest.py`` writes it to the JSON file named by
``MEMBENCH_FAULT_REPORT`` (the figures in docs/reliability.md).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
# Fields that measure the run rather than its result: timings, sampled memory and energy (named by
# their unit: ``wall_s``, ``epoch_s_mean``, ``step_ms``, ``peak_rss_mib``, ``energy_j``, ``co2e_g``), and
# the bookkeeping of where a run resumed. Everything else must match an uninterrupted run exactly.
VOLATILE_UNITS = {"s", "ms", "mib", "j", "g"}
# iteration_vs_copy: a ratio of two timings (appclass bench); pid: the measuring process; the timing
# fields' spread, load and reliability flag (membench.core.timing) describe the machine while the
# run was timed; time_samples and timing_process: a resumed run's steady samples leave out each
# process's first.
VOLATILE_FIELDS = {
    "host",
    "pid",
    "resumed_from_epoch",
    "torch_threads",
    "meter_samples",
    "iteration_vs_copy",
    "time_spread_pct",
    "load_1m_max",
    "timing_reliable",
    "timing_flag",
    "time_samples",
    "timing_process",
}
_POLL_S = 0.05
_KILL_ATTEMPTS = 4
# Kills per job: 2 keeps CI short; MEMBENCH_FAULT_KILLS=10 gives the figures in docs/reliability.md.
KILLS_PER_JOB = int(os.environ.get("MEMBENCH_FAULT_KILLS", "2"))

FAULT_LOG: list[dict] = []


@dataclass
class Finished:
    """A command that ran: its exit code, wall time and output; ``started_s``: when the ``started``
    condition :func:`run` was given first held (seconds after the start), if it did."""

    returncode: int
    wall_s: float
    output: str
    started_s: float | None = None

    @property
    def window_s(self) -> float:
        """How long the command ran once started (its kill window): from ``started_s`` (else from
        its start) to its end."""
        return self.wall_s - (self.started_s or 0.0)


@dataclass
class KillOutcome:
    """What a chain of kills and the final rerun did."""

    kills_injected: int = 0
    finished_before_kill: int = 0
    final: Finished | None = None
    kill_times_s: list[float] = field(default_factory=list)


def environment() -> dict[str, str]:
    """The test process's environment with this checkout's package first on PYTHONPATH."""
    path = os.pathsep.join([str(REPO_ROOT / "workflow"), os.environ.get("PYTHONPATH", "")])
    bin_dir = str(Path(sys.executable).parent)
    return {**os.environ, "PYTHONPATH": path, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}


def membench(*args: str) -> list[str]:
    """The command line of ``membench <args>`` run by this Python."""
    return [sys.executable, "-m", "membench.cli", *map(str, args)]


def run(
    command: list[str],
    timeout_s: float = 600,
    cwd: str | os.PathLike | None = None,
    started: Callable[[], bool] | None = None,
) -> Finished:
    """Run ``command`` to completion; raise ``AssertionError`` with its output if it fails. With
    ``started``, also record when it first held (``Finished.started_s``): an uninterrupted run's
    kill window, which the kills of :func:`kill_and_rerun` are drawn from."""
    start = time.monotonic()
    if started is None:
        result = subprocess.run(
            command, capture_output=True, text=True, env=environment(), timeout=timeout_s, cwd=cwd
        )
        finished = Finished(result.returncode, time.monotonic() - start, result.stdout + result.stderr)
    else:
        started_s = None
        with tempfile.TemporaryFile() as output:
            process = subprocess.Popen(
                command, stdout=output, stderr=subprocess.STDOUT, env=environment(), cwd=cwd
            )
            try:
                while process.poll() is None:
                    if started_s is None and started():
                        started_s = time.monotonic() - start
                    if time.monotonic() - start > timeout_s:
                        raise AssertionError(f"{' '.join(command)} ran past {timeout_s} s")
                    time.sleep(_POLL_S)
            finally:
                if process.poll() is None:
                    process.kill()
                    process.wait()
            wall_s = time.monotonic() - start
            output.seek(0)
            text = output.read().decode(errors="replace")
        finished = Finished(process.returncode, wall_s, text, started_s)
    assert finished.returncode == 0, f"{' '.join(command)} failed:\n{finished.output[-4000:]}"
    return finished


@dataclass
class Ran:
    """A ``membench`` command run by :func:`run_membench`: its exit code (``None``: it outlived its
    time limit and was killed) and standard error."""

    returncode: int | None
    stderr: str


def _membench_child(argv: list[str], cwd: str, stderr_path: str) -> None:
    # A process of its own, forked from a server that imported membench and torch once: the
    # command's exit code, output and any traceback are its own, at no interpreter start.
    os.chdir(cwd)
    with open(stderr_path, "wb") as stderr, open(os.devnull, "wb") as stdout:
        os.dup2(stderr.fileno(), 2)
        os.dup2(stdout.fileno(), 1)
    from membench.cli import main

    sys.exit(main(argv))


def run_membench(argv: list[str], cwd: str | os.PathLike, timeout_s: float) -> Ran:
    """Run ``membench <argv>`` in its own process with a time limit, as a user runs it (exit code,
    one-line errors, tracebacks and hangs are the process's own), but forked from a server that has
    membench and torch imported, so that a test of many command lines pays no interpreter start."""
    import multiprocessing
    import tempfile

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["membench.cli", "torch", "pandas"])
    with tempfile.NamedTemporaryFile(suffix=".stderr") as stderr:
        child = context.Process(target=_membench_child, args=(list(argv), os.fspath(cwd), stderr.name))
        child.start()
        child.join(timeout_s)
        if child.is_alive():
            child.kill()
            child.join()
            return Ran(None, Path(stderr.name).read_text(errors="replace"))
        return Ran(child.exitcode, Path(stderr.name).read_text(errors="replace"))


def kill_delays(seed: int, count: int, span_s: float, low: float = 0.15, high: float = 0.9) -> list[float]:
    """``count`` seeded kill delays, uniform in [low, high] of ``span_s`` (an uninterrupted run's time)."""
    rng = np.random.default_rng(seed)
    return sorted(float(d) for d in rng.uniform(low * span_s, high * span_s, size=count))


def kill_during(
    command: list[str],
    delay_s: float,
    signum: int = signal.SIGKILL,
    started: Callable[[], bool] | None = None,
    cwd: str | os.PathLike | None = None,
    timeout_s: float = 600,
) -> bool:
    """Start ``command``, wait until ``started()`` holds (if given), then ``delay_s``, then send
    ``signum`` to its process group. Returns whether it was still running (a fault was injected)."""
    killed, _ = _kill_attempt(command, delay_s, signum, started, cwd, timeout_s)
    return killed


def _kill_attempt(
    command: list[str],
    delay_s: float,
    signum: int,
    started: Callable[[], bool] | None,
    cwd: str | os.PathLike | None,
    timeout_s: float = 600,
) -> tuple[bool, float | None]:
    """:func:`kill_during`, and for a command that ended before the kill, how long it ran once
    started."""
    process = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=environment(),
        cwd=cwd,
        start_new_session=True,
    )
    deadline = time.monotonic() + timeout_s
    try:
        while started is not None and not started() and process.poll() is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"{' '.join(command)} never reached its kill window")
            time.sleep(_POLL_S)
        window_start = time.monotonic()
        end = window_start + delay_s
        while process.poll() is None and time.monotonic() < end:
            time.sleep(_POLL_S)
        if process.poll() is not None:
            return False, time.monotonic() - window_start
        os.killpg(process.pid, signum)
        process.wait(timeout=60)
        return True, None
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def kill_and_rerun(
    command: list[str],
    delays_s: Iterable[float],
    check_after_kill: Callable[[], None],
    started: Callable[[], bool] | None = None,
    signum: int = signal.SIGKILL,
    cwd: str | os.PathLike | None = None,
    job: str = "",
) -> KillOutcome:
    """Kill ``command`` once per delay (each rerun resumes from what the last one left), checking
    ``check_after_kill()`` after every attempt, then run it to completion. Logs to :data:`FAULT_LOG`."""
    outcome = KillOutcome()
    for delay in delays_s:
        # A run that finishes first (the machine got faster, or a resumed run had less left) is
        # retried with half the delay, or half the time that run took once started if shorter: each
        # such run costs a whole job, so the retry lands inside the run just seen.
        for _ in range(_KILL_ATTEMPTS):
            killed, ran_s = _kill_attempt(command, delay, signum, started, cwd)
            check_after_kill()
            if killed:
                outcome.kills_injected += 1
                outcome.kill_times_s.append(round(delay, 3))
                break
            outcome.finished_before_kill += 1
            delay = min(delay, ran_s) / 2
    outcome.final = run(command, cwd=cwd)
    log_fault(
        job or " ".join(command[3:5]),
        signal.Signals(signum).name,
        outcome.kills_injected,
        finished_before_fault=outcome.finished_before_kill,
        fault_times_s=outcome.kill_times_s,
    )
    return outcome


def log_fault(job: str, fault: str, injected: int, **details) -> None:
    """Add a row to :data:`FAULT_LOG`; ``survived`` stays ``None`` until :func:`record_survived`."""
    FAULT_LOG.append({"job": job, "fault": fault, "injected": injected, "survived": None, **details})


def record_survived(survived: bool = True) -> None:
    """Mark the last logged fault row as survived (every check after it passed)."""
    FAULT_LOG[-1]["survived"] = survived


def comparable(record: dict) -> dict:
    """``record`` without its :data:`VOLATILE_FIELDS` and fields named with a :data:`VOLATILE_UNITS` unit."""
    return {k: v for k, v in record.items() if not _volatile(k)}


def comparable_table(path: str | os.PathLike):
    """A results table (CSV) without volatile columns, rows in a stable order."""
    import pandas as pd

    frame = pd.read_csv(path)
    frame = frame[[c for c in frame.columns if not _volatile(c)]]
    return frame.sort_values(list(frame.columns)).reset_index(drop=True)


def _volatile(name: str) -> bool:
    return name in VOLATILE_FIELDS or not VOLATILE_UNITS.isdisjoint(name.split("_"))


def assert_metrics_absent_or_complete(outdir: str | os.PathLike) -> None:
    """After a kill: ``metrics.json`` is absent, or complete (valid, with its ``memlog.csv`` beside it)."""
    from membench.core.metrics import read_metrics

    outdir = Path(outdir)
    metrics = outdir / "metrics.json"
    if metrics.exists():
        record = read_metrics(metrics)
        assert record["wall_s"] is not None and not math.isnan(record["wall_s"])
        assert (outdir / "memlog.csv").is_file()


def assert_no_visible_partial_files(directory: str | os.PathLike, complete: Iterable[str]) -> None:
    """Every non-hidden file under ``directory`` is one of ``complete`` (names that are only ever
    written whole); leftovers of a kill must be hidden temporaries, never output names."""
    directory = Path(directory)
    if not directory.exists():
        return
    allowed = set(complete)
    for path in directory.rglob("*"):
        relative = path.relative_to(directory)
        if path.is_file() and not any(part.startswith(".") for part in relative.parts):
            assert path.name in allowed, f"unexpected file after a kill: {relative}"


def read_json(path: str | os.PathLike) -> dict:
    return json.loads(Path(path).read_text())
