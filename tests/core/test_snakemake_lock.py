"""A Snakemake lock left by a killed Snakemake is removed; any other lock is left alone."""

import json
import os
import subprocess
import sys

import pytest

from membench.core import snakemake_lock


@pytest.fixture
def locked(tmp_path):
    (tmp_path / "locks").mkdir()
    (tmp_path / "locks" / "0.output.lock").write_text("results/x\n")
    return tmp_path


def _dead_pid():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_lock_of_a_dead_holder_is_removed(locked):
    snakemake_lock.record_owner(locked, pid=_dead_pid())
    assert "no longer running" in snakemake_lock.clear_stale_lock(locked)
    assert not (locked / "locks").exists() and not (locked / snakemake_lock.OWNER_NAME).exists()


def test_lock_of_a_live_holder_is_kept(locked):
    snakemake_lock.record_owner(locked)
    assert snakemake_lock.clear_stale_lock(locked) is None
    assert (locked / "locks" / "0.output.lock").exists()


def test_a_reused_pid_does_not_keep_a_stale_lock(locked):
    path = snakemake_lock.record_owner(locked)
    owner = json.loads(path.read_text())
    owner["start_ticks"] -= 1  # the recorded holder started earlier: this pid is another process now
    path.write_text(json.dumps(owner))
    assert snakemake_lock.clear_stale_lock(locked) is not None


@pytest.mark.parametrize(
    "owner", [None, "{not json", json.dumps({"host": "elsewhere", "pid": 1, "start_ticks": 0})]
)
def test_unknown_or_remote_holders_are_left_alone(locked, owner):
    if owner is not None:
        (locked / snakemake_lock.OWNER_NAME).write_text(owner)
    assert snakemake_lock.clear_stale_lock(locked) is None
    assert (locked / "locks" / "0.output.lock").exists()


def test_no_lock_nothing_to_do(tmp_path):
    snakemake_lock.record_owner(tmp_path, pid=os.getpid())
    assert snakemake_lock.clear_stale_lock(tmp_path) is None
