"""Compressors of saved activations, in pure torch: the fallback and the reference of the kernels.

Bit layout: a 2-D tensor of ``rows`` x ``length`` values with ``bits`` bits each is packed into
``rows`` x ``ceil(length / (8 // bits))`` bytes; value ``j`` of a row lives in byte
``j // (8 // bits)`` at bit offset ``(j % (8 // bits)) * bits``. Masks use the same layout with one
bit per value over the flattened tensor. Stochastic rounding takes its uniform random numbers as
an argument so that kernels and reference can be compared bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

__all__ = [
    "DivisionCompressor",
    "GroupCompressor",
    "low_frequency",
    "maxpool2d_backward",
    "maxpool2d_forward",
    "pack_mask",
    "quantize_pack",
    "row_range",
    "SUPPORTED_BITS",
    "unpack_dequantize",
    "unpack_mask",
    "upsample_low_frequency",
]

SUPPORTED_BITS = (1, 2, 4, 8)


def _check_bits(bits: int) -> None:
    if bits not in SUPPORTED_BITS:
        raise ValueError(f"bits must be one of {SUPPORTED_BITS}, got {bits}")


def _shifts(bits: int, device: torch.device) -> torch.Tensor:
    return torch.arange(0, 8, bits, dtype=torch.uint8, device=device)


def quantize_pack(
    x: torch.Tensor, minimum: torch.Tensor, scale: torch.Tensor, noise: torch.Tensor, bits: int
) -> torch.Tensor:
    """Quantise each row of ``x`` to ``bits`` bits by stochastic rounding and pack the levels.

    ``x``: float32 (rows, length); ``minimum``, ``scale``: float32 (rows,), level ``k`` stands for
    ``minimum + k * scale``; ``noise``: float32 (rows, length) uniform in [0, 1).
    Returns uint8 (rows, ceil(length / (8 // bits))).
    """
    _check_bits(bits)
    levels = (1 << bits) - 1
    per_byte = 8 // bits
    rows, length = x.shape
    level = torch.floor((x - minimum[:, None]) / scale[:, None] + noise).clamp_(0, levels).to(torch.uint8)
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


def maxpool2d_forward(
    x: torch.Tensor, kernel: int, stride: int, padding: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Max pool (square window, no dilation, floor mode) returning the winner's index in its window.

    ``x``: float32 (N, C, H, W). Returns ``(out, index)``: out (N, C, Ho, Wo) as ``F.max_pool2d``;
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
    """Gradient of :func:`maxpool2d_forward` w.r.t. its input, float32 (N, C, height, width)."""
    n, c, out_h, out_w = grad_out.shape
    window = index.to(torch.int64)
    origin_h = torch.arange(out_h, device=grad_out.device)[:, None] * stride - padding
    origin_w = torch.arange(out_w, device=grad_out.device)[None, :] * stride - padding
    flat_index = (origin_h + window // kernel) * width + (origin_w + window % kernel)
    grad_in = torch.zeros(n, c, height * width, dtype=grad_out.dtype, device=grad_out.device)
    grad_in.scatter_add_(2, flat_index.view(n, c, -1), grad_out.reshape(n, c, -1))
    return grad_in.view(n, c, height, width)


# -- compressors of 4-D activations ---------------------------------------------------------------
def row_range(rows: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row ``(minimum, scale)`` of float32 (rows, length) for ``bits``-bit levels, bfloat16 (rows,).

    Both are rounded outward to bfloat16 (minimum down, scale up), so the grid
    ``minimum + k * scale``, k = 0..2**bits-1, still covers every value of the row and stochastic
    rounding stays unbiased. A constant row gets scale 1 (all its values map to level 0).
    """
    minimum = rows.amin(dim=1)
    low = minimum.to(torch.bfloat16)
    low = torch.where(low.float() > minimum, torch.nextafter(low, torch.full_like(low, float("-inf"))), low)
    scale = (rows.amax(dim=1) - low.float()) / ((1 << bits) - 1)
    step = scale.to(torch.bfloat16)
    step = torch.where(step.float() < scale, torch.nextafter(step, torch.full_like(step, float("inf"))), step)
    return low, torch.where(step > 0, step, torch.ones_like(step))


def low_frequency(x: torch.Tensor, block: int) -> torch.Tensor:
    """LFC of (N, C, H, W): average over ``block`` x ``block`` tiles (edge tiles over what they hold),
    or over the whole map when it is smaller than one tile. Same dtype as ``x``."""
    if x.shape[2] < block or x.shape[3] < block:
        return x.mean(dim=(2, 3), keepdim=True)
    return F.avg_pool2d(x, block, block, ceil_mode=True)


def upsample_low_frequency(lfc: torch.Tensor, height: int, width: int, block: int) -> torch.Tensor:
    """Nearest upsampling of an LFC back to (N, C, height, width), float32."""
    lfc = lfc.to(torch.float32)
    if lfc.shape[2] == 1 and lfc.shape[3] == 1:
        return lfc.expand(-1, -1, height, width)
    return lfc.repeat_interleave(block, dim=2).repeat_interleave(block, dim=3)[:, :, :height, :width]


@dataclass(frozen=True)
class DivisionCompressor:
    """DIVISION: keep the LFC (block ``block``) in bfloat16, the HFC at ``bits`` bits per value with
    one min/scale per (sample, channel) and stochastic rounding.

    Saved per float32 (N, C, H, W) map: LFC bf16 (N, C, ceil(H/B), ceil(W/B)) (1x1 when H or W < B),
    packed HFC uint8 (N*C, ceil(H*W*bits/8)), minimum and scale bfloat16 (N*C,).
    """

    block: int = 8
    bits: int = 2

    def compress(self, x: torch.Tensor, generator: torch.Generator | None, ops) -> tuple[torch.Tensor, ...]:
        n, c, h, w = x.shape
        x = x.to(torch.float32)
        lfc = low_frequency(x, self.block).to(torch.bfloat16)
        # The HFC is taken against the rounded LFC, so decompression adds back exactly what was removed.
        hfc = (x - upsample_low_frequency(lfc, h, w, self.block)).reshape(n * c, h * w)
        minimum, scale = row_range(hfc, self.bits)
        noise = torch.rand(hfc.shape, generator=generator, device=x.device, dtype=torch.float32)
        return lfc, ops.quantize_pack(hfc, minimum.float(), scale.float(), noise, self.bits), minimum, scale

    def decompress(self, saved: tuple[torch.Tensor, ...], shape: torch.Size, ops) -> torch.Tensor:
        lfc, packed, minimum, scale = saved
        n, c, h, w = shape
        hfc = ops.unpack_dequantize(packed, minimum.float(), scale.float(), self.bits, h * w).view(n, c, h, w)
        return hfc + upsample_low_frequency(lfc, h, w, self.block)


@dataclass(frozen=True)
class GroupCompressor:
    """ActNN-style: ``bits`` bits per value, one min/scale per group of ``group_size`` consecutive
    values of the flattened map, stochastic rounding, no adaptive bit allocation.

    Saved per float32 map of ``numel`` values: packed uint8 (G, ceil(group_size*bits/8)), minimum and
    scale bfloat16 (G,), with G = ceil(numel / group_size) (the last group zero-padded).
    """

    group_size: int = 256
    bits: int = 2

    def compress(self, x: torch.Tensor, generator: torch.Generator | None, ops) -> tuple[torch.Tensor, ...]:
        flat = x.to(torch.float32).reshape(-1)
        padded = -flat.numel() % self.group_size
        if padded:
            flat = F.pad(flat, (0, padded))
        groups = flat.view(-1, self.group_size)
        minimum, scale = row_range(groups, self.bits)
        noise = torch.rand(groups.shape, generator=generator, device=x.device, dtype=torch.float32)
        return ops.quantize_pack(groups, minimum.float(), scale.float(), noise, self.bits), minimum, scale

    def decompress(self, saved: tuple[torch.Tensor, ...], shape: torch.Size, ops) -> torch.Tensor:
        packed, minimum, scale = saved
        values = ops.unpack_dequantize(packed, minimum.float(), scale.float(), self.bits, self.group_size)
        return values.view(-1)[: shape.numel()].view(shape)
