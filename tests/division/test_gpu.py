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

from membench.division import compress
from membench.division.bench import make_optimizer, prepare_model, random_batch, training_step
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


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _map(shape, dtype, seed: int = 0) -> torch.Tensor:
    x = torch.randn(shape, generator=_generator(seed)) * 3 + 1
    x.view(-1)[::7] = -0.0  # signed zeros, as ReLU outputs hold
    return x.to(dtype)


def _equal_on_cpu(ours, reference) -> bool:
    return all(
        a.device.type == "cuda" and torch.equal(a.cpu(), b) and a.dtype == b.dtype
        for a, b in zip(ours, reference, strict=True)
    )


SEED, OFFSET = 0x1234_5678_9ABC_DEF0, 0x0FED_CBA9_8765_4321
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# Tiles that divide the plane, edge tiles, a plane under a block, a plane wider than a block of
# threads, values that do not fill a byte, one value, and ResNet-50's planes at 224 px: staged in
# shared memory (56 x 56; 112 x 112 in 16 bits, beyond the 48 KiB a block gets unasked) or, too
# large in float32, read from global memory. A map whose bytes end off a 16-byte boundary is not staged.
# Short planes of every noise block (1, 2, 4, 8 and 16 Philox calls: teams of as many lanes, several
# planes a warp), and a plane of more than 256 tiles (no tile table: tiles computed per value).
SHAPES = (
    (4, 8, 16, 16),
    (2, 3, 17, 13),
    (1, 2, 7, 20),
    (2, 2, 3, 300),
    (3, 1, 9, 8),
    (1, 1, 1, 1),
    (2, 3, 56, 56),
    (1, 9, 112, 112),
    (8, 4, 7, 7),
    (3, 7, 2, 3),
    (5, 3, 4, 4),
    (2, 9, 4, 8),
    (1, 2, 136, 136),
)


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
@pytest.mark.parametrize("dtype", DTYPES)
def test_compress_kernels_are_bit_exact_with_the_cpu_reference(cuda_kernels, dtype, bits):
    for index, shape in enumerate(SHAPES):
        x = _map(shape, dtype, index)
        saved = cuda_kernels.division_compress(x.to(CUDA), 8, bits, SEED, OFFSET)
        expected = compress.division_compress(x, 8, bits, SEED, OFFSET)
        assert _equal_on_cpu(saved, expected), shape
        restored = cuda_kernels.division_decompress(*saved, 8, bits, shape[2], shape[3], dtype)
        assert _equal_on_cpu(
            [restored], [compress.division_decompress(*expected, 8, bits, *shape[2:], dtype)]
        )
        for group_size in (600, 256, 100, 33, 8):  # teams of 32, 16, 8, 4 and 1 lanes
            saved = cuda_kernels.group_compress(x.to(CUDA), group_size, bits, SEED, OFFSET)
            expected = compress.group_compress(x, group_size, bits, SEED, OFFSET)
            assert _equal_on_cpu(saved, expected), (shape, group_size)
            restored = cuda_kernels.group_decompress(*saved, group_size, bits, list(shape), dtype)
            reference = compress.group_decompress(*expected, group_size, bits, list(shape), dtype)
            assert _equal_on_cpu([restored], [reference]), (shape, group_size)


