"""The CUDA kernels' checks against the CPU reference, for any kernels that run them: the built CUDA
extension on a GPU (``test_gpu.py``) and the same kernels emulated on the CPU
(``test_cuda_emulated.py``). Each check takes the kernels and the device their inputs go to and
compares every output, bit for bit, with :mod:`membench.division.compress` on the CPU."""

from __future__ import annotations

import torch

from membench.division import compress

SEED, OFFSET = 0x1234_5678_9ABC_DEF0, 0x0FED_CBA9_8765_4321
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# Tiles that divide the plane, edge tiles, a plane under a block, a plane wider than a block of
# threads, values that do not fill a byte, one value, and ResNet-50's planes at 224 px: staged in
# shared memory (56 x 56; 112 x 112 in 16 bits, beyond the 48 KiB a block gets unasked) or, too
# large in float32, read from global memory. A map whose bytes end off a 16-byte boundary is not staged.
# Short planes of every noise block (1, 2, 4, 8 and 16 Philox calls: teams of as many lanes, several
# planes a warp), and a plane of more than 256 tiles (no tile table: tiles computed per value).
# ResNet-50's 28 x 28 and 14 x 14 planes: packed rows of whole words, and of 49 bytes at 2 bits;
# their tiles summed in runs of 4 and 2 columns (8 on the 56 x 56 and 112 x 112 planes).
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
    (2, 3, 28, 28),
    (3, 5, 14, 14),
)
GROUP_SIZES = (600, 256, 100, 33, 8)  # teams of 32, 16, 8, 4 and 1 lanes


def random_map(shape, dtype, seed: int = 0) -> torch.Tensor:
    x = torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * 3 + 1
    x.view(-1)[::7] = -0.0  # signed zeros, as ReLU outputs hold
    return x.to(dtype)


def cancelling_map(shape, dtype, seed: int = 0) -> torch.Tensor:
    """Values in [0, 2^-8) and, in one pair of adjacent columns in four, +2^15 beside -2^15. The
    pairs cancel, so a tile's mean is small, but a small value added to a large partial sum is
    lost: how much of a tile's sum is lost depends on the order of its additions, which the
    kernels and the reference must share."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.rand(shape, generator=generator) * 2.0**-8
    pairs = (*shape[:-1], shape[-1] // 2)
    chosen = torch.rand(pairs, generator=generator) < 0.25
    large = chosen * (torch.randint(0, 2, pairs, generator=generator) * 2 - 1) * 2.0**15
    x[..., 0 : 2 * pairs[-1] : 2] += large
    x[..., 1 : 2 * pairs[-1] : 2] -= large
    return x.to(dtype)


def equal_on(device: torch.device, ours, reference) -> bool:
    """Whether every output is on `device` and equals the reference's, dtype and bits."""
    return all(
        a.device.type == device.type and torch.equal(a.cpu(), b) and a.dtype == b.dtype
        for a, b in zip(ours, reference, strict=True)
    )


def check_compressors(kernels, device: torch.device, dtype: torch.dtype, bits: int) -> None:
    """DIVISION and ActNN-style compression and decompression of every shape of :data:`SHAPES`."""
    for index, shape in enumerate(SHAPES):
        x = random_map(shape, dtype, index)
        saved = kernels.division_compress(x.to(device), 8, bits, SEED, OFFSET)
        expected = compress.division_compress(x, 8, bits, SEED, OFFSET)
        assert equal_on(device, saved, expected), shape
        cancelling = cancelling_map(shape, dtype, index)
        summed = kernels.division_compress(cancelling.to(device), 8, bits, SEED, OFFSET)
        assert equal_on(device, summed, compress.division_compress(cancelling, 8, bits, SEED, OFFSET)), shape
        restored = kernels.division_decompress(*saved, 8, bits, shape[2], shape[3], dtype)
        reference = compress.division_decompress(*expected, 8, bits, *shape[2:], dtype)
        assert equal_on(device, [restored], [reference]), shape
        for group_size in GROUP_SIZES:
            saved = kernels.group_compress(x.to(device), group_size, bits, SEED, OFFSET)
            expected = compress.group_compress(x, group_size, bits, SEED, OFFSET)
            assert equal_on(device, saved, expected), (shape, group_size)
            restored = kernels.group_decompress(*saved, group_size, bits, list(shape), dtype)
            reference = compress.group_decompress(*expected, group_size, bits, list(shape), dtype)
            assert equal_on(device, [restored], [reference]), (shape, group_size)


