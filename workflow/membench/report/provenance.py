"""Where, how and with what the results were made: command line, commit, configuration differences
from the default, machine, software versions, and the machine's load while timing jobs ran."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import subprocess
from pathlib import Path

import pandas as pd
import yaml

from membench.core.errors import InputError
from membench.core.validate import open_regular, read_json_object

__all__ = [
    "config_differences",
    "cpu_model",
    "default_config",
    "git_commit",
    "MACHINE_COLUMNS",
    "machine_from_tables",
    "provenance",
    "read_provenance",
    "timing_load",
]

# Columns of the aggregated tables that say what measured them.
MACHINE_COLUMNS = (
    "device",
    "device_name",
    "gpu_name",
    "host",
    "torch_threads",
    "torch_version",
    "cuda_version",
    "gpu_driver_version",
    "python_version",
)


def git_commit(checkout: str | os.PathLike) -> str:
    """The checkout's commit (with ``+uncommitted changes`` when its tracked files differ), or
    ``not a git checkout``."""

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["git", "-C", os.fspath(checkout), *args], capture_output=True, text=True, timeout=30
        )

    try:
        head = git("rev-parse", "HEAD")
    except (OSError, subprocess.TimeoutExpired):
        return "not a git checkout"
    if head.returncode != 0:
        return "not a git checkout"
    dirty = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
    return head.stdout.strip() + (" + uncommitted changes" if dirty else "")


def default_config(config_path: str | os.PathLike, schema_path: str | os.PathLike) -> dict:
    """The default configuration: ``config_path`` with the schema's defaults filled in."""
    from snakemake.utils import validate

    with open_regular(config_path, "r", encoding="utf-8") as handle:
        config = yaml.safe_load(handle) or {}
    validate(config, os.fspath(schema_path), set_default=True)
    return config


def config_differences(default: dict, config: dict, prefix: str = "") -> list[str]:
    """``key: default -> value`` for each key whose value differs, dotted keys, sorted."""
    lines = []
    for key in sorted(set(default) | set(config), key=str):
        name = f"{prefix}{key}"
        old, new = default.get(key, "(absent)"), config.get(key, "(absent)")
        if isinstance(old, dict) and isinstance(new, dict):
            lines += config_differences(old, new, f"{name}.")
        elif old != new:
            lines.append(f"{name}: {_short(old)} -> {_short(new)}")
    return lines


def _short(value, limit: int = 80) -> str:
    text = value if value == "(absent)" else json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else the platform's processor string)."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def provenance(command: str, config: dict, config_path, schema_path, checkout) -> dict:
    """The provenance record the report shows (written by ``membench report provenance``): the
    command, commit, configuration differences, machine, and membench's and Snakemake's versions."""
    return {
        "command": command,
        "commit": git_commit(checkout),
        "config_differences": config_differences(default_config(config_path, schema_path), config),
        "cpu_model": cpu_model(),
        "cpu_cores": os.cpu_count(),
        "platform": platform.platform(),
        "membench_version": _version("membench"),
        "snakemake_version": _version("snakemake"),
    }


def _version(package: str) -> str:
    """The installed version of ``package``, or ``not installed``."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def read_provenance(path: str | os.PathLike) -> dict:
    """A provenance record written by ``membench report provenance``."""
    record = read_json_object(path, "provenance file not found")
    if not {"command", "commit", "config_differences"} <= set(record):
        raise InputError(path, "expected an object with command, commit and config_differences")
    return record


def machine_from_tables(tables: dict[str, pd.DataFrame]) -> dict[str, str]:
    """Each machine column's distinct values over the tables, joined (``device: cpu``)."""
    values: dict[str, list[str]] = {}
    for frame in tables.values():
        for column in MACHINE_COLUMNS:
            if column in frame.columns:
                for value in frame[column].dropna().unique():
                    text = f"{value:g}" if isinstance(value, float) else str(value)
                    values.setdefault(column, [])
                    if text not in values[column]:
                        values[column].append(text)
    return {column: ", ".join(values[column]) for column in MACHINE_COLUMNS if column in values}


def timing_load(tables: dict[str, pd.DataFrame]) -> dict[str, float]:
    """The highest 1-minute load average seen while each table's timing jobs ran (where recorded)."""
    loads = {}
    for name, frame in tables.items():
        if "load_1m_max" in frame.columns:
            load = pd.to_numeric(frame["load_1m_max"], errors="coerce").max()
            if pd.notna(load):
                loads[name] = float(load)
    return loads
