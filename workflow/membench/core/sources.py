"""Readers for the machine's memory and energy counters: NVML, RAPL and the process's RSS.

Each reader is optional: when the library, the device or the permission is missing it reports
``None`` instead of raising, so a job on a CPU-only machine measures what it can and stays quiet.
"""

from __future__ import annotations

import glob
import os
import resource
from pathlib import Path

import torch

MIB = 2**20
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def current_rss_bytes() -> int:
    """Resident set size of this process now, from ``/proc/self/statm``."""
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * _PAGE_BYTES
    except (OSError, IndexError, ValueError):
        return peak_rss_bytes()


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far (``getrusage``, kilobytes on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class NvmlGpu:
    """NVML handle of the GPU behind a torch CUDA device; ``open`` returns ``None`` without NVML."""

    def __init__(self, nvml, handle) -> None:
        self._nvml = nvml
        self._handle = handle

    @classmethod
    def open(cls, device: torch.device) -> "NvmlGpu | None":
        if device.type != "cuda":
            return None
        try:
            import pynvml

            pynvml.nvmlInit()
        except Exception:  # no library, no driver: NVML fields stay empty
            return None
        index = device.index if device.index is not None else torch.cuda.current_device()
        handle = None
        uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
        if uuid is not None:
            try:
                handle = pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}")
            except Exception:
                handle = None
        if handle is None:
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            except Exception:
                return None
        return cls(pynvml, handle)

    def used_bytes(self) -> int | None:
        """Device memory in use by all processes (what nvidia-smi shows as memory.used)."""
        try:
            return int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used)
        except Exception:
            return None

    def energy_j(self) -> float | None:
        """Total energy counter since the driver loaded, in joules (Volta and newer)."""
        try:
            return self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle) / 1000.0
        except Exception:
            return None


class RaplPackages:
    """Sum of the CPU package energy counters under ``/sys/class/powercap`` (often root-only)."""

    def __init__(self, zones: list[Path]) -> None:
        self._zones = zones
        self._ranges = [_read_int(z / "max_energy_range_uj") or 2**32 for z in zones]
        self._start = [0] * len(zones)

    @classmethod
    def open(cls, root: str = "/sys/class/powercap") -> "RaplPackages | None":
        # Top-level zones (intel-rapl:N) are packages; intel-rapl:N:M are their sub-domains.
        zones = [Path(p) for p in sorted(glob.glob(os.path.join(root, "intel-rapl:*"))) if Path(p).name.count(":") == 1]
        readable = [z for z in zones if _read_int(z / "energy_uj") is not None]
        return cls(readable) if readable else None

    def start(self) -> None:
        self._start = [_read_int(z / "energy_uj") or 0 for z in self._zones]

    def energy_since_start_j(self) -> float | None:
        total_uj = 0
        for zone, start, wrap in zip(self._zones, self._start, self._ranges):
            now = _read_int(zone / "energy_uj")
            if now is None:
                return None
            total_uj += now - start if now >= start else now + wrap - start
        return total_uj / 1e6


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None
