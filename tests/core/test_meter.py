"""The meter on a CPU: fields, phases, memlog, energy readers and CO2e."""

import pytest
import torch
from torch import nn

from membench.core import sources
from membench.core.meter import MEMLOG_COLUMNS, Meter, co2e_g
from membench.core.metrics import MEASURED_FIELDS


def _step(model, meter):
    x = torch.randn(4, 8)
    with meter.saved_activations(model):
        loss = model(x).sum()
    loss.backward()


def test_meter_on_cpu_reports_exact_fields_and_empty_gpu_fields():
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
    with Meter(torch.device("cpu"), sample_interval_s=0.01, trace_live_tensors=True) as meter:
        with meter.phase("train"):
            _step(model, meter)
    summary = meter.summary()
    for field in MEASURED_FIELDS:
        assert field in summary
    assert summary["nvml_peak_mib"] is None
    assert summary["cuda_peak_allocated_mib"] is None
    assert summary["nvml_available"] is False
    # Linear saves x (4x8) and ReLU its output (4x16), float32.
    assert summary["activation_mib"] == pytest.approx((4 * 8 + 4 * 16) * 4 / 2**20)
    assert summary["train_activation_mib"] == summary["activation_mib"]
    assert summary["peak_tensor_mib"] > 0
    assert summary["peak_rss_mib"] > 0
    assert summary["train_wall_s"] > 0
    assert summary["trace_live_tensors"] is True


def test_meter_without_tracers_leaves_their_fields_empty():
    model = nn.Linear(8, 16)
    with Meter(torch.device("cpu"), sample_interval_s=0, trace_saved_activations=False) as meter:
        with meter.phase("train"):
            _step(model, meter)
    summary = meter.summary()
    assert summary["activation_mib"] is None
    assert summary["peak_tensor_mib"] is None
    assert summary["meter_samples"] >= 2  # start and end samples even without the thread


def test_memlog_has_the_documented_columns_and_phase_samples():
    with Meter(torch.device("cpu"), sample_interval_s=0.005) as meter:
        with meter.phase("work"):
            torch.randn(200, 200) @ torch.randn(200, 200)
    memlog = meter.memlog()
    assert list(memlog.columns) == list(MEMLOG_COLUMNS)
    assert "work" in set(memlog["phase"])
    assert memlog["t_s"].is_monotonic_increasing
    assert (memlog["rss_mib"] > 0).all()


def test_co2e_uses_grid_intensity():
    assert co2e_g(3.6e6, 475.0) == pytest.approx(475.0)
    assert co2e_g(None, 475.0) is None


def _zone(root, name, energy_uj, max_range_uj):
    zone = root / name
    zone.mkdir()
    (zone / "energy_uj").write_text(f"{energy_uj}\n")
    (zone / "max_energy_range_uj").write_text(f"{max_range_uj}\n")
    return zone


def test_rapl_sums_packages_and_handles_wraparound(tmp_path):
    first = _zone(tmp_path, "intel-rapl:0", 900, 1000)
    second = _zone(tmp_path, "intel-rapl:1", 100, 1000)
    _zone(tmp_path, "intel-rapl:0:0", 5, 1000)  # a sub-domain: must not be added again
    rapl = sources.RaplPackages.open(str(tmp_path))
    rapl.start()
    (first / "energy_uj").write_text("100\n")  # wrapped: 900 -> 1000 -> 100 is 200 uJ
    (second / "energy_uj").write_text("400\n")
    assert rapl.energy_since_start_j() == pytest.approx(500e-6)


def test_rapl_absent_is_none(tmp_path):
    assert sources.RaplPackages.open(str(tmp_path)) is None


def test_nvml_is_not_opened_for_cpu():
    assert sources.NvmlGpu.open(torch.device("cpu")) is None


def test_time_calls_times_each_call():
    from membench.core.device import time_calls

    calls = []
    seconds = time_calls(lambda: calls.append(sum(range(10000))), 3, torch.device("cpu"))
    assert len(seconds) == 3 == len(calls)
    assert all(s > 0 for s in seconds)
