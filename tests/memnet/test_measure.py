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
