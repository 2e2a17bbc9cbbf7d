"""Recover Snakemake's working-directory lock after the Snakemake process was killed.

Snakemake locks its working directory (``.snakemake/locks``) and removes the lock when it exits;
killed with SIGKILL (an out-of-memory kill, a lost login session, a scheduler's time limit) it
leaves the lock behind, and every later ``snakemake`` refuses to start until ``--unlock``. The
workflow records which process holds the lock (:func:`record_owner`, from ``onstart``) and, when it
starts again, removes a lock whose holder is gone (:func:`clear_stale_lock`). A lock whose holder is
alive, runs on another host, or was not recorded is left alone.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
from pathlib import Path

from membench.core.processes import process_alive, start_ticks_of

__all__ = ["clear_stale_lock", "OWNER_NAME", "record_owner"]

OWNER_NAME = "membench-lock-owner.json"


def record_owner(snakemake_dir: str | os.PathLike = ".snakemake", pid: int | None = None) -> Path:
    """Record this host and ``pid`` (default: this process) as the holder of the lock."""
    pid = os.getpid() if pid is None else pid
    path = Path(snakemake_dir) / OWNER_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{pid}.tmp")
    tmp.write_text(json.dumps({"host": socket.gethostname(), "pid": pid, "start_ticks": start_ticks_of(pid)}))
    os.replace(tmp, path)
    return path


def clear_stale_lock(snakemake_dir: str | os.PathLike = ".snakemake") -> str | None:
    """Remove the lock when its recorded holder on this host has exited; return what was done."""
    snakemake_dir = Path(snakemake_dir)
    locks = snakemake_dir / "locks"
    owner_path = snakemake_dir / OWNER_NAME
    if not locks.is_dir() or not any(locks.iterdir()) or not owner_path.is_file():
        return None
    try:
        owner = json.loads(owner_path.read_text())
        host, pid, start_ticks = owner["host"], int(owner["pid"]), owner.get("start_ticks")
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if host != socket.gethostname() or process_alive(pid, start_ticks):
        return None
    shutil.rmtree(locks, ignore_errors=True)
    owner_path.unlink(missing_ok=True)
    return f"removed the lock of Snakemake process {pid}, which is no longer running (killed?)"
