"""Measurement: one process per configuration; the cleaned table loads through the published
reader (tests/reliability kills a measurement half-way and reruns it)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from membench.memnet.dataset import load_jobs
from membench.memnet.generate import generate

REPO = Path(__file__).resolve().parents[2]
RANGES = {"input": (4, 16), "output": (2, 4), "depth": (1, 2), "batch": (2, 8)}
STABLE = [
    "config_id",
    "status",
    "total_activations",
    "total_parameters",
    "layers",
    "activation_mib",
    "memory_mib",
]


def _measure(configs: Path, records: Path, out: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO / "workflow")}
    command = [
        sys.executable,
        "-m",
        "membench.cli",
        "memnet",
        "measure",
        "--configs",
        str(configs),
        "--family",
        "mlp",
        "--records-dir",
        str(records),
        "--out",
        str(out),
        "--device",
        "cpu",
        "--train-steps",
        "1",
        "--threads",
        "1",
        "--sample-interval-s",
        "0",
    ]
    return subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )


def test_generator_is_seeded():
    first, again = generate("mlp", 5, 3, RANGES), generate("mlp", 5, 3, RANGES)
    assert first.equals(again) and not first.equals(generate("mlp", 5, 4, RANGES))
    assert first["input"].between(4, 16).all() and first["batch"].between(2, 8).all()


def test_cleaned_measurements_load_through_the_published_reader(tmp_path):
    configs = tmp_path / "configs.csv"
    generate("mlp", 2, 1, RANGES).to_csv(configs, index=False)
    assert _measure(configs, tmp_path / "records", tmp_path / "measured.csv").wait(timeout=600) == 0
    env = {**os.environ, "PYTHONPATH": str(REPO / "workflow")}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "membench.cli",
            "memnet",
            "clean",
            "--configs",
            str(configs),
            "--measurements",
            str(tmp_path / "measured.csv"),
            "--family",
            "mlp",
            "--out",
            str(tmp_path / "mlp.csv"),
        ],
        env=env,
        check=True,
        capture_output=True,
    )
    jobs = load_jobs(tmp_path / "mlp.csv", "mlp")
    assert len(jobs) == 2 and (jobs.frame["memory_mib"] > 0).all()
    assert (
        jobs.frame["total_activations"] == jobs.frame["layers"].map(lambda ls: sum(a for _, a, _ in ls))
    ).all()


def test_target_is_nvml_on_a_gpu_with_a_fallback_and_the_allocator_on_a_cpu():
    from membench.memnet.measure import target_source

    assert target_source({"nvml_peak_mib": 900.0, "cuda_peak_reserved_mib": 800.0}, True) == "nvml_peak_mib"
    assert (
        target_source({"nvml_peak_mib": None, "cuda_peak_reserved_mib": 800.0}, True)
        == "cuda_peak_reserved_mib"
    )
    assert (
        target_source({"nvml_peak_mib": None, "train_alloc_peak_mib": 3.0}, False) == "train_alloc_peak_mib"
    )


def _fake_job(memory_mib):
    def job(device, steps, optimizer, interval):
        return {"status": "SUCCESSFUL", "memory_mib": memory_mib}

    return job


def test_a_record_is_reused_only_for_the_same_configuration_options_and_code(tmp_path, caplog):
    from membench.memnet.measure import run_isolated

    identity = {"config_id": "mlp00000", "filename": "mlp00000", "family": "mlp"}
    first = run_isolated([(identity, {"batch": 4}, _fake_job(1.0))], tmp_path, device="cpu", threads=1)
    again = run_isolated([(identity, {"batch": 4}, _fake_job(2.0))], tmp_path, device="cpu", threads=1)
    assert first[0]["memory_mib"] == again[0]["memory_mib"] == 1.0  # the same measurement: not repeated
    edited = run_isolated([(identity, {"batch": 8}, _fake_job(3.0))], tmp_path, device="cpu", threads=1)
    assert edited[0]["memory_mib"] == 3.0 and "options changed: determines" in caplog.text
    fewer_steps = run_isolated(
        [(identity, {"batch": 8}, _fake_job(4.0))], tmp_path, device="cpu", steps=1, threads=1
    )
    assert fewer_steps[0]["memory_mib"] == 4.0 and "run_identity" not in fewer_steps[0]


def test_a_foreign_file_named_like_a_record_is_refused_not_deleted(tmp_path):

    from membench.core.errors import InputError
    from membench.memnet.measure import run_isolated

    (tmp_path / "mlp00000.json").write_text('{"mine": true}')
    with pytest.raises(InputError, match="not written by membench"):
        run_isolated(
            [({"config_id": "mlp00000", "filename": "x", "family": "mlp"}, {}, _fake_job(1.0))],
            tmp_path,
            device="cpu",
            threads=1,
        )
    assert (tmp_path / "mlp00000.json").read_text() == '{"mine": true}'


def test_a_job_sharing_the_gpu_is_charged_its_own_process_only():
    from membench.memnet.measure import target_source

    summary = {"nvml_peak_mib": 900.0, "nvml_process_peak_mib": 300.0, "train_alloc_peak_mib": 3.0}
    assert target_source(summary, True, per_process=True) == "nvml_process_peak_mib"
    assert target_source({**summary, "nvml_process_peak_mib": None}, True, per_process=True) is None
    assert target_source(summary, False, per_process=True) == "train_alloc_peak_mib"


def _out_of_memory_once(marker):
    """A job that runs out of memory the first time it runs and fits every time after."""

    def job(device, steps, optimizer, interval):
        if not marker.exists():
            marker.write_text("")
            return {"status": "OOM_CRASH", "memory_mib": None}
        return {"status": "SUCCESSFUL", "memory_mib": 5.0}

    return job


def test_jobs_measured_side_by_side_and_an_out_of_memory_among_them_measured_again_alone(tmp_path):
    from membench.memnet.measure import run_isolated

    jobs = [
        ({"config_id": "mlp00000", "filename": "a", "family": "mlp"}, {"batch": 4}, _fake_job(1.0)),
        ({"config_id": "mlp00001", "filename": "b", "family": "mlp"}, {"batch": 8}, _fake_job(2.0)),
        (
            {"config_id": "mlp00002", "filename": "c", "family": "mlp"},
            {"batch": 16},
            _out_of_memory_once(tmp_path / "ran"),
        ),
    ]
    records = run_isolated(jobs, tmp_path / "records", device="cpu", threads=1, jobs_at_once=2)
    assert [(r["status"], r["memory_mib"], r["jobs_at_once"]) for r in records] == [
        ("SUCCESSFUL", 1.0, 2),
        ("SUCCESSFUL", 2.0, 2),
        ("SUCCESSFUL", 5.0, 1),
    ]
    # Resumed: every record is of this measurement (the lone one too), so none is measured again.
    again = run_isolated(
        [(labels, determines, _fake_job(9.0)) for labels, determines, _ in jobs],
        tmp_path / "records",
        device="cpu",
        threads=1,
        jobs_at_once=3,
    )
    assert [r["memory_mib"] for r in again] == [1.0, 2.0, 5.0]
    # One at a time charges the device's count: another measurement, so every job is measured anew.
    alone = run_isolated(
        [(labels, determines, _fake_job(7.0)) for labels, determines, _ in jobs],
        tmp_path / "records",
        device="cpu",
        threads=1,
    )
    assert [(r["memory_mib"], r["jobs_at_once"]) for r in alone] == [(7.0, 1)] * 3
