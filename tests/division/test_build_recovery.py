"""The kernel build recovers: a failed build is recorded and jobs fall back to the pure-torch
kernels; a build killed while holding the lock (SIGKILL, SIGTERM) never makes the next one wait."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from membench.cli import main
from membench.core.errors import InputError
from membench.division.extension import LOCK_NAME, build_extension, build_lock
from membench.division.kernels import select_kernels

pytestmark = pytest.mark.slow

_HOLD_LOCK = """
import sys, time
from pathlib import Path
from membench.division.extension import build_lock

with build_lock(sys.argv[1]):
    (Path(sys.argv[1]) / "cpu" / "lock").write_text("")  # what torch's builder leaves when killed
    print("holding", flush=True)
    time.sleep(600)
"""


def _failed_build(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("CXX", shutil.which("false"))
    manifest = build_extension(tmp_path / "build", cuda="no")
    assert manifest["status"] == "failed" and manifest["error"]
    return tmp_path / "build" / "manifest.json"


def test_a_failed_build_is_recorded_and_auto_jobs_run_the_torch_kernels(tmp_path, monkeypatch, capsys):
    manifest_path = _failed_build(tmp_path, monkeypatch)
    recorded = json.loads(manifest_path.read_text())
    assert recorded["status"] == "failed" and "library" not in recorded
    with pytest.raises(InputError, match="the build failed"):
        select_kernels("extension", manifest_path)
    kernels = select_kernels("auto", manifest_path)
    assert kernels.name == "torch" and "the build failed" in kernels.fallback_reason
    outdir = tmp_path / "job"
    code = main(
        [
            "division",
            "memory",
            "--outdir",
            str(outdir),
            "--variant",
            "division",
            "--width",
            "4",
            "--batch-size",
            "2",
            "--image-size",
            "16",
            "--kernels",
            "auto",
            "--build-manifest",
            str(manifest_path),
            "--device",
            "cpu",
            "--sample-interval-s",
            "0",
        ]
    )
    assert code == 0
    record = json.loads((outdir / "metrics.json").read_text())
    assert record["kernels"] == "torch" and "the build failed" in record["kernels_fallback_reason"]


def test_a_missing_ninja_is_a_recorded_build_failure(tmp_path, monkeypatch):
    monkeypatch.setenv("CXX", shutil.which("c++") or shutil.which("g++") or "c++")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setitem(sys.modules, "ninja", None)
    manifest = build_extension(tmp_path / "build", cuda="no")
    assert manifest["status"] == "failed" and "ninja not found" in manifest["error"]


def test_the_build_command_exits_0_and_says_the_build_failed(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CXX", shutil.which("false"))
    assert main(["division", "build", "--outdir", str(tmp_path / "b"), "--cuda", "no"]) == 0
    assert json.loads((tmp_path / "b" / "manifest.json").read_text())["status"] == "failed"


def _holder(outdir: Path) -> subprocess.Popen:
    (outdir / "cpu").mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_LOCK, str(outdir)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert holder.stdout.readline().strip() == "holding"
    return holder


def test_a_live_holder_is_waited_for_with_a_timeout_naming_its_pid(tmp_path):
    holder = _holder(tmp_path)
    try:
        start = time.monotonic()
        with pytest.raises(InputError, match=f"pid {holder.pid}"):
            with build_lock(tmp_path, timeout_s=0.5):
                pass
        assert time.monotonic() - start < 10
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_a_build_killed_holding_the_locks_does_not_block_the_next(built_manifest, signum):
    outdir = built_manifest.parent
    holder = _holder(outdir)
    holder.send_signal(signum)
    holder.wait()
    assert (outdir / LOCK_NAME).read_text().strip() == str(holder.pid)
    assert (outdir / "cpu" / "lock").exists()
    manifest = build_extension(outdir, cuda="no", lock_timeout_s=120)
    assert manifest["status"] == "built"
    assert not (outdir / "cpu" / "lock").exists()
    assert select_kernels("extension", built_manifest).name == "extension"
