"""kill -9 at seeded random points of every long job type, then rerun: the job resumes or restarts,
its final metrics equal an uninterrupted run's (timings aside), and no partial output is ever left
under an output's name."""

from __future__ import annotations

import json

import faults
import lmdb
import pandas as pd
import pytest

from membench.core.metrics import read_metrics
from membench.data.images.lmdb_store import check_lmdb, read_metadata
from membench.memnet.generate import generate

pytestmark = pytest.mark.slow

JOB_FILES = (
    "metrics.json",
    "memlog.csv",
    "checkpoint.pt",
    "history.csv",
    "summary.csv",
    "beliefs.npy",
    "summary.parquet",
    "staleness.csv",
)


def _hotconv_train(fold, outdir):
    return faults.membench(
        "hotconv",
        "train",
        "--variant",
        "hotconv_eco",
        "--dataset",
        "tiny",
        "--fold",
        "1",
        "--train",
        fold["train"],
        "--val",
        fold["val"],
        "--test",
        fold["test"],
        "--classes",
        fold["classes"],
        "--binaries",
        fold["binaries"],
        "--outdir",
        outdir,
        "--epochs",
        "4",
        "--batch-size",
        "8",
        "--max-len",
        "4096",
        "--learning-rate",
        "0.01",
        "--early-stopping-patience",
        "10",
        "--memory-probe-steps",
        "1",
        "--num-filters",
        "8",
        "--window-size",
        "16",
        "--stride",
        "16",
        "--fp-slice-size",
        "256",
        "--fp2-slice-size",
        "32",
        "--device",
        "cpu",
        "--sample-interval-s",
        "0",
        "--seed",
        "0",
    )


def _division_train(digits, outdir):
    return faults.membench(
        "division",
        "train",
        "--outdir",
        outdir,
        "--variant",
        "division",
        "--width",
        "4",
        "--image-size",
        "16",
        "--train-lmdb",
        digits["train"],
        "--val-lmdb",
        digits["val"],
        "--dataset",
        "digits",
        "--epochs",
        "2",
        "--batch-size",
        "16",
        "--num-workers",
        "0",
        "--kernels",
        "torch",
        "--device",
        "cpu",
        "--sample-interval-s",
        "0",
    )


def _division_point(outdir):
    return faults.membench(
        "division",
        "memory",
        "--outdir",
        outdir,
        "--variant",
        "division",
        "--width",
        "4",
        "--batch-size",
        "4",
        "--image-size",
        "16",
        "--kernels",
        "torch",
        "--device",
        "cpu",
        "--sample-interval-s",
        "0",
    )


def _appclass_bench(graphs, outdir):
    return faults.membench(
        "appclass",
        "bench",
        *graphs,
        "--dataset",
        "rmat7/induced5",
        "--outdir",
        outdir,
        "--implementation",
        "torch",
        "--threads",
        "1",
        "--repeats",
        "1",
        "--device",
        "cpu",
        "--sample-interval-s",
        "0",
    )


def _kill_job_and_compare(tmp_path, make_command, job, seed, started_file=None):
    clean = tmp_path / "clean"
    # The kills are drawn from the uninterrupted run's kill window: once ``started_file`` exists
    # (the first checkpoint), else from its start.
    reference = faults.run(
        make_command(clean), started=(lambda: (clean / started_file).exists()) if started_file else None
    )
    expected = faults.comparable(read_metrics(clean / "metrics.json"))
    outdir = tmp_path / "killed"

    def after_kill():
        faults.assert_metrics_absent_or_complete(outdir)
        faults.assert_no_visible_partial_files(outdir, JOB_FILES)

    started = (lambda: (outdir / started_file).exists()) if started_file else None
    span = reference.window_s
    delays = faults.kill_delays(seed, faults.KILLS_PER_JOB, span, low=0.0 if started_file else 0.15)
    outcome = faults.kill_and_rerun(make_command(outdir), delays, after_kill, started=started, job=job)
    assert outcome.kills_injected >= 1, "no kill landed while the job ran"
    assert faults.comparable(read_metrics(outdir / "metrics.json")) == expected
    faults.record_survived()
    return read_metrics(outdir / "metrics.json")


def test_hotconv_train_resumes_after_kill_9(bodmas_fold, tmp_path):
    record = _kill_job_and_compare(
        tmp_path,
        lambda out: _hotconv_train(bodmas_fold, out),
        "hotconv train",
        11,
        started_file="checkpoint.pt",
    )
    assert record["epochs_run"] == 4


def test_division_train_resumes_after_kill_9(digits, tmp_path):
    _kill_job_and_compare(
        tmp_path, lambda out: _division_train(digits, out), "division train", 12, started_file="checkpoint.pt"
    )


def test_division_sweep_point_restarts_after_kill_9(tmp_path):
    _kill_job_and_compare(tmp_path, _division_point, "division memory point", 13)


def test_appclass_bench_restarts_after_kill_9(graphs, tmp_path):
    _kill_job_and_compare(tmp_path, lambda out: _appclass_bench(graphs, out), "appclass bench", 14)


def _records(path):
    with lmdb.open(str(path), readonly=True, lock=False) as env, env.begin() as txn:
        return list(txn.cursor())


