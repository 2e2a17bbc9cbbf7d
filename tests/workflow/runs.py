"""Snakemake run on the test config from a test: the command line, and the run. Imported by the
tests as ``workflow.runs``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TEST_CONFIG = Path(__file__).with_name("config.yaml")


def snakemake_command(workdir: Path, *args: str, configfile: Path = TEST_CONFIG) -> list[str]:
    """``snakemake`` of this checkout's workflow in ``workdir`` on ``configfile``, one core (the suite's
    other xdist worker has the other: two would make torch's threads wait on each other), ``args``."""
    return [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(REPO / "Snakefile"),
        "--directory",
        str(workdir),
        "--configfile",
        str(configfile),
        "--cores",
        "1",
        *args,
    ]


def snakemake(workdir: Path, *args: str, configfile: Path = TEST_CONFIG) -> subprocess.CompletedProcess:
    """The run of :func:`snakemake_command`, its output captured; this Python's scripts on PATH."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    command = snakemake_command(workdir, *args, configfile=configfile)
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
