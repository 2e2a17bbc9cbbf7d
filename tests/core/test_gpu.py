"""The meter on a CUDA device: NVML fields and the allocator peak (``pytest -m gpu``)."""

from __future__ import annotations

import time

import pytest
import torch

from membench.core.meter import MIB, Meter

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
CUDA = torch.device("cuda")


def test_nvml_fields_are_present_and_positive():
    with Meter(CUDA, sample_interval_s=0.01) as meter:
        with meter.phase("step"):
            block = torch.ones(256 * MIB // 4, device=CUDA)
            torch.cuda.synchronize()
            time.sleep(0.2)  # several samples while the block is held
            del block
    fields = meter.summary()
    assert fields["nvml_available"] and fields["energy_source"] == "nvml"
    assert fields["nvml_baseline_mib"] > 0
    assert 256 <= fields["nvml_peak_mib"] < 1024
    assert 256 <= fields["step_nvml_peak_mib"] <= fields["nvml_peak_mib"]
    assert fields["energy_j"] > 0 and fields["co2e_g"] > 0


def test_alloc_peak_equals_max_memory_allocated_above_the_phase_start():
    held = torch.ones(MIB, device=CUDA)  # allocated before the phase: not the phase's
    with Meter(CUDA, sample_interval_s=0.0) as meter:
        start = torch.cuda.memory_allocated(CUDA)
        with meter.phase("step"):
            a = torch.randn(2048, 2048, device=CUDA)
            b = a @ a
            del a, b
        peak = torch.cuda.max_memory_allocated(CUDA)
    fields = meter.summary()
    assert fields["step_alloc_peak_mib"] * MIB == peak - start
    assert fields["step_alloc_peak_mib"] >= 32  # two 16 MiB matrices at least
    assert fields["alloc_peak_mib"] == fields["step_alloc_peak_mib"]
    del held
