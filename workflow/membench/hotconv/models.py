"""The MalConv architecture and the four ways of computing its temporal max-pool.

All variants share :class:`MalConvNet` (embedding 257x8 with padding index 0, two Conv1d 8->F with
kernel ``window_size`` and ``stride``, gate ``relu(conv1) * sigmoid(conv2)``, global max over time,
``fc1`` F->F, LeakyReLU, ``fc2`` F->C). They differ only in how ``pool`` gets the pooled (B, F)
activations and their gradients:

``malconv``
    dense: the whole (B, 8, L) embedding and every window's activation are kept for autograd.
``malconv2``
    the low-memory max-pool of Raff et al., "Classifying Sequences of Extreme Length with Constant
    Memory Applied to Malware Detection" (AAAI 2021): a no-grad pass over slices finds each
    (sample, filter)'s winning window; only the B x F winning windows are re-embedded and re-run
    with autograd.
``hotconv``
    the same no-grad search also records the gate's pre-activations at the winner; the backward
    pass (:class:`_HotWindowPool`) computes the conv weight, bias and embedding gradients by hand
    from the winning ("hot") windows, re-embedded from the raw tokens, all filters at once.
``hotconv_eco``
    as ``hotconv``, but the hot-window embeddings are built on the host and streamed to the device
    in chunks of ``fp2_slice_size // window_size`` filters, so device memory stays tiny.

Tokens are ``byte + 1`` with 0 as padding, any integer dtype (the loader gives int16), shape (B, L)
with L >= ``window_size``. ``malconv`` moves the whole token batch to the model's device (the dense
model needs all of it there); ``malconv2``, ``hotconv`` and ``hotconv_eco`` leave it where it is
(the host) and move one slice, and then the B x F winning windows, at a time, so their device
memory does not grow with the file length.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from membench.core.errors import InputError
from membench.hotconv.options import VARIANTS

__all__ = [
    "chunked_pool",
    "dense_pool",
    "EMBED_DIM",
    "gather_windows",
    "MalConvNet",
    "ModelSpec",
    "num_windows",
    "SearchResult",
    "sliced_search",
    "VOCABULARY",
]

EMBED_DIM = 8
VOCABULARY = 257  # 256 byte values + the padding token 0


@dataclass(frozen=True)
class ModelSpec:
    """Shape of the network and of its sliced passes (config keys as in the original HotConv).

    Parameters
    ----------
    variant : str
        One of :data:`VARIANTS`.
    num_classes : int
        Output classes (2 for benign/malware).
    num_filters : int
        Filters F of each of the two gated convolutions (256 in the HotConv paper setting).
    window_size : int
        Convolution kernel width in bytes (512 in the paper).
    stride : int
        Convolution stride in bytes, at most ``window_size`` (512 in the paper).
    fp_slice_size : int
        Bytes of windows per slice of the no-grad search (malconv2, hotconv, hotconv_eco); a
        multiple of ``stride`` and at least ``window_size``; batches are padded to a multiple of it.
    fp2_slice_size : int
        hotconv_eco: bytes of hot windows streamed per chunk (``fp2_slice_size // window_size``
        filters at a time); a multiple of ``window_size`` (the original's ``MIN`` is one window).
    """

    variant: str
    num_classes: int
    num_filters: int = 256
    window_size: int = 512
    stride: int = 512
    fp_slice_size: int = 8192
    fp2_slice_size: int = 512

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise InputError(
                None, f"variant {self.variant!r} is not one of {', '.join(VARIANTS)}", "key 'variant'"
            )
        for key in ("num_filters", "window_size", "stride", "fp_slice_size", "fp2_slice_size"):
            if getattr(self, key) < 1:
                raise InputError(
                    None, f"{key} must be a positive integer, got {getattr(self, key)}", f"key '{key}'"
                )
        if self.num_classes < 2:
            raise InputError(
                None, f"at least 2 classes are needed, got {self.num_classes}", "key 'num_classes'"
            )
        if self.stride > self.window_size:
            raise InputError(
                None, f"stride {self.stride} must not exceed window_size {self.window_size}", "key 'stride'"
            )
        if self.fp_slice_size % self.stride or self.fp_slice_size < self.window_size:
            raise InputError(
                None,
                f"fp_slice_size {self.fp_slice_size} must be a multiple of stride {self.stride}"
                f" and at least window_size {self.window_size}",
                "key 'fp_slice_size'",
            )
        if self.fp2_slice_size % self.window_size:
            raise InputError(
                None,
                f"fp2_slice_size {self.fp2_slice_size} must be a multiple of window_size {self.window_size}",
                "key 'fp2_slice_size'",
            )

    @property
    def filters_per_chunk(self) -> int:
        """Filters whose hot windows hotconv_eco streams to the device at once."""
        return max(1, min(self.num_filters, self.fp2_slice_size // self.window_size))


class MalConvNet(nn.Module):
    """MalConv with a gated convolution; ``spec.variant`` picks how the max-pool is computed.

    ``forward(tokens)``: tokens (B, L) integer, L >= window_size -> logits (B, num_classes), float.
    """

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.spec = spec
        filters = spec.num_filters
        self.embed = nn.Embedding(VOCABULARY, EMBED_DIM, padding_idx=0)
        self.conv1 = nn.Conv1d(EMBED_DIM, filters, spec.window_size, stride=spec.stride)
        self.conv2 = nn.Conv1d(EMBED_DIM, filters, spec.window_size, stride=spec.stride)
        self.fc1 = nn.Linear(filters, filters)
        self.fc2 = nn.Linear(filters, spec.num_classes)

    @property
    def device(self) -> torch.device:
        return self.conv1.weight.device

    def pool(self, tokens: torch.Tensor) -> torch.Tensor:
        """Max over time of ``relu(conv1(x)) * sigmoid(conv2(x))``: (B, L) tokens -> (B, F)."""
        if tokens.dim() != 2 or tokens.shape[1] < self.spec.window_size:
            raise ValueError(
                f"tokens must be (batch, length >= {self.spec.window_size}), got {tuple(tokens.shape)}"
            )
        variant = self.spec.variant
        if variant == "malconv":
            return dense_pool(self, tokens)
        if variant == "malconv2":
            return chunked_pool(self, tokens)
        return _HotWindowPool.apply(
            tokens,
            self.embed.weight,
            self.conv1.weight,
            self.conv1.bias,
            self.conv2.weight,
            self.conv2.bias,
            self.spec,
        )

    def head(self, pooled: torch.Tensor) -> torch.Tensor:
        """(B, F) pooled activations -> (B, num_classes) logits."""
        return self.fc2(F.leaky_relu(self.fc1(pooled)))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.pool(tokens))


def num_windows(length: int, window_size: int, stride: int) -> int:
    """Convolution output positions over ``length`` bytes (``length >= window_size``)."""
    return (length - window_size) // stride + 1


def dense_pool(model: MalConvNet, tokens: torch.Tensor) -> torch.Tensor:
    """MalConv: embed the whole batch, convolve, gate and max-pool under autograd. (B, L) -> (B, F)."""
    x = model.embed(tokens.to(model.device, torch.long)).transpose(1, 2)
    gated = F.relu(model.conv1(x)) * torch.sigmoid(model.conv2(x))
    return gated.max(dim=2).values


def chunked_pool(model: MalConvNet, tokens: torch.Tensor) -> torch.Tensor:
    """MalConv2: no-grad winner search, then autograd through the B x F winning windows only.

    The winners of all filters of a sample are concatenated into one (8, F * W) sequence and
    convolved with stride W, so each filter's max over it is its max over the whole file (every
    candidate is a real window and its own winner is among them).
    """
    spec = model.spec
    with torch.no_grad():
        winners = sliced_search(
            tokens,
            model.embed.weight,
            model.conv1.weight,
            model.conv1.bias,
            model.conv2.weight,
            model.conv2.bias,
            spec.stride,
            spec.fp_slice_size,
        ).window
    batch, filters = winners.shape
    # Candidates in window order, so an exact tie between two windows goes to the earlier one, as
    # in the dense max-pool (filter order would hand it to whichever filter came first).
    winners = winners.sort(dim=1).values.to(tokens.device)
    hot = gather_windows(tokens, winners, spec.window_size, spec.stride).to(model.device, torch.long)
    x = model.embed(hot).permute(0, 3, 1, 2).reshape(batch, EMBED_DIM, filters * spec.window_size)
    a = F.conv1d(x, model.conv1.weight, model.conv1.bias, stride=spec.window_size)
    g = F.conv1d(x, model.conv2.weight, model.conv2.bias, stride=spec.window_size)
    return (F.relu(a) * torch.sigmoid(g)).max(dim=2).values


@dataclass
class SearchResult:
    """Per (sample, filter) winner of a no-grad sliced pass; every field is (B, F)."""

    value: torch.Tensor  # pooled activation, float
    window: torch.Tensor  # index of the winning window (its first byte is window * stride), int64
    conv1: torch.Tensor  # conv1 pre-activation at the winner, float
    conv2: torch.Tensor  # conv2 pre-activation at the winner, float


def sliced_search(
    tokens: torch.Tensor,
    embed_weight: torch.Tensor,
    w1: torch.Tensor,
    b1: torch.Tensor,
    w2: torch.Tensor,
    b2: torch.Tensor,
    stride: int,
    slice_size: int,
) -> SearchResult:
    """Find each (sample, filter)'s maximum gated activation slice by slice, without a graph.

    tokens (B, L) integer on any device (slices are copied to the weights' device one at a time,
    through pinned memory from a host); weights on the compute device. A slice holds
    ``slice_size // stride`` consecutive windows and reads ``slice_size - stride + window`` bytes,
    so windows that straddle slice boundaries are seen exactly once. Memory: one slice's embedding
    and activations plus four (B, F) tensors, independent of L. Ties keep the earliest window.
    """
    device = w1.device
    stage = device.type == "cuda" and tokens.device.type == "cpu"
    batch, length = tokens.shape
    filters, _, window_size = w1.shape
    windows = num_windows(length, window_size, stride)
    per_slice = slice_size // stride
    value = torch.full((batch, filters), -torch.inf, dtype=w1.dtype, device=device)
    window = torch.zeros((batch, filters), dtype=torch.long, device=device)
    conv1 = torch.zeros((batch, filters), dtype=w1.dtype, device=device)
    conv2 = torch.zeros((batch, filters), dtype=w1.dtype, device=device)
    for first in range(0, windows, per_slice):
        last = min(windows, first + per_slice)
        chunk = _to_device(tokens[:, first * stride : (last - 1) * stride + window_size], device, stage).to(
            torch.long
        )
        x = F.embedding(chunk, embed_weight, padding_idx=0).transpose(1, 2)
        a = F.conv1d(x, w1, b1, stride=stride)
        g = F.conv1d(x, w2, b2, stride=stride)
        slice_value, slice_window = (F.relu(a) * torch.sigmoid(g)).max(dim=2)
        better = slice_value > value
        value = torch.where(better, slice_value, value)
        window = torch.where(better, slice_window + first, window)
        conv1 = torch.where(better, a.gather(2, slice_window.unsqueeze(2)).squeeze(2), conv1)
        conv2 = torch.where(better, g.gather(2, slice_window.unsqueeze(2)).squeeze(2), conv2)
    return SearchResult(value, window, conv1, conv2)


def gather_windows(tokens: torch.Tensor, window: torch.Tensor, window_size: int, stride: int) -> torch.Tensor:
    """The tokens of the selected windows: tokens (B, L), window (B, K) int64 -> (B, K, window_size).

    Runs on the tokens' device; only the selected windows are copied.
    """
    windows = tokens.unfold(1, window_size, stride)  # (B, num_windows, W), a view
    rows = torch.arange(tokens.shape[0], device=tokens.device).unsqueeze(1)
    return windows[rows, window.to(tokens.device)]


class _HotWindowPool(torch.autograd.Function):
    """HotConv's max-pool: sliced no-grad forward, hand-written backward from the hot windows.

    With h = relu(a) * sigmoid(g) at the winning window x (8, W) of sample b and filter f, and
    G = dL/dpooled[b, f] from the head:
    dL/da = G * sigmoid(g) * [a > 0],  dL/dg = G * relu(a) * sigmoid(g) * (1 - sigmoid(g)),
    dW1[f] = sum_b dL/da * x, db1[f] = sum_b dL/da (same for conv2), and the embedding receives
    dL/da * W1[f] + dL/dg * W2[f] at the tokens of x. G already carries the loss's 1/B, so nothing
    is divided by the batch size again (the original divided only the last filter chunk), and the
    ReLU gradient is masked (the original passed it through unmasked).
    """

    @staticmethod
    def forward(ctx, tokens, embed_weight, w1, b1, w2, b2, spec: ModelSpec):
        found = sliced_search(tokens, embed_weight, w1, b1, w2, b2, spec.stride, spec.fp_slice_size)
        ctx.spec = spec
        ctx.save_for_backward(tokens, embed_weight, w1, w2, found.window, found.conv1, found.conv2)
        return found.value

    @staticmethod
    def backward(ctx, grad_pooled):
        tokens, embed_weight, w1, w2, window, conv1, conv2 = ctx.saved_tensors
        spec: ModelSpec = ctx.spec
        device = w1.device
        gate = torch.sigmoid(conv2)
        grad_a = grad_pooled * gate * (conv1 > 0)
        grad_g = grad_pooled * F.relu(conv1) * gate * (1 - gate)
        grad_w1 = torch.empty_like(w1)
        grad_w2 = torch.empty_like(w2)
        grad_embed = torch.zeros_like(embed_weight) if ctx.needs_input_grad[1] else None
        eco = spec.variant == "hotconv_eco"
        chunk = spec.filters_per_chunk if eco else spec.num_filters
        host = tokens.device
        # One copy of the winners to the host (the only synchronisation of this backward); the
        # hot windows are gathered there, where the tokens are.
        window = window.to(host)
        host_embed = embed_weight.detach().to(host) if eco else None
        stage = device.type == "cuda" and host.type == "cpu"
        for first in range(0, spec.num_filters, chunk):
            part = slice(first, min(spec.num_filters, first + chunk))
            host_hot = gather_windows(tokens, window[:, part], spec.window_size, spec.stride)  # (B, f, W)
            hot = _to_device(host_hot, device, stage)
            if eco:
                # Built on the host, then one chunk of filters goes to the device, from pinned
                # memory and without waiting: the next chunk is built while this one computes.
                x = _to_device(_host_embedding(host_hot, host_embed, stage), device, stage)
            else:
                x = F.embedding(hot.to(torch.long), embed_weight, padding_idx=0)
            grad_w1[part] = torch.einsum("bf,bfwc->fcw", grad_a[:, part], x)
            grad_w2[part] = torch.einsum("bf,bfwc->fcw", grad_g[:, part], x)
            del x
            if grad_embed is not None:
                # One contraction over both convolutions, so a single (B, f, W, 8) tensor is made.
                grad_x = torch.einsum(
                    "kbf,kfcw->bfwc",
                    torch.stack((grad_a[:, part], grad_g[:, part])),
                    torch.stack((w1[part], w2[part])),
                )
                grad_embed.index_add_(0, hot.reshape(-1).to(torch.long), grad_x.reshape(-1, EMBED_DIM))
        if grad_embed is not None:
            grad_embed[0] = 0  # the padding token's embedding stays zero, as nn.Embedding(padding_idx=0)
        return None, grad_embed, grad_w1, grad_a.sum(0), grad_w2, grad_g.sum(0), None


def _host_embedding(hot: torch.Tensor, host_embed: torch.Tensor, pinned: bool) -> torch.Tensor:
    """Embeddings (B, f, W, 8) of hot-window tokens (B, f, W), built on the host (in pinned memory
    when ``pinned``, so the copy to the device can run asynchronously)."""
    out = torch.empty((*hot.shape, EMBED_DIM), dtype=host_embed.dtype, pin_memory=pinned)
    torch.index_select(host_embed, 0, hot.reshape(-1).to(torch.long), out=out.view(-1, EMBED_DIM))
    return out


def _to_device(host_tensor: torch.Tensor, device: torch.device, stage: bool) -> torch.Tensor:
    """``host_tensor`` on ``device``; with ``stage`` (a host tensor bound for a CUDA device) it goes
    through pinned memory and is copied without synchronising the host. Torch's pinned-memory
    cache reuses a buffer only after the copy out of it has finished."""
    if not stage:
        return host_tensor.to(device)
    if not host_tensor.is_pinned():
        pinned = torch.empty(host_tensor.shape, dtype=host_tensor.dtype, pin_memory=True)
        host_tensor = pinned.copy_(host_tensor)
    return host_tensor.to(device, non_blocking=True)