def check_nan_and_infinity(kernels, device: torch.device, dtype: torch.dtype) -> None:
    """NaN minimum, scale 1, top levels, NaN after decompression, as on the CPU; NaN payloads are the
    conversion's own (CUDA's bfloat16 NaN is not the CPU's), so NaNs compare equal whatever their bits."""
    # staged in shared memory; in float32, not; eight planes a warp
    for shape in ((2, 3, 16, 16), (2, 3, 112, 112), (2, 5, 7, 7)):
        x = random_map(shape, dtype)
        x[0, 0, 3, 4], x[0, 2, 0, 0], x[1, 1, 5, 6] = float("nan"), float("inf"), -float("inf")
        saved = list(kernels.division_compress(x.to(device), 8, 2, SEED, OFFSET))
        expected = list(compress.division_compress(x, 8, 2, SEED, OFFSET))
        restored = kernels.division_decompress(*saved, 8, 2, shape[2], shape[3], dtype)
        reference = compress.division_decompress(*expected, 8, 2, shape[2], shape[3], dtype)
        for group_size in (256, 33):
            saved.extend(kernels.group_compress(x.to(device), group_size, 2, SEED, OFFSET))
            expected.extend(compress.group_compress(x, group_size, 2, SEED, OFFSET))
        for ours, theirs in zip((*saved, restored), (*expected, reference), strict=True):
            torch.testing.assert_close(ours.cpu(), theirs, rtol=0, atol=0, equal_nan=True)


def check_views_at_any_offset(kernels, device: torch.device, dtype: torch.dtype) -> None:
    """A map that starts inside its storage, on a 16-byte boundary (staged) or off it (not), or
    1, 2 or 4 values in, whose tiles are then summed by columns or in shorter runs; packed rows
    that start off 8 bytes."""
    for shape in ((3, 4, 56, 56), (3, 1, 7, 7)):
        x = random_map(shape, dtype)
        view = x.to(device)[1:]
        saved = kernels.division_compress(view, 8, 2, SEED, OFFSET)
        assert equal_on(device, saved, compress.division_compress(x[1:], 8, 2, SEED, OFFSET)), shape
        saved = kernels.group_compress(view, 256, 2, SEED, OFFSET)
        assert equal_on(device, saved, compress.group_compress(x[1:], 256, 2, SEED, OFFSET)), shape
    x = random_map((2, 3, 56, 56), dtype)
    for shift in (1, 2, 4):
        shifted = torch.empty(x.numel() + shift, dtype=dtype, device=device)[shift:].view(x.shape)
        shifted.copy_(x)
        saved = kernels.division_compress(shifted, 8, 2, SEED, OFFSET)
        assert equal_on(device, saved, compress.division_compress(x, 8, 2, SEED, OFFSET)), shift
    # Packed rows one byte into their storage: not read eight values' levels at once.
    lfc, packed, minimum, scale = compress.division_compress(x, 8, 2, SEED, OFFSET)
    shifted = torch.empty(packed.numel() + 1, dtype=torch.uint8, device=device)[1:].view(packed.shape)
    shifted.copy_(packed)
    restored = kernels.division_decompress(
        lfc.to(device), shifted, minimum.to(device), scale.to(device), 8, 2, 56, 56, dtype
    )
    reference = compress.division_decompress(lfc, packed, minimum, scale, 8, 2, 56, 56, dtype)
    assert equal_on(device, [restored], [reference])


