"""Readers for the machine's memory and energy counters: NVML, RAPL and the process's RSS.

Each reader is optional: when the library, the device or the permission is missing it reports
``None`` instead of raising, so a job on a CPU-only machine measures what it can and stays quiet.
"""

from __future__ import annotations

import glob
import os
import resource
import threading
from pathlib import Path

import torch

__all__ = ["current_rss_bytes", "MIB", "nvml_lookups", "NvmlGpu", "peak_rss_bytes", "RaplPackages"]

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
    """NVML handle of the GPU (or MIG instance) behind a torch CUDA device; ``open`` returns ``None``
    without NVML or when no lookup finds the device (never a guess at another device)."""

    def __init__(self, nvml, handle, found_by: str) -> None:
        self._nvml = nvml
        self._handle = handle
        self.found_by = found_by

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
        properties = torch.cuda.get_device_properties(index)
        lookups = nvml_lookups(
            index,
            getattr(properties, "uuid", None),
            os.environ.get("CUDA_VISIBLE_DEVICES"),
            os.environ.get("CUDA_DEVICE_ORDER"),
            _pci_bus_id(properties),
        )
        find = {
            "uuid": pynvml.nvmlDeviceGetHandleByUUID,
            "index": pynvml.nvmlDeviceGetHandleByIndex,
            "pci": pynvml.nvmlDeviceGetHandleByPciBusId,
        }
        for kind, key in lookups:
            try:
                return cls(pynvml, find[kind](key), f"{kind} {key}")
            except Exception:  # not this one: try the next way of naming the device
                continue
        return None

    def used_bytes(self) -> int | None:
        """Device memory in use by all processes (what nvidia-smi shows as memory.used)."""
        try:
            return int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used)
        except Exception:
            return None

    def process_used_bytes(self, pid: int | None = None) -> int | None:
        """Device memory NVML charges to process ``pid`` (this one by default); ``None`` where NVML
        does not report it (MIG without privileges, some containers)."""
        pid = os.getpid() if pid is None else pid
        try:
            processes = self._nvml.nvmlDeviceGetComputeRunningProcesses(self._handle)
        except Exception:
            return None
        for process in processes:
            if process.pid == pid:
                used = process.usedGpuMemory
                return None if used is None else int(used)
        return None

    def energy_j(self) -> float | None:
        """Total energy counter since the driver loaded, in joules (Volta and newer)."""
        try:
            return self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle) / 1000.0
        except Exception:
            return None

    def description(self) -> dict[str, object]:
        """GPU model, driver version and clocks (MHz: SM and memory, now and at most), for the record;
        each ``None`` where NVML does not say."""
        nvml = self._nvml

        def read(call, *args):
            try:
                value = call(*args)
            except Exception:
                return None
            return value.decode() if isinstance(value, bytes) else value

        return {
            "gpu_name": read(nvml.nvmlDeviceGetName, self._handle),
            "gpu_driver_version": read(nvml.nvmlSystemGetDriverVersion),
            "gpu_sm_clock_mhz": read(nvml.nvmlDeviceGetClockInfo, self._handle, nvml.NVML_CLOCK_SM),
            "gpu_memory_clock_mhz": read(nvml.nvmlDeviceGetClockInfo, self._handle, nvml.NVML_CLOCK_MEM),
            "gpu_max_sm_clock_mhz": read(nvml.nvmlDeviceGetMaxClockInfo, self._handle, nvml.NVML_CLOCK_SM),
            "gpu_max_memory_clock_mhz": read(
                nvml.nvmlDeviceGetMaxClockInfo, self._handle, nvml.NVML_CLOCK_MEM
            ),
            "nvml_device": self.found_by,
        }


