"""The training jobs GPUMemNet measures: MLP, CNN and Transformer models built from a configuration,
their GPUMemNet file names, and their per-layer summary (activations per sample, parameters).

A configuration is a flat dict of scalars (one row of the generator's table). The file name encodes
it as ``key:value`` tokens joined by ``_`` (GPUMemNet's scheme), so a cleaned CSV row alone says how
to rebuild its model (what the FakeTensor estimator needs).
"""

from __future__ import annotations

import torch
from torch import nn

from membench.core.errors import InputError

__all__ = [
    "ACTIVATION_MODULES",
    "build_cnn",
    "build_mlp",
    "build_mlp_from_layers",
    "build_model",
    "CNN_PATTERNS",
    "config_filename",
    "config_from_tokens",
    "CONFIG_KEYS",
    "example_batch",
    "layer_name",
    "layer_summary",
    "MLP_PATTERNS",
    "mlp_widths",
    "module_counts",
    "TRANSFORMER_VOCAB",
    "TransformerClassifier",
]

MLP_PATTERNS = ("uniform", "pyramid", "inverted_pyramid", "bottleneck")
CNN_PATTERNS = ("uniform", "pyramid", "bottleneck")
# GPUMemNet's 11 activation functions (Identity included), by their names in the file names.
ACTIVATION_MODULES = {
    "elu": nn.ELU,
    "gelu": nn.GELU,
    "identity": nn.Identity,
    "leakyrelu": nn.LeakyReLU,
    "mish": nn.Mish,
    "prelu": nn.PReLU,
    "relu": nn.ReLU,
    "selu": nn.SELU,
    "silu": nn.SiLU,
    "softplus": nn.Softplus,
    "tanh": nn.Tanh,
}
TRANSFORMER_VOCAB = 1000
# Keys of each family's configuration, in file-name order, with their types.
CONFIG_KEYS: dict[str, dict[str, type]] = {
    "mlp": {
        "input": int,
        "output": int,
        "depth": int,
        "arch": str,
        "batch": int,
        "act": str,
        "dropout": float,
        "batchnorm": bool,
    },
    "cnn": {
        "channels": int,
        "classes": int,
        "depth": int,
        "arch": str,
        "filters": int,
        "batch": int,
        "input": int,
        "act": str,
        "dropout": float,
        "batchnorm": bool,
    },
    "transformer": {
        "embed": int,
        "layers": int,
        "heads": int,
        "seq": int,
        "batch": int,
        "classes": int,
        "dropout": float,
    },
}


def config_filename(family: str, config: dict) -> str:
    """GPUMemNet-style file name of a configuration, e.g.
    ``input:64_output:10_depth:2_..._batchnorm:True.out``."""
    return "_".join(f"{key}:{config[key]}" for key in CONFIG_KEYS[family]) + ".out"


def config_from_tokens(family: str, tokens: dict[str, str], where: str = "file name") -> dict:
    """Parse the tokens of a file name (see ``dataset.filename_tokens``) back into a configuration."""
    config = {}
    for key, kind in CONFIG_KEYS[family].items():
        if key not in tokens:
            raise InputError(None, f"{where}: no {key!r} token; cannot rebuild the {family} model")
        text = tokens[key]
        try:
            config[key] = (text == "True") if kind is bool else kind(text)
        except ValueError:
            raise InputError(None, f"{where}: token {key}:{text!r} is not a {kind.__name__}") from None
    return config


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
    """Token embedding, a stack of encoder layers (batch first), mean pooling, a linear head."""

    def __init__(self, config: dict) -> None:
        super().__init__()
        self.embedding = nn.Embedding(TRANSFORMER_VOCAB, config["embed"])
        layer = nn.TransformerEncoderLayer(
            config["embed"], config["heads"], 4 * config["embed"], dropout=config["dropout"], batch_first=True
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
    forward pass without gradients."""
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