def test_lmdb_build_is_never_left_half_written_after_kill_9(all_digits_folder, tmp_path):
    def command(out):
        return faults.membench(
            "images", "lmdb", "--root", all_digits_folder, "--split", "train", "--outdir", out
        )

    reference = faults.run(command(tmp_path / "clean"))
    outdir = tmp_path / "killed"

    def after_kill():
        if outdir.exists():  # only ever the complete LMDB
            assert read_metadata(outdir)[0] == read_metadata(tmp_path / "clean")[0]
            assert check_lmdb(outdir) == read_metadata(outdir)[0]
        assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) in (
            ["clean"],
            ["clean", "killed"],
        )

    # Kill while the LMDB is being written (its hidden temporary exists), at a seeded random point.
    writing = lambda: any(p.name.startswith(".killed.") for p in tmp_path.iterdir())  # noqa: E731
    delays = faults.kill_delays(15, faults.KILLS_PER_JOB, reference.wall_s, low=0.0, high=0.3)
    outcome = faults.kill_and_rerun(command(outdir), delays, after_kill, started=writing, job="images lmdb")
    assert outcome.kills_injected >= 1
    assert _records(outdir) == _records(tmp_path / "clean")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "clean",
        "killed",
    ]  # the killed builds' temporaries removed
    faults.record_survived()


def _robust_train(outdir):
    return faults.membench(
        "robust",
        "train",
        "--outdir",
        outdir,
        "--mode",
        "sequential",
        "--dataset",
        "digits",
        "--epochs",
        "3",
        "--train-limit",
        "256",
        "--test-limit",
        "64",
        "--hidden-units",
        "32",
        "--attack-steps",
        "2",
        "--batch-size",
        "32",
        "--eval-attack-steps",
        "3",
        "--eval-restarts",
        "1",
        "--guard-attack-steps",
        "2",
        "--guard-samples",
        "32",
        "--device",
        "cpu",
        "--sample-interval-s",
        "0",
        "--seed",
        "0",
    )


def test_robust_train_resumes_after_kill_9(tmp_path):
    record = _kill_job_and_compare(tmp_path, _robust_train, "robust train", 16, started_file="checkpoint.pt")
    assert record["epochs_done"] == 3
    # The epochs trained before a kill (read back from the checkpoint) count in the timing, but not
    # the first of each process (its warm-up).
    processes = pd.read_csv(tmp_path / "killed" / "history.csv")["timing_process"].nunique()
    assert record["time_unit"] == "epoch" and record["time_samples"] == (3 - processes or 3)
    for name in ("history.csv", "staleness.csv"):
        assert faults.comparable_table(tmp_path / "killed" / name).equals(
            faults.comparable_table(tmp_path / "clean" / name)
        )


def _memnet_measure(configs, run_dir):
    return faults.membench(
        "memnet",
        "measure",
        "--configs",
        configs,
        "--family",
        "mlp",
        "--records-dir",
        run_dir / "records",
        "--out",
        run_dir / "measurements.csv",
        "--device",
        "cpu",
        "--train-steps",
        "1",
        "--threads",
        "1",
        "--sample-interval-s",
        "0",
    )


def test_memnet_measure_resumes_after_kill_9(tmp_path):
    configs = tmp_path / "configs.csv"
    ranges = {"input": (4, 16), "output": (2, 4), "depth": (1, 2), "batch": (2, 8)}
    table = generate("mlp", 4, 0, ranges)
    table.to_csv(configs, index=False)
    reference = faults.run(_memnet_measure(configs, tmp_path / "clean"))
    run_dir = tmp_path / "killed"
    expected_ids = {f"{i}.json" for i in table["config_id"]}

    first_written_ns = {}

    def after_kill():
        # The table appears only whole, after every record (a run can finish, or write its table,
        # before its kill lands); each record is a complete measurement.
        faults.assert_no_visible_partial_files(run_dir / "records", expected_ids)
        if (run_dir / "measurements.csv").exists():
            assert {path.name for path in (run_dir / "records").glob("*.json")} == expected_ids
            assert len(pd.read_csv(run_dir / "measurements.csv")) == len(expected_ids)
        for path in (run_dir / "records").glob("*.json"):
            assert json.loads(path.read_text())["status"] == "SUCCESSFUL"
            first_written_ns.setdefault(path.name, path.stat().st_mtime_ns)

    # The kill window opens when the records directory exists (the configurations are read).
    started = lambda: (run_dir / "records").exists()  # noqa: E731
    delays = faults.kill_delays(17, faults.KILLS_PER_JOB, reference.wall_s * 0.5, low=0.0)
    outcome = faults.kill_and_rerun(
        _memnet_measure(configs, run_dir), delays, after_kill, started=started, job="memnet measure"
    )
    assert outcome.kills_injected >= 1, "no kill landed while the job ran"
    killed, clean = run_dir / "measurements.csv", tmp_path / "clean" / "measurements.csv"
    assert faults.comparable_table(killed).equals(faults.comparable_table(clean))
    # A configuration measured before a kill is never measured again.
    records = run_dir / "records"
    assert {name: (records / name).stat().st_mtime_ns for name in first_written_ns} == first_written_ns
    record = json.loads(next(records.glob("*.json")).read_text())
    assert (
        record["memory_source"] == "train_alloc_peak_mib"
        and record["torch_version"]
        and record["device_name"]
    )
    # Memory is memnet's result, not a side measurement: on CPU the allocator-level peaks are exact.
    result_columns = ["config_id", "memory_mib", "activation_mib"]
    assert pd.read_csv(killed)[result_columns].equals(pd.read_csv(clean)[result_columns])
    faults.record_survived()
