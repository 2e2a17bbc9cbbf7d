"""The memory, time and energy meter every membench job runs under (README.md, "What is measured,
and how").

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
    peak NVML ``memory.used`` of the whole device sampled by a background thread, minus the
    baseline read after the CUDA context exists and ``empty_cache`` (HotConv's GRMM_peak,
    nvidia-smi's view). A shared GPU's other tenants show here.
``nvml_process_peak_mib``
    the same for the memory NVML charges to this process alone, where NVML reports it.
``cuda_peak_allocated_mib``, ``cuda_peak_reserved_mib``
    torch allocator peaks, reset at the start of every phase.
``alloc_peak_mib``
    peak bytes the job's device allocator held during a phase above what it held when the phase
    began, kernel workspaces included: on CUDA ``max_memory_allocated`` (reset at the phase start)
    minus ``memory_allocated`` at the start; on a CPU, with ``trace_allocator``, the peak of the
    CPU allocator's allocation and free events (:class:`~membench.core.tracers.CpuAllocatorTracker`).
    The figure method comparisons use (a training step's), on every device. Blocks allocated before
    the phase and freed in it (gradients a step starts by dropping) lower the CUDA figure; the CPU
    profiler does not know their size, so on a CPU they are not subtracted.
``activation_mib``
    peak bytes saved for backward in one training step (saved_tensors_hooks, parameters excluded).
``peak_tensor_mib``
    peak bytes of live tensor storages on the job's device created during traced phases (a
    TorchDispatchMode); it cannot see buffers kernels allocate for themselves.
``host_peak_tensor_mib``
    the same on the host, for a GPU job (staged inputs, index tensors, the collated batch).
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
from typing import Iterable, Iterator, TypeVar

import pandas as pd
import torch
from torch.utils._pytree import tree_flatten

from membench.core import sources
from membench.core.device import synchronize
from membench.core.metrics import MEMLOG_COLUMNS
from membench.core.options import DEFAULT_GRID_INTENSITY_G_PER_KWH
from membench.core.tracers import CpuAllocatorTracker, LiveTensorTracker, SavedActivationCounter

__all__ = [
    "co2e_g",
    "Meter",
    "MIB",
    "PhaseResult",
]

MIB = 2**20
_Batch = TypeVar("_Batch")
_GPU_DESCRIPTION_FIELDS = (
    "gpu_name",
    "gpu_driver_version",
    "gpu_sm_clock_mhz",
    "gpu_memory_clock_mhz",
    "gpu_max_sm_clock_mhz",
    "gpu_max_memory_clock_mhz",
    "nvml_device",
)


@dataclass
class PhaseResult:
    """What the meter saw during one named phase."""

    name: str
    wall_s: float = 0.0
    cuda_peak_allocated_bytes: int | None = None
    cuda_peak_reserved_bytes: int | None = None
    peak_tensor_bytes: int | None = None
    host_peak_tensor_bytes: int | None = None
    alloc_peak_bytes: int | None = None
    nvml_peak_bytes: int | None = None
    nvml_process_peak_bytes: int | None = None
    rss_peak_bytes: int = 0
    activation_bytes: int | None = None
    samples: int = 0


@dataclass
class _Sample:
    t_s: float
    phase: str
    rss_bytes: int
    nvml_used_bytes: int | None
    nvml_process_used_bytes: int | None
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
    trace_allocator : bool
        On a CPU, follow the allocator through the PyTorch profiler (``alloc_peak_mib``) during
        phases; costs one profiler record per operator. On CUDA the figure comes from torch's
        allocator statistics at no cost, whatever this says.
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
        trace_allocator: bool = False,
        trace_saved_activations: bool = True,
        grid_intensity_g_per_kwh: float = DEFAULT_GRID_INTENSITY_G_PER_KWH,
    ) -> None:
        self.device = torch.device(device)
        self.sample_interval_s = sample_interval_s
        self.trace_live_tensors = trace_live_tensors
        self.trace_allocator = trace_allocator
        self._tracker: LiveTensorTracker | None = None
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
        self._nvml_process_baseline_bytes: int | None = None
        self._gpu_description: dict[str, object] = {}
        self._energy_start_j: float | None = None
        self._energy_j: float | None = None
        self._energy_source: str | None = None
        self._t0 = 0.0
        self._wall_s = 0.0

    # -- lifecycle -----------------------------------------------------------------------------
    def __enter__(self) -> "Meter":
        if self.device.type == "cuda":
            # The baseline is read after the context exists, so it is not charged to the job, and
            # after the caching allocator returned what it holds unused (an earlier meter's blocks).
            torch.zeros(1, device=self.device)
            synchronize(self.device)
            torch.cuda.empty_cache()
            self._gpu = sources.NvmlGpu.open(self.device)
        if self._gpu is not None:
            self._nvml_baseline_bytes = self._gpu.used_bytes()
            self._nvml_process_baseline_bytes = self._gpu.process_used_bytes()
            self._gpu_description = self._gpu.description()
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

    def __exit__(self, exc_type, exc, traceback) -> None:
        if exc_type is None:
            # Not while an exception propagates: a pending CUDA error would replace it.
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
        """Measure the enclosed code as phase ``name`` (re-entering a name keeps the peaks' maximum
        and accumulates the time). Phases do not nest."""
        result = self._state.phases.setdefault(name, PhaseResult(name))
        previous = self._state.current_phase
        self._state.current_phase = name
        cuda = self.device.type == "cuda"
        if cuda:
            synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            start_allocated = torch.cuda.memory_allocated(self.device)
        tracker = LiveTensorTracker() if self.trace_live_tensors else None
        allocator = CpuAllocatorTracker() if self.trace_allocator and not cuda else None
        self._take_sample()
        start = time.perf_counter()
        try:
            with contextlib.ExitStack() as tracers:
                for tracer in (allocator, tracker):
                    if tracer is not None:
                        tracers.enter_context(tracer)
                self._tracker = tracker
                yield result
                synchronize(self.device)
        finally:
            self._tracker = None
            result.wall_s += time.perf_counter() - start
            self._take_sample()
            self._state.current_phase = previous
            if cuda:
                peak = torch.cuda.max_memory_allocated(self.device)
                result.cuda_peak_allocated_bytes = _max(result.cuda_peak_allocated_bytes, peak)
                result.cuda_peak_reserved_bytes = _max(
                    result.cuda_peak_reserved_bytes, torch.cuda.max_memory_reserved(self.device)
                )
                result.alloc_peak_bytes = _max(result.alloc_peak_bytes, peak - start_allocated)
            if allocator is not None:
                result.alloc_peak_bytes = _max(result.alloc_peak_bytes, allocator.peak_bytes)
            if tracker is not None:
                result.peak_tensor_bytes = _max(
                    result.peak_tensor_bytes, tracker.peak_bytes(self.device.type)
                )
                if cuda:
                    result.host_peak_tensor_bytes = _max(
                        result.host_peak_tensor_bytes, tracker.peak_bytes("cpu")
                    )

    def batches(self, loader: Iterable[_Batch]) -> Iterator[_Batch]:
        """Yield ``loader``'s batches, counting their tensors in the current phase's tensor peak.

        A batch collated in this process (``num_workers=0``) is created under the tracer; one from a
        worker process arrives in shared memory, created elsewhere. Counting every batch on arrival
        makes ``peak_tensor_mib`` (and a GPU job's ``host_peak_tensor_mib``) the same whatever
        ``num_workers`` is. (The CPU allocator figure sees only batches collated in this process.)
        """
        for batch in loader:
            if self._tracker is not None:
                for tensor in tree_flatten(batch)[0]:
                    if isinstance(tensor, torch.Tensor):
                        self._tracker.add(tensor)
            yield batch

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
        result = self._state.phases.setdefault(
            self._state.current_phase, PhaseResult(self._state.current_phase)
        )
        result.activation_bytes = _max(result.activation_bytes, counter.peak_bytes)

    # -- sampling --------------------------------------------------------------------------------
    def _sample_loop(self) -> None:
        start_cpu = time.thread_time()
        while not self._stop.wait(self.sample_interval_s):
            self._take_sample()
        self._sampler_cpu_s = time.thread_time() - start_cpu

    def _take_sample(self) -> None:
        if self._rapl is not None:
            self._rapl.update()
        nvml_used = self._gpu.used_bytes() if self._gpu is not None else None
        nvml_process_used = self._gpu.process_used_bytes() if self._gpu is not None else None
        allocated = torch.cuda.memory_allocated(self.device) if self.device.type == "cuda" else None
        sample = _Sample(
            t_s=time.perf_counter() - self._t0,
            phase=self._state.current_phase,
            rss_bytes=sources.current_rss_bytes(),
            nvml_used_bytes=nvml_used,
            nvml_process_used_bytes=nvml_process_used,
            cuda_allocated_bytes=allocated,
        )
        with self._lock:
            self._state.samples.append(sample)
            phase = self._state.phases.get(sample.phase)
            if phase is not None:
                phase.samples += 1
                phase.rss_peak_bytes = max(phase.rss_peak_bytes, sample.rss_bytes)
                phase.nvml_peak_bytes = _max(phase.nvml_peak_bytes, nvml_used)
                phase.nvml_process_peak_bytes = _max(phase.nvml_process_peak_bytes, nvml_process_used)

    # -- results ---------------------------------------------------------------------------------
    @property
    def phases(self) -> dict[str, PhaseResult]:
        return self._state.phases

    @property
    def sources(self) -> dict[str, bool]:
        """Which counters this machine let the meter read."""
        return {
            "nvml_available": self._gpu is not None and self._nvml_baseline_bytes is not None,
            "allocator_available": self.device.type == "cuda" or self.trace_allocator,
            "rapl_available": self._rapl is not None,
        }

    def summary(self) -> dict[str, object]:
        """The flat metrics fields (README.md, "What is measured, and how"), job-wide and per phase
        (``<phase>_<field>``)."""
        phases = list(self._state.phases.values())
        nvml_peak = _max(*(s.nvml_used_bytes for s in self._state.samples))
        process_peak = _max(*(s.nvml_process_used_bytes for s in self._state.samples))
        fields: dict[str, object] = {
            "nvml_peak_mib": _above(nvml_peak, self._nvml_baseline_bytes),
            "nvml_baseline_mib": _mib(self._nvml_baseline_bytes),
            "nvml_process_peak_mib": _above(process_peak, self._nvml_process_baseline_bytes),
            "nvml_process_baseline_mib": _mib(self._nvml_process_baseline_bytes),
            "cuda_peak_allocated_mib": _mib(_max(*(p.cuda_peak_allocated_bytes for p in phases))),
            "cuda_peak_reserved_mib": _mib(_max(*(p.cuda_peak_reserved_bytes for p in phases))),
            "activation_mib": _mib(_max(*(p.activation_bytes for p in phases))),
            "peak_tensor_mib": _mib(_max(*(p.peak_tensor_bytes for p in phases))),
            "host_peak_tensor_mib": _mib(_max(*(p.host_peak_tensor_bytes for p in phases))),
            "alloc_peak_mib": _mib(_max(*(p.alloc_peak_bytes for p in phases))),
            "peak_rss_mib": _mib(sources.peak_rss_bytes()),
            "energy_j": self._energy_j,
            "energy_source": self._energy_source,
            "co2e_g": co2e_g(self._energy_j, self.grid_intensity_g_per_kwh),
            "meter_wall_s": self._wall_s,
            "meter_samples": len(self._state.samples),
            "meter_sampler_cpu_s": self._sampler_cpu_s,
            "trace_live_tensors": self.trace_live_tensors,
            "trace_allocator": self.trace_allocator,
            "trace_saved_activations": self.trace_saved_activations,
            **self.sources,
            **{name: self._gpu_description.get(name) for name in _GPU_DESCRIPTION_FIELDS},
            # TF32 changes float32 matmul and convolution results and speed on Ampere and newer.
            "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
            "tf32_cudnn": torch.backends.cudnn.allow_tf32,
        }
        for p in phases:
            fields[f"{p.name}_wall_s"] = p.wall_s
            fields[f"{p.name}_activation_mib"] = _mib(p.activation_bytes)
            fields[f"{p.name}_peak_tensor_mib"] = _mib(p.peak_tensor_bytes)
            fields[f"{p.name}_host_peak_tensor_mib"] = _mib(p.host_peak_tensor_bytes)
            fields[f"{p.name}_alloc_peak_mib"] = _mib(p.alloc_peak_bytes)
            fields[f"{p.name}_peak_rss_mib"] = _mib(p.rss_peak_bytes)
            fields[f"{p.name}_cuda_peak_allocated_mib"] = _mib(p.cuda_peak_allocated_bytes)
            fields[f"{p.name}_nvml_peak_mib"] = _above(p.nvml_peak_bytes, self._nvml_baseline_bytes)
            fields[f"{p.name}_nvml_process_peak_mib"] = _above(
                p.nvml_process_peak_bytes, self._nvml_process_baseline_bytes
            )
        return fields

    def memlog(self) -> pd.DataFrame:
        """The sampled time series, one row per sample, columns ``MEMLOG_COLUMNS``."""
        with self._lock:
            rows = [
                (
                    s.t_s,
                    s.phase,
                    s.rss_bytes / MIB,
                    _mib(s.nvml_used_bytes),
                    _mib(s.nvml_process_used_bytes),
                    _mib(s.cuda_allocated_bytes),
                )
                for s in self._state.samples
            ]
        return pd.DataFrame(rows, columns=list(MEMLOG_COLUMNS))


def co2e_g(energy_j: float | None, grid_intensity_g_per_kwh: float) -> float | None:
    """Grams of CO2-equivalent for ``energy_j`` joules at the given grid intensity."""
    if energy_j is None:
        return None
    return energy_j / 3.6e6 * grid_intensity_g_per_kwh


def _mib(nbytes: int | float | None) -> float | None:
    return None if nbytes is None else nbytes / MIB


def _above(peak_bytes: int | None, baseline_bytes: int | None) -> float | None:
    """MiB of ``peak_bytes`` above ``baseline_bytes`` (never below 0); ``None`` if either is unknown."""
    if peak_bytes is None or baseline_bytes is None:
        return None
    return _mib(max(0, peak_bytes - baseline_bytes))


def _max(*values):
    present = [v for v in values if v is not None]
    return max(present) if present else None
