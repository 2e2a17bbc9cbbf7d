"""The pure-torch compressors: layouts, error bounds, unbiasedness."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from membench.division import compress
from membench.division.compress import DivisionCompressor, GroupCompressor, row_range
from membench.division.kernels import TORCH_KERNELS


def _generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
def test_quantize_pack_layout_and_round_trip(bits):
    rows, length = 5, 37  # length not a multiple of the values per byte
    levels = torch.randint(0, 2**bits, (rows, length), generator=_generator()).float()
    minimum, scale = (
        torch.randn(rows, generator=_generator(1)),
        torch.rand(rows, generator=_generator(2)) + 0.5,
    )
    x = levels * scale[:, None] + minimum[:, None]
    # Noise 0.5 rounds to the nearest level, so exact levels come back exactly.
    packed = compress.quantize_pack(x, minimum, scale, torch.full_like(x, 0.5), bits)
    assert packed.dtype == torch.uint8 and packed.shape == (rows, -(-length * bits // 8))
    assert torch.equal(compress.unpack_dequantize(packed, minimum, scale, bits, length), x)
    if bits == 2:  # value j sits in byte j // 4 at bit 2 * (j % 4)
        expected = sum(int(levels[0, j]) << (2 * j) for j in range(4))
        assert int(packed[0, 0]) == expected


def test_mask_pack_round_trip_and_size():
    mask = torch.rand(3, 5, 7, generator=_generator()) > 0.5
    packed = compress.pack_mask(mask)
    assert packed.numel() == -(-mask.numel() // 8)
    assert torch.equal(compress.unpack_mask(packed, mask.numel()).view(mask.shape), mask)


@pytest.mark.parametrize("kernel,stride,padding", [(2, 2, 0), (3, 2, 1), (3, 1, 1)])
def test_maxpool_window_index_matches_torch(kernel, stride, padding):
    x = torch.randn(2, 3, 9, 9, generator=_generator(), requires_grad=True)
    out, index = compress.maxpool2d_forward(x.detach(), kernel, stride, padding)
    reference = F.max_pool2d(x, kernel, stride, padding)
    assert index.dtype == torch.int8 and torch.equal(out, reference.detach())
    grad_out = torch.randn(reference.shape, generator=_generator(1))
    (expected,) = torch.autograd.grad(reference, x, grad_out)
    grad = compress.maxpool2d_backward(grad_out, index, 9, 9, kernel, stride, padding)
    torch.testing.assert_close(grad, expected)


def test_row_range_covers_every_value_in_bfloat16():
    rows = torch.randn(64, 100, generator=_generator()) * 7 + 3
    minimum, scale = row_range(rows, 2)
    assert minimum.dtype == torch.bfloat16 and scale.dtype == torch.bfloat16
    assert (minimum.float() <= rows.amin(1)).all()
    assert (minimum.float() + 3 * scale.float() >= rows.amax(1)).all()
    constant = torch.full((2, 10), 4.0)
    assert torch.equal(row_range(constant, 2)[1].float(), torch.ones(2))


@pytest.mark.parametrize(
    "compressor", [DivisionCompressor(8, 2), DivisionCompressor(4, 4), GroupCompressor(256, 2)]
)
@pytest.mark.parametrize("shape", [(4, 6, 32, 32), (3, 5, 12, 10), (2, 8, 4, 4)])
def test_round_trip_error_is_within_one_quantisation_step(compressor, shape):
    x = torch.randn(shape, generator=_generator()) * 2 + 1
    saved = compressor.compress(x, _generator(1), TORCH_KERNELS)
    restored = compressor.decompress(saved, x.shape, TORCH_KERNELS)
    assert restored.shape == x.shape and restored.dtype == torch.float32
    scale = saved[-1].float()
    if isinstance(compressor, DivisionCompressor):
        step = scale.view(shape[0], shape[1], 1, 1)
    else:
        step = scale.repeat_interleave(compressor.group_size)[: x.numel()].view(shape)
    assert ((restored - x).abs() <= step * (1 + 1e-5) + 1e-5).all()


def test_division_keeps_lfc_in_bfloat16_global_below_block():
    compressor = DivisionCompressor(8, 2)
    lfc, packed, minimum, scale = compressor.compress(torch.randn(2, 3, 16, 12), _generator(), TORCH_KERNELS)
    assert lfc.dtype == torch.bfloat16 and lfc.shape == (2, 3, 2, 2)  # ceil(12 / 8) = 2
    assert packed.shape == (6, 16 * 12 // 4) and minimum.shape == (6,) and scale.shape == (6,)
    small = compressor.compress(torch.randn(2, 3, 4, 4), _generator(), TORCH_KERNELS)[0]
    assert small.shape == (2, 3, 1, 1)


def test_division_bytes_are_about_fourteen_times_fewer_on_large_maps():
    x = torch.randn(8, 16, 64, 64)
    saved = DivisionCompressor(8, 2).compress(x, _generator(), TORCH_KERNELS)
    saved_bytes = sum(t.numel() * t.element_size() for t in saved)
    assert 13.5 < x.numel() * 4 / saved_bytes < 14.3


@pytest.mark.parametrize("compressor", [DivisionCompressor(8, 2), GroupCompressor(64, 2)])
def test_stochastic_rounding_is_unbiased(compressor):
    x = torch.randn(2, 3, 16, 16, generator=_generator())
    generator = _generator(7)
    draws = 400
    total = torch.zeros_like(x)
    for _ in range(draws):
        total += compressor.decompress(
            compressor.compress(x, generator, TORCH_KERNELS), x.shape, TORCH_KERNELS
        )
    mean = total / draws
    step = (x.amax() - x.amin()) / 3  # a bound on every row's scale
    # One draw errs by up to a step (variance <= step^2 / 4); the mean of 400 by about step / 40.
    assert (mean - x).abs().max() < step * 0.2
    assert (mean - x).abs().mean() < step * 0.03


def test_bad_bits_are_refused():
    with pytest.raises(ValueError, match="bits"):
        compress.quantize_pack(torch.zeros(1, 4), torch.zeros(1), torch.ones(1), torch.zeros(1, 4), 3)