# LFC blocks and planes whose tiles are summed by a lane per column (an odd tile width; a plane under
# its block, one tile 40 wide, with a team of 4 lanes) or by a lane per run of 2 columns (2 or 3
# lanes a tile: a 16-lane team takes 5 tiles at a time) or of 8 (2, 4 or 8 lanes a tile; the last
# tile of a row narrower than the others).
BLOCK_SHAPES = (
    (5, (2, 3, 28, 28)),
    (8, (3, 2, 1, 40)),
    (4, (2, 3, 17, 26)),
    (6, (3, 2, 14, 14)),
    (16, (2, 2, 56, 56)),
    (32, (2, 3, 40, 40)),
    (64, (1, 2, 64, 64)),
)


def check_block_sizes(kernels, device: torch.device, dtype: torch.dtype) -> None:
    """DIVISION's compression on every block and shape of :data:`BLOCK_SHAPES`."""
    for index, (block, shape) in enumerate(BLOCK_SHAPES):
        for x in (random_map(shape, dtype, index), cancelling_map(shape, dtype, index)):
            saved = kernels.division_compress(x.to(device), block, 2, SEED, OFFSET)
            expected = compress.division_compress(x, block, 2, SEED, OFFSET)
            assert equal_on(device, saved, expected), (block, shape)


def check_masks_and_maxpool(kernels, device: torch.device, dtype: torch.dtype) -> None:
    """ReLU and dropout masks, their gradients, and max pooling with window indices."""
    # Not a whole number of bytes or of blocks of 2048 values; then eights of values, read at once;
    # then a map of one short noise row (30 values: 4 calls).
    for index, shape in enumerate(((3, 5, 110, 61), (2, 4, 56, 56), (2, 3, 5))):
        x = random_map(shape, dtype, index)
        grad = random_map(x.shape, dtype, index + 1)
        out, packed = kernels.relu_pack(x.to(device))
        assert equal_on(device, (out, packed), compress.relu_pack(x)), shape
        assert equal_on(
            device,
            [kernels.masked_grad(grad.to(device), packed, 1.0)],
            [compress.masked_grad(grad, packed.cpu(), 1.0)],
        ), shape
        for p in (0.7, 0.1):
            dropped = kernels.dropout_pack(x.to(device), p, SEED, OFFSET)
            assert equal_on(device, dropped, compress.dropout_pack(x, p, SEED, OFFSET)), shape
            gain = 1.0 / (1.0 - p)
            grad_in = kernels.masked_grad(grad.to(device), dropped[1], gain)
            expected = compress.masked_grad(grad, dropped[1].cpu(), gain)
            assert equal_on(device, [grad_in], [expected]), shape
    # Square and oblong maps, windows apart, overlapping by one (ResNet's) and by two.
    for shape, kernel, stride, padding in (
        ((4, 8, 17, 17), 2, 2, 0),
        ((4, 8, 17, 17), 3, 2, 1),
        ((2, 3, 23, 30), 3, 1, 1),
        ((1, 2, 56, 57), 3, 2, 1),
    ):
        x = random_map(shape, dtype, 2)
        height, width = shape[2:]
        out, index = kernels.maxpool2d_forward(x.to(device), kernel, stride, padding)
        assert equal_on(device, (out, index), compress.maxpool2d_forward(x, kernel, stride, padding))
        grad_out = random_map(out.shape, dtype, 3)
        grad = kernels.maxpool2d_backward(grad_out.to(device), index, height, width, kernel, stride, padding)
        expected = compress.maxpool2d_backward(grad_out, index.cpu(), height, width, kernel, stride, padding)
        if kernel == stride:
            assert equal_on(device, [grad], [expected])
        else:  # overlapping windows: sums of a few values, rounded to the dtype in another order
            exact = compress.maxpool2d_backward(
                grad_out.float(), index.cpu(), height, width, kernel, stride, padding
            )
            windows = ((kernel + stride - 1) // stride) ** 2
            error = windows * torch.finfo(dtype).eps * grad_out.float().abs().max().item()
            torch.testing.assert_close(grad.cpu().float(), exact, rtol=0, atol=error)
