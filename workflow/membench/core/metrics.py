"""The metrics contract every job follows (README.md, "What is measured, and how").

A job writes, atomically, into its output directory:

``metrics.json``
    one flat JSON object with at least :data:`REQUIRED_FIELDS` and :data:`MEASURED_FIELDS` (null
    where a source cannot be read), plus the job's own results;
``memlog.csv``
    the meter's sampled time series (:data:`MEMLOG_COLUMNS`).

A job that runs compiled kernels (DIVISION's compressors, appclass's matching) records which in
:data:`KERNELS_FIELD` (:func:`kernels_value`); tables place it after the measured fields.
"""

from __future__ import annotations

import os
import platform
import re
import socket
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from membench.core import atomic
from membench.core.errors import InputError
from membench.core.validate import read_json_object

if TYPE_CHECKING:
    import torch

__all__ = [
    "check_record",
    "job_record",
    "KERNEL_KINDS",
    "KERNELS_FIELD",
    "kernels_value",
    "MEASURED_FIELDS",
    "MEMLOG_COLUMNS",
    "read_metrics",
    "REQUIRED_FIELDS",
    "write_job_outputs",
]

REQUIRED_FIELDS = (
    "system",
    "variant",
    "dataset",
    "device",
    "device_name",
    "torch_version",
    "seed",
    "batch_size",
    "wall_s",
)
MEASURED_FIELDS = (
    "nvml_peak_mib",
    "cuda_peak_allocated_mib",
    "cuda_peak_reserved_mib",
    "activation_mib",
    "alloc_peak_mib",
    "peak_tensor_mib",
    "host_peak_tensor_mib",
    "peak_rss_mib",
    "energy_j",
    "co2e_g",
)
MEMLOG_COLUMNS = ("t_s", "phase", "rss_mib", "nvml_used_mib", "nvml_process_used_mib", "cuda_allocated_mib")
_SCALAR_TYPES = (str, int, float, bool, type(None))
# What ran a job's compute: ``cpp-<digest8>`` or ``cuda-<digest8>``, membench's built C++ or CUDA
# kernels (digest8: the first 8 hex digits of the SHA-256 of their sources,
# :func:`membench.core.extension.sources_digest`); ``torch``, torch's own operators; ``numpy``, a
# NumPy implementation (appclass's reference).
KERNELS_FIELD = "kernels"
KERNEL_KINDS = ("cpp", "cuda", "torch", "numpy")
_KERNELS_VALUE = re.compile(r"(?:torch|numpy|(?:cpp|cuda)-[0-9a-f]{8})")


def job_record(
    system: str, variant: str, dataset: str, device: torch.device, seed: int, batch_size: int | None
) -> dict[str, object]:
    """Start a metrics record with the identifying fields of a job (``wall_s`` is set at the end)."""
    # Imported here, not at the top: table and plot jobs read metrics without torch (~2 s a job).
    import torch

    from membench.core.device import device_name

    device = torch.device(device)
    return {
        "system": system,
        "variant": variant,
        "dataset": dataset,
        "device": device.type,
        "device_name": device_name(device),
        "torch_version": torch.__version__,
        "seed": seed,
        "batch_size": batch_size,
        "wall_s": None,
        "host": socket.gethostname(),
        "python_version": platform.python_version(),
        "cuda_version": torch.version.cuda,
        "torch_threads": torch.get_num_threads(),
    }


def kernels_value(kind: str, source_sha256: str | None = None) -> str:
    """The :data:`KERNELS_FIELD` value of kernels of ``kind`` (:data:`KERNEL_KINDS`); built ones
    (``cpp``, ``cuda``) name their sources' SHA-256 (hex), whose first 8 digits they carry."""
    if kind not in KERNEL_KINDS:
        raise ValueError(f"kernel kind must be one of {', '.join(KERNEL_KINDS)}, got {kind!r}")
    if kind in ("torch", "numpy"):
        return kind
    if source_sha256 is None or not re.fullmatch(r"[0-9a-f]{8,}", source_sha256):
        raise ValueError(f"{kind} kernels need their sources' SHA-256 in hex, got {source_sha256!r}")
    return f"{kind}-{source_sha256[:8]}"


def write_job_outputs(outdir: str | os.PathLike, record: dict, memlog: pd.DataFrame | None = None) -> Path:
    """Check ``record`` against the contract and write ``metrics.json`` (and ``memlog.csv``) atomically.

    Returns the path of ``metrics.json``. ``memlog.csv`` is written first so that a present
    ``metrics.json`` always means a complete job.
    """
    outdir = Path(outdir)
    record = {**{f: None for f in MEASURED_FIELDS}, **record}
    check_record(record, outdir / "metrics.json")
    if memlog is not None:
        atomic.write_csv(outdir / "memlog.csv", memlog)
    atomic.write_json(outdir / "metrics.json", record)
    return outdir / "metrics.json"


def check_record(record: dict, path: str | os.PathLike) -> None:
    """Raise :class:`InputError` unless ``record`` is flat and holds every required field, and a
    :data:`KERNELS_FIELD` it holds is a :func:`kernels_value`."""
    missing = [f for f in REQUIRED_FIELDS + MEASURED_FIELDS if f not in record]
    if missing:
        raise InputError(path, f"metrics record lacks required field(s) {', '.join(missing)}")
    nested = [k for k, v in record.items() if not isinstance(v, _SCALAR_TYPES)]
    if nested:
        raise InputError(path, f"metrics record must be flat; field(s) {', '.join(nested)} are not scalars")
    kernels = record.get(KERNELS_FIELD)
    if KERNELS_FIELD in record and not (isinstance(kernels, str) and _KERNELS_VALUE.fullmatch(kernels)):
        raise InputError(
            path,
            f"kernels must be torch, numpy, cpp-<8 hex digits> or cuda-<8 hex digits>, got {kernels!r}",
            f"key '{KERNELS_FIELD}'",
        )


def read_metrics(path: str | os.PathLike) -> dict:
    """Read and check one ``metrics.json``."""
    record = read_json_object(path, "metrics file not found")
    check_record(record, path)
    return record
