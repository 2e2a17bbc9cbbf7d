"""DIVISION on a CUDA device (``pytest -m gpu``): the CUDA kernels bit-exact with the CPU reference
(the same Philox noise, every dtype and bit width), on the tensor's own device, and every method's
training step under float32, float16 and bfloat16 autocast."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from division.cuda_checks import (
    DTYPES,
    OFFSET,
    SEED,
    check_block_sizes,
    check_compressors,
    check_masks_and_maxpool,
    check_nan_and_infinity,
    check_views_at_any_offset,
    equal_on,
    random_map,
)

from membench.core.meter import Meter
from membench.division import compress
from membench.division.bench import (
    make_optimizer,
    measure_step_memory,
    prepare_model,
    random_batch,
    training_step,
)
from membench.division.extension import build_extension
from membench.division.kernels import TORCH_KERNELS, select_kernels
from membench.division.options import METHODS, MethodSpec
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


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
@pytest.mark.parametrize("dtype", DTYPES)
def test_compress_kernels_are_bit_exact_with_the_cpu_reference(cuda_kernels, dtype, bits):
    check_compressors(cuda_kernels, CUDA, dtype, bits)


@pytest.mark.parametrize("dtype", DTYPES)
def test_division_compression_is_bit_exact_for_any_block(cuda_kernels, dtype):
    check_block_sizes(cuda_kernels, CUDA, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_planes_with_nan_or_infinity_match_the_cpu_reference(cuda_kernels, dtype):
    check_nan_and_infinity(cuda_kernels, CUDA, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_compressors_read_views_at_any_offset(cuda_kernels, dtype):
    check_views_at_any_offset(cuda_kernels, CUDA, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_mask_and_maxpool_kernels_are_bit_exact_with_the_cpu_reference(cuda_kernels, dtype):
    check_masks_and_maxpool(cuda_kernels, CUDA, dtype)


def test_kernels_run_on_the_tensors_device(cuda_kernels):
    """The device guard: outputs land on the inputs' GPU whatever the current device is."""
    last = torch.device("cuda", torch.cuda.device_count() - 1)
    x = random_map((2, 3, 8, 8), torch.float32)
    with torch.cuda.device(0):
        out, packed = cuda_kernels.relu_pack(x.to(last))
        saved = cuda_kernels.division_compress(x.to(last), 8, 2, SEED, OFFSET)
    assert out.device == last and packed.device == last and all(t.device == last for t in saved)
    assert equal_on(CUDA, saved, compress.division_compress(x, 8, 2, SEED, OFFSET))


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


def test_the_step_peak_holds_every_saved_activation_on_cuda():
    """The step's allocator peak above its start is what the step allocated and held, as on a CPU:
    at least the saved activations (it once lacked the bytes of the gradients the step freed)."""
    model, _ = prepare_model("resnet18", "vanilla", 10, CUDA, MethodSpec(), TORCH_KERNELS, seed=0, width=16)
    inputs, targets = random_batch(4, 32, 10, CUDA, seed=0)
    with Meter(CUDA, sample_interval_s=0) as meter:
        fields = measure_step_memory(model, make_optimizer(model), inputs, targets, meter)
    summary = meter.summary()
    assert fields["status"] == "ok"
    assert summary["step_alloc_peak_mib"] >= summary["step_activation_mib"] > 0


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


def test_a_group_too_large_for_cuda_is_refused(cuda_kernels):
    """In-group indices are 32-bit on CUDA: a group of 2^30 values or more is refused, before any
    allocation, in one line."""
    with pytest.raises(RuntimeError, match="groups of 2\\^30 values or more are not supported on CUDA"):
        cuda_kernels.group_compress(torch.zeros(8, device=CUDA), 1 << 30, 2, SEED, OFFSET)
