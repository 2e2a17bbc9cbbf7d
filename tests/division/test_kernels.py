"""The built C++ kernels against the pure-torch reference, bit for bit (built once per session, see
conftest): every dtype of a map, sizes that are not multiples of a block, a group or a byte, every
bit width, and every thread count."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from membench.division import compress
from membench.division.compress import DivisionCompressor, GroupCompressor
from membench.division.kernels import CPU_ISA_VARIABLE, KERNEL_NAMES, TORCH_KERNELS

from .conftest import PARENT_BUILD_VARIABLE
from .cuda_checks import cancelling_map

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
SEED, OFFSET = 0x1234_5678_9ABC_DEF0, 0x0FED_CBA9_8765_4321
# (N, C, H, W): tiles that divide the plane, edge tiles, planes under a block (one global tile),
# planes whose values do not fill a byte, a plane of one value, short planes of every noise
# block (1, 2, 4 and 8 calls: 16 / calls planes share one vector of Philox calls, here with
# plane counts that leave the last vector part-used), planes of one noise block (16 calls, one
# vector), and of three blocks and four (two vectors of calls, then one).
SHAPES = (
    (1, 2, 25, 25),
    (1, 2, 30, 30),
    (2, 3, 16, 16),
    (2, 3, 17, 13),
    (1, 2, 7, 20),
    (3, 1, 9, 8),
    (2, 2, 5, 3),
    (1, 1, 1, 1),
    (3, 7, 2, 3),
    (5, 3, 4, 4),
    (2, 9, 4, 8),
    (3, 5, 7, 7),
)


def _generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _map(shape, dtype, seed: int = 0) -> torch.Tensor:
    x = torch.randn(shape, generator=_generator(seed)) * 3 + 1
    x.view(-1)[::7] = -0.0  # signed zeros, as ReLU outputs hold
    return x.to(dtype)


def _equal(ours, reference) -> bool:
    return all(torch.equal(a, b) and a.dtype == b.dtype for a, b in zip(ours, reference, strict=True))


def test_the_extension_exposes_every_kernel(extension_kernels):
    assert extension_kernels.name == "extension"
    assert all(callable(getattr(extension_kernels, name)) for name in KERNEL_NAMES)


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
@pytest.mark.parametrize("dtype", DTYPES)
def test_division_kernels_are_bit_exact(extension_kernels, dtype, bits):
    for index, shape in enumerate(SHAPES):
        x = _map(shape, dtype, index)
        for block in (8, 4):
            saved = extension_kernels.division_compress(x, block, bits, SEED, OFFSET)
            expected = compress.division_compress(x, block, bits, SEED, OFFSET)
            assert _equal(saved, expected), (shape, block)
            for out_dtype in {dtype, torch.float32}:
                args = (*expected, block, bits, shape[2], shape[3], out_dtype)
                restored = extension_kernels.division_decompress(*args)
                assert _equal([restored], [compress.division_decompress(*args)]), (shape, block, out_dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_division_kernels_sum_tiles_in_the_reference_order(extension_kernels, dtype):
    for index, shape in enumerate(SHAPES):
        x = cancelling_map(shape, dtype, index)
        for block in (8, 4, 3):
            saved = extension_kernels.division_compress(x, block, 2, SEED, OFFSET)
            assert _equal(saved, compress.division_compress(x, block, 2, SEED, OFFSET)), (shape, block)


@pytest.mark.parametrize("block", [1, 2, 3, 12, 16, 32])
def test_division_kernels_are_bit_exact_for_every_tile_width(extension_kernels, block):
    """Tiles narrower than a vector, of one vector and of several (vectors of 4, 8 and 16 floats,
    one per instruction set), tiles that fit no vector, and edge tiles: a last tile row of one row,
    a last tile of fewer columns, and one tile mean that is NaN."""
    for index, width in enumerate((3 * block, 3 * block - 1, 5 * block + 2)):
        x = _map((2, 3, block + 1, width), torch.float32, index)
        x[1, 2, 0, width - 1] = float("nan")
        saved = extension_kernels.division_compress(x, block, 2, SEED, OFFSET)
        expected = compress.division_compress(x, block, 2, SEED, OFFSET)
        args = (*expected, block, 2, block + 1, width, torch.float32)
        saved += (extension_kernels.division_decompress(*args),)
        expected += (compress.division_decompress(*args),)
        for ours, reference in zip(saved, expected, strict=True):
            torch.testing.assert_close(ours, reference, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
@pytest.mark.parametrize("dtype", DTYPES)
def test_group_kernels_are_bit_exact(extension_kernels, dtype, bits):
    for index, shape in enumerate(SHAPES):
        x = _map(shape, dtype, index)
        # the last group of most maps is padded; 600 is three noise blocks, 100 and 8 short rows
        for group_size in (600, 256, 100, 33, 8):
            saved = extension_kernels.group_compress(x, group_size, bits, SEED, OFFSET)
            assert _equal(saved, compress.group_compress(x, group_size, bits, SEED, OFFSET)), shape
            args = (*saved, group_size, bits, list(shape), dtype)
            restored = extension_kernels.group_decompress(*args)
            assert _equal([restored], [compress.group_decompress(*args)]), shape
            assert restored.shape == x.shape


@pytest.mark.parametrize("dtype", DTYPES)
def test_mask_kernels_are_bit_exact(extension_kernels, dtype):
    x = _map((3, 5, 11, 7), dtype)  # 1155 values: the last byte and the last chunk are partial
    grad = _map(x.shape, dtype, 1)
    out, packed = extension_kernels.relu_pack(x)
    assert _equal((out, packed), compress.relu_pack(x))
    assert _equal(
        [extension_kernels.masked_grad(grad, packed, 1.0)], [compress.masked_grad(grad, packed, 1.0)]
    )
    for p in (0.7, 0.1):  # 0.7 rounds down in float32: the comparison is made in float32
        dropped = extension_kernels.dropout_pack(x, p, SEED, OFFSET)
        assert _equal(dropped, compress.dropout_pack(x, p, SEED, OFFSET))
        gain = 1.0 / (1.0 - p)
        assert _equal(
            [extension_kernels.masked_grad(grad, dropped[1], gain)],
            [compress.masked_grad(grad, dropped[1], gain)],
        )


@pytest.mark.parametrize("dtype", DTYPES)
def test_masked_grad_multiplies_non_finite_gradients_as_the_reference(extension_kernels, dtype):
    """A masked-out infinity becomes NaN (infinity times zero), a masked-out negative value -0."""
    x = _map((2, 3, 9, 5), dtype)
    grad = _map(x.shape, dtype, 1)
    grad.view(-1)[::5] = float("inf")
    grad.view(-1)[1::9] = float("nan")
    grad.view(-1)[2::11] = -float("inf")
    packed = extension_kernels.relu_pack(x)[1]
    ours = extension_kernels.masked_grad(grad, packed, 1.0)
    reference = compress.masked_grad(grad, packed, 1.0)
    torch.testing.assert_close(ours, reference, rtol=0, atol=0, equal_nan=True)
    numbers = ~reference.isnan()  # a NaN's sign is the conversion's own
    assert torch.equal(ours.isnan(), reference.isnan())
    assert torch.equal(ours[numbers].signbit(), reference[numbers].signbit())
    assert ours.isnan().sum() > grad.isnan().sum()


def test_dropout_of_a_map_of_one_short_row_is_bit_exact(extension_kernels):
    x = _map((2, 3, 5), torch.float32)  # 30 values: one block of 4 calls
    expected = compress.dropout_pack(x, 0.5, SEED, OFFSET)
    assert _equal(extension_kernels.dropout_pack(x, 0.5, SEED, OFFSET), expected)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kernel,stride,padding", [(2, 2, 0), (3, 2, 1)])
def test_maxpool_kernels_match_reference(extension_kernels, dtype, kernel, stride, padding):
    x = _map((2, 4, 11, 11), dtype)
    out, index = extension_kernels.maxpool2d_forward(x, kernel, stride, padding)
    assert _equal((out, index), compress.maxpool2d_forward(x, kernel, stride, padding))
    grad_out = _map(out.shape, dtype, 1)
    grad = extension_kernels.maxpool2d_backward(grad_out, index, 11, 11, kernel, stride, padding)
    expected = compress.maxpool2d_backward(grad_out, index, 11, 11, kernel, stride, padding)
    if kernel == stride:
        assert _equal([grad], [expected])
    else:  # overlapping windows: sums may be added in another order
        torch.testing.assert_close(grad, expected)


@pytest.mark.parametrize("compressor", [DivisionCompressor(8, 2), GroupCompressor(256, 2)])
def test_compressors_agree_bit_for_bit_with_the_same_generator(extension_kernels, compressor):
    x = _map((3, 5, 20, 20), torch.float32)
    ours = compressor.compress(x, _generator(5), extension_kernels)
    assert _equal(ours, compressor.compress(x, _generator(5), TORCH_KERNELS))
    assert _equal(
        [compressor.decompress(ours, x.shape, torch.bfloat16, extension_kernels)],
        [compressor.decompress(ours, x.shape, torch.bfloat16, TORCH_KERNELS)],
    )


def test_results_do_not_depend_on_the_thread_count(extension_kernels):
    x = _map((4, 16, 24, 24), torch.float32)
    short = _map((3, 7, 4, 4), torch.float32)
    threads = torch.get_num_threads()
    results = []
    try:
        for count in (1, 3):
            torch.set_num_threads(count)
            results.append(
                (
                    *extension_kernels.division_compress(x, 8, 2, SEED, OFFSET),
                    *extension_kernels.group_compress(x, 256, 2, SEED, OFFSET),
                    *extension_kernels.dropout_pack(x, 0.5, SEED, OFFSET),
                    # short rows: threads split the vectors of calls that 16 / calls rows share
                    *extension_kernels.division_compress(short, 8, 2, SEED, OFFSET),
                    *extension_kernels.group_compress(short, 8, 2, SEED, OFFSET),
                )
            )
    finally:
        torch.set_num_threads(threads)
    assert _equal(results[0], results[1])


def test_stochastic_rounding_is_unbiased(extension_kernels):
    x = torch.full((1, 1, 100, 200), 0.3)
    x[0, 0, 0, 0], x[0, 0, 0, 1] = 0.0, 3.0  # a grid of 0, 1, 2, 3: 0.3 lies between levels 0 and 1
    saved = extension_kernels.group_compress(x, x.numel(), 2, SEED, OFFSET)
    levels = extension_kernels.group_decompress(*saved, x.numel(), 2, [x.numel()], torch.float32)[2:]
    assert set(levels.unique().tolist()) == {0.0, 1.0}
    assert abs(levels.mean().item() - 0.3) < 0.01


def test_bad_arguments_raise_from_the_extension(extension_kernels):
    x = torch.zeros(1, 1, 4, 4)
    with pytest.raises(RuntimeError, match="bits"):
        extension_kernels.division_compress(x, 8, 3, 0, 0)
    with pytest.raises(RuntimeError, match="float32, float16 or bfloat16"):
        extension_kernels.group_compress(x.double(), 256, 2, 0, 0)
    with pytest.raises(RuntimeError, match="4-D"):
        extension_kernels.division_compress(x[0], 8, 2, 0, 0)
    lfc, packed, minimum, scale = extension_kernels.division_compress(x, 8, 2, 0, 0)
    with pytest.raises(RuntimeError, match="packed"):
        extension_kernels.division_decompress(lfc, packed[:, :1], minimum, scale, 8, 2, 4, 4, torch.float32)
    with pytest.raises(RuntimeError, match="mask"):
        extension_kernels.masked_grad(x, torch.zeros(1, dtype=torch.uint8), 1.0)


def test_degenerate_planes_and_windows_raise_from_the_extension(extension_kernels):
    """Arguments that would divide by zero or write outside a map: one-line errors, not a crash."""
    x = torch.zeros(1, 1, 4, 4)
    lfc, packed, minimum, scale = extension_kernels.division_compress(x, 8, 2, 0, 0)
    with pytest.raises(RuntimeError, match="positive height and width, got 4x0"):
        extension_kernels.division_compress(x[..., :0], 8, 2, 0, 0)
    with pytest.raises(RuntimeError, match="block must be positive, got 0"):
        extension_kernels.division_compress(x, 0, 2, 0, 0)
    with pytest.raises(RuntimeError, match="block must be positive, got 0"):
        extension_kernels.division_decompress(lfc, packed, minimum, scale, 0, 2, 4, 4, torch.float32)
    with pytest.raises(RuntimeError, match="positive height and width, got 0x4"):
        extension_kernels.division_decompress(lfc, packed, minimum, scale, 8, 2, 0, 4, torch.float32)
    for kernel, stride, padding in [(2, 0, 0), (0, 1, 0), (2, 2, -1)]:
        with pytest.raises(RuntimeError, match="kernel and stride must be positive"):
            extension_kernels.maxpool2d_forward(x, kernel, stride, padding)
    with pytest.raises(RuntimeError, match="4x4 map is smaller than the window"):
        extension_kernels.maxpool2d_forward(x, 5, 1, 0)
    with pytest.raises(RuntimeError, match="window too large for an int8 index, got kernel 12"):
        extension_kernels.maxpool2d_forward(torch.zeros(1, 1, 16, 16), 12, 1, 0)
    with pytest.raises(RuntimeError, match="padding must be at most half the kernel"):
        extension_kernels.maxpool2d_forward(x, 2, 1, 2)
    out, index = extension_kernels.maxpool2d_forward(x, 2, 2, 0)
    with pytest.raises(RuntimeError, match="not the pooled size of a 2x2 map"):
        extension_kernels.maxpool2d_backward(out, index, 2, 2, 2, 2, 0)
    with pytest.raises(RuntimeError, match="index names positions outside"):
        extension_kernels.maxpool2d_backward(out, index - 1, 4, 4, 2, 2, 0)


def test_grids_match_the_reference_at_the_edges_of_bfloat16(extension_kernels):
    """Each row's grid (its minimum rounded down and its scale rounded up to bfloat16), for rows
    of two values drawn from zeros of both signs, subnormals, values that bfloat16 holds, values
    halfway between two bfloat16 (ties to even) or just past one, the largest floats, infinities and
    NaN: every pair, in groups of two values."""
    tiny, above_one = 2.0**-149, torch.nextafter(torch.tensor(1.0), torch.tensor(2.0)).item()
    edges = [0.0, -0.0, tiny, -tiny, 2.0**-133, -(2.0**-134), 1.17549435e-38, 1.0, above_one, -above_one]
    edges += [1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), 3.0, -2.5, 0.1, 1e30, -1e30, 3.3895314e38, 3.4028235e38]
    edges += [-3.4028235e38, float("inf"), float("-inf"), float("nan")]
    pairs = torch.tensor([[a, b] for a in edges for b in edges], dtype=torch.float32)
    for bits in (1, 2, 4, 8):
        ours = extension_kernels.group_compress(pairs, 2, bits, SEED, OFFSET)
        for mine, reference in zip(ours, compress.group_compress(pairs, 2, bits, SEED, OFFSET), strict=True):
            torch.testing.assert_close(mine, reference, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", DTYPES)
def test_kernels_match_the_reference_on_planes_with_nan_or_infinity(extension_kernels, dtype):
    """A plane or group that holds a NaN or an infinity (a diverging run; float16 overflows) gets a NaN
    minimum, scale 1 and the top level everywhere, in the kernels and the reference alike; it
    decompresses to NaN. NaN payloads are the conversion's own (CUDA writes others), so NaNs compare
    equal whatever their bits."""
    x = _map((2, 3, 16, 16), dtype)
    x[0, 0, 3, 4] = float("nan")
    x[0, 2, 0, 0] = float("inf")
    x[1, 1, 5, 9] = -float("inf")
    x[1, 2, 7, 7], x[1, 2, 8, 8] = float("inf"), -float("inf")

    def same(ours, reference):
        for a, b in zip(ours, reference, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)

    for block in (8, 4):
        saved = extension_kernels.division_compress(x, block, 2, SEED, OFFSET)
        expected = compress.division_compress(x, block, 2, SEED, OFFSET)
        same(saved, expected)
        planes = torch.tensor([[0, 0], [0, 2], [1, 1], [1, 2]]).T
        flat = planes[0] * 3 + planes[1]
        assert torch.isnan(expected[2].float()[flat]).all() and (expected[1][flat] == 0xFF).all()
        restored = extension_kernels.division_decompress(*expected, block, 2, 16, 16, dtype)
        same([restored], [compress.division_decompress(*expected, block, 2, 16, 16, dtype)])
        assert torch.isnan(restored[planes[0], planes[1]]).all()
        assert torch.isfinite(restored[0, 1]).all()
    for group_size in (256, 33):
        saved = extension_kernels.group_compress(x, group_size, 2, SEED, OFFSET)
        same(saved, compress.group_compress(x, group_size, 2, SEED, OFFSET))
        args = (*saved, group_size, 2, list(x.shape), dtype)
        same([extension_kernels.group_decompress(*args)], [compress.group_decompress(*args)])


# -- instruction sets: the extension runs the best one this CPU has, so a run of this file checks
# that one; the others this CPU can run are checked each in a run of this file of its own.
INSTRUCTION_SETS = ("avx512", "avx2", "baseline")


def _isa_probe(built_manifest, isa: str) -> subprocess.CompletedProcess:
    script = (
        "import sys; from membench.division.kernels import select_kernels; "
        "print(select_kernels('extension', sys.argv[1], 'cpu').cpu_isa)"
    )
    env = {**os.environ, CPU_ISA_VARIABLE: isa}
    return subprocess.run(
        [sys.executable, "-c", script, str(built_manifest)], env=env, capture_output=True, text=True
    )


def test_the_kernels_run_the_instruction_set_asked_for(extension_kernels):
    asked = os.environ.get(CPU_ISA_VARIABLE)
    assert extension_kernels.cpu_isa == asked if asked else extension_kernels.cpu_isa in INSTRUCTION_SETS
    assert TORCH_KERNELS.cpu_isa is None


@pytest.mark.slow
def test_an_instruction_set_this_build_lacks_is_a_one_line_error(built_manifest):
    probe = _isa_probe(built_manifest, "sse9")
    assert probe.returncode != 0
    last_line = probe.stderr.strip().splitlines()[-1]
    expected = (
        r"membench\.core\.errors\.InputError: <input>, environment variable MEMBENCH_CPU_ISA: "
        r"'sse9' is not an instruction set of this build \((avx512, avx2, )?baseline\)"
    )
    assert re.fullmatch(expected, last_line), last_line


@pytest.mark.slow
@pytest.mark.parametrize("isa", INSTRUCTION_SETS)
def test_every_instruction_set_this_cpu_has_is_bit_exact(built_manifest, extension_kernels, isa, tmp_path):
    if os.environ.get(CPU_ISA_VARIABLE):
        pytest.skip("this run checks one instruction set")
    if isa == extension_kernels.cpu_isa:
        pytest.skip(f"{isa} is the set this run checks")
    probe = _isa_probe(built_manifest, isa)
    if "this CPU lacks" in probe.stderr or "not an instruction set of this build" in probe.stderr:
        pytest.skip(f"this CPU or build lacks {isa}")
    assert probe.stdout.strip() == isa, probe.stderr[-2000:]
    env = {**os.environ, CPU_ISA_VARIABLE: isa, PARENT_BUILD_VARIABLE: str(built_manifest)}
    command = [sys.executable, "-m", "pytest", __file__, "-q", "-p", "no:xdist", "-p", "no:cacheprovider"]
    command += ["-o", "addopts=--import-mode=importlib", "--basetemp", str(tmp_path / "run")]
    result = subprocess.run(command, env=env, capture_output=True, text=True, cwd=Path(__file__).parents[2])
    assert result.returncode == 0, result.stdout[-3000:]
    assert " passed" in result.stdout and " failed" not in result.stdout
