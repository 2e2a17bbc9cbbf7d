"""Kill the whole workflow (Snakemake and its jobs) with SIGKILL mid-run: a plain ``snakemake``
again completes, with the same tables as an uninterrupted run."""

from __future__ import annotations

import subprocess
import sys

import faults
import pytest
import yaml
from workflow.runs import TEST_CONFIG, snakemake_command

from membench.core import snakemake_lock

pytestmark = [pytest.mark.workflow, pytest.mark.slow]

TABLES = ("results/tables/datasets.csv", "results/tables/appclass.csv")


def test_killed_workflow_completes_on_rerun_with_the_same_tables(tmp_path):
    # The pure-torch appclass kernels: no C++ build, whose compile time would dominate the runs, so
    # the kills land among the data, benchmark and table jobs (killed builds:
    # tests/division/test_build_recovery.py).
    config = yaml.safe_load(TEST_CONFIG.read_text())
    for variant in config["appclass"]["variants"]:
        variant["kernels"] = "torch"
    configfile = tmp_path / "config.yaml"
    configfile.write_text(yaml.safe_dump(config))
    clean, killed = tmp_path / "clean", tmp_path / "killed"
    # Snakemake's own 1 s rate window: with the profile's 10 s one a finished Snakemake lives on for
    # up to 10 s with its lock released, and a kill landing there would test nothing.
    arguments = (*TABLES, "--max-jobs-per-timespan", "100/1s")
    reference = faults.run(snakemake_command(clean, *arguments, configfile=configfile), timeout_s=900)
    # Kill once a job has finished (the lock is held and some outputs exist), at a seeded random time.
    first_output = killed / "results" / "data" / "bodmas" / "tiny" / "metadata.csv"
    delays = faults.kill_delays(21, faults.KILLS_PER_JOB, reference.wall_s, low=0.0, high=0.5)

    locks_left = []

    def after_kill():
        locks = killed / ".snakemake" / "locks"
        locks_left.append(locks.is_dir() and any(locks.iterdir()))
        for table in TABLES:
            if (killed / table).exists():
                faults.comparable_table(killed / table)  # a table present is a whole one

    outcome = faults.kill_and_rerun(
        snakemake_command(killed, *arguments, configfile=configfile),
        delays,
        after_kill,
        started=first_output.exists,
        job="snakemake (whole workflow)",
    )
    assert outcome.kills_injected >= 1 and any(locks_left), "no kill left Snakemake's lock behind"
    if locks_left[-1]:
        assert "removed the lock" in outcome.final.output
    for table in TABLES:
        assert faults.comparable_table(killed / table).equals(faults.comparable_table(clean / table)), table
    faults.record_survived()


def test_a_dead_snakemakes_lock_is_removed_by_a_run_only(tmp_path):
    # The lock and owner record a killed Snakemake leaves behind.
    snakemake_dir = tmp_path / ".snakemake"
    (snakemake_dir / "locks").mkdir(parents=True)
    (snakemake_dir / "locks" / "0.input.lock").write_text("x\n")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    snakemake_lock.record_owner(snakemake_dir, pid=dead.pid)
    for args in (["-n"], ["--lint"]):
        checked = faults.run(snakemake_command(tmp_path, *args))
        assert "removed the lock" not in checked.output, args
        assert (snakemake_dir / "locks" / "0.input.lock").exists(), f"{args} removed the lock"
    ran = faults.run(snakemake_command(tmp_path, "results/data/bodmas/tiny/metadata.csv"))
    assert ran.returncode == 0 and "removed the lock of Snakemake process" in ran.output, ran.output[-3000:]
    assert (tmp_path / "results" / "data" / "bodmas" / "tiny" / "metadata.csv").exists()


@pytest.mark.parametrize("kernels,builds", [("torch", False), ("auto", True)])
def test_division_jobs_with_torch_kernels_do_not_wait_for_the_build(tmp_path, kernels, builds):
    config = yaml.safe_load(TEST_CONFIG.read_text())
    config["division"]["kernels"] = kernels
    configfile = tmp_path / "config.yaml"
    configfile.write_text(yaml.safe_dump(config))
    dry = faults.run(snakemake_command(tmp_path / "work", "-n", configfile=configfile))
    assert ("division_build" in dry.output) == builds
    assert "division_memory" in dry.output


@pytest.mark.parametrize("kernels,builds", [("torch", False), ("auto", True)])
def test_appclass_jobs_with_torch_kernels_do_not_wait_for_the_build(tmp_path, kernels, builds):
    config = yaml.safe_load(TEST_CONFIG.read_text())
    for variant in config["appclass"]["variants"]:
        variant["kernels"] = kernels
    configfile = tmp_path / "config.yaml"
    configfile.write_text(yaml.safe_dump(config))
    dry = faults.run(
        snakemake_command(tmp_path / "work", "-n", "-p", "results/tables/appclass.csv", configfile=configfile)
    )
    assert ("appclass_build" in dry.output) == builds
    assert ("--build-manifest" in dry.output) == builds
    assert "appclass_bench" in dry.output
