"""Honest timings: the steady-state median of repeated samples, their spread, and a flag.

Every job that reports a time the report compares (an epoch, a training step, a repeat of a
benchmark, one prediction) times it with a :class:`Timer` and adds :meth:`Timer.fields` to its
metrics record. Memory stays with :class:`membench.core.meter.Meter`; this only times.

Fields:

``time_unit``
    what one sample is: ``"epoch"``, ``"step"``, ``"iteration"`` or ``"repeat"``.
``time_median_s``
    median seconds of the steady-state samples: all but the first when there are two or more
    (the first pays for warm-up: lazy initialisation, allocator growth, caches). A resumed job's
    samples come from several processes: each process's first is its warm-up, and samples timed in
    another setting (:func:`timing_setting`: another device model, CPU count or thread count) are
    left out, with a flag, so that one median never mixes two machines.
``time_spread_pct``
    (max - min) / median x 100 over the steady-state samples (empty with fewer than two).
``time_min_s``, ``time_max_s``
    the fastest and slowest steady-state sample (the error bars of a timing plot).
``time_samples``
    number of steady-state samples.
``load_1m_max``, ``cpu_count``
    the largest 1-minute load average seen at the start and end of the samples, and the CPUs this
    process may use.
``timing_reliable``, ``timing_flag``
    whether the median can be taken as the method's time on this machine; the flag lists the
    reasons when not (empty when reliable), e.g. ``"spread 45% > 25%; load 3.1 on 2 CPUs (limit 2.5)"``.
"""

from __future__ import annotations

import contextlib
import math
import os
import secrets
import statistics
import time
from typing import TYPE_CHECKING, Callable, Iterator, Sequence

if TYPE_CHECKING:
    import torch

__all__ = [
    "available_cpus",
    "load_1m",
    "LOAD_RATIO_MAX",
    "MIN_STEADY_SAMPLES",
    "SPREAD_PCT_MAX",
    "TIME_UNITS",
    "steady_median",
    "Timer",
    "TIMING_FIELDS",
    "timing_fields",
    "timing_setting",
]

TIME_UNITS = ("epoch", "step", "iteration", "repeat")
TIMING_FIELDS = (
    "time_unit",
    "time_median_s",
    "time_spread_pct",
    "time_min_s",
    "time_max_s",
    "time_samples",
    "load_1m_max",
    "cpu_count",
    "timing_reliable",
    "timing_flag",
)
# Steps of one method on an idle machine vary by a few percent; a quarter means something else
# (another job, frequency scaling, swapping) changed the machine's speed while it was timed.
SPREAD_PCT_MAX = 25.0
# A single steady-state sample has no spread, so nothing shows whether it was typical.
MIN_STEADY_SAMPLES = 2
# More runnable threads than CPUs means some wait. The job's own threads load the machine
# legitimately (2 threads on 2 CPUs: load 2), so the limit is the larger of the CPUs and the job's
# threads, times this ratio; the slack lets through the 1-minute average's lag and the short-lived
# helper threads (meter sampler, data loader), while a second job as large as this one (ratio 2)
# is flagged.
LOAD_RATIO_MAX = 1.25


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask; all CPUs where that is unknown)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def load_1m() -> float:
    """The machine's 1-minute load average (runnable and uninterruptible threads)."""
    return os.getloadavg()[0]


def timing_setting(device: torch.device, threads: int) -> str:
    """What a sample's time depends on besides the work: the device's model, the CPUs the process
    may use and the threads the job keeps busy. Samples of one job in two settings are not pooled."""
    from membench.core.device import device_name

    return f"{device_name(device)}; {available_cpus()} CPUs; {threads} threads"


def _steady_samples(
    count: int, settings: Sequence[str] | None, processes: Sequence[str] | None
) -> tuple[list[int], list[int], bool]:
    """The indices of the steady-state samples among ``count``, of the samples timed in the last
    sample's setting, and whether every one of those is the first of its process.

    A sample is steady unless it is the first of its process (``processes``: one token per sample;
    default one process) or its setting differs; where no sample is steady, the setting's samples
    are used (a single sample is a time, flagged)."""
    processes = list(processes) if processes is not None else ["process"] * count
    settings = list(settings) if settings is not None else ["setting"] * count
    if len(processes) != count or len(settings) != count:
        raise ValueError(f"{count} samples need as many settings and processes")
    same = [i for i in range(count) if settings[i] == settings[-1]]
    first_of_process = {processes.index(process) for process in set(processes)}
    steady = [i for i in same if i not in first_of_process]
    return steady or same, same, not steady and len(same) > 1


def steady_median(samples: Sequence[float]) -> float | None:
    """The median of one process's steady-state samples (all but the first when there are two or
    more), as ``time_median_s`` takes it: for the parts of a timed unit (a repeat's phases)."""
    kept, _, _ = _steady_samples(len(samples), None, None)
    return statistics.median(samples[i] for i in kept) if kept else None


