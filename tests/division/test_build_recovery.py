"""The kernel build recovers: a failed build is recorded and jobs fall back to the pure-torch
kernels; a build killed while holding the lock (SIGKILL, SIGTERM) never makes the next one wait, and
the next one finishes what it left; a build started while another runs waits for it and builds
nothing."""

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
from membench.core.extension import CACHE_DIR_VARIABLE, sources_digest
from membench.core.processes import membench_command
from membench.division.extension import LOCK_NAME, MANIFEST_NAME, SPEC, build_extension, build_lock
from membench.division.kernels import select_kernels

pytestmark = pytest.mark.slow

_HOLD_LOCK = """
import sys, time
from pathlib import Path
from membench.division.extension import build_lock

entry = Path(sys.argv[1])
with build_lock(entry):
    (entry / "build" / "lock").write_text("")  # what torch's builder leaves when killed
    print("holding", flush=True)
    time.sleep(600)
"""

# Holds the lock of a build as a build does, then writes its manifest and releases the lock.
_BUILD_WHILE_HOLDING = """
import json, sys, time
from pathlib import Path
from membench.core import atomic
from membench.division.extension import build_lock

entry, manifest = Path(sys.argv[1]), json.loads(sys.argv[2])
with build_lock(entry):
    print("holding", flush=True)
    time.sleep(2)
    atomic.write_json(entry / "manifest.json", {**manifest, "built_at": "by the other build"})
"""


def _process(script: str, *arguments: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    process = subprocess.Popen(
        [sys.executable, "-c", script, *arguments], stdout=subprocess.PIPE, text=True, env=env
    )
    assert process.stdout.readline().strip() == "holding"
    return process


def _unfinished_copy(built_manifest: Path, cache: Path, linked: bool = False) -> Path:
    """The session's build copied into ``cache`` (same key) as a build leaves it before writing its
    manifest: the objects compiled, and the library unless the linker was killed (not ``linked``)."""
    entry = cache / SPEC.name / built_manifest.parent.name
    shutil.copytree(built_manifest.parent, entry)
    if not linked:
        (entry / json.loads(built_manifest.read_text())["library"]).unlink()
    (entry / MANIFEST_NAME).unlink()
    return entry


def _failed_build(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("CXX", shutil.which("false"))
    manifest = build_extension(tmp_path / "cache", cuda="no", outdir=tmp_path / "build")
    assert manifest["status"] == "failed" and manifest["error"]
    return tmp_path / "build" / MANIFEST_NAME


def test_a_failed_build_is_recorded_not_cached_and_auto_jobs_run_the_torch_kernels(
    tmp_path, monkeypatch, capsys
):
    manifest_path = _failed_build(tmp_path, monkeypatch)
    recorded = json.loads(manifest_path.read_text())
    assert recorded["status"] == "failed" and "library" not in recorded
    assert not (Path(recorded["cache_entry"]) / MANIFEST_NAME).exists()  # the next build tries again
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
    manifest = build_extension(tmp_path / "cache", cuda="no")
    assert manifest["status"] == "failed" and "ninja not found" in manifest["error"]


def test_the_build_command_exits_0_and_says_the_build_failed(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CXX", shutil.which("false"))
    assert main(["division", "build", "--outdir", str(tmp_path / "b"), "--cuda", "no"]) == 0
    assert json.loads((tmp_path / "b" / MANIFEST_NAME).read_text())["status"] == "failed"


def test_the_build_command_names_the_cached_build_for_jobs_anywhere(built_manifest, tmp_path, monkeypatch):
    """``membench division build --outdir`` finds the cached build (no compile) and leaves a manifest
    that jobs load from any directory: its library is the cache's, by absolute path."""
    assert main(["division", "build", "--outdir", str(tmp_path / "b"), "--cuda", "no"]) == 0
    pointer = json.loads((tmp_path / "b" / MANIFEST_NAME).read_text())
    cached = json.loads(built_manifest.read_text())
    assert pointer["built_at"] == cached["built_at"]  # found, not rebuilt
    assert Path(pointer["library"]) == (built_manifest.parent / cached["library"]).resolve()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert (
        select_kernels("extension", tmp_path / "b" / MANIFEST_NAME).value
        == select_kernels("extension", built_manifest).value
    )


def test_a_job_run_from_another_directory_records_the_cached_kernels(built_manifest, tmp_path, monkeypatch):
    """A job with no manifest named, run anywhere, loads the per-user cache's build (this run's,
    MEMBENCH_CACHE_DIR) and records it: ``cpp-`` and the sources' digest."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    arguments = ["--width", "4", "--batch-size", "2", "--image-size", "16", "--device", "cpu"]
    code = main(["division", "memory", "--outdir", "job", "--variant", "division", *arguments])
    assert code == 0
    record = json.loads((elsewhere / "job" / "metrics.json").read_text())
    assert record["kernels"] == f"cpp-{sources_digest(SPEC.source_paths())[:8]}"
    assert record["kernels_fallback_reason"] is None
    assert record["kernels_cpu_isa"] == select_kernels("extension", built_manifest).cpu_isa
    assert sorted(p.name for p in elsewhere.iterdir()) == ["job"]
    # A method that compresses nothing runs torch's operators and says so.
    assert main(["division", "memory", "--outdir", "vanilla", "--variant", "vanilla", *arguments]) == 0
    vanilla = json.loads((elsewhere / "vanilla" / "metrics.json").read_text())
    assert vanilla["kernels"] == "torch" and vanilla["kernels_cpu_isa"] is None


def test_a_live_holder_is_waited_for_with_a_timeout_naming_its_pid(tmp_path):
    (tmp_path / "build").mkdir()
    holder = _process(_HOLD_LOCK, str(tmp_path))
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
def test_a_build_killed_holding_the_locks_is_finished_by_the_next(built_manifest, tmp_path, signum):
    entry = _unfinished_copy(built_manifest, tmp_path / "cache")
    holder = _process(_HOLD_LOCK, str(entry))
    holder.send_signal(signum)
    holder.wait()
    assert (entry / LOCK_NAME).read_text().strip() == str(holder.pid)
    assert (entry / "build" / "lock").exists()
    # The next build, a process of its own as a job's would be.
    env = {**os.environ, CACHE_DIR_VARIABLE: str(tmp_path / "cache")}
    command = membench_command("division", "build", "--cuda", "no", "--lock-timeout-s", "120")
    subprocess.run(command, check=True, env=env, timeout=600, capture_output=True)
    manifest = json.loads((entry / MANIFEST_NAME).read_text())
    assert manifest["status"] == "built" and manifest["cache_entry"] == str(entry.resolve())
    assert not (entry / "build" / "lock").exists() and (entry / manifest["library"]).is_file()
    recovered = select_kernels("extension", entry / MANIFEST_NAME)
    assert recovered.value == select_kernels("extension", built_manifest).value


def test_a_build_started_while_another_runs_waits_and_builds_nothing(built_manifest, tmp_path):
    entry = _unfinished_copy(built_manifest, tmp_path / "cache", linked=True)
    other = _process(_BUILD_WHILE_HOLDING, str(entry), built_manifest.read_text())
    try:
        start = time.monotonic()
        manifest = build_extension(tmp_path / "cache", cuda="no", lock_timeout_s=120)
        waited_s = time.monotonic() - start
    finally:
        other.wait(timeout=60)
    assert manifest["built_at"] == "by the other build" and waited_s > 1.0