def nvml_lookups(
    torch_index: int,
    uuid: object,
    visible_devices: str | None,
    device_order: str | None,
    pci_bus_id: str | None,
) -> list[tuple[str, object]]:
    """The ways to find torch's CUDA device ``torch_index`` in NVML, most specific first.

    torch numbers the devices ``CUDA_VISIBLE_DEVICES`` leaves, in CUDA's order (fastest first unless
    ``CUDA_DEVICE_ORDER=PCI_BUS_ID``); NVML numbers every device in PCI order. So torch's index is an
    NVML index only when nothing is hidden and the order is PCI's. Lookups: the device's UUID as
    torch reports it (``GPU-`` or, for a MIG instance, ``MIG-``); the ``CUDA_VISIBLE_DEVICES`` entry
    it stands for (a UUID, or an index in PCI order); the PCI bus id (not for a MIG instance, whose
    bus is the whole GPU's).
    """
    lookups: list[tuple[str, object]] = []
    if uuid is not None:
        text = str(uuid)
        if text.startswith(("GPU-", "MIG-")):
            lookups.append(("uuid", text))
        else:
            lookups += [("uuid", f"GPU-{text}"), ("uuid", f"MIG-{text}")]
    pci_order = device_order == "PCI_BUS_ID"
    entry = None
    if visible_devices is not None:
        entries = [e.strip() for e in visible_devices.split(",") if e.strip()]
        entry = entries[torch_index] if torch_index < len(entries) else None
        if entry is not None and entry.startswith(("GPU-", "MIG-")):
            lookups.append(("uuid", entry))
        elif entry is not None and entry.isdigit() and pci_order:
            lookups.append(("index", int(entry)))
    elif pci_order:
        lookups.append(("index", torch_index))
    if pci_bus_id is not None and not (entry or "").startswith("MIG-"):
        lookups.append(("pci", pci_bus_id))
    return lookups


def _pci_bus_id(properties) -> str | None:
    """``domain:bus:device.0`` from torch's device properties, where this torch reports them."""
    bus = getattr(properties, "pci_bus_id", None)
    device = getattr(properties, "pci_device_id", None)
    domain = getattr(properties, "pci_domain_id", None)
    if bus is None or device is None or domain is None:
        return None
    return f"{domain:08x}:{bus:02x}:{device:02x}.0"


class RaplPackages:
    """Sum of the CPU package energy counters under ``/sys/class/powercap`` (often root-only).

    A counter wraps around after ``max_energy_range_uj`` (about 262 kJ: 20-30 minutes of a busy
    socket), so it is read at every meter sample (:meth:`update`) and the differences are added up:
    a job longer than one wrap loses nothing as long as samples come more often than wraps.
    """

    def __init__(self, zones: list[Path]) -> None:
        self._zones = zones
        self._ranges = [_read_int(z / "max_energy_range_uj") or 2**32 for z in zones]
        self._last: list[int | None] = [None] * len(zones)
        self._total_uj = 0
        self._unreadable = False
        self._lock = threading.Lock()  # the meter's sampler thread and the job's thread both read

    @classmethod
    def open(cls, root: str = "/sys/class/powercap") -> "RaplPackages | None":
        # Top-level zones (intel-rapl:N) are packages; intel-rapl:N:M are their sub-domains.
        zones = [
            Path(p)
            for p in sorted(glob.glob(os.path.join(root, "intel-rapl:*")))
            if Path(p).name.count(":") == 1
        ]
        readable = [z for z in zones if _read_int(z / "energy_uj") is not None]
        return cls(readable) if readable else None

    def start(self) -> None:
        with self._lock:
            self._last = [_read_int(z / "energy_uj") for z in self._zones]
            self._total_uj = 0
            self._unreadable = any(value is None for value in self._last)

    def update(self) -> None:
        """Add the energy since the previous read (at most one wrap of each counter in between)."""
        with self._lock:
            for i, (zone, wrap) in enumerate(zip(self._zones, self._ranges)):
                now, last = _read_int(zone / "energy_uj"), self._last[i]
                if now is None or last is None:
                    self._unreadable = True
                    continue
                self._total_uj += now - last if now >= last else now + wrap - last
                self._last[i] = now

    def energy_since_start_j(self) -> float | None:
        """Joules since :meth:`start`; ``None`` if a counter could not be read at some point."""
        self.update()
        return None if self._unreadable else self._total_uj / 1e6


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None