def timing_fields(
    samples_s: Sequence[float],
    unit: str,
    loads_1m: Sequence[float | None],
    threads: int,
    cpu_count: int | None = None,
    *,
    settings: Sequence[str] | None = None,
    processes: Sequence[str] | None = None,
) -> dict[str, object]:
    """The timing fields (module docstring) of ``samples_s`` taken by a job running ``threads``
    threads, with ``loads_1m`` the 1-minute load averages seen around them (``None`` or NaN where
    unknown).

    ``settings`` and ``processes`` (one per sample: :func:`timing_setting` and a token of the
    process that timed it, as a :class:`Timer` records them) say which samples a resumed job's
    checkpoint brought from earlier processes; by default all come from one process in one
    setting. ``cpu_count`` defaults to :func:`available_cpus`.
    """
    if unit not in TIME_UNITS:
        raise ValueError(f"time unit {unit!r} is not one of {', '.join(TIME_UNITS)}")
    cpu_count = available_cpus() if cpu_count is None else cpu_count
    kept, same, only_first = _steady_samples(len(samples_s), settings, processes)
    other_setting = len(samples_s) - len(same)
    steady = [float(samples_s[i]) for i in kept]
    # One load per sample where settings are given (so that another setting's are left out too).
    loads = [loads_1m[i] for i in same] if settings is not None else loads_1m
    known_loads = [load for load in loads if load is not None and not math.isnan(load)]
    load_1m_max = max(known_loads) if known_loads else None
    median_s = statistics.median(steady) if steady else None
    spread_pct = None
    if len(steady) >= 2 and median_s > 0:
        spread_pct = (max(steady) - min(steady)) / median_s * 100.0
    reasons = []
    if only_first:
        reasons.append(f"each {unit} the first of its process")
    if other_setting:
        reasons.append(
            f"{other_setting} {unit}"
            + ("s" if other_setting != 1 else "")
            + " timed in another setting left out"
        )
    if not steady:
        reasons.append("no samples")
    elif len(steady) < MIN_STEADY_SAMPLES:
        reasons.append(f"{len(steady)} sample" + ("s" if len(steady) != 1 else ""))
    if spread_pct is not None and spread_pct > SPREAD_PCT_MAX:
        reasons.append(f"spread {spread_pct:.0f}% > {SPREAD_PCT_MAX:.0f}%")
    load_limit = LOAD_RATIO_MAX * max(cpu_count, threads)
    if load_1m_max is not None and load_1m_max > load_limit:
        reasons.append(f"load {load_1m_max:.1f} on {cpu_count} CPUs (limit {load_limit:.1f})")
    return {
        "time_unit": unit,
        "time_median_s": median_s,
        "time_spread_pct": spread_pct,
        "time_min_s": min(steady) if steady else None,
        "time_max_s": max(steady) if steady else None,
        "time_samples": len(steady),
        "load_1m_max": load_1m_max,
        "cpu_count": cpu_count,
        "timing_reliable": not reasons,
        "timing_flag": "; ".join(reasons),
    }


class Timer:
    """Wall-time samples of one repeated unit of work (an epoch, a step, a repeat) and the load
    average around them.

    ``threads`` is how many threads the job itself keeps busy (default: torch's intra-op threads);
    on a GPU ``device`` is synchronised around each sample so that it covers the queued work.
    """

    def __init__(self, unit: str, *, threads: int | None = None, device: torch.device | None = None) -> None:
        if unit not in TIME_UNITS:
            raise ValueError(f"time unit {unit!r} is not one of {', '.join(TIME_UNITS)}")
        # Imported here, not at the top: plots and tables read the timing fields and limits
        # without torch (~1.5 s a process).
        import torch

        from membench.core.device import synchronize

        self._synchronize = synchronize
        self.unit = unit
        self.threads = torch.get_num_threads() if threads is None else threads
        self.device = torch.device("cpu") if device is None else torch.device(device)
        #: :func:`timing_setting` of this process's samples, and a token naming this timer's process.
        self.setting = timing_setting(self.device, self.threads)
        self.process = secrets.token_hex(8)
        self.samples_s: list[float] = []
        self.loads_1m: list[float | None] = []
        self.settings: list[str] = []
        self.processes: list[str] = []

    @contextlib.contextmanager
    def sample(self) -> Iterator[None]:
        """Time the enclosed code as one sample."""
        self._synchronize(self.device)
        load_before = load_1m()
        start = time.perf_counter()
        yield
        self._synchronize(self.device)
        seconds = time.perf_counter() - start
        self.add(seconds, max(load_before, load_1m()))

    def repeat(self, call: Callable[[], object], repeats: int) -> list[float]:
        """Time ``repeats`` calls of ``call``, one sample each; returns their seconds."""
        for _ in range(repeats):
            with self.sample():
                call()
        return self.samples_s[-repeats:] if repeats else []

    def add(
        self,
        seconds: float,
        load_1m_max: float | None,
        setting: str | None = None,
        process: str | None = None,
    ) -> None:
        """Record a sample; one timed earlier (a resumed job's epoch, read from its checkpoint)
        comes with the ``setting`` and ``process`` it was timed in (default: this timer's)."""
        self.samples_s.append(float(seconds))
        self.loads_1m.append(load_1m_max)
        self.settings.append(self.setting if setting is None else setting)
        self.processes.append(self.process if process is None else process)

    @property
    def last_load_1m(self) -> float | None:
        """The load average recorded with the latest sample."""
        return self.loads_1m[-1] if self.loads_1m else None

    def fields(self) -> dict[str, object]:
        """The timing fields of the samples so far (module docstring)."""
        return timing_fields(
            self.samples_s,
            self.unit,
            self.loads_1m,
            self.threads,
            settings=self.settings,
            processes=self.processes,
        )
