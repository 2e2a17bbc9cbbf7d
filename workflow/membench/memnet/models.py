"""The training jobs GPUMemNet measures: MLP, CNN and Transformer models built from a configuration
(:mod:`membench.memnet.configs`) or a GPUMemNet file name, and their per-layer summary (activations
per sample, parameters).
"""

from __future__ import annotations

import itertools
import math
from typing import Callable

import torch
from torch import nn

from membench.core.errors import InputError
from membench.memnet.configs import (
    ACTIVATIONS,
    CNN_PATTERNS,
    MLP_PATTERNS,
    TRANSFORMER_VOCAB,
    config_from_tokens,
)
from membench.memnet.dataset import filename_tokens

__all__ = [
    "ACTIVATION_MODULES",
    "build_cnn",
    "build_cnn_from_layers",
    "build_mlp",
    "build_mlp_from_layers",
    "build_model",
    "example_batch",
    "job_model",
    "LayerGraph",
    "layer_name",
    "layer_summary",
    "mlp_widths",
    "module_counts",
    "TransformerClassifier",
]

# GPUMemNet's activation functions as torch.nn modules, by their names in the file names.
ACTIVATION_MODULES = {name: getattr(nn, module) for name, module in ACTIVATIONS.items()}
# Kernel sizes, strides and paddings tried when a convolution is rebuilt from its counts.
_KERNELS, _STRIDES = (3, 1, 5, 7), (1, 2, 3, 4)


def _activation(name: str) -> nn.Module:
    try:
        return ACTIVATION_MODULES[name.lower()]()
    except KeyError:
        raise InputError(
            None, f"unknown activation {name!r}; expected one of {', '.join(ACTIVATION_MODULES)}"
        ) from None


