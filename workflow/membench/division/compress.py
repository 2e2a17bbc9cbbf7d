"""Compressors of saved activations, in pure torch: the fallback and the reference of the kernels.

Every function of :data:`KERNEL_NAMES` (``membench.division.kernels``) is here as a plain function of
tensors, with the same name and arguments as the built kernels (``csrc/``), which compute the same
numbers in one pass over the map; tests compare them bit for bit.

Bit layout: a 2-D tensor of ``rows`` x ``length`` values with ``bits`` bits each is packed into
``rows`` x ``ceil(length / (8 // bits))`` bytes; value ``j`` of a row lives in byte
``j // (8 // bits)`` at bit offset ``(j % (8 // bits)) * bits``. Masks use the same layout with one
bit per value over the flattened tensor.

Noise: stochastic rounding draws its uniforms from Philox4x32-10 (Salmon et al., "Parallel random
numbers: as easy as 1, 2, 3", SC'11), a counter-based generator: the uniform of value ``j`` of row
``r`` is a function of ``(seed, offset, r, j)`` (:func:`philox_uniform`), which the kernels compute
where they use it and never store. A compression call takes ``(seed, offset)`` from a
``torch.Generator`` the caller owns (:func:`philox_inputs`), so a run that restores the generator
draws the same noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

__all__ = [
    "division_compress",
    "division_decompress",
    "DivisionCompressor",
    "dropout_pack",
    "group_compress",
    "group_decompress",
    "GroupCompressor",
    "low_frequency",
    "masked_grad",
    "maxpool2d_backward",
    "maxpool2d_forward",
    "noise_calls",
    "pack_mask",
    "philox4x32",
    "philox_inputs",
    "philox_uniform",
    "quantize_pack",
    "relu_pack",
    "row_range",
    "SUPPORTED_BITS",
    "unpack_dequantize",
    "unpack_mask",
    "upsample_low_frequency",
]

SUPPORTED_BITS = (1, 2, 4, 8)
_MASK32 = 0xFFFFFFFF
_PHILOX_M = (0xD2511F53, 0xCD9E8D57)  # round multipliers
_PHILOX_W = (0x9E3779B9, 0xBB67AE85)  # Weyl key increments
_PHILOX_ROUNDS = 10


def _check_bits(bits: int) -> None:
    if bits not in SUPPORTED_BITS:
        raise ValueError(f"bits must be one of {SUPPORTED_BITS}, got {bits}")


def _shifts(bits: int, device: torch.device) -> torch.Tensor:
    return torch.arange(0, 8, bits, dtype=torch.uint8, device=device)


# -- counter-based noise ---------------------------------------------------------------------------
def _mulhilo(word: torch.Tensor, multiplier: int) -> tuple[torch.Tensor, torch.Tensor]:
    """High and low 32 bits of ``multiplier * word`` (int64 tensors holding 32-bit values), from
    16-bit halves of the multiplier so that no product leaves int64."""
    low_part = word * (multiplier & 0xFFFF)
    high_part = word * (multiplier >> 16)
    low_sum = low_part + ((high_part & 0xFFFF) << 16)
    return (high_part >> 16) + (low_sum >> 32), low_sum & _MASK32


def philox4x32(
    counter: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], key: tuple[int, int]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Philox4x32-10 of a 128-bit counter (four int64 tensors of 32-bit words, broadcast together)
    under a 64-bit key (two 32-bit words); returns the four output words as int64 tensors."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for round_index in range(_PHILOX_ROUNDS):
        if round_index:
            k0, k1 = (k0 + _PHILOX_W[0]) & _MASK32, (k1 + _PHILOX_W[1]) & _MASK32
        hi0, lo0 = _mulhilo(c0, _PHILOX_M[0])
        hi1, lo1 = _mulhilo(c2, _PHILOX_M[1])
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return c0, c1, c2, c3


def philox_uniform(
    seed: int, offset: int, rows: int, length: int, device: torch.device, uniform_bits: int = 8
) -> torch.Tensor:
    """The uniforms of stochastic rounding (``uniform_bits`` 8) or dropout (16), float32 (rows,
    length) in (0, 1).

    A call of :func:`philox4x32`, with key (low, high 32 bits of ``seed``) and counter (call, ``r``,
    low, high 32 bits of ``offset``), gives ``P = 128 / uniform_bits`` uniforms. Row ``r``'s values
    come in blocks of ``P C`` values served by ``C = noise_calls(length, P)`` calls (16 for rows
    longer than ``8 P`` values): value ``j``, ``t = j % PC``, takes part ``t // C`` (of
    ``uniform_bits`` bits, from the low bits of word 0 up) of call ``C * (j // PC) + t % C``, and
    its uniform is ``(part + 1/2) * 2**-uniform_bits``. So ``C`` consecutive values take one part of
    ``C`` consecutive calls (a vector of calls fills vectors of values, or the blocks of several
    short rows). With 8 bits, one call serves sixteen values and stochastic rounding stays unbiased
    to within 2**-9 of a step, finer than the bfloat16 grid; dropout's 16 bits keep its probability
    exact to 2**-16. ``seed`` and ``offset`` are taken modulo 2**64.
    """
    if uniform_bits not in (8, 16):
        raise ValueError(f"uniform_bits must be 8 or 16, got {uniform_bits}")
    per_call = 128 // uniform_bits
    calls = noise_calls(length, per_call)
    blocks = -(-length // (per_call * calls))
    if rows > _MASK32 + 1 or blocks * calls > _MASK32 + 1:
        raise ValueError(f"at most 2**32 rows of 2**32 calls, got {rows} x {length}")
    call = torch.arange(blocks * calls, dtype=torch.int64, device=device).expand(rows, blocks * calls)
    row = torch.arange(rows, dtype=torch.int64, device=device)[:, None].expand_as(call)
    offset_words = (torch.full_like(call, offset & _MASK32), torch.full_like(call, (offset >> 32) & _MASK32))
    words = philox4x32((call, row, *offset_words), (seed & _MASK32, (seed >> 32) & _MASK32))
    part_mask = (1 << uniform_bits) - 1
    shifts = range(0, 32, uniform_bits)
    parts = torch.stack(  # (rows, call, word, part)
        [torch.stack([(w >> shift) & part_mask for shift in shifts], dim=2) for w in words], dim=2
    )
    uniforms = (parts.to(torch.float32) + 0.5) * 2.0**-uniform_bits
    # (rows, block, lane, word, part) -> value order (block, word, part, lane)
    uniforms = uniforms.view(rows, blocks, calls, 4, 32 // uniform_bits).permute(0, 1, 3, 4, 2)
    return uniforms.reshape(rows, blocks * per_call * calls)[:, :length]


def noise_calls(length: int, per_call: int = 16) -> int:
    """Philox calls per block of a row of ``length`` values, ``per_call`` values a call
    (:func:`philox_uniform`): 16, or for rows of at most ``8 * per_call`` values the least power of
    two ``C`` with ``per_call * C >= length``."""
    calls = 1
    while calls < 16 and per_call * calls < length:
        calls *= 2
    return calls


def philox_inputs(generator: torch.Generator | None) -> tuple[int, int]:
    """``(seed, offset)`` of one compression call, drawn from a CPU ``generator`` (torch's default
    generator when None): two 63-bit integers."""
    seed, offset = torch.randint(0, 2**63 - 1, (2,), generator=generator, dtype=torch.int64).tolist()
    return seed, offset


# -- quantisation and bit packing ------------------------------------------------------------------
def quantize_pack(
    x: torch.Tensor, minimum: torch.Tensor, scale: torch.Tensor, noise: torch.Tensor, bits: int
) -> torch.Tensor:
    """Quantise each row of ``x`` to ``bits`` bits by stochastic rounding and pack the levels.

    ``x``: float32 (rows, length); ``minimum``, ``scale``: float32 (rows,), level ``k`` stands for
    ``minimum + k * scale``; ``noise``: float32 (rows, length) uniform in [0, 1). The level is
    ``floor((x - minimum) * (1 / scale) + noise)``, the reciprocal rounded once per row. A value
    whose level is NaN (in a row that holds a NaN, or an infinity the grid cannot place) takes the
    top level.
    Returns uint8 (rows, ceil(length / (8 // bits))).
    """
    _check_bits(bits)
    levels = (1 << bits) - 1
    per_byte = 8 // bits
    rows, length = x.shape
    # 1 / scale once per row, then a multiplication per value (division costs more in the kernels)
    level = torch.floor((x - minimum[:, None]) * torch.reciprocal(scale)[:, None] + noise)
    level = level.nan_to_num_(nan=levels).clamp_(0, levels).to(torch.uint8)
    padded = -length % per_byte
    if padded:
        level = F.pad(level, (0, padded))
    level = level.view(rows, -1, per_byte) << _shifts(bits, x.device)
    return level.sum(dim=2, dtype=torch.uint8)


def unpack_dequantize(
    packed: torch.Tensor, minimum: torch.Tensor, scale: torch.Tensor, bits: int, length: int
) -> torch.Tensor:
    """Inverse of :func:`quantize_pack`: float32 (rows, length) = ``level * scale + minimum``."""
    _check_bits(bits)
    rows = packed.shape[0]
    level = (packed[:, :, None] >> _shifts(bits, packed.device)) & ((1 << bits) - 1)
    level = level.view(rows, -1)[:, :length].to(torch.float32)
    return level * scale[:, None] + minimum[:, None]


def row_range(rows: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row ``(minimum, scale)`` of float32 (rows, length) for ``bits``-bit levels, bfloat16 (rows,).

    Both are rounded outward to bfloat16 (minimum down, scale up), so the grid
    ``minimum + k * scale``, k = 0..2**bits-1, still covers every value of the row and stochastic
    rounding stays unbiased. A zero minimum is +0 (which zero a scan meets first is not defined); a
    constant row gets scale 1 (all its values map to level 0).
    """
    minimum = rows.amin(dim=1) + 0.0
    low = minimum.to(torch.bfloat16)
    low = torch.where(low.float() > minimum, torch.nextafter(low, torch.full_like(low, float("-inf"))), low)
    scale = (rows.amax(dim=1) - low.float()) / ((1 << bits) - 1)
    step = scale.to(torch.bfloat16)
    step = torch.where(step.float() < scale, torch.nextafter(step, torch.full_like(step, float("inf"))), step)
    return low, torch.where(step > 0, step, torch.ones_like(step))


# -- 1-bit masks -----------------------------------------------------------------------------------
def pack_mask(mask: torch.Tensor) -> torch.Tensor:
    """Pack a bool tensor (any shape, flattened) into uint8 (ceil(numel / 8),), 8 values per byte."""
    flat = mask.reshape(-1).to(torch.uint8)
    padded = -flat.numel() % 8
    if padded:
        flat = F.pad(flat, (0, padded))
    return (flat.view(-1, 8) << _shifts(1, mask.device)).sum(dim=1, dtype=torch.uint8)


def unpack_mask(packed: torch.Tensor, numel: int) -> torch.Tensor:
    """Inverse of :func:`pack_mask`: bool (numel,)."""
    bits = (packed[:, None] >> _shifts(1, packed.device)) & 1
    return bits.view(-1)[:numel].to(torch.bool)


def relu_pack(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """ReLU keeping its mask: ``(x * (x > 0), pack_mask(x > 0))``, the output in ``x``'s dtype."""
    mask = x > 0
    return x * mask, pack_mask(mask)


def dropout_pack(x: torch.Tensor, p: float, seed: int, offset: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Dropout keeping its mask: value ``j`` of the flattened ``x`` is kept when the 16-bit Philox
    uniform of row 0, value ``j`` is at least ``p`` (float32). Returns ``((x * keep) * (1 / (1 - p)))``
    computed in float32 and written in ``x``'s dtype, and the packed mask."""
    keep = philox_uniform(seed, offset, 1, x.numel(), x.device, uniform_bits=16).view(x.shape) >= p
    return ((x.float() * keep) * (1.0 / (1.0 - p))).to(x.dtype), pack_mask(keep)


def masked_grad(grad_out: torch.Tensor, packed: torch.Tensor, gain: float) -> torch.Tensor:
    """Backward of :func:`relu_pack` (``gain`` 1) and :func:`dropout_pack` (``gain`` 1 / (1 - p)):
    ``(grad_out * mask) * gain`` computed in float32, in ``grad_out``'s dtype."""
    mask = unpack_mask(packed, grad_out.numel()).view(grad_out.shape)
    return ((grad_out.float() * mask) * gain).to(grad_out.dtype)


# -- max pooling with window indices ---------------------------------------------------------------
def maxpool2d_forward(
    x: torch.Tensor, kernel: int, stride: int, padding: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Max pool (square window, no dilation, floor mode) returning the winner's index in its window.

    ``x``: floating (N, C, H, W). Returns ``(out, index)``: out (N, C, Ho, Wo) as ``F.max_pool2d``;
    index int8 (N, C, Ho, Wo), ``kh * kernel + kw`` of the winner within its window.
    """
    out, flat_index = F.max_pool2d(x, kernel, stride, padding, return_indices=True)
    width = x.shape[3]
    out_h, out_w = out.shape[2:]
    origin_h = torch.arange(out_h, device=x.device)[:, None] * stride - padding
    origin_w = torch.arange(out_w, device=x.device)[None, :] * stride - padding
    window = (flat_index // width - origin_h) * kernel + (flat_index % width - origin_w)
    return out, window.to(torch.int8)


def maxpool2d_backward(
    grad_out: torch.Tensor,
    index: torch.Tensor,
    height: int,
    width: int,
    kernel: int,
    stride: int,
    padding: int,
) -> torch.Tensor:
    """Gradient of :func:`maxpool2d_forward` w.r.t. its input: (N, C, height, width) in
    ``grad_out``'s dtype."""
    n, c, out_h, out_w = grad_out.shape
    window = index.to(torch.int64)
    origin_h = torch.arange(out_h, device=grad_out.device)[:, None] * stride - padding
    origin_w = torch.arange(out_w, device=grad_out.device)[None, :] * stride - padding
    flat_index = (origin_h + window // kernel) * width + (origin_w + window % kernel)
    grad_in = torch.zeros(n, c, height * width, dtype=grad_out.dtype, device=grad_out.device)
    grad_in.scatter_add_(2, flat_index.view(n, c, -1), grad_out.reshape(n, c, -1))
    return grad_in.view(n, c, height, width)


# -- DIVISION and ActNN-style compression of 4-D activations --------------------------------------
def _tile(height: int, width: int, block: int) -> tuple[int, int]:
    """LFC tile of a ``height`` x ``width`` plane: ``block`` x ``block``, or the whole plane when it
    is smaller than a block either way."""
    if block < 1:
        raise ValueError(f"block must be positive, got {block}")
    if height < 1 or width < 1:
        raise ValueError(f"maps must have a positive height and width, got {height}x{width}")
    return (height, width) if height < block or width < block else (block, block)


def low_frequency(x: torch.Tensor, block: int) -> torch.Tensor:
    """LFC of float32 (N, C, H, W): the mean of each tile (:func:`_tile`; edge tiles over what they
    hold), float32 (N, C, ceil(H / tile), ceil(W / tile)).

    Summation order, which the kernels share: each tile column from the top down, then the columns
    from left to right, both from +0.0, then one division by the tile's value count.
    """
    n, c, height, width = x.shape
    tile_h, tile_w = _tile(height, width, block)
    rows, cols = -(-height // tile_h), -(-width // tile_w)
    padded = F.pad(x, (0, cols * tile_w - width, 0, rows * tile_h - height))
    tiles = padded.view(n, c, rows, tile_h, cols, tile_w)
    column = torch.zeros(n, c, rows, cols, tile_w, device=x.device)
    for kh in range(tile_h):
        column = column + tiles[:, :, :, kh]
    total = torch.zeros(n, c, rows, cols, device=x.device)
    for kw in range(tile_w):
        total = total + column[..., kw]
    count_h = (height - torch.arange(rows, device=x.device) * tile_h).clamp(max=tile_h)
    count_w = (width - torch.arange(cols, device=x.device) * tile_w).clamp(max=tile_w)
    return total / (count_h[:, None] * count_w[None, :]).to(torch.float32)


def upsample_low_frequency(lfc: torch.Tensor, height: int, width: int, block: int) -> torch.Tensor:
    """Nearest upsampling of an LFC back to (N, C, height, width), float32."""
    tile_h, tile_w = _tile(height, width, block)
    lfc = lfc.to(torch.float32)
    return lfc.repeat_interleave(tile_h, dim=2).repeat_interleave(tile_w, dim=3)[:, :, :height, :width]


def division_compress(
    x: torch.Tensor, block: int, bits: int, seed: int, offset: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """DIVISION-compress a floating (N, C, H, W) map; returns ``(lfc, packed, minimum, scale)``.

    LFC: :func:`low_frequency` in bfloat16. HFC: the map minus the upsampled bfloat16 LFC (so that
    decompression adds back exactly what was removed), per (sample, channel) plane quantised to
    ``bits`` bits on the grid of :func:`row_range` by stochastic rounding with the uniforms of
    :func:`philox_uniform` (row ``n * C + c``, value ``h * W + w``).
    """
    n, c, height, width = x.shape
    values = x.to(torch.float32)
    lfc = low_frequency(values, block).to(torch.bfloat16)
    hfc = (values - upsample_low_frequency(lfc, height, width, block)).reshape(n * c, height * width)
    minimum, scale = row_range(hfc, bits)
    noise = philox_uniform(seed, offset, n * c, height * width, x.device)
    return lfc, quantize_pack(hfc, minimum.float(), scale.float(), noise, bits), minimum, scale


def division_decompress(
    lfc: torch.Tensor,
    packed: torch.Tensor,
    minimum: torch.Tensor,
    scale: torch.Tensor,
    block: int,
    bits: int,
    height: int,
    width: int,
    dtype: torch.dtype,
) -> torch.Tensor:
    """Inverse of :func:`division_compress`: (N, C, height, width) in ``dtype``, the dequantised HFC
    plus the upsampled LFC computed in float32."""
    n, c = lfc.shape[:2]
    hfc = unpack_dequantize(packed, minimum.float(), scale.float(), bits, height * width)
    hfc = hfc.view(n, c, height, width)
    return (hfc + upsample_low_frequency(lfc, height, width, block)).to(dtype)


def group_compress(
    x: torch.Tensor, group_size: int, bits: int, seed: int, offset: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """ActNN-style compression of a floating map: its flattened values in groups of ``group_size``
    (the last zero-padded), each quantised to ``bits`` bits on the grid of :func:`row_range` by
    stochastic rounding (:func:`philox_uniform`, row = group). Returns ``(packed, minimum, scale)``."""
    flat = x.to(torch.float32).reshape(-1)
    padded = -flat.numel() % group_size
    if padded:
        flat = F.pad(flat, (0, padded))
    groups = flat.view(-1, group_size)
    minimum, scale = row_range(groups, bits)
    noise = philox_uniform(seed, offset, groups.shape[0], group_size, x.device)
    return quantize_pack(groups, minimum.float(), scale.float(), noise, bits), minimum, scale


def group_decompress(
    packed: torch.Tensor,
    minimum: torch.Tensor,
    scale: torch.Tensor,
    group_size: int,
    bits: int,
    shape: list[int],
    dtype: torch.dtype,
) -> torch.Tensor:
    """Inverse of :func:`group_compress`: the map of ``shape`` in ``dtype``."""
    values = unpack_dequantize(packed, minimum.float(), scale.float(), bits, group_size)
    return values.view(-1)[: math.prod(shape)].view(shape).to(dtype)


@dataclass(frozen=True)
class DivisionCompressor:
    """DIVISION: keep the LFC (block ``block``) in bfloat16, the HFC at ``bits`` bits per value with
    one min/scale per (sample, channel) and stochastic rounding.

    Saved per (N, C, H, W) map: LFC bf16 (N, C, ceil(H/B), ceil(W/B)) (1x1 when H or W < B),
    packed HFC uint8 (N*C, ceil(H*W*bits/8)), minimum and scale bfloat16 (N*C,).
    """

    block: int = 8
    bits: int = 2

    def compress(self, x: torch.Tensor, generator: torch.Generator | None, ops) -> tuple[torch.Tensor, ...]:
        """The saved tensors of ``x`` (any floating dtype), noise drawn from a CPU ``generator``."""
        _check_bits(self.bits)
        return tuple(ops.division_compress(x, self.block, self.bits, *philox_inputs(generator)))

    def decompress(
        self, saved: tuple[torch.Tensor, ...], shape: torch.Size, dtype: torch.dtype, ops
    ) -> torch.Tensor:
        """The map of ``shape`` in ``dtype``."""
        lfc, packed, minimum, scale = saved
        return ops.division_decompress(
            lfc, packed, minimum, scale, self.block, self.bits, shape[2], shape[3], dtype
        )


@dataclass(frozen=True)
class GroupCompressor:
    """ActNN-style: ``bits`` bits per value, one min/scale per group of ``group_size`` consecutive
    values of the flattened map, stochastic rounding, no adaptive bit allocation.

    Saved per map of ``numel`` values: packed uint8 (G, ceil(group_size*bits/8)), minimum and
    scale bfloat16 (G,), with G = ceil(numel / group_size) (the last group zero-padded).
    """

    group_size: int = 256
    bits: int = 2

    def compress(self, x: torch.Tensor, generator: torch.Generator | None, ops) -> tuple[torch.Tensor, ...]:
        """The saved tensors of ``x`` (any floating dtype), noise drawn from a CPU ``generator``."""
        _check_bits(self.bits)
        return tuple(ops.group_compress(x, self.group_size, self.bits, *philox_inputs(generator)))

    def decompress(
        self, saved: tuple[torch.Tensor, ...], shape: torch.Size, dtype: torch.dtype, ops
    ) -> torch.Tensor:
        """The map of ``shape`` in ``dtype``."""
        packed, minimum, scale = saved
        return ops.group_decompress(packed, minimum, scale, self.group_size, self.bits, list(shape), dtype)
