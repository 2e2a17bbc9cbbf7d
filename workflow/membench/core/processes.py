"""Processes: whether one that left something behind (a lock, a temporary file) still runs, and
the command line that runs a membench command in a fresh process."""

from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["membench_command", "process_alive", "start_ticks_of"]


def process_alive(pid: int, start_ticks: int | None = None) -> bool:
    """True when process ``pid`` runs on this host and, if ``start_ticks`` is given, is the process
    that started then (pids are reused); ``False`` once it has exited."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    now = start_ticks_of(pid)
    return start_ticks is None or now is None or now == start_ticks


def start_ticks_of(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22), if readable."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat[stat.rindex(")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def membench_command(*arguments: str) -> list[str]:
    """The command line of ``membench <arguments>`` run by this Python, for a point measured in a
    fresh process (the subprocess imports this same package)."""
    return [sys.executable, "-m", "membench.cli", *map(str, arguments)]
