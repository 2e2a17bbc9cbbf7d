"""Benchmark algorithms: the largest-batch search, the step memory and throughput fields."""

from __future__ import annotations

import pytest
import torch

from membench.core import timing
from membench.core.meter import Meter
from membench.division import bench
from membench.division.bench import (
    largest_batch,
    make_optimizer,
    measure_compressors,
    measure_paired_throughput,
    measure_step_memory,
    measure_throughput,
    prepare_model,
    random_batch,
    step_memory_bound,
)
from membench.division.kernels import TORCH_KERNELS
from membench.division.options import MethodSpec


@pytest.mark.parametrize(
    "capacity,start,limit", [(300, 64, 4096), (5, 64, 4096), (4096, 64, 4096), (1000, 1, 1000), (0, 8, 64)]
)
def test_largest_batch_finds_the_capacity(capacity, start, limit):
    largest, probes = largest_batch(lambda b: b <= capacity, start, limit)
    assert largest == min(capacity, limit)
    assert len(probes) <= 2 * (limit.bit_length() + 1)
    assert all(ok == (b <= capacity) for b, ok in probes)


def test_largest_batch_refuses_bad_bounds():
    with pytest.raises(ValueError):
        largest_batch(lambda b: True, 0, 10)


def _job(method: str, kernels=TORCH_KERNELS):
    cpu = torch.device("cpu")
    model, _ = prepare_model("resnet18", method, 10, cpu, MethodSpec(), kernels, 0, width=4)
    inputs, targets = random_batch(8, 16, 10, cpu, 0)
    return model, make_optimizer(model), inputs, targets


def test_step_memory_reports_activation_and_total(extension_kernels):
    results = {}
    for method in ("vanilla", "division"):
        model, optimizer, inputs, targets = _job(method, extension_kernels)
        with Meter(torch.device("cpu"), sample_interval_s=0, trace_live_tensors=True) as meter:
            fields = measure_step_memory(model, optimizer, inputs, targets, meter)
        summary = meter.summary()
        assert fields["status"] == "ok" and fields["total_memory_mib"] > fields["state_mib"] > 0
        results[method] = (summary["step_activation_mib"], fields["total_memory_mib"])
    assert results["division"][0] < results["vanilla"][0] / 5
    assert results["division"][1] < results["vanilla"][1]


def test_step_memory_counts_gradients_once_and_the_batch(extension_kernels):
    """The measured step starts without the warm-up step's gradients, so they are neither in the
    state nor freed by the step: the state is parameters, buffers and momentum, and the total is
    the state, the batch and the step's own allocator peak, which holds every saved activation."""
    model, optimizer, inputs, targets = _job("vanilla", extension_kernels)
    with Meter(torch.device("cpu"), sample_interval_s=0, trace_allocator=True) as meter:
        fields = measure_step_memory(model, optimizer, inputs, targets, meter)
    summary = meter.summary()
    tensors = [*model.parameters(), *model.buffers()]
    tensors += [
        v for state in optimizer.state.values() for v in state.values() if isinstance(v, torch.Tensor)
    ]
    state_bytes = sum(t.numel() * t.element_size() for t in tensors)
    batch_bytes = inputs.numel() * 4 + targets.numel() * 8
    assert fields["state_mib"] == state_bytes / 2**20
    assert fields["total_memory_mib"] == pytest.approx(
        (state_bytes + batch_bytes) / 2**20 + summary["step_alloc_peak_mib"]
    )
    assert summary["step_alloc_peak_mib"] >= summary["step_activation_mib"]


def test_throughput_fields():
    model, optimizer, inputs, targets = _job("division")
    fields = measure_throughput(model, optimizer, inputs, targets, iterations=3, warmup=1)
    assert fields["step_ms_min"] <= fields["step_ms_median"] <= fields["step_ms_max"]
    assert fields["images_per_s"] == pytest.approx(8 / (fields["step_ms_median"] / 1e3))
    assert fields["time_samples"] == 2 and fields["step_ms_median"] == fields["time_median_s"] * 1e3


