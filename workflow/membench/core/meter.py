"""The memory, time and energy meter every membench job runs under (SPEC section 3).

Usage::

    with Meter(device, trace_live_tensors=True) as meter:
        with meter.phase("train"):
            for x, y in loader:
                with meter.saved_activations(model):
                    loss = criterion(model(x), y)
                loss.backward()
                ...
    record.update(meter.summary())
    memlog = meter.memlog()

Fields (MiB = 2**20 bytes; empty when the source cannot be read on this machine):

``nvml_peak_mib``
    peak NVML ``memory.used`` sampled by a background thread, minus the baseline read after the
    CUDA context exists (HotConv's GRMM_peak, nvidia-smi's view).
``cuda_peak_allocated_mib``, ``cuda_peak_reserved_mib``
    torch allocator peaks, reset at the start of every phase.
``activation_mib``
    peak bytes saved for backward in one training step (saved_tensors_hooks, parameters excluded).
``peak_tensor_mib``
    peak bytes of live tensor storages created during traced phases (a TorchDispatchMode).
``peak_rss_mib``
    peak resident set size of the process.
``energy_j``, ``co2e_g``
    NVML energy counter difference (GPU) or RAPL packages (CPU, where readable); CO2e at the
    configured grid intensity.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field
from typing import Iterable, Iterator

import pandas as pd
import torch

from membench.core import sources
from membench.core.device import synchronize
from membench.core.tracers import LiveTensorTracker, SavedActivationCounter

MIB = 2**20
DEFAULT_GRID_INTENSITY_G_PER_KWH = 475.0
MEMLOG_COLUMNS = ("t_s", "phase", "rss_mib", "nvml_used_mib", "cuda_allocated_mib")


@dataclass
class PhaseResult:
    """What the meter saw during one named phase."""

    name: str
    wall_s: float = 0.0
    cuda_peak_allocated_bytes: int | None = None
    cuda_peak_reserved_bytes: int | None = None
    peak_tensor_bytes: int | None = None
    nvml_peak_bytes: int | None = None
    rss_peak_bytes: int = 0
    activation_bytes: int | None = None
    samples: int = 0


@dataclass
class _Sample:
    t_s: float
    phase: str
    rss_bytes: int
    nvml_used_bytes: int | None
    cuda_allocated_bytes: int | None


@dataclass
class _State:
    phases: dict[str, PhaseResult] = field(default_factory=dict)
    samples: list[_Sample] = field(default_factory=list)
    current_phase: str = "setup"


class Meter:
    """Measure memory, time and energy of the code run inside it.

    Parameters
    ----------
    device : torch.device
        The device the job runs on; GPU sources are read only for a CUDA device.
    sample_interval_s : float
        Period of the background sampler (NVML memory.used, RSS, allocator). 0 disables sampling.
    trace_live_tensors : bool
        Track live tensor storages (``peak_tensor_mib``) during phases. Costs time per operator.
    trace_saved_activations : bool
        Count saved activations where the job asks (``saved_activations``). Costs little.
    grid_intensity_g_per_kwh : float
        Grid carbon intensity used for ``co2e_g``.
    """

    def __init__(
        self,
        device: torch.device,
        *,
        sample_interval_s: float = 0.05,
        trace_live_tensors: bool = False,
        trace_saved_activations: bool = True,
        grid_intensity_g_per_kwh: float = DEFAULT_GRID_INTENSITY_G_PER_KWH,
    ) -> None:
        self.device = torch.device(device)
        self.sample_interval_s = sample_interval_s
        self.trace_live_tensors = trace_live_tensors
        self.trace_saved_activations = trace_saved_activations
        self.grid_intensity_g_per_kwh = grid_intensity_g_per_kwh
        self._state = _State()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sampler_cpu_s = 0.0
        self._gpu: sources.NvmlGpu | None = None
        self._rapl: sources.RaplPackages | None = None
        self._nvml_baseline_bytes: int | None = None
        self._energy_start_j: float | None = None
        self._energy_j: float | None = None
        self._energy_source: str | None = None
        self._t0 = 0.0
        self._wall_s = 0.0

    # -- lifecycle -----------------------------------------------------------------------------
    def __enter__(self) -> "Meter":
        if self.device.type == "cuda":
            # The baseline is read after the context exists, so it is not charged to the job.
            torch.zeros(1, device=self.device)
            synchronize(self.device)
            self._gpu = sources.NvmlGpu.open(self.device)
        if self._gpu is not None:
            self._nvml_baseline_bytes = self._gpu.used_bytes()
            self._energy_start_j = self._gpu.energy_j()
            if self._energy_start_j is not None:
                self._energy_source = "nvml"
        if self._energy_source is None:
            self._rapl = sources.RaplPackages.open()
            if self._rapl is not None:
                self._rapl.start()
                self._energy_source = "rapl"
        self._t0 = time.perf_counter()
        self._take_sample()
        if self.sample_interval_s > 0:
            self._thread = threading.Thread(target=self._sample_loop, name="membench-meter", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        synchronize(self.device)
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._take_sample()
        self._wall_s = time.perf_counter() - self._t0
        if self._energy_source == "nvml":
            end = self._gpu.energy_j()
            self._energy_j = None if end is None else end - self._energy_start_j
        elif self._energy_source == "rapl":
            self._energy_j = self._rapl.energy_since_start_j()

    # -- phases and tracers ----------------------------------------------------------------------
    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[PhaseResult]:
        """Measure the enclosed code as phase ``name`` (re-entering a name accumulates its time)."""
        result = self._state.phases.setdefault(name, PhaseResult(name))
        previous = self._state.current_phase
        self._state.current_phase = name
        if self.device.type == "cuda":
            synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        tracker = LiveTensorTracker() if self.trace_live_tensors else contextlib.nullcontext()
        self._take_sample()
        start = time.perf_counter()
        try:
            with tracker:
                yield result
            synchronize(self.device)
        finally:
            result.wall_s += time.perf_counter() - start
            self._take_sample()
            self._state.current_phase = previous
            if self.device.type == "cuda":
                result.cuda_peak_allocated_bytes = _max(
                    result.cuda_peak_allocated_bytes, torch.cuda.max_memory_allocated(self.device)
                )
                result.cuda_peak_reserved_bytes = _max(
                    result.cuda_peak_reserved_bytes, torch.cuda.max_memory_reserved(self.device)
                )
            if self.trace_live_tensors:
                result.peak_tensor_bytes = _max(result.peak_tensor_bytes, tracker.peak_bytes)

    @contextlib.contextmanager
    def saved_activations(self, model_or_tensors: torch.nn.Module | Iterable[torch.Tensor]) -> Iterator[None]:
        """Count the bytes saved for backward by the enclosed forward pass into the current phase.

        ``model_or_tensors`` names what is not an activation: a module (its parameters and buffers)
        or an iterable of tensors. Does nothing when saved-activation tracing is off.
        """
        if not self.trace_saved_activations:
            yield
            return
        if isinstance(model_or_tensors, torch.nn.Module):
            excluded = list(model_or_tensors.parameters()) + list(model_or_tensors.buffers())
        else:
            excluded = list(model_or_tensors)
        counter = SavedActivationCounter(exclude=excluded)
        with counter:
            yield
        result = self._state.phases.setdefault(self._state.current_phase, PhaseResult(self._state.current_phase))
        result.activation_bytes = _max(result.activation_bytes, counter.peak_bytes)

    # -- sampling --------------------------------------------------------------------------------
    def _sample_loop(self) -> None:
        start_cpu = time.thread_time()
        while not self._stop.wait(self.sample_interval_s):
            self._take_sample()
        self._sampler_cpu_s = time.thread_time() - start_cpu

    def _take_sample(self) -> None:
        nvml_used = self._gpu.used_bytes() if self._gpu is not None else None
        allocated = torch.cuda.memory_allocated(self.device) if self.device.type == "cuda" else None
        sample = _Sample(
            t_s=time.perf_counter() - self._t0,
            phase=self._state.current_phase,
            rss_bytes=sources.current_rss_bytes(),
            nvml_used_bytes=nvml_used,
            cuda_allocated_bytes=allocated,
        )
        with self._lock:
            self._state.samples.append(sample)
            phase = self._state.phases.get(sample.phase)
            if phase is not None:
                phase.samples += 1
                phase.rss_peak_bytes = max(phase.rss_peak_bytes, sample.rss_bytes)
                if nvml_used is not None:
                    phase.nvml_peak_bytes = _max(phase.nvml_peak_bytes, nvml_used)

    # -- results ---------------------------------------------------------------------------------
    @property
    def phases(self) -> dict[str, PhaseResult]:
        return self._state.phases

    @property
    def sources(self) -> dict[str, bool]:
        """Which counters this machine let the meter read."""
        return {
            "nvml_available": self._gpu is not None and self._nvml_baseline_bytes is not None,
            "allocator_available": self.device.type == "cuda",
            "rapl_available": self._rapl is not None,
        }

    def summary(self) -> dict[str, object]:
        """The flat metrics fields of SPEC section 3, job-wide and per phase (``<phase>_<field>``)."""
        phases = list(self._state.phases.values())
        nvml_peak = _max(*(p.nvml_peak_bytes for p in phases), *(s.nvml_used_bytes for s in self._state.samples))
        fields: dict[str, object] = {
            "nvml_peak_mib": _mib(None if nvml_peak is None or self._nvml_baseline_bytes is None
                                  else max(0, nvml_peak - self._nvml_baseline_bytes)),
            "nvml_baseline_mib": _mib(self._nvml_baseline_bytes),
            "cuda_peak_allocated_mib": _mib(_max(*(p.cuda_peak_allocated_bytes for p in phases))),
            "cuda_peak_reserved_mib": _mib(_max(*(p.cuda_peak_reserved_bytes for p in phases))),
            "activation_mib": _mib(_max(*(p.activation_bytes for p in phases))),
            "peak_tensor_mib": _mib(_max(*(p.peak_tensor_bytes for p in phases))),
            "peak_rss_mib": _mib(sources.peak_rss_bytes()),
            "energy_j": self._energy_j,
            "energy_source": self._energy_source,
            "co2e_g": co2e_g(self._energy_j, self.grid_intensity_g_per_kwh),
            "meter_wall_s": self._wall_s,
            "meter_samples": len(self._state.samples),
            "meter_sampler_cpu_s": self._sampler_cpu_s,
            "trace_live_tensors": self.trace_live_tensors,
            "trace_saved_activations": self.trace_saved_activations,
            **self.sources,
        }
        for p in phases:
            fields[f"{p.name}_wall_s"] = p.wall_s
            fields[f"{p.name}_activation_mib"] = _mib(p.activation_bytes)
            fields[f"{p.name}_peak_tensor_mib"] = _mib(p.peak_tensor_bytes)
            fields[f"{p.name}_peak_rss_mib"] = _mib(p.rss_peak_bytes)
            fields[f"{p.name}_cuda_peak_allocated_mib"] = _mib(p.cuda_peak_allocated_bytes)
            fields[f"{p.name}_nvml_peak_mib"] = _mib(
                None if p.nvml_peak_bytes is None or self._nvml_baseline_bytes is None
                else max(0, p.nvml_peak_bytes - self._nvml_baseline_bytes)
            )
        return fields

    def memlog(self) -> pd.DataFrame:
        """The sampled time series, one row per sample, columns ``MEMLOG_COLUMNS``."""
        with self._lock:
            rows = [
                (s.t_s, s.phase, s.rss_bytes / MIB, _mib(s.nvml_used_bytes), _mib(s.cuda_allocated_bytes))
                for s in self._state.samples
            ]
        return pd.DataFrame(rows, columns=list(MEMLOG_COLUMNS))


def add_meter_options(parser, sample_interval_s: float = 0.05) -> None:
    """The meter's command-line options, named as its config keys: ``--sample-interval-s`` and
    ``--grid-intensity-g-per-kwh``."""
    parser.add_argument("--sample-interval-s", type=float, default=sample_interval_s,
                        help="period of the background memory sampler; 0 turns it off")
    parser.add_argument("--grid-intensity-g-per-kwh", type=float, default=DEFAULT_GRID_INTENSITY_G_PER_KWH,
                        help="grid carbon intensity for co2e_g")


def co2e_g(energy_j: float | None, grid_intensity_g_per_kwh: float) -> float | None:
    """Grams of CO2-equivalent for ``energy_j`` joules at the given grid intensity."""
    if energy_j is None:
        return None
    return energy_j / 3.6e6 * grid_intensity_g_per_kwh


def _mib(nbytes: int | float | None) -> float | None:
    return None if nbytes is None else nbytes / MIB


def _max(*values):
    present = [v for v in values if v is not None]
    return max(present) if present else None
