"""The meter on a CPU: fields, phases, memlog, energy readers and CO2e."""

import pytest
import torch
from torch import nn

from membench.core import sources
from membench.core.meter import Meter, co2e_g
from membench.core.metrics import MEASURED_FIELDS, MEMLOG_COLUMNS


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


def test_alloc_peak_sees_the_convolution_workspace_peak_tensor_misses():
    batch, channels, filters, window, positions = 4, 8, 64, 32, 256
    # Two threads: the convolution then unfolds its input into a workspace (on one thread it takes a
    # path without one); the autouse fixture restores the thread count.
    torch.set_num_threads(2)
    torch.manual_seed(0)
    conv = nn.Conv1d(channels, filters, kernel_size=window, stride=window)
    x = torch.randn(batch, channels, window * positions)
    with Meter(
        torch.device("cpu"), sample_interval_s=0, trace_live_tensors=True, trace_allocator=True
    ) as meter:
        with meter.phase("step"):
            conv(x).sum().backward()
    summary = meter.summary()
    unfolded_mib = batch * channels * window * positions * 4 / 2**20
    assert summary["step_alloc_peak_mib"] == summary["alloc_peak_mib"]
    assert summary["alloc_peak_mib"] >= summary["peak_tensor_mib"] + unfolded_mib
    assert summary["trace_allocator"] is True and summary["allocator_available"] is True
    assert summary["host_peak_tensor_mib"] is None  # a CPU job's tensors are all on its device


def test_alloc_peak_is_relative_to_the_phase_start_and_keeps_the_maximum_of_reentries():
    held = torch.empty(10**6)  # allocated before the phases: not charged to them
    with Meter(torch.device("cpu"), sample_interval_s=0, trace_allocator=True) as meter:
        for size in (1000, 3000, 2000):
            with meter.phase("step"):
                torch.empty(size)
    assert meter.summary()["step_alloc_peak_mib"] == 3000 * 4 / 2**20
    del held


def test_batches_count_the_collated_batch_whatever_made_it():
    made_outside = [(torch.zeros(100), torch.zeros(10, dtype=torch.int64))]
    with Meter(torch.device("cpu"), sample_interval_s=0, trace_live_tensors=True) as meter:
        with meter.phase("train"):
            for inputs, labels in meter.batches(made_outside):
                (inputs * 2).sum()
    # The batch (400 + 80 bytes) counts as if collated here; inputs * 2 (400) and its sum (4) on top.
    assert meter.summary()["train_peak_tensor_mib"] == (400 + 80 + 400 + 4) / 2**20


def _loader_peak_mib(num_workers: int) -> float:
    from torch.utils.data import DataLoader, TensorDataset

    data = TensorDataset(torch.arange(64, dtype=torch.float32).reshape(16, 4), torch.arange(16))
    loader = DataLoader(data, batch_size=4, num_workers=num_workers)
    with Meter(torch.device("cpu"), sample_interval_s=0, trace_live_tensors=True) as meter:
        with meter.phase("train"):
            for inputs, labels in meter.batches(loader):
                inputs.sum()
    return meter.summary()["train_peak_tensor_mib"]


def test_the_collated_batch_counts_the_same_whatever_num_workers_is():
    assert _loader_peak_mib(0) == _loader_peak_mib(1) > 0


def test_meter_does_not_mask_an_exception_in_flight(monkeypatch):
    import membench.core.meter as meter_module

    def failing_synchronize(device):
        raise RuntimeError("a pending device error")

    with pytest.raises(ValueError, match="the job's own error"):
        with Meter(torch.device("cpu"), sample_interval_s=0) as meter:
            monkeypatch.setattr(meter_module, "synchronize", failing_synchronize)
            with meter.phase("train"):
                raise ValueError("the job's own error")


def test_meter_without_tracers_leaves_their_fields_empty():
    model = nn.Linear(8, 16)
    with Meter(torch.device("cpu"), sample_interval_s=0, trace_saved_activations=False) as meter:
        with meter.phase("train"):
            _step(model, meter)
    summary = meter.summary()
    assert summary["activation_mib"] is None
    assert summary["peak_tensor_mib"] is None
    assert summary["alloc_peak_mib"] is None
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


def test_rapl_counts_every_wrap_of_a_long_job_read_between_wraps(tmp_path):
    zone = _zone(tmp_path, "intel-rapl:0", 100, 1000)
    rapl = sources.RaplPackages.open(str(tmp_path))
    rapl.start()
    for reading in (700, 300, 900, 200):  # three wraps: 600 + 600 + 600 + 300 uJ
        (zone / "energy_uj").write_text(f"{reading}\n")
        rapl.update()
    assert rapl.energy_since_start_j() == pytest.approx(2100e-6)
    (zone / "energy_uj").write_text("garbage\n")
    assert rapl.energy_since_start_j() is None  # a counter that could not be read loses the total


