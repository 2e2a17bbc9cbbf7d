"""memnet on a GPU: configurations measured one process each with NVML, cleaned into GPUMemNet's
format; the GPU measurement of a job lies above FakeTensor's count of its tensors (the CUDA
context and the allocator's cache are on top)."""

import pandas as pd
import pytest
import torch

from membench.memnet.clean import clean_records
from membench.memnet.configs import config_of
from membench.memnet.dataset import DEFAULT_BINS, load_jobs
from membench.memnet.estimators import new_estimator
from membench.memnet.generate import generate
from membench.memnet.measure import measure_configs

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

RANGES = {"input": (64, 256), "classes": (2, 10), "depth": (1, 3), "filters": (8, 32), "batch": (4, 16)}


def test_cnn_jobs_are_measured_with_nvml_and_exceed_their_tensors(tmp_path):
    configs = generate("cnn", 3, seed=0, ranges=RANGES)
    records = measure_configs(configs, "cnn", tmp_path / "records", device="cuda", steps=2, timeout_s=300)
    assert [r["status"] for r in records] == ["SUCCESSFUL"] * 3
    assert {r["memory_source"] for r in records} <= {"nvml_peak_mib", "cuda_peak_reserved_mib"}
    typed = pd.DataFrame(
        [{"config_id": r["config_id"], **config_of(r, "cnn")} for r in configs.to_dict("records")]
    )
    frame, skipped = clean_records(records, typed, "cnn")
    frame.to_csv(tmp_path / "gpumemnet.csv", index=False)
    jobs = load_jobs(tmp_path / "gpumemnet.csv", "cnn")
    assert skipped == 0 and len(jobs) == 3 and jobs.frame["device_name"].str.len().gt(0).all()
    counted, reasons = new_estimator("faketensor", DEFAULT_BINS["cnn"]).point_mib(jobs)
    assert reasons == [""] * 3
    assert (jobs.frame["memory_mib"].to_numpy() > counted).all()


def test_jobs_side_by_side_are_each_charged_what_they_take_alone(tmp_path):
    configs = generate("cnn", 4, seed=1, ranges=RANGES)
    alone = measure_configs(configs, "cnn", tmp_path / "alone", device="cuda", steps=2, timeout_s=300)
    shared = measure_configs(
        configs, "cnn", tmp_path / "shared", device="cuda", steps=2, timeout_s=300, jobs_at_once=4
    )
    assert [r["status"] for r in shared] == ["SUCCESSFUL"] * 4
    assert {r["memory_source"] for r in shared} == {"nvml_process_peak_mib"}
    assert [r["jobs_at_once"] for r in shared] == [4] * 4
    # A job alone: the device's count and its process's agree; side by side, its process's is unchanged
    # (equal to the MiB on an H200, 2026-11-26; docs/benchmarks/memnet.md).
    assert [r["nvml_peak_mib"] for r in alone] == [r["nvml_process_peak_mib"] for r in alone]
    assert [r["memory_mib"] for r in shared] == [r["nvml_process_peak_mib"] for r in alone]
