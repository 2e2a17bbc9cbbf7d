"""The pure-torch compressors: Philox noise, layouts, error bounds, unbiasedness."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from membench.division import compress
from membench.division.compress import DivisionCompressor, GroupCompressor, philox4x32, row_range
from membench.division.kernels import TORCH_KERNELS


def _generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _philox_words(counter: tuple[int, int, int, int], key: tuple[int, int]) -> list[int]:
    words = philox4x32(tuple(torch.tensor([c], dtype=torch.int64) for c in counter), key)
    return [int(w) for w in words]


# Random123's known-answer vectors for philox4x32 with 10 rounds (kat_vectors): counter, key, output.
@pytest.mark.parametrize(
    "counter,key,expected",
    [
        ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
        ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
        (
            (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
            (0xA4093822, 0x299F31D0),
            (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
        ),
    ],
)
def test_philox_matches_the_random123_known_answers(counter, key, expected):
    assert _philox_words(counter, key) == list(expected)


def _documented_uniform(seed, offset, row, j, calls, uniform_bits):
    """Value ``j``'s uniform as philox_uniform's docstring states it, from one Philox call."""
    per_call = 128 // uniform_bits
    t = j % (per_call * calls)
    call = calls * (j // (per_call * calls)) + t % calls
    part = t // calls
    words = _philox_words((call, row, offset & 0xFFFFFFFF, offset >> 32), (seed & 0xFFFFFFFF, seed >> 32))
    per_word = 32 // uniform_bits
    value = (words[part // per_word] >> (uniform_bits * (part % per_word))) & ((1 << uniform_bits) - 1)
    return (value + 0.5) / 2**uniform_bits


@pytest.mark.parametrize("uniform_bits,length", [(8, 600), (16, 300)])  # the last block is partial
def test_philox_uniform_takes_the_documented_part_of_the_documented_call(uniform_bits, length):
    seed, offset, rows = 0x0123456789ABCDEF, 0xFEDCBA9876543210, 3
    noise = compress.philox_uniform(seed, offset, rows, length, torch.device("cpu"), uniform_bits)
    for row, j in [(0, 0), (0, 1), (1, 17), (2, 45), (1, 127), (2, 128), (0, 255), (1, 256), (2, length - 1)]:
        assert noise[row, j].item() == _documented_uniform(seed, offset, row, j, 16, uniform_bits)
    assert noise.dtype == torch.float32 and 0 < noise.min() and noise.max() < 1
    assert torch.all((noise * 2 ** (uniform_bits + 1)) % 2 == 1)  # (part + 1/2) * 2**-uniform_bits


@pytest.mark.parametrize(
    "uniform_bits,length,calls",
    [
        (8, 1, 1),
        (8, 16, 1),
        (8, 17, 2),
        (8, 49, 4),
        (8, 64, 4),
        (8, 65, 8),
        (8, 128, 8),
        (8, 129, 16),
        (16, 8, 1),
        (16, 9, 2),
        (16, 49, 8),
        (16, 64, 8),
        (16, 65, 16),
    ],
)
def test_short_rows_take_one_block_of_fewer_calls(uniform_bits, length, calls):
    assert compress.noise_calls(length, 128 // uniform_bits) == calls
    seed, offset, rows = 0x0123456789ABCDEF, 0xFEDCBA9876543210, 3
    noise = compress.philox_uniform(seed, offset, rows, length, torch.device("cpu"), uniform_bits)
    for row in range(rows):
        for j in range(length):
            assert noise[row, j].item() == _documented_uniform(seed, offset, row, j, calls, uniform_bits)


def test_philox_uniform_refuses_other_widths():
    with pytest.raises(ValueError, match="uniform_bits must be 8 or 16, got 12"):
        compress.philox_uniform(0, 0, 1, 8, torch.device("cpu"), 12)


def test_philox_uniform_is_uniform_and_streams_differ():
    cpu = torch.device("cpu")
    noise = compress.philox_uniform(7, 0, 64, 1000, cpu)
    # 8-bit uniforms: mean 1/2, variance (1 - 2**-16) / 12
    assert abs(noise.mean().item() - 0.5) < 0.005 and abs(noise.var().item() - 1 / 12) < 0.002
    assert not torch.equal(noise[0], noise[1])
    for other in (compress.philox_uniform(8, 0, 64, 1000, cpu), compress.philox_uniform(7, 1, 64, 1000, cpu)):
        assert (noise == other).float().mean() < 0.01
    assert torch.equal(compress.philox_uniform(7, 0, 64, 1000, cpu)[:, :500], noise[:, :500])


def test_philox_inputs_follow_the_generator_state():
    generator = _generator(3)
    state = generator.get_state()
    first = compress.philox_inputs(generator)
    assert compress.philox_inputs(generator) != first
    generator.set_state(state)
    assert compress.philox_inputs(generator) == first


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


def test_low_frequency_is_the_tile_mean():
    x = torch.randn(2, 3, 19, 13, generator=_generator())
    lfc = compress.low_frequency(x, 8)
    torch.testing.assert_close(lfc, F.avg_pool2d(x, 8, 8, ceil_mode=True))
    torch.testing.assert_close(lfc[:, :, 2, 1], x[:, :, 16:, 8:].mean(dim=(2, 3)))  # an edge tile: 3 x 5
    small = compress.low_frequency(x[:, :, :5, :], 8)  # smaller than a block: one global tile
    assert small.shape == (2, 3, 1, 1)
    torch.testing.assert_close(small[:, :, 0, 0], x[:, :, :5, :].mean(dim=(2, 3)))


def test_row_range_minimum_of_zero_is_positive_zero():
    rows = torch.tensor([[-0.0, 0.0, 1.0], [0.0, -0.0, 2.0], [-0.0, -0.0, -0.0]])
    minimum, scale = row_range(rows, 2)
    assert torch.equal(minimum.view(torch.int16), torch.zeros(3, dtype=torch.int16))  # +0 bits
    assert scale[2].item() == 1.0


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
    restored = compressor.decompress(saved, x.shape, torch.float32, TORCH_KERNELS)
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
            compressor.compress(x, generator, TORCH_KERNELS), x.shape, torch.float32, TORCH_KERNELS
        )
    mean = total / draws
    step = (x.amax() - x.amin()) / 3  # a bound on every row's scale
    # One draw errs by up to a step (variance <= step^2 / 4); the mean of 400 by about step / 40.
    assert (mean - x).abs().max() < step * 0.2
    assert (mean - x).abs().mean() < step * 0.03


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("compressor", [DivisionCompressor(8, 2), GroupCompressor(256, 4)])
def test_maps_come_back_in_the_asked_dtype(compressor, dtype):
    x = torch.randn(2, 3, 10, 9, generator=_generator()).to(dtype)
    saved = compressor.compress(x, _generator(1), TORCH_KERNELS)
    restored = compressor.decompress(saved, x.shape, dtype, TORCH_KERNELS)
    assert restored.dtype == dtype and restored.shape == x.shape
    as_float = compressor.decompress(saved, x.shape, torch.float32, TORCH_KERNELS)
    assert torch.equal(restored, as_float.to(dtype))  # written once from the float32 value


def test_relu_and_dropout_keep_their_masks():
    x = torch.randn(5, 7, 3, generator=_generator())
    out, packed = compress.relu_pack(x)
    assert torch.equal(out, torch.relu(x)) and torch.equal(
        compress.unpack_mask(packed, x.numel()), (x > 0).view(-1)
    )
    grad = torch.randn(x.shape, generator=_generator(1))
    assert torch.equal(compress.masked_grad(grad, packed, 1.0), grad * (x > 0))
    out, packed = compress.dropout_pack(x, 0.25, 11, 12)
    keep = compress.unpack_mask(packed, x.numel()).view(x.shape)
    uniforms = compress.philox_uniform(11, 12, 1, x.numel(), x.device, uniform_bits=16)
    assert torch.equal(keep, uniforms.view(x.shape) >= 0.25)
    assert torch.equal(out, (x * keep) * (1 / 0.75))
    assert torch.equal(compress.masked_grad(grad, packed, 1 / 0.75), (grad * keep) * (1 / 0.75))


def test_degenerate_planes_are_refused():
    with pytest.raises(ValueError, match="positive height and width, got 4x0"):
        compress.division_compress(torch.zeros(1, 1, 4, 0), 8, 2, 0, 0)
    with pytest.raises(ValueError, match="block must be positive, got 0"):
        compress.division_compress(torch.zeros(1, 1, 4, 4), 0, 2, 0, 0)


def test_bad_bits_are_refused():
    with pytest.raises(ValueError, match="bits"):
        compress.quantize_pack(torch.zeros(1, 4), torch.zeros(1), torch.ones(1), torch.zeros(1, 4), 3)