def test_the_meter_reads_rapl_at_every_sample(tmp_path, monkeypatch):
    zone = _zone(tmp_path, "intel-rapl:0", 0, 1000)
    rapl = sources.RaplPackages.open(str(tmp_path))
    monkeypatch.setattr(sources.RaplPackages, "open", classmethod(lambda cls, root=None: rapl))
    with Meter(torch.device("cpu"), sample_interval_s=0) as meter:
        for reading in (800, 600, 400):  # each phase's samples see the counter between wraps
            (zone / "energy_uj").write_text(f"{reading}\n")
            with meter.phase("step"):
                pass
    assert meter.summary()["energy_j"] == pytest.approx(2400e-6)


def test_rapl_absent_is_none(tmp_path):
    assert sources.RaplPackages.open(str(tmp_path)) is None


def test_nvml_is_not_opened_for_cpu():
    assert sources.NvmlGpu.open(torch.device("cpu")) is None


def test_nvml_lookups_never_take_torch_index_as_nvml_index_when_devices_are_hidden():
    uuid = "6a1b2c3d-0000-1111-2222-333344445555"
    # CUDA_VISIBLE_DEVICES=3,1: torch's device 0 is NVML's 3 (with PCI order), never NVML's 0.
    assert sources.nvml_lookups(0, uuid, "3,1", "PCI_BUS_ID", "00000000:3b:00.0") == [
        ("uuid", f"GPU-{uuid}"),
        ("uuid", f"MIG-{uuid}"),
        ("index", 3),
        ("pci", "00000000:3b:00.0"),
    ]
    # CUDA's default order is fastest first: an integer entry names no NVML index then.
    assert sources.nvml_lookups(1, None, "3,1", None, None) == []
    assert sources.nvml_lookups(1, None, None, "PCI_BUS_ID", None) == [("index", 1)]


def test_nvml_lookups_use_mig_uuids_and_skip_the_parent_gpu_bus():
    mig = "MIG-0f1e2d3c-aaaa-bbbb-cccc-ddddeeeeffff"
    assert sources.nvml_lookups(0, None, f"{mig},GPU-x", None, "00000000:3b:00.0") == [("uuid", mig)]
    assert sources.nvml_lookups(1, None, f"{mig},GPU-x", None, "00000000:3b:00.0") == [
        ("uuid", "GPU-x"),
        ("pci", "00000000:3b:00.0"),
    ]


class _FakeNvml:
    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2

    class _Process:
        def __init__(self, pid, used):
            self.pid, self.usedGpuMemory = pid, used

    def __init__(self, processes):
        self.processes = processes

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return self.processes

    def nvmlDeviceGetName(self, handle):
        return b"Fake GPU"

    def nvmlSystemGetDriverVersion(self):
        return "580.1"

    def nvmlDeviceGetClockInfo(self, handle, clock):
        return {1: 1980, 2: 2619}[clock]

    def nvmlDeviceGetMaxClockInfo(self, handle, clock):
        raise RuntimeError("not supported")


def test_nvml_process_usage_and_description():
    import os

    fake = _FakeNvml([_FakeNvml._Process(1, 5 * 2**20), _FakeNvml._Process(os.getpid(), 3 * 2**20)])
    gpu = sources.NvmlGpu(fake, handle=None, found_by="uuid GPU-x")
    assert gpu.process_used_bytes() == 3 * 2**20
    assert gpu.process_used_bytes(pid=1) == 5 * 2**20
    assert gpu.process_used_bytes(pid=2) is None
    assert (
        sources.NvmlGpu(_FakeNvml([_FakeNvml._Process(os.getpid(), None)]), None, "").process_used_bytes()
        is None
    )
    description = gpu.description()
    assert description["gpu_name"] == "Fake GPU" and description["gpu_driver_version"] == "580.1"
    assert description["gpu_sm_clock_mhz"] == 1980 and description["gpu_max_sm_clock_mhz"] is None
    assert description["nvml_device"] == "uuid GPU-x"


def test_cpu_summary_records_tf32_and_empty_gpu_description():
    with Meter(torch.device("cpu"), sample_interval_s=0) as meter:
        with meter.phase("work"):
            torch.zeros(10)
    summary = meter.summary()
    assert summary["tf32_matmul"] == torch.backends.cuda.matmul.allow_tf32
    assert summary["gpu_name"] is None and summary["nvml_process_peak_mib"] is None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_alloc_peak_is_the_allocator_peak_above_the_phase_start():
    device = torch.device("cuda")
    held = torch.empty(2**20, device=device)
    with Meter(device, sample_interval_s=0) as meter:
        with meter.phase("step"):
            first = torch.empty(2**18, device=device)
            second = torch.empty(2**18, device=device)
            del first, second
    summary = meter.summary()
    assert summary["step_alloc_peak_mib"] == 2 * 2**18 * 4 / 2**20
    assert summary["cuda_peak_allocated_mib"] >= summary["step_alloc_peak_mib"] + held.numel() * 4 / 2**20
    assert summary["gpu_name"] is not None or summary["nvml_available"] is False
    del held
