"""Autograd Functions and layers that keep compressed activations for backward.

Everything a backward needs is kept through ``ctx.save_for_backward`` so that the core's
saved-activation counter sees exactly the compressed bytes. Outside training with gradients the
layers compute as their torch parents and save nothing.

Maps are compressed from, and decompressed into, their own dtype (float32, float16, bfloat16): no
float32 copy of a map is made under mixed precision. Under ``torch.autocast`` a convolution
computes in the autocast dtype as ``F.conv2d`` would, and its backward (which runs outside
autocast) decompresses its input straight into that dtype and casts the weight to it, returning
gradients in the dtypes of the inputs. Batch norm computes in its input's dtype (float32
statistics), as torch's does under autocast. Maps of other dtypes (float64) take the torch parent
layers.
"""

from __future__ import annotations

import contextlib
import weakref

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd import Function

from membench.division.compress import philox_inputs
from membench.division.kernels import Kernels

__all__ = [
    "CompressedBatchNorm2d",
    "CompressedConv2d",
    "CompressionContext",
    "IndexMaxPool2d",
    "MaskedDropout",
    "MaskedReLU",
]

# The dtypes the kernels read and write maps in; others (float64) take torch's own layers.
_MAP_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


class CompressionContext:
    """What the converted layers of one model share: the compressor of conv/batch-norm inputs
    (``None``: keep them uncompressed), the kernels, and the CPU generator (seeded with ``seed``)
    that gives every compression and dropout call its noise ``(seed, offset)``.

    A compressed copy belongs to one forward pass: a tensor that feeds two layers in a pass (a block
    input feeding a conv and a projection shortcut) is compressed once, as torch keeps one storage
    for it in the vanilla model, but a tensor fed again in a later pass (a fixed input batch reused
    across steps) is compressed again, with fresh noise. :meth:`begin_forward` starts a pass
    (``convert_model`` calls it before each forward of the model). The context keeps weak
    references only: a copy lives as long as the autograd graph that saved it.
    """

    def __init__(self, compressor, kernels: Kernels, seed: int) -> None:
        self.compressor = compressor
        self.kernels = kernels
        self.generator = torch.Generator().manual_seed(seed)
        self.forward_passes = 0
        self._compressed: dict[int, tuple] = {}

    def begin_forward(self, *hook_args) -> None:
        """Start a forward pass: copies made before are not reused. Takes (and ignores) the
        arguments of a module's forward pre-hook, so that it can be one."""
        self.forward_passes += 1
        self._compressed.clear()

    def noise_inputs(self) -> tuple[int, int]:
        """``(seed, offset)`` of the next compression or dropout call, drawn from :attr:`generator`."""
        return philox_inputs(self.generator)

    def compress(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The saved tensors standing for ``x`` (``(x,)`` without a compressor)."""
        if self.compressor is None:
            return (x,)
        cached = self._compressed.get(id(x))
        if cached is not None and cached[0]() is x and cached[1] == x._version:
            saved = tuple(ref() for ref in cached[2])
            if all(t is not None for t in saved):
                return saved
        saved = self.compressor.compress(x.detach(), self.generator, self.kernels)
        self._compressed[id(x)] = (weakref.ref(x), x._version, tuple(weakref.ref(t) for t in saved))
        return saved

    def decompress(self, saved, shape: torch.Size, dtype: torch.dtype) -> torch.Tensor:
        """Inverse of :meth:`compress`: a tensor of ``shape`` and ``dtype``, written in ``dtype``."""
        if self.compressor is None:
            return saved[0].to(dtype)
        return self.compressor.decompress(tuple(saved), shape, dtype, self.kernels)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The generator's state (a uint8 tensor), so a resumed run draws the same noise."""
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.generator.set_state(state["generator"])


def _autocast_dtype(device_type: str) -> torch.dtype | None:
    """The dtype autocast computes convolutions in on ``device_type``, None when it is off."""
    return torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else None


def _autocast_off(device_type: str):
    """A context with autocast off on ``device_type``; nothing to enter when it is off already
    (entering ``torch.autocast`` costs microseconds a layer, a step's hundredth on a CPU)."""
    if torch.is_autocast_enabled(device_type):
        return torch.autocast(device_type, enabled=False)
    return contextlib.nullcontext()


def _cast(tensor: torch.Tensor | None, dtype: torch.dtype | None) -> torch.Tensor | None:
    return tensor if tensor is None or dtype is None or tensor.dtype == dtype else tensor.to(dtype)


# A strided convolution's input gradient from this size on is computed half a batch at a time.
_SPLIT_INPUT_GRAD_BYTES = 16 * 2**20
# A convolution's input gradient on a CPU from this input size on is computed in a call of its own:
# the second call costs step time and saves one map-sized buffer, which below this size is worth
# less (docs/benchmarks/division.md), so smaller maps keep one call.
_SEPARATE_INPUT_GRAD_BYTES = 16 * 2**20


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def _cpu_input_grad(
    grad_out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, args: tuple
) -> torch.Tensor:
    """A convolution's input gradient on a CPU. oneDNN's call holds two buffers the size of the
    input gradient beside it; a strided convolution's input gradient is the largest map of its
    backward (4x its output gradient at stride 2), so a large one is computed half a batch at a
    time, into its place (smaller maps keep one call: two would cost more time than they save)."""
    stride = args[1]
    if max(stride) == 1 or x.shape[0] < 2 or _nbytes(x) < _SPLIT_INPUT_GRAD_BYTES:
        return torch.ops.aten.convolution_backward(grad_out, x, weight, *args, [True, False, False])[0]
    grad_x = torch.empty_like(x)
    half = x.shape[0] // 2
    for rows in (slice(0, half), slice(half, x.shape[0])):
        grad_x[rows] = torch.ops.aten.convolution_backward(
            grad_out[rows], x[rows], weight, *args, [True, False, False]
        )[0]
    return grad_x


class _Conv2dFunction(Function):
    @staticmethod
    def forward(ctx, x, weight, bias, stride, padding, dilation, groups, context):
        compute = _autocast_dtype(x.device.type)
        with _autocast_off(x.device.type):
            out = F.conv2d(
                _cast(x, compute),
                _cast(weight, compute),
                _cast(bias, compute),
                stride,
                padding,
                dilation,
                groups,
            )
        ctx.save_for_backward(weight, *context.compress(x))
        ctx.config = (
            x.shape,
            x.dtype,
            compute,
            None if bias is None else bias,
            stride,
            padding,
            dilation,
            groups,
            context,
        )
        return out

    @staticmethod
    def backward(ctx, grad_out):
        weight, *saved = ctx.saved_tensors
        shape, dtype, compute, bias, stride, padding, dilation, groups, context = ctx.config
        compute = compute or dtype
        x = context.decompress(saved, shape, compute)
        grad_out, compute_weight = _cast(grad_out, compute), _cast(weight, compute)
        need_x, need_weight = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        need_bias = bias is not None and ctx.needs_input_grad[2]
        args = (bias.shape if bias is not None else None, stride, padding, dilation, False, [0, 0], groups)
        with _autocast_off(grad_out.device.type):
            if grad_out.device.type == "cpu" and _nbytes(x) >= _SEPARATE_INPUT_GRAD_BYTES:
                # Two calls on a CPU: oneDNN's backward reorders its input and output gradient into
                # map-sized buffers, and computing the input gradient apart keeps it from being
                # alive beside them (one map less at the step's peak).
                _, grad_weight, grad_bias = torch.ops.aten.convolution_backward(
                    grad_out, x, compute_weight, *args, [False, need_weight, need_bias]
                )
                grad_x = _cpu_input_grad(grad_out, x, compute_weight, args) if need_x else None
            else:
                grad_x, grad_weight, grad_bias = torch.ops.aten.convolution_backward(
                    grad_out, x, compute_weight, *args, [need_x, need_weight, need_bias]
                )
        return (
            _cast(grad_x, dtype),
            _cast(grad_weight, weight.dtype),
            None if grad_bias is None else grad_bias.to(bias.dtype),
            None,
            None,
            None,
            None,
            None,
        )


class _BatchNorm2dFunction(Function):
    """Batch norm through the backend ``nn.BatchNorm2d`` would take (cuDNN on CUDA, as vanilla's),
    keeping its input compressed for backward."""

    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, momentum, eps, context):
        out, mean, invstd, reserve, backend = torch.ops.aten._batch_norm_impl_index(
            x, weight, bias, running_mean, running_var, True, momentum, eps, torch.backends.cudnn.enabled
        )
        ctx.save_for_backward(weight, mean, invstd, reserve, *context.compress(x))
        ctx.config = (x.shape, x.dtype, eps, backend, context)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        weight, mean, invstd, reserve, *saved = ctx.saved_tensors
        shape, dtype, eps, backend, context = ctx.config
        x = context.decompress(saved, shape, dtype)
        grad_x, grad_weight, grad_bias = torch.ops.aten._batch_norm_impl_index_backward(
            backend,
            x,
            grad_out.contiguous(),
            weight,
            None,
            None,
            mean,
            invstd,
            True,
            eps,
            [
                ctx.needs_input_grad[0],
                weight is not None and ctx.needs_input_grad[1],
                weight is not None and ctx.needs_input_grad[2],
            ],
            reserve,
        )
        return grad_x, grad_weight, grad_bias, None, None, None, None, None


