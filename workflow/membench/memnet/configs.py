"""The configurations of GPUMemNet's training jobs, without torch: their keys and types, the width
patterns and activations they draw from, and their GPUMemNet file names (the generator and the
cleaner read these; :mod:`membench.memnet.models` builds the models).

A configuration is a flat dict of scalars (one row of the generator's table). The file name encodes
it as ``key:value`` tokens joined by ``_`` (GPUMemNet's scheme), so a cleaned CSV row alone says how
to rebuild its model (what the FakeTensor estimator needs).
"""

from __future__ import annotations

from membench.core.errors import InputError

__all__ = [
    "ACTIVATIONS",
    "CNN_PATTERNS",
    "config_filename",
    "config_from_tokens",
    "CONFIG_KEYS",
    "config_of",
    "GPUMEMNET_TRANSFORMER_TOKENS",
    "MLP_PATTERNS",
    "TRANSFORMER_VOCAB",
]

MLP_PATTERNS = ("uniform", "pyramid", "inverted_pyramid", "bottleneck")
CNN_PATTERNS = ("uniform", "pyramid", "bottleneck")
# GPUMemNet's 11 activation functions (Identity included): their names in the file names -> the
# torch.nn module (by its class name, the name GPUMemNet's tables give).
ACTIVATIONS = {
    "elu": "ELU",
    "gelu": "GELU",
    "identity": "Identity",
    "leakyrelu": "LeakyReLU",
    "mish": "Mish",
    "prelu": "PReLU",
    "relu": "ReLU",
    "selu": "SELU",
    "silu": "SiLU",
    "softplus": "Softplus",
    "tanh": "Tanh",
}
TRANSFORMER_VOCAB = 1000
# GPUMemNet's Transformer file-name tokens -> membench's configuration keys.
GPUMEMNET_TRANSFORMER_TOKENS = {
    "embedding_size": "embed",
    "num_layers": "layers",
    "num_heads": "heads",
    "seq_length": "seq",
    "batch_size": "batch",
    "num_classes": "classes",
    "dropout_rate": "dropout",
    "ff_hidden_size": "ff",
    "input_size": "vocab",
}
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
    """Parse the tokens of a file name (see ``dataset.filename_tokens``) back into a configuration:
    membench's names, or GPUMemNet's Transformer names (:data:`GPUMEMNET_TRANSFORMER_TOKENS`, which
    add the feed-forward width and the vocabulary)."""
    keys = dict(CONFIG_KEYS[family])
    if family == "transformer" and not set(keys) <= set(tokens) and "embedding_size" in tokens:
        tokens = {
            ours: tokens[theirs] for theirs, ours in GPUMEMNET_TRANSFORMER_TOKENS.items() if theirs in tokens
        }
        keys |= {"ff": int, "vocab": int}
    config = {}
    for key, kind in keys.items():
        if key not in tokens:
            raise InputError(None, f"{where}: no {key!r} token; cannot rebuild the {family} model")
        text = tokens[key]
        try:
            config[key] = (text == "True") if kind is bool else kind(text)
        except ValueError:
            raise InputError(None, f"{where}: token {key}:{text!r} is not a {kind.__name__}") from None
    return config


def config_of(row: dict, family: str) -> dict:
    """The configuration dict of a generator-table row (typed as :data:`CONFIG_KEYS`)."""
    config = {}
    for key, kind in CONFIG_KEYS[family].items():
        value = row[key]
        config[key] = (str(value) == "True") if kind is bool else kind(value)
    return config
