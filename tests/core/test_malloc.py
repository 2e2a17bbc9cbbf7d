"""membench.core.malloc: with freed memory kept, a map allocated again after it was freed is not
faulted in again (each run in a fresh process: the policy is process state)."""

from __future__ import annotations

import json
import platform
import subprocess
import sys

import pytest

_FAULTS_OF_REALLOCATION = """
import json, resource, sys, torch
from membench.core.malloc import keep_freed_memory

kept = keep_freed_memory() if sys.argv[1] == "keep" else None


def step():  # ten 4 MiB maps alive at once, then freed, as a forward pass's activations
    maps = [torch.ones(2**20) for _ in range(10)]
    del maps


step()  # glibc's adaptive thresholds settle on the size
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    step()
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
print(json.dumps({"kept": kept, "faults": faults}))
"""


def _faults(mode: str) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", _FAULTS_OF_REALLOCATION, mode], capture_output=True, text=True, check=True
    )
    return json.loads(result.stdout)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the policy is glibc's")
def test_kept_memory_is_reused_without_page_faults():
    kept, default = _faults("keep"), _faults("default")
    assert kept["kept"] is True
    # 10 steps of 40 MiB are 102,400 pages: by default most fault again, kept few do.
    assert default["faults"] > 50_000
    assert kept["faults"] * 10 < default["faults"]
