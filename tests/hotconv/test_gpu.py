"""HotConv on a CUDA device (``pytest -m gpu``): every variant's benchmark step, gradients equal to
dense autograd with TF32 off, out of memory as a result, and NVML figures independent of order."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from membench.hotconv.bench import SweepSpec, measure_point
from membench.hotconv.models import MalConvNet, ModelSpec
from membench.hotconv.options import VARIANTS

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
CUDA = torch.device("cuda")
SWEEP = SweepSpec(num_filters=64, window_size=64, stride=64, fp_slice_size=1024, fp2_slice_size=256, steps=2)
WORKFLOW = Path(__file__).resolve().parents[2] / "workflow"


@pytest.fixture
def no_tf32():
    """TF32 off while results are compared for equality (it rounds float32 products to 10 bits)."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant_measures_a_point_on_cuda(variant):
    record = measure_point(SWEEP, variant, 8, 65536, CUDA, sample_interval_s=0.01)
    assert record["status"] == "ok" and record["device"] == "cuda"
    for field in (
        "step_alloc_peak_mib",
        "step_cuda_peak_allocated_mib",
        "nvml_peak_mib",
        "step_ms",
        "activation_mib",
    ):
        assert record[field] > 0, field


@pytest.mark.parametrize("variant", ["malconv2", "hotconv", "hotconv_eco"])
def test_gradients_equal_dense_autograd_on_cuda(no_tf32, variant):
    spec = dict(
        num_classes=3, num_filters=32, window_size=64, stride=64, fp_slice_size=512, fp2_slice_size=128
    )
    torch.manual_seed(0)
    reference = MalConvNet(ModelSpec("malconv", **spec)).to(CUDA)
    model = MalConvNet(ModelSpec(variant, **spec)).to(CUDA)
    model.load_state_dict(reference.state_dict())
    generator = torch.Generator().manual_seed(1)
    tokens = torch.randint(1, 257, (4, 4096), dtype=torch.int16, generator=generator)
    tokens[1, 1000:] = 0
    labels = torch.tensor([0, 1, 2, 1], device=CUDA)
    grads = {}
    for name, net, batch in (("dense", reference, tokens.to(CUDA)), (variant, model, tokens)):
        net.embed.weight.requires_grad_(False)  # the correctness anchor: frozen embedding
        F.cross_entropy(net(batch), labels).backward()
        grads[name] = {n: p.grad for n, p in net.named_parameters() if p.requires_grad}
    for name, expected in grads["dense"].items():
        actual = grads[variant][name]
        assert expected.abs().max() > 0, name
        assert float((actual - expected).abs().max() / expected.abs().max()) < 1e-5, name


def test_out_of_memory_is_recorded_as_a_result():
    torch.cuda.empty_cache()
    index = torch.cuda.current_device()  # the fraction is set per device index
    total = torch.cuda.get_device_properties(index).total_memory
    torch.cuda.set_per_process_memory_fraction(512 * 2**20 / total, index)  # 512 MiB for this process
    try:
        # Dense MalConv embeds the whole batch: 16 x 4 MiB x 8 channels x 4 bytes = 2 GiB.
        record = measure_point(SWEEP, "malconv", 16, 4 * 2**20, CUDA, sample_interval_s=0.0)
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, index)
        torch.cuda.empty_cache()
    assert record["status"] == "oom"
    assert "out of memory" in record["status_message"].lower()


def _point_in_own_process(variant: str, outdir: Path) -> dict:
    command = [
        sys.executable,
        "-m",
        "membench.cli",
        "hotconv",
        "bench",
        "--variant",
        variant,
        "--batch-size",
        "8",
        "--max-len",
        "262144",
        "--train-steps",
        "2",
        "--num-filters",
        "256",
        "--window-size",
        "512",
        "--stride",
        "512",
        "--device",
        "cuda",
        "--sample-interval-s",
        "0.005",
        "--outdir",
        str(outdir),
    ]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, (str(WORKFLOW), os.environ.get("PYTHONPATH")))),
    }
    subprocess.run(command, check=True, env=env, timeout=300, capture_output=True)
    return json.loads((outdir / "metrics.json").read_text())


def test_two_orders_of_a_sweep_give_nvml_figures_within_2_mib(tmp_path):
    order = ["malconv", "malconv2", "hotconv_eco"]
    runs = []
    for name, variants in (("forward", order), ("reverse", order[::-1])):
        runs.append({v: _point_in_own_process(v, tmp_path / name / v)["nvml_peak_mib"] for v in variants})
    for variant in order:
        assert runs[0][variant] > 0
        assert abs(runs[0][variant] - runs[1][variant]) <= 2, (variant, runs)