class _MaskFunction(Function):
    """``out = x * mask * gain`` keeping only the 1-bit packed mask: ReLU (``p`` None: mask x > 0,
    gain 1) or dropout (mask: Philox uniform >= ``p`` under ``(seed, offset)``, gain 1 / (1 - p))."""

    @staticmethod
    def forward(ctx, x, p, seed, offset, kernels):
        if p is None:
            out, packed = kernels.relu_pack(x)
            gain = 1.0
        else:
            out, packed = kernels.dropout_pack(x, p, seed, offset)
            gain = 1.0 / (1.0 - p)
        ctx.save_for_backward(packed)
        ctx.config = (gain, kernels)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        (packed,) = ctx.saved_tensors
        gain, kernels = ctx.config
        return kernels.masked_grad(grad_out, packed, gain), None, None, None, None


class _MaxPool2dFunction(Function):
    @staticmethod
    def forward(ctx, x, kernel, stride, padding, kernels):
        out, index = kernels.maxpool2d_forward(x.contiguous(), kernel, stride, padding)
        ctx.save_for_backward(index)
        ctx.config = (x.shape[2], x.shape[3], kernel, stride, padding, kernels)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        (index,) = ctx.saved_tensors
        height, width, kernel, stride, padding, kernels = ctx.config
        return (
            kernels.maxpool2d_backward(grad_out.contiguous(), index, height, width, kernel, stride, padding),
            None,
            None,
            None,
            None,
        )


