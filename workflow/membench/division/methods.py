"""The compared methods, as functions that convert a model's layers in place.

``vanilla``
    the model as written; torch keeps float32 inputs of conv/batch-norm, ReLU outputs, max-pool
    inputs and int64 indices.
``division``
    conv and batch-norm keep a DIVISION-compressed input (LFC block B in bfloat16 + HFC at Q bits),
    ReLU and dropout a 1-bit mask, max-pool an int8 window index; each by one fused kernel
    (:mod:`membench.division.kernels`) that reads and writes the map in its own dtype.
``actnn2bit``
    as ``division`` but conv and batch-norm inputs kept at 2 bits with one min/scale per group of
    256 values (ActNN without adaptive bit allocation).
``checkpoint``
    every :class:`~membench.division.models.Block` keeps only its input and is recomputed in
    backward (``torch.utils.checkpoint``, reentrant, so the input is kept by ``save_for_backward``).
"""

from __future__ import annotations

from torch import nn

from membench.division.compress import DivisionCompressor, GroupCompressor
from membench.division.functions import (
    CompressedBatchNorm2d,
    CompressedConv2d,
    CompressionContext,
    IndexMaxPool2d,
    MaskedDropout,
    MaskedReLU,
)
from membench.division.kernels import TORCH_KERNELS, Kernels
from membench.division.models import Block
from membench.division.options import METHODS, MethodSpec

__all__ = ["convert_model"]


def convert_model(
    model: nn.Module,
    method: str,
    spec: MethodSpec = MethodSpec(),
    kernels: Kernels = TORCH_KERNELS,
    seed: int = 0,
) -> CompressionContext | None:
    """Convert ``model`` in place for ``method``; return the compression context (None when the
    method compresses nothing). Parameters and buffers are shared, so state-dict keys do not change.
    Convert before building the optimizer. A compressing method adds a forward pre-hook to
    ``model`` that starts a pass of the context (:meth:`CompressionContext.begin_forward`).
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    if method == "vanilla":
        return None
    if method == "checkpoint":
        for module in model.modules():
            if isinstance(module, Block):
                module.recompute_in_backward = True
        return None
    if method == "division":
        compressor = DivisionCompressor(spec.block_size, spec.hfc_bits)
    else:
        compressor = GroupCompressor(spec.group_size, spec.actnn_bits)
    context = CompressionContext(compressor, kernels, seed)
    _replace_layers(model, context)
    # Each forward pass of the model compresses its own inputs (a copy belongs to one step).
    model.register_forward_pre_hook(context.begin_forward)
    return context


def _replace_layers(parent: nn.Module, context: CompressionContext) -> None:
    for name, child in parent.named_children():
        replacement = _replacement(child, context)
        if replacement is not None:
            setattr(parent, name, replacement)
        else:
            _replace_layers(child, context)


def _replacement(module: nn.Module, context: CompressionContext) -> nn.Module | None:
    kind = type(module)
    if kind is nn.Conv2d and module.padding_mode == "zeros" and not isinstance(module.padding, str):
        new = CompressedConv2d(
            module.in_channels,
            module.out_channels,
            module.kernel_size,
            module.stride,
            module.padding,
            module.dilation,
            module.groups,
            module.bias is not None,
            device="meta",
        )
        new.weight, new.bias = module.weight, module.bias
    elif kind is nn.BatchNorm2d:
        new = CompressedBatchNorm2d(
            module.num_features,
            module.eps,
            module.momentum,
            module.affine,
            module.track_running_stats,
            device="meta",
        )
        new.weight, new.bias = module.weight, module.bias
        new.running_mean, new.running_var = module.running_mean, module.running_var
        new.num_batches_tracked = module.num_batches_tracked
    elif kind is nn.ReLU:
        new = MaskedReLU()
    elif kind is nn.Dropout:
        new = MaskedDropout(module.p)
    elif kind is nn.MaxPool2d and _square_int_pool(module):
        new = IndexMaxPool2d(module.kernel_size, module.stride, module.padding)
    else:
        return None
    new.context = context
    new.train(module.training)
    return new


def _square_int_pool(pool: nn.MaxPool2d) -> bool:
    return (
        all(isinstance(v, int) for v in (pool.kernel_size, pool.stride, pool.padding))
        and pool.dilation == 1
        and not pool.ceil_mode
        and not pool.return_indices
        and pool.kernel_size**2 <= 127
    )