def test_paired_throughput_takes_turns_and_reports_the_ratio_of_each_round(monkeypatch):
    # A fake clock: a step of the method takes 2 s, vanilla's 1 s, and from the third round on
    # the machine is three times slower for both; the ratio of each round stays 0.5.
    clock, calls = [0.0], []
    method_model, vanilla_model = torch.nn.Linear(1, 1), torch.nn.Linear(1, 1)

    def step(model, optimizer, inputs, targets, precision):
        calls.append("method" if model is method_model else "vanilla")
        slow = 3.0 if len(calls) > 2 * (1 + 2) else 1.0  # after the warm-up round and two rounds
        clock[0] += slow * (2.0 if model is method_model else 1.0)

    monkeypatch.setattr(bench, "training_step", step)
    monkeypatch.setattr(timing.time, "perf_counter", lambda: clock[0])
    inputs, targets = torch.zeros(8, 1), torch.zeros(8)
    fields = measure_paired_throughput(
        method_model, None, vanilla_model, None, inputs, targets, iterations=5, warmup=1
    )
    rounds = ["vanilla", "method", "method", "vanilla"] * 2 + ["vanilla", "method"]
    assert calls == ["method", "vanilla"] + rounds
    assert fields["vs_paired_vanilla"] == 0.5
    # the medians of the last four rounds: 6 s (method) and 3 s (vanilla)
    assert fields["images_per_s"] == 8 / 6.0 and fields["paired_vanilla_images_per_s"] == 8 / 3.0
    assert fields["time_samples"] == 4


class _FailingModel(torch.nn.Module):
    def __init__(self, message: str):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(1))
        self.message = message

    def forward(self, x):
        raise RuntimeError(self.message)


def test_step_memory_records_a_library_allocation_failure_as_oom():
    model = _FailingModel("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`")
    inputs, targets = random_batch(2, 8, 10, torch.device("cpu"), 0)
    with Meter(torch.device("cpu"), sample_interval_s=0) as meter:
        fields = measure_step_memory(model, make_optimizer(model), inputs, targets, meter)
    assert fields["status"] == "oom" and "CUBLAS_STATUS_ALLOC_FAILED" in fields["status_message"]
    assert fields["total_memory_mib"] is None


def test_step_memory_lets_other_errors_through():
    model = _FailingModel("an illegal memory access was encountered")
    inputs, targets = random_batch(2, 8, 10, torch.device("cpu"), 0)
    with pytest.raises(RuntimeError, match="illegal memory access"):
        with Meter(torch.device("cpu"), sample_interval_s=0) as meter:
            measure_step_memory(model, make_optimizer(model), inputs, targets, meter)


@pytest.mark.parametrize("method", ["vanilla", "division", "actnn2bit"])
def test_the_memory_bound_is_below_the_measured_peak(extension_kernels, method):
    """What the bound counts are tensors created in the step, so the bound is at most the step's
    peak of live tensors (exact here whatever the threads, unlike the allocator's), to within a
    few bytes: on this small model the two agree to 1 KiB."""
    model, optimizer, inputs, targets = _job(method, extension_kernels)
    with Meter(torch.device("cpu"), sample_interval_s=0, trace_live_tensors=True) as meter:
        measure_step_memory(model, optimizer, inputs, targets, meter)
    peak_mib = meter.summary()["step_peak_tensor_mib"]
    bound = step_memory_bound(model, optimizer, inputs, targets)
    parts = bound["bound_saved_mib"] + bound["bound_grads_mib"] + bound["bound_maps_mib"]
    assert bound["step_alloc_bound_mib"] == pytest.approx(parts)
    grads_mib = sum(p.numel() * 4 for p in model.parameters()) / 2**20
    assert bound["bound_grads_mib"] <= grads_mib and bound["bound_at"]
    assert 0.9 * peak_mib < bound["step_alloc_bound_mib"] <= peak_mib + 1 / 1024


def test_compressor_benchmark_fields(extension_kernels):
    fields = measure_compressors(extension_kernels, (2, 4, 9, 9), MethodSpec(), repeats=2)
    assert fields["map_shape"] == "2x4x9x9" and fields["map_dtype"] == "float32" and fields["repeats"] == 2
    assert fields["time_unit"] == "repeat" and fields["time_samples"] == 2
    for method in ("division", "actnn2bit"):
        total = fields[f"{method}_compress_ms"] + fields[f"{method}_decompress_ms"]
        assert fields[f"{method}_ms"] == pytest.approx(total)
        assert fields[f"{method}_vs_clone"] == pytest.approx(total / fields["clone_ms"])
    assert fields["relu_mask_ms"] == pytest.approx(fields["relu_pack_ms"] + fields["masked_grad_ms"])
    assert fields["relu_mask_vs_clone"] == pytest.approx(fields["relu_mask_ms"] / fields["clone_ms"])
