"""The CUDA kernels, run on the CPU: ``division_cuda.cu`` (kernels and launch code unchanged)
compiled with g++ against ``cuda_emulation/cuda_on_cpu.h``, which runs every thread of a block as a
fiber and the warp's collectives as barriers. The checks of ``test_gpu.py`` (``cuda_checks.py``)
run on it, so a change to the CUDA kernels is tested bit for bit against the CPU reference on
machines without a GPU, as CI is: wrong arithmetic, a missing barrier (each fiber runs as far as it
can before the next starts, so a lane that reads what another has not written yet reads 0xFF bytes),
and a collective that not every lane reaches all fail here. The GPU's timing and memory ordering
are not emulated: ``pytest -m gpu`` remains the test of the kernels on a device."""

from __future__ import annotations

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
)
from torch.utils import cpp_extension

from membench.core.extension import cxx_compiler_present
from membench.division.extension import CSRC_DIR

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not cxx_compiler_present(), reason="no C++ compiler on this machine"),
]
EMULATION = Path(__file__).with_name("cuda_emulation")
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    """The CUDA kernels built for the emulation (about 20-40 s)."""
    return cpp_extension.load(
        name="membench_cuda_emulated",
        sources=[str(EMULATION / "emulated_kernels.cpp")],
        extra_include_paths=[str(CSRC_DIR)],
        # As nvcc's --fmad=false: no contraction of multiplications and additions.
        extra_cflags=["-O1", "-ffp-contract=off", "-Wno-unknown-pragmas"],
        build_directory=str(tmp_path_factory.mktemp("cuda_emulation")),
    )


def test_the_emulation_runs_warp_collectives_as_a_gpu_does(emulated):
    shuffled, shifted, ballot = emulated.collectives()
    threads = torch.arange(64)
    assert torch.equal(shuffled, 1000 * (threads ^ 5))
    # A lane within 3 of its warp's end keeps its own value.
    assert torch.equal(shifted, 1000.0 * torch.where(threads % 32 < 29, threads + 3, threads))
    expected = sum(1 << lane for lane in range(1, 20, 2)) | (1 << 31)
    assert torch.equal(ballot.view(torch.uint32).to(torch.int64), torch.full((64,), expected))


def test_the_emulation_refuses_a_barrier_that_not_every_lane_reaches(emulated):
    with pytest.raises(RuntimeError, match="thread 0 waits at a warp barrier that not every thread"):
        emulated.divergent()


def test_the_emulation_fills_shared_memory_with_nan_bytes(emulated):
    assert torch.isnan(emulated.unwritten_shared()).all()


def test_the_emulation_refuses_a_write_past_the_shared_memory_asked_for(emulated):
    with pytest.raises(RuntimeError, match="block 0 wrote shared memory past the 128 bytes its launch asked"):
        emulated.past_shared()


def test_the_cuda_host_code_refuses_in_one_line_what_the_kernels_cannot_run(emulated):
    with pytest.raises(RuntimeError, match="groups of 2\\^30 values or more are not supported on CUDA"):
        emulated.group_compress(torch.zeros(8), 1 << 30, 2, SEED, OFFSET)
    grid = torch.zeros(1, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="groups of 2\\^30 values or more are not supported on CUDA"):
        emulated.group_decompress(
            torch.zeros(1, 2, dtype=torch.uint8), grid, grid, 1 << 30, 2, [8], torch.float32
        )
    with pytest.raises(RuntimeError, match="planes of more than 4096 rows or columns are not supported"):
        emulated.division_compress(torch.zeros(1, 1, 1, 4097), 8, 2, SEED, OFFSET)
    # Blocks of 1 value: a 300 x 300 plane's LFC alone (352 KiB as floats) is more than a block's memory.
    with pytest.raises(RuntimeError, match="rows of this size do not fit the GPU's shared memory"):
        emulated.division_compress(torch.zeros(1, 1, 300, 300), 1, 2, SEED, OFFSET)


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
@pytest.mark.parametrize("dtype", DTYPES)
def test_emulated_compress_kernels_are_bit_exact_with_the_cpu_reference(emulated, dtype, bits):
    check_compressors(emulated, CPU, dtype, bits)


@pytest.mark.parametrize("dtype", DTYPES)
def test_emulated_division_compression_is_bit_exact_for_any_block(emulated, dtype):
    check_block_sizes(emulated, CPU, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_emulated_kernels_match_the_cpu_reference_on_nan_and_infinity(emulated, dtype):
    check_nan_and_infinity(emulated, CPU, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_emulated_compressors_read_views_at_any_offset(emulated, dtype):
    check_views_at_any_offset(emulated, CPU, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_emulated_mask_and_maxpool_kernels_are_bit_exact_with_the_cpu_reference(emulated, dtype):
    check_masks_and_maxpool(emulated, CPU, dtype)