def mlp_widths(config: dict) -> list[int]:
    """Hidden widths of an MLP configuration (``depth`` of them) for its width pattern."""
    depth, first = config["depth"], max(config["output"], config["input"] // 2, 4)
    arch = config["arch"]
    if arch == "uniform":
        return [first] * depth
    if arch == "pyramid":
        return [max(config["output"], first >> i, 4) for i in range(depth)]
    if arch == "inverted_pyramid":
        return [min(first << i, 8192) for i in range(depth)]
    if arch == "bottleneck":
        return [max(config["output"], first >> min(i, depth - 1 - i), 4) for i in range(depth)]
    raise InputError(None, f"unknown MLP pattern {arch!r}; expected one of {', '.join(MLP_PATTERNS)}")


def build_mlp(config: dict) -> nn.Module:
    layers, fan_in = [], config["input"]
    for width in mlp_widths(config):
        layers.append(nn.Linear(fan_in, width))
        if config["batchnorm"]:
            layers.append(nn.BatchNorm1d(width))
        layers.append(_activation(config["act"]))
        if config["dropout"] > 0:
            layers.append(nn.Dropout(config["dropout"]))
        fan_in = width
    layers.append(nn.Linear(fan_in, config["output"]))
    return nn.Sequential(*layers)


def build_mlp_from_layers(layers: list[tuple[str, int, int]]) -> tuple[nn.Module, int]:
    """Rebuild a GPUMemNet MLP from its ``Activations-Params`` list; returns (model, input features).

    A ``linear`` entry (out, params) has ``params = (in + 1) * out``; batch norm, dropout, softmax and
    activation entries follow GPUMemNet's names. Each entry must take the previous one's outputs (the
    first is linear), else :class:`InputError`.
    """
    modules: list[nn.Module] = []
    fan_in = input_features = None
    for name, activations, params in layers:
        key = name.lower()
        if key == "linear":
            in_features = params // activations - 1 if activations > 0 else 0
            if in_features < 1 or fan_in not in (None, in_features):
                raise InputError(
                    None,
                    f"layer ({name!r}, {activations}, {params}) is no linear layer taking "
                    f"{fan_in or 'some'} inputs; cannot rebuild the MLP",
                )
            if input_features is None:
                input_features = in_features
            modules.append(nn.Linear(in_features, activations))
        elif activations != fan_in:
            raise InputError(
                None,
                f"layer ({name!r}, {activations}, {params}) does not take the {fan_in} outputs "
                "before it; cannot rebuild the MLP",
            )
        elif key == "batch_normalization":
            modules.append(nn.BatchNorm1d(activations))
        elif key == "dropout":
            modules.append(nn.Dropout(0.1))
        elif key == "softmax":
            modules.append(nn.Softmax(dim=1))
        else:
            modules.append(_activation(key))
        fan_in = activations
    if input_features is None or fan_in is None:
        raise InputError(None, "layer list has no linear layer; cannot rebuild the MLP")
    return nn.Sequential(*modules), input_features


def _cnn_filters(config: dict) -> list[int]:
    base, depth, arch = config["filters"], config["depth"], config["arch"]
    if arch == "uniform":
        return [base] * depth
    if arch == "pyramid":
        return [min(base << (i * 3 // max(depth, 1)), 4 * base) for i in range(depth)]
    if arch == "bottleneck":
        return [max(base >> min(i, depth - 1 - i), 8) for i in range(depth)]
    raise InputError(None, f"unknown CNN pattern {arch!r}; expected one of {', '.join(CNN_PATTERNS)}")


def build_cnn(config: dict) -> nn.Module:
    """3x3 convolutions (stride 2 every quarter of the depth while the map is above 4 pixels), then
    adaptive average pooling, dropout and a linear classifier."""
    layers, channels, size = [], config["channels"], config["input"]
    every = max(1, config["depth"] // 4)
    for i, filters in enumerate(_cnn_filters(config)):
        stride = 2 if i % every == 0 and size > 4 else 1
        size = (size + 1) // stride if stride == 2 else size
        layers.append(nn.Conv2d(channels, filters, 3, stride=stride, padding=1, bias=not config["batchnorm"]))
        if config["batchnorm"]:
            layers.append(nn.BatchNorm2d(filters))
        layers.append(_activation(config["act"]))
        channels = filters
    layers += [
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Dropout(config["dropout"]),
        nn.Linear(channels, config["classes"]),
    ]
    return nn.Sequential(*layers)


class TransformerClassifier(nn.Module):
    """Token embedding, a stack of encoder layers (batch first), mean pooling, a linear head; the
    feed-forward width is ``config["ff"]`` (default 4 x embed) and the vocabulary
    ``config["vocab"]`` (default :data:`TRANSFORMER_VOCAB`)."""

    def __init__(self, config: dict) -> None:
        super().__init__()
        self.embedding = nn.Embedding(config.get("vocab", TRANSFORMER_VOCAB), config["embed"])
        layer = nn.TransformerEncoderLayer(
            config["embed"],
            config["heads"],
            config.get("ff", 4 * config["embed"]),
            dropout=config["dropout"],
            batch_first=True,
        )
        self.encoder = nn.TransformerEncoder(layer, config["layers"], enable_nested_tensor=False)
        self.head = nn.Linear(config["embed"], config["classes"])

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embedding(tokens)).mean(dim=1))


def build_model(family: str, config: dict) -> nn.Module:
    """The model of a configuration."""
    if family == "mlp":
        return build_mlp(config)
    if family == "cnn":
        return build_cnn(config)
    return TransformerClassifier(config)


def example_batch(family: str, config: dict, device="cpu", generator: torch.Generator | None = None):
    """(inputs, class targets) of one training batch of a configuration."""
    batch = config["batch"]
    if family == "mlp":
        x = torch.randn(batch, config["input"], generator=generator).to(device)
        classes = config["output"]
    elif family == "cnn":
        x = torch.randn(batch, config["channels"], config["input"], config["input"], generator=generator).to(
            device
        )
        classes = config["classes"]
    else:
        x = torch.randint(0, TRANSFORMER_VOCAB, (batch, config["seq"]), generator=generator).to(device)
        classes = config["classes"]
    return x, torch.randint(0, classes, (batch,), generator=generator).to(device)


def layer_name(module: nn.Module) -> str:
    """GPUMemNet's name of a layer in ``Activations-Params`` (its MLP names; class names otherwise)."""
    return {nn.Linear: "linear", nn.BatchNorm1d: "batch_normalization", nn.Dropout: "dropout"}.get(
        type(module), type(module).__name__
    )


def layer_summary(model: nn.Module, x: torch.Tensor) -> list[tuple[str, int, int]]:
    """(name, output elements per sample, own parameters) of every leaf module and every module
    holding parameters directly (e.g. attention's input projection), in call order, from one
    forward pass without gradients.

    The pass runs on the meta device, with meta stand-ins for the parameters and buffers: shapes
    only, so a large model costs milliseconds rather than a CPU forward pass of seconds, and its
    buffers (batch norm's running statistics) are left as they were. A model that needs real values
    (a branch on data, a tensor attribute that is not a buffer) is run for real instead.
    """
    try:
        return _summary_pass(model, x, on_meta=True)
    except (NotImplementedError, RuntimeError):
        return _summary_pass(model, x, on_meta=False)


def _summary_pass(model: nn.Module, x: torch.Tensor, on_meta: bool) -> list[tuple[str, int, int]]:
    batch = x.shape[0]
    rows: list[tuple[str, int, int]] = []

    def hook(module, _inputs, output):
        out = output[0] if isinstance(output, tuple) else output
        params = sum(p.numel() for p in module.parameters(recurse=False))
        rows.append((layer_name(module), int(out.numel() // batch), int(params)))

    handles = [
        m.register_forward_hook(hook)
        for m in model.modules()
        if not list(m.children()) or any(True for _ in m.parameters(recurse=False))
    ]
    try:
        with torch.no_grad():
            if on_meta:
                tensors = itertools.chain(model.named_parameters(), model.named_buffers())
                stand_ins = {name: torch.empty_like(t, device="meta") for name, t in tensors}
                torch.func.functional_call(model, stand_ins, (x.to("meta"),))
            else:
                model(x)
    finally:
        for handle in handles:
            handle.remove()
    return rows


def module_counts(model: nn.Module) -> dict[str, int]:
    """Number of modules of each class name (``Conv2d``, ``Linear``, ...)."""
    counts: dict[str, int] = {}
    for m in model.modules():
        counts[type(m).__name__] = counts.get(type(m).__name__, 0) + 1
    return counts


class LayerGraph(nn.Module):
    """Modules applied in order, each to the output of an earlier one (``sources[i]``: 0 is the
    input, ``j`` the output of module ``j``): a chain, with branches where a module takes an older
    output (a residual block's shortcut). An output is dropped after its last use."""

    def __init__(self, modules: list[nn.Module], sources: list[int]) -> None:
        super().__init__()
        self.steps = nn.ModuleList(modules)
        self.sources = list(sources)
        self._last_use = {source: i for i, source in enumerate(self.sources)}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outputs = {0: x}
        for i, (module, source) in enumerate(zip(self.steps, self.sources)):
            outputs[i + 1] = module(outputs[source])
            if self._last_use.get(source) == i:
                del outputs[source]
        return outputs[len(self.steps)]


def _conv_from_counts(shapes: list[tuple[int, ...]], current: int, activations: int, params: int):
    """(source, Conv2d, output shape) of a convolution with ``params`` parameters and
    ``activations`` outputs per sample, taking the current output or, failing that, the latest
    earlier one that fits (kernel 3, 1, 5 or 7; padding k // 2 or 0), at the smallest stride that
    any of them fits; None if none fits."""
    order = [current] + [j for j in range(len(shapes) - 1, -1, -1) if j != current]
    for stride in _STRIDES:
        for source in order:
            if len(shapes[source]) != 3:
                continue
            c_in, h_in, w_in = shapes[source]
            for k in _KERNELS:
                for bias in (1, 0):
                    c_out, rest = divmod(params, c_in * k * k + bias)
                    if rest or c_out < 1 or activations % c_out:
                        continue
                    for pad in (k // 2, 0):
                        h, w = (h_in + 2 * pad - k) // stride + 1, (w_in + 2 * pad - k) // stride + 1
                        if h > 0 and h * w == activations // c_out:
                            conv = nn.Conv2d(c_in, c_out, k, stride=stride, padding=pad, bias=bool(bias))
                            return source, conv, (c_out, h, w)
    return None


def _pool_from_counts(shape: tuple[int, ...], activations: int, adaptive: bool, kind: str):
    """A pooling layer taking ``shape`` to ``activations`` outputs per sample, or None."""
    if len(shape) != 3 or activations % shape[0]:
        return None
    c, h_in, w_in = shape
    pixels = activations // c
    if adaptive:
        side = math.isqrt(pixels)
        if side * side != pixels:
            return None
        pool = nn.AdaptiveAvgPool2d(side) if kind == "avg" else nn.AdaptiveMaxPool2d(side)
        return pool, (c, side, side)
    for k in (2, 3):
        for stride in (2, 1):
            for pad in (0, 1):
                h, w = (h_in + 2 * pad - k) // stride + 1, (w_in + 2 * pad - k) // stride + 1
                if h > 0 and h * w == pixels:
                    make = nn.AvgPool2d if kind == "avg" else nn.MaxPool2d
                    return make(k, stride=stride, padding=pad), (c, h, w)
    return None


def build_cnn_from_layers(
    layers: list[tuple[str, int, int]], channels: int, size: int
) -> tuple[nn.Module, tuple[int, int, int]]:
    """A CNN with the layers of an ``Activations-Params`` list (outputs per sample, parameters),
    for an input of ``channels`` x ``size`` x ``size``; returns (model, input shape).

    Each convolution's channels, kernel, stride and padding are solved from its counts, taking
    the previous output or, where that cannot give them, an earlier one (a residual shortcut),
    at the smallest stride that fits;
    norms, activations, dropout, pooling, flatten, linear and softmax layers follow by name. Adds
    that join branches are not in such lists and are left out, so the model holds the listed
    layers' tensors, not the branches' sums. Raises :class:`InputError` naming the first layer
    that no shape explains.
    """
    modules: list[nn.Module] = []
    sources: list[int] = []
    shapes: list[tuple[int, ...]] = [(channels, size, size)]
    current = 0
    for i, (name, activations, params) in enumerate(layers):
        key = name.lower().replace("_", "")
        shape = shapes[current]
        source = current
        where = f"layer {i + 1} ({name!r}, {activations}, {params})"
        if key == "conv2d":
            found = _conv_from_counts(shapes, current, activations, params)
            if found is None:
                raise InputError(
                    None,
                    f"{where}: no earlier output, kernel (1, 3, 5, 7), stride and padding give these "
                    "outputs and parameters; cannot rebuild the CNN",
                )
            source, module, shape = found
        elif key in ("adaptiveavgpool2d", "adaptivemaxpool2d", "avgpool2d", "maxpool2d"):
            found = _pool_from_counts(
                shape, activations, key.startswith("adaptive"), "avg" if "avg" in key else "max"
            )
            if found is None:
                raise InputError(None, f"{where}: no pooling takes the {shape} outputs before it to these")
            module, shape = found
        elif key == "flatten":
            module, shape = nn.Flatten(), (math.prod(shape),)
        elif key == "linear":
            features = math.prod(shape)
            if activations < 1 or params not in ((features + 1) * activations, features * activations):
                raise InputError(
                    None, f"{where}: no linear layer takes the {features} outputs before it to these"
                )
            linear = nn.Linear(features, activations, bias=params != features * activations)
            module = linear if len(shape) == 1 else nn.Sequential(nn.Flatten(), linear)
            shape = (activations,)
        else:
            if activations != math.prod(shape):
                raise InputError(None, f"{where}: does not keep the {math.prod(shape)} outputs before it")
            if "norm" in key:
                if len(shape) != 3 or params not in (0, 2 * shape[0]):
                    raise InputError(None, f"{where}: no batch norm over the {shape} outputs before it")
                module = nn.BatchNorm2d(shape[0], affine=params > 0)
            elif key == "dropout":
                module = nn.Dropout(0.1)
            elif key == "softmax":
                module = nn.Softmax(dim=1)
            else:
                module = _activation(key)
        modules.append(module)
        sources.append(source)
        shapes.append(shape)
        current = len(shapes) - 1
    if not modules or len(shapes[current]) != 1:
        raise InputError(
            None, "the layer list does not end in class scores (a linear layer); cannot rebuild the CNN"
        )
    return LayerGraph(modules, sources), (channels, size, size)


def job_model(
    family: str, filename: str, layers: list[tuple[str, int, int]], batch_size: int
) -> tuple[Callable[[], nn.Module], Callable[[], tuple[torch.Tensor, torch.Tensor]]]:
    """(build, make_batch) of a GPUMemNet-format row's training job, for counting its tensors:
    ``build()`` the model, ``make_batch()`` one batch of (inputs, class targets) of
    ``batch_size`` samples, uninitialised (shapes and dtypes are what count).

    MLPs are rebuilt from their layer list; CNNs from the file name where it is membench's
    (:func:`build_cnn`), else from the layer list (:func:`build_cnn_from_layers`, the input's
    channels and size from the name's ``channels``/``input`` or ``input_channels``/``input_size``);
    Transformers from the file name (membench's or GPUMemNet's tokens). Raises :class:`InputError`
    saying why a row cannot be rebuilt.
    """
    tokens = filename_tokens(filename)
    targets = torch.zeros(batch_size, dtype=torch.long)
    if family == "mlp":
        if not layers:
            raise InputError(None, "no layer list; cannot rebuild the MLP")
        with torch.device("meta"):  # checks the list without allocating its weights
            features = build_mlp_from_layers(layers)[1]
        return lambda: build_mlp_from_layers(layers)[0], lambda: (torch.empty(batch_size, features), targets)
    if family == "cnn":
        try:
            config = config_from_tokens("cnn", tokens)
        except InputError:
            config = None
        if config is not None:
            shape = (config["channels"], config["input"], config["input"])
            return lambda: build_cnn(config), lambda: (torch.empty(batch_size, *shape), targets)
        channels = tokens.get("channels", tokens.get("input_channels"))
        size = tokens.get("input", tokens.get("input_size"))
        if not layers:
            raise InputError(None, "no layer list; cannot rebuild the CNN")
        if channels is None or size is None or not channels.isdigit() or not size.isdigit():
            raise InputError(
                None,
                "the file name gives no input channels and size (channels/input or "
                "input_channels/input_size); cannot rebuild the CNN",
            )
        with torch.device("meta"):  # raises naming the first layer no shape explains
            build_cnn_from_layers(layers, int(channels), int(size))
        shape = (int(channels), int(size), int(size))
        return (
            lambda: build_cnn_from_layers(layers, shape[0], shape[1])[0],
            lambda: (torch.empty(batch_size, *shape), targets),
        )
    config = config_from_tokens("transformer", tokens)
    return (
        lambda: TransformerClassifier(config),
        lambda: (torch.zeros(batch_size, config["seq"], dtype=torch.long), targets),
    )