def _training_with_grad(module: nn.Module, *tensors: torch.Tensor | None) -> bool:
    return (
        module.training
        and torch.is_grad_enabled()
        and any(t is not None and t.requires_grad for t in tensors)
    )


class CompressedConv2d(nn.Conv2d):
    """``nn.Conv2d`` (zeros padding, numeric padding) that keeps its input compressed for backward."""

    context: CompressionContext

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not _training_with_grad(self, x, self.weight) or x.dtype not in _MAP_DTYPES:
            return super().forward(x)
        return _Conv2dFunction.apply(
            x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups, self.context
        )


class CompressedBatchNorm2d(nn.BatchNorm2d):
    """``nn.BatchNorm2d`` that keeps its input compressed for backward while training."""

    context: CompressionContext

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (
            not _training_with_grad(self, x, self.weight)
            or not self.track_running_stats
            or x.dtype not in _MAP_DTYPES
        ):
            return super().forward(x)
        self.num_batches_tracked.add_(1)
        momentum = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        return _BatchNorm2dFunction.apply(
            x, self.weight, self.bias, self.running_mean, self.running_var, momentum, self.eps, self.context
        )


class MaskedReLU(nn.ReLU):
    """ReLU keeping a 1-bit mask for backward (32x fewer bytes than the float32 output)."""

    context: CompressionContext

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not _training_with_grad(self, x) or x.dtype not in _MAP_DTYPES:
            return super().forward(x)
        return _MaskFunction.apply(x, None, 0, 0, self.context.kernels)


class MaskedDropout(nn.Dropout):
    """Dropout keeping a 1-bit mask for backward; the mask is drawn by Philox under the context's
    noise inputs, in the same kernel that applies it."""

    context: CompressionContext

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        if self.p == 1.0:
            return x * 0.0
        if x.dtype not in _MAP_DTYPES:
            return super().forward(x)
        seed, offset = self.context.noise_inputs()
        if not _training_with_grad(self, x):
            return self.context.kernels.dropout_pack(x, self.p, seed, offset)[0]
        return _MaskFunction.apply(x, self.p, seed, offset, self.context.kernels)


class IndexMaxPool2d(nn.MaxPool2d):
    """Max pool keeping an int8 index within each window for backward (square windows only)."""

    context: CompressionContext

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not _training_with_grad(self, x) or x.dtype not in _MAP_DTYPES:
            return super().forward(x)
        return _MaxPool2dFunction.apply(x, self.kernel_size, self.stride, self.padding, self.context.kernels)
