"""membench.core.malloc: with freed memory kept, a freed map stays in the process for the next
allocation, where glibc's defaults hand it back to the kernel (each run in a fresh process: the
policy is process state; glibc's own accounting, mallinfo2, says where the bytes are)."""

from __future__ import annotations

import json
import platform
import subprocess
import sys

import pytest

_FREED_BYTES_KEPT = """
import ctypes, json, sys, torch
from membench.core.malloc import keep_freed_memory


FIELDS = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()


class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in FIELDS]


libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
kept = keep_freed_memory() if sys.argv[1] == "keep" else None
free_before = libc.mallinfo2().fordblks
torch.ones(30 * 2**18).sum()  # a 30 MiB map, written and freed
print(json.dumps({"kept": kept, "freed_mib_kept": (libc.mallinfo2().fordblks - free_before) / 2**20}))
"""


def _run(mode: str) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", _FREED_BYTES_KEPT, mode], capture_output=True, text=True, check=True
    )
    return json.loads(result.stdout)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the policy is glibc's")
def test_a_freed_map_stays_in_the_process_for_reuse():
    kept, default = _run("keep"), _run("default")
    assert kept["kept"] is True
    # By default the first large block is mapped on its own and unmapped when freed.
    assert default["freed_mib_kept"] < 1
    assert kept["freed_mib_kept"] >= 30
