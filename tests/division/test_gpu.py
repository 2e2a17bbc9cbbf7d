"""DIVISION on a CUDA device (``pytest -m gpu``): the CUDA kernels bit-exact with the CPU reference
given the same random numbers, on the tensor's own device, and every method's training step under
float32, float16 and bfloat16 autocast."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from membench.division import compress
from membench.division.bench import make_optimizer, prepare_model, random_batch, training_step
from membench.division.extension import build_extension
from membench.division.kernels import TORCH_KERNELS, select_kernels
from membench.division.methods import METHODS, MethodSpec
from membench.division.precision import Precision

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
CUDA = torch.device("cuda")
WORKFLOW = Path(__file__).resolve().parents[2] / "workflow"


@pytest.fixture(scope="module")
def cuda_manifest(tmp_path_factory, kernel_cache_dir):
    """A CUDA build of the kernels (about a minute)."""
    outdir = tmp_path_factory.mktemp("division_cuda_build")
    manifest = build_extension(kernel_cache_dir, cuda="yes", outdir=outdir)
    assert manifest["cuda"] is True
    return outdir / "manifest.json"


@pytest.fixture(scope="module")
def cuda_kernels(cuda_manifest):
    return select_kernels("extension", cuda_manifest, "cuda")


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
def test_quantize_kernels_are_bit_exact_with_the_cpu_reference(cuda_kernels, bits):
    x = torch.randn(129, 1000, generator=_generator(0)) * 3
    minimum, scale = (t.float() for t in compress.row_range(x, bits))
    noise = torch.rand(x.shape, generator=_generator(1))
    expected = compress.quantize_pack(x, minimum, scale, noise, bits)
    packed = cuda_kernels.quantize_pack(x.to(CUDA), minimum.to(CUDA), scale.to(CUDA), noise.to(CUDA), bits)
    assert packed.device.type == "cuda"
    assert torch.equal(packed.cpu(), expected)
    restored = cuda_kernels.unpack_dequantize(packed, minimum.to(CUDA), scale.to(CUDA), bits, 1000)
    assert torch.equal(restored.cpu(), compress.unpack_dequantize(expected, minimum, scale, bits, 1000))


def test_mask_and_maxpool_kernels_are_bit_exact_with_the_cpu_reference(cuda_kernels):
    mask = torch.rand(100_003, generator=_generator(0)) > 0.4
    packed = cuda_kernels.pack_mask(mask.to(CUDA))
    assert torch.equal(packed.cpu(), compress.pack_mask(mask))
    assert torch.equal(cuda_kernels.unpack_mask(packed, mask.numel()).cpu(), mask)
    x = torch.randn(4, 8, 17, 17, generator=_generator(1))
    out, index = cuda_kernels.maxpool2d_forward(x.to(CUDA), 2, 2, 0)
    ref_out, ref_index = compress.maxpool2d_forward(x, 2, 2, 0)
    assert torch.equal(out.cpu(), ref_out) and torch.equal(index.cpu(), ref_index)
    grad_out = torch.randn(ref_out.shape, generator=_generator(2))
    grad = cuda_kernels.maxpool2d_backward(grad_out.to(CUDA), index, 17, 17, 2, 2, 0)
    assert torch.equal(grad.cpu(), compress.maxpool2d_backward(grad_out, ref_index, 17, 17, 2, 2, 0))


def test_kernels_run_on_the_tensors_device(cuda_kernels):
    """The device guard: outputs land on the inputs' GPU whatever the current device is."""
    last = torch.device("cuda", torch.cuda.device_count() - 1)
    mask = torch.rand(1000, generator=_generator(0), device="cpu") > 0.5
    with torch.cuda.device(0):
        packed = cuda_kernels.pack_mask(mask.to(last))
    assert packed.device == last
    assert torch.equal(packed.cpu(), compress.pack_mask(mask))


@pytest.mark.parametrize("amp", ["none", "fp16", "bf16"])
@pytest.mark.parametrize("method", METHODS)
def test_every_method_trains_on_cuda(cuda_kernels, method, amp):
    kernels = TORCH_KERNELS if method in ("vanilla", "checkpoint") else cuda_kernels
    model, _ = prepare_model("resnet18", method, 10, CUDA, MethodSpec(), kernels, seed=0, width=16)
    optimizer = make_optimizer(model, lr=0.05)
    inputs, targets = random_batch(16, 32, 10, CUDA, seed=0)
    precision = Precision(amp, CUDA)
    losses = [training_step(model, optimizer, inputs, targets, precision=precision) for _ in range(5)]
    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < losses[0]


def test_memory_and_speed_jobs_run_on_cuda_with_amp(cuda_manifest, tmp_path):
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, (str(WORKFLOW), os.environ.get("PYTHONPATH")))),
    }
    for job in ("memory", "speed"):
        command = [
            sys.executable,
            "-m",
            "membench.cli",
            "division",
            job,
            "--outdir",
            str(tmp_path / job),
            "--variant",
            "division",
            "--model",
            "resnet18",
            "--width",
            "16",
            "--batch-size",
            "32",
            "--device",
            "cuda",
            "--amp",
            "fp16",
            "--kernels",
            "extension",
            "--build-manifest",
            str(cuda_manifest),
        ] + (["--train-steps", "3", "--warmup-steps", "1"] if job == "speed" else [])
        subprocess.run(command, check=True, env=env, timeout=300, capture_output=True)
        record = json.loads((tmp_path / job / "metrics.json").read_text())
        assert (
            record["amp"] == "fp16" and record["kernels"].startswith("cuda-") and record["device"] == "cuda"
        )
        assert record["nvml_peak_mib"] > 0
        if job == "memory":
            assert (
                record["status"] == "ok" and record["total_memory_mib"] > 0 and record["activation_mib"] > 0
            )
        else:
            assert record["images_per_s"] > 0