@pytest.mark.parametrize("dtype", DTYPES)
def test_planes_with_nan_or_infinity_match_the_cpu_reference(cuda_kernels, dtype):
    """NaN minimum, scale 1, top levels, NaN after decompression, as on the CPU; NaN payloads are the
    conversion's own (CUDA's bfloat16 NaN is not the CPU's), so NaNs compare equal whatever their bits."""
    # staged in shared memory; in float32, not; eight planes a warp
    for shape in ((2, 3, 16, 16), (2, 3, 112, 112), (2, 5, 7, 7)):
        x = _map(shape, dtype)
        x[0, 0, 3, 4], x[0, 2, 0, 0], x[1, 1, 5, 6] = float("nan"), float("inf"), -float("inf")
        saved = list(cuda_kernels.division_compress(x.to(CUDA), 8, 2, SEED, OFFSET))
        expected = list(compress.division_compress(x, 8, 2, SEED, OFFSET))
        restored = cuda_kernels.division_decompress(*saved, 8, 2, shape[2], shape[3], dtype)
        reference = compress.division_decompress(*expected, 8, 2, shape[2], shape[3], dtype)
        for group_size in (256, 33):
            saved.extend(cuda_kernels.group_compress(x.to(CUDA), group_size, 2, SEED, OFFSET))
            expected.extend(compress.group_compress(x, group_size, 2, SEED, OFFSET))
        for ours, theirs in zip((*saved, restored), (*expected, reference), strict=True):
            torch.testing.assert_close(ours.cpu(), theirs, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", DTYPES)
def test_compressors_read_views_at_any_offset(cuda_kernels, dtype):
    """A map that starts inside its storage, on a 16-byte boundary (staged) or off it (not)."""
    for shape in ((3, 4, 56, 56), (3, 1, 7, 7)):
        x = _map(shape, dtype)
        view = x.to(CUDA)[1:]
        saved = cuda_kernels.division_compress(view, 8, 2, SEED, OFFSET)
        assert _equal_on_cpu(saved, compress.division_compress(x[1:], 8, 2, SEED, OFFSET)), shape
        saved = cuda_kernels.group_compress(view, 256, 2, SEED, OFFSET)
        assert _equal_on_cpu(saved, compress.group_compress(x[1:], 256, 2, SEED, OFFSET)), shape


@pytest.mark.parametrize("dtype", DTYPES)
def test_mask_and_maxpool_kernels_are_bit_exact_with_the_cpu_reference(cuda_kernels, dtype):
    # Not a whole number of bytes or of blocks of 2048 values; then eights of values, read at once;
    # then a map of one short noise row (30 values: 4 calls).
    for index, shape in enumerate(((3, 5, 110, 61), (2, 4, 56, 56), (2, 3, 5))):
        x = _map(shape, dtype, index)
        grad = _map(x.shape, dtype, index + 1)
        out, packed = cuda_kernels.relu_pack(x.to(CUDA))
        assert _equal_on_cpu((out, packed), compress.relu_pack(x)), shape
        assert _equal_on_cpu(
            [cuda_kernels.masked_grad(grad.to(CUDA), packed, 1.0)],
            [compress.masked_grad(grad, packed.cpu(), 1.0)],
        ), shape
        for p in (0.7, 0.1):
            dropped = cuda_kernels.dropout_pack(x.to(CUDA), p, SEED, OFFSET)
            assert _equal_on_cpu(dropped, compress.dropout_pack(x, p, SEED, OFFSET)), shape
            gain = 1.0 / (1.0 - p)
            grad_in = cuda_kernels.masked_grad(grad.to(CUDA), dropped[1], gain)
            assert _equal_on_cpu([grad_in], [compress.masked_grad(grad, dropped[1].cpu(), gain)]), shape
    for kernel, stride, padding in ((2, 2, 0), (3, 2, 1)):
        x = _map((4, 8, 17, 17), dtype, 2)
        out, index = cuda_kernels.maxpool2d_forward(x.to(CUDA), kernel, stride, padding)
        assert _equal_on_cpu((out, index), compress.maxpool2d_forward(x, kernel, stride, padding))
        grad_out = _map(out.shape, dtype, 3)
        grad = cuda_kernels.maxpool2d_backward(grad_out.to(CUDA), index, 17, 17, kernel, stride, padding)
        expected = compress.maxpool2d_backward(grad_out, index.cpu(), 17, 17, kernel, stride, padding)
        if kernel == stride:
            assert _equal_on_cpu([grad], [expected])
        else:  # overlapping windows: sums of up to 4 values, rounded to the dtype in another order
            exact = compress.maxpool2d_backward(
                grad_out.float(), index.cpu(), 17, 17, kernel, stride, padding
            )
            error = 4 * torch.finfo(dtype).eps * grad_out.float().abs().max().item()
            torch.testing.assert_close(grad.cpu().float(), exact, rtol=0, atol=error)


def test_kernels_run_on_the_tensors_device(cuda_kernels):
    """The device guard: outputs land on the inputs' GPU whatever the current device is."""
    last = torch.device("cuda", torch.cuda.device_count() - 1)
    x = _map((2, 3, 8, 8), torch.float32)
    with torch.cuda.device(0):
        out, packed = cuda_kernels.relu_pack(x.to(last))
        saved = cuda_kernels.division_compress(x.to(last), 8, 2, SEED, OFFSET)
    assert out.device == last and packed.device == last and all(t.device == last for t in saved)
    assert _equal_on_cpu(saved, compress.division_compress(x, 8, 2, SEED, OFFSET))


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


def test_a_group_too_large_for_cuda_is_refused(cuda_kernels):
    """In-group indices are 32-bit on CUDA: a group of 2^30 values or more is refused, before any
    allocation, in one line."""
    with pytest.raises(RuntimeError, match="groups of 2\\^30 values or more are not supported on CUDA"):
        cuda_kernels.group_compress(torch.zeros(8, device=CUDA), 1 << 30, 2, SEED, OFFSET)
