"""GPUMemNet-format CSVs (MLP, CNN, Transformer): one reader, validated at the boundary.

The published data and the tables membench measures load through :func:`load_jobs`, which checks
every column it uses and returns a :class:`Jobs` frame with one name per concept (``batch_size``,
``total_parameters``, ``memory_mib``, ...). Literal columns are parsed with ``ast.literal_eval`` only.
"""

from __future__ import annotations

import ast
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from membench.core.errors import InputError
from membench.core.validate import csv_line, int_column, read_csv_columns

__all__ = [
    "activation_code",
    "activations_per_batch",
    "ACTIVATIONS",
    "Bins",
    "COUNT_COLUMNS",
    "DEFAULT_BINS",
    "FAMILIES",
    "filename_tokens",
    "Jobs",
    "load_jobs",
    "MAX_BATCH_SIZE",
    "MAX_COUNT",
    "MAX_LAYER_LIST_CHARACTERS",
    "MAX_MEMORY_MIB",
    "MEMORY_COLUMN",
    "MEMORY_TARGETS",
    "memory_target",
    "MULTIWORD_KEYS",
    "REQUIRED",
    "SPLITS",
    "STATUS_FAILED",
]

FAMILIES = ("mlp", "cnn", "transformer")
# How jobs are split to evaluate estimators: stratified k-fold, and k-fold over architectures.
SPLITS = ("kfold", "grouped")
MEMORY_COLUMN = "Max GPU Memory (MiB)"
# What the memory column counts, by the ``Memory Source`` that membench's measurements write
# (``measure.target_source``); whether the CUDA context is in it decides what a figure means.
MEMORY_TARGETS = {
    "nvml_peak_mib": "NVML's peak of the GPU above a baseline read once the CUDA context exists "
    "(context excluded)",
    "nvml_process_peak_mib": "NVML's peak of the job's own process above a baseline read once the "
    "CUDA context exists (context excluded)",
    "cuda_peak_reserved_mib": "the CUDA caching allocator's reserved peak (context excluded)",
    "train_alloc_peak_mib": "the CPU allocator's peak of the training steps (no GPU, no CUDA context)",
}
# A file without a ``Memory Source`` is in GPUMemNet's own format, measured as GPUMemNet measures.
GPUMEMNET_TARGET = "nvidia-smi's memory used during training, as GPUMemNet measures (CUDA context included)"
STATUS_OK, STATUS_OOM = "SUCCESSFUL", "OOM_CRASH"
# Statuses of runs that measured nothing: GPUMemNet's cleaner writes UNKNOWN_ERROR, membench's
# measure FAILED and TIMEOUT. Their rows are dropped, as successes with 0 MiB are.
STATUS_FAILED = ("UNKNOWN_ERROR", "FAILED", "TIMEOUT")

# Columns every family's file must hold, in GPUMemNet's spelling.
REQUIRED: dict[str, tuple[str, ...]] = {
    "mlp": (
        "Filename",
        "Depth",
        "Activations-Params",
        "Activation Function",
        "Total Activations",
        "Total Parameters",
        "Batch Size",
        MEMORY_COLUMN,
    ),
    "cnn": (
        "Filename",
        "Depth",
        "Activations-Params",
        "Activation Function",
        "Total Activations",
        "Total Parameters",
        "Batch Size",
        "Conv2d Count",
        "BatchNorm2d Count",
        "Dropout Count",
        "AdaptiveAvgPool2d Count",
        "Linear Count",
        MEMORY_COLUMN,
        "Status",
    ),
    "transformer": (
        "Batch Size",
        "Seq Length",
        "Embedding Size",
        "Num Layers",
        "Num Heads",
        "Depth",
        "Total Activations",
        "Total Parameters",
        MEMORY_COLUMN,
        "Status",
    ),
}
# Integer count columns read when present (0 when absent), named as in the Jobs frame.
COUNT_COLUMNS = {
    "Batch Normalization Layers": "batchnorm_layers",
    "Dropout Layers": "dropout_layers",
    "Conv2d Count": "conv2d_count",
    "BatchNorm2d Count": "batchnorm2d_count",
    "Dropout Count": "dropout_count",
    "AdaptiveAvgPool2d Count": "adaptiveavgpool2d_count",
    "Linear Count": "linear_count",
    "LayerNorm Count": "layernorm_count",
    "NonDynamicallyQuantizableLinear Count": "mha_linear_count",
    "Seq Length": "seq_length",
    "Embedding Size": "embedding_size",
    "Num Layers": "num_layers",
    "Num Heads": "num_heads",
}
ACTIVATIONS = (
    "ELU",
    "GELU",
    "Identity",
    "LeakyReLU",
    "Mish",
    "PReLU",
    "ReLU",
    "SELU",
    "SiLU",
    "Softplus",
    "Tanh",
)
# Keys of GPUMemNet's file names that hold ``_`` (its CNN and Transformer runs).
MULTIWORD_KEYS = frozenset(
    {
        "input_channels",
        "num_classes",
        "base_filters",
        "input_size",
        "embedding_size",
        "num_layers",
        "num_heads",
        "ff_hidden_size",
        "dropout_rate",
        "seq_length",
        "num_samples",
        "batch_size",
    }
)
# The largest numbers a row may hold. Within them every tensor the estimators rebuild from a row
# (FakeTensor's MLP from its layer list) stays below 2**63 bytes: 2**20 samples of 2**40 values
# of 4 bytes are 2**62.
MAX_BATCH_SIZE = 2**20
MAX_COUNT = 2**40  # depth, activations, parameters, layer counts, sizes
MAX_MEMORY_MIB = 2**40
# A layer list is parsed as a Python literal, whose syntax tree takes about 150 times the text in
# memory: longer texts (some thousand layers) are refused before parsing.
MAX_LAYER_LIST_CHARACTERS = 100_000


@dataclass(frozen=True)
class Bins:
    """Memory classes: bin ``k`` holds ``[start + k*width, start + (k+1)*width)`` MiB; the first bin
    also takes everything below, the last everything above, and OOM jobs fall in the last."""

    start_mib: float
    width_mib: float
    count: int

    def label(self, memory_mib: np.ndarray) -> np.ndarray:
        k = np.floor((np.asarray(memory_mib, dtype=float) - self.start_mib) / self.width_mib)
        return np.clip(k, 0, self.count - 1).astype(np.int64)

    def upper_mib(self, label: np.ndarray) -> np.ndarray:
        """The MiB a job of class ``label`` may be given (the bin's upper edge)."""
        return self.start_mib + (np.asarray(label) + 1) * self.width_mib


DEFAULT_BINS = {
    "mlp": Bins(1000.0, 1000.0, 5),
    "cnn": Bins(0.0, 8000.0, 6),
    "transformer": Bins(0.0, 8000.0, 6),
}


@dataclass
class Jobs:
    """Validated jobs of one family: ``frame`` has one row per job, columns

    ``filename, group, depth, batch_size, total_activations, total_parameters, input_elements,
    activation, layers`` (list of (name, activations per sample, parameters)), the count columns of
    :data:`COUNT_COLUMNS` (0 where the file has none), ``oom`` (bool), ``memory_mib``,
    ``device_name`` (the GPU a row was measured on, where the file says; else empty) and
    ``memory_source`` (what ``memory_mib`` counts, :func:`memory_target`; else empty).

    ``activations_per_batch``: the file counted activations for the whole batch (GPUMemNet's CNN
    and Transformer files, made with torchsummary at the job's batch size); the frame holds them
    per sample, divided by the batch size, as every other file does.
    """

    family: str
    frame: pd.DataFrame
    path: str
    dropped_failed: int = 0
    activations_per_batch: bool = False

    def __len__(self) -> int:
        return len(self.frame)

    def subset(self, index: np.ndarray) -> "Jobs":
        return Jobs(
            self.family,
            self.frame.iloc[index].reset_index(drop=True),
            self.path,
            activations_per_batch=self.activations_per_batch,
        )


def memory_target(jobs: Jobs) -> str:
    """What the jobs' ``memory_mib`` counts, in words (:data:`MEMORY_TARGETS`): whether the CUDA
    context is in it."""
    sources = sorted({source for source in jobs.frame["memory_source"] if source})
    if not sources:
        return GPUMEMNET_TARGET
    return "; ".join(MEMORY_TARGETS.get(source, source) for source in sources)


def load_jobs(path: str | os.PathLike, family: str) -> Jobs:
    """Read and validate a GPUMemNet-format CSV of ``family`` (``mlp``, ``cnn`` or ``transformer``).

    Raises :class:`InputError` naming the file, line and column of the first bad value: missing
    columns, non-integer counts, a layer list that is not a Python literal list of
    ``(name, activations, parameters)``, negative or non-numeric memory, an unknown status, a number
    beyond its bound (:data:`MAX_BATCH_SIZE`, :data:`MAX_COUNT`, :data:`MAX_MEMORY_MIB`).
    Successful rows with 0 MiB (or none) are failed measurements and are dropped, as are rows whose
    status is a failure (:data:`STATUS_FAILED`); ``Jobs.dropped_failed`` counts them. A file whose
    layer lists count activations per batch is read per sample (:func:`activations_per_batch`).
    """
    if family not in FAMILIES:
        raise InputError(path, f"unknown family {family!r}; expected one of {', '.join(FAMILIES)}")
    path = Path(path)
    raw = read_csv_columns(path, REQUIRED[family], other_columns=True)
    n = len(raw)
    if n == 0:
        raise InputError(path, "no data rows")
    frame = pd.DataFrame(index=range(n))
    frame["filename"] = raw["Filename"] if "Filename" in raw else [f"row{i + 2}" for i in range(n)]
    for column, name in (
        ("Depth", "depth"),
        ("Total Activations", "total_activations"),
        ("Total Parameters", "total_parameters"),
    ):
        frame[name] = int_column(raw, column, path, 0, MAX_COUNT).to_numpy()
    frame["batch_size"] = int_column(raw, "Batch Size", path, 1, MAX_BATCH_SIZE).to_numpy()
    for column, name in COUNT_COLUMNS.items():
        frame[name] = int_column(raw, column, path, 0, MAX_COUNT).to_numpy() if column in raw else 0
    frame["memory_mib"] = _memory_column(raw, path).to_numpy()
    status = raw["Status"].str.strip() if "Status" in raw else pd.Series([STATUS_OK] * n)
    bad = ~status.isin([STATUS_OK, STATUS_OOM, *STATUS_FAILED])
    if bad.any():
        i = int(bad.to_numpy().argmax())
        raise InputError(
            path,
            f"{status.iloc[i]!r} is not {STATUS_OK}, {STATUS_OOM} or a failure ({', '.join(STATUS_FAILED)})",
            f"{csv_line(i)}, column Status",
        )
    frame["oom"] = (status == STATUS_OOM).to_numpy()
    frame["activation"] = (
        raw["Activation Function"].str.strip().to_numpy() if "Activation Function" in raw else ""
    )
    frame["layers"] = _layer_lists(raw, path) if "Activations-Params" in raw else [[] for _ in range(n)]
    per_batch = activations_per_batch(frame["layers"], frame["batch_size"])
    if per_batch:
        frame["layers"] = [
            [(name, a // b, p) for name, a, p in layers]
            for layers, b in zip(frame["layers"], frame["batch_size"])
        ]
        frame["total_activations"] = frame["total_activations"] // frame["batch_size"]
    frame["device_name"] = raw["Device Name"].str.strip().to_numpy() if "Device Name" in raw else ""
    frame["memory_source"] = raw["Memory Source"].str.strip().to_numpy() if "Memory Source" in raw else ""
    tokens = [filename_tokens(name) for name in frame["filename"]]
    frame["group"] = [_group(family, t, raw, i) for i, t in enumerate(tokens)]
    frame["input_elements"] = [
        _input_elements(family, t, layers, frame.loc[i])
        for i, (t, layers) in enumerate(zip(tokens, frame["layers"]))
    ]
    failed = (status.isin(STATUS_FAILED).to_numpy()) | ((~frame["oom"]) & (frame["memory_mib"] <= 0))
    frame = frame[~failed].reset_index(drop=True)
    return Jobs(family, frame, str(path), dropped_failed=int(failed.sum()), activations_per_batch=per_batch)


def filename_tokens(filename: str) -> dict[str, str]:
    """``input:2346_output:197_depth:2_arch:pyramid...out`` -> ``{"input": "2346", ...}``.

    Tokens are ``key:value`` joined by ``_``; a value may hold ``_`` (it runs to the next key), and
    a key may too where it is one of GPUMemNet's (:data:`MULTIWORD_KEYS`: ``input_channels:3``,
    ``num_classes:10``). A key given again keeps each later value as ``key#2``, ``key#3``
    (GPUMemNet's CNN names give ``dropout`` twice: the rate, then whether it is used).
    """
    stem = filename[:-4] if filename.endswith(".out") else filename
    tokens: dict[str, str] = {}
    key = None
    pending: list[str] = []  # words since the last key: the end of its value, or the start of the next key
    for part in stem.split("_"):
        if ":" not in part:
            pending.append(part)
            continue
        tail, value = part.split(":", 1)
        joined = 0
        for count in range(len(pending), 0, -1):
            if "_".join([*pending[-count:], tail]) in MULTIWORD_KEYS:
                joined = count
                break
        new_key = "_".join([*pending[len(pending) - joined :], tail])
        if key is not None and len(pending) > joined:
            tokens[key] += "_" + "_".join(pending[: len(pending) - joined])
        pending = []
        name, repeat = new_key, 1
        while name in tokens:
            repeat += 1
            name = f"{new_key}#{repeat}"
        tokens[name] = value
        key = name
    if key is not None and pending:
        tokens[key] += "_" + "_".join(pending)
    return tokens


def _memory_column(raw: pd.DataFrame, path) -> pd.Series:
    """The measured MiB; an empty cell (GPUMemNet's cleaner leaves it so when no nvidia-smi log was
    found) is 0, which drops a successful row as a failed measurement."""
    text = raw[MEMORY_COLUMN].str.strip()
    values = pd.to_numeric(text.mask(text == "", "0"), errors="coerce")
    where_bad = values.isna() | ~np.isfinite(values)
    if where_bad.any():
        i = int(where_bad.to_numpy().argmax())
        raise InputError(
            path,
            f"{raw[MEMORY_COLUMN].iloc[i]!r} is not a number of MiB",
            f"{csv_line(i)}, column {MEMORY_COLUMN}",
        )
    negative = values < 0
    if negative.any():
        i = int(negative.to_numpy().argmax())
        raise InputError(path, f"{values.iloc[i]} MiB is negative", f"{csv_line(i)}, column {MEMORY_COLUMN}")
    too_large = values > MAX_MEMORY_MIB
    if too_large.any():
        i = int(too_large.to_numpy().argmax())
        raise InputError(
            path,
            f"{raw[MEMORY_COLUMN].iloc[i]} MiB is out of range (at most 2**40)",
            f"{csv_line(i)}, column {MEMORY_COLUMN}",
        )
    return values.astype(float)


def _layer_lists(raw: pd.DataFrame, path) -> list[list[tuple[str, int, int]]]:
    lists = []
    for i, text in enumerate(raw["Activations-Params"]):
        where = f"{csv_line(i)}, column Activations-Params"
        if len(text) > MAX_LAYER_LIST_CHARACTERS:
            raise InputError(
                path,
                f"a layer list of {len(text)} characters; at most {MAX_LAYER_LIST_CHARACTERS} are read",
                where,
            )
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            raise InputError(path, f"not a Python literal list: {text[:60]!r}", where) from None
        if not isinstance(value, (list, tuple)) or not all(
            isinstance(v, (list, tuple))
            and len(v) == 3
            and isinstance(v[0], str)
            and all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= MAX_COUNT for x in v[1:])
            for v in value
        ):
            raise InputError(
                path,
                "expected a list of (layer name, activations, parameters) with "
                "integer counts from 0 to 2**40",
                where,
            )
        lists.append([(str(a), int(b), int(c)) for a, b, c in value])
    return lists


def _group(family: str, tokens: dict[str, str], raw: pd.DataFrame, i: int) -> str:
    """The architecture a job belongs to, for the grouped split."""
    if "arch" in tokens:
        return tokens["arch"]
    if "architecture" in raw:
        return str(raw["architecture"].iloc[i])
    if family == "transformer":
        return f"heads{raw['Num Heads'].iloc[i]}"
    return "all"


def _input_elements(family: str, tokens: dict[str, str], layers, row) -> int:
    """Elements of one input sample: the first linear layer's fan-in (MLP), channels x size^2
    (CNN, from the file name: membench's ``channels`` and ``input``, GPUMemNet's ``input_channels``
    and ``input_size``), the sequence length (Transformer); 0 where unknown."""
    if family == "mlp" and layers and layers[0][0] == "linear" and layers[0][1] > 0:
        return max(0, layers[0][2] // layers[0][1] - 1)
    if family == "cnn":
        channels = tokens.get("channels", tokens.get("input_channels", "3"))
        size = tokens.get("input", tokens.get("input_size"))
        try:
            return int(channels) * int(size) ** 2 if size is not None else 0
        except ValueError:
            return 0
    if family == "transformer":
        return int(row["seq_length"])
    return 0


def activations_per_batch(layer_lists, batch_sizes) -> bool:
    """Whether a file's layer lists count each layer's outputs for the whole batch rather than per
    sample (torchsummary run at the job's batch size, as in GPUMemNet's CNN and Transformer files).

    Told by the linear layers, whose parameters are ``(inputs + 1) x outputs`` (or ``inputs x
    outputs``): per sample, a linear entry's parameters are a multiple of its activations; per
    batch they are not, but are a multiple of activations / batch. The file counts per batch when
    most rows whose last linear layer tells the two apart say so and every layer of every row
    divides by its batch size.
    """
    told = per_batch = 0
    for layers, batch in zip(layer_lists, batch_sizes):
        batch = int(batch)
        linear = [(a, p) for name, a, p in layers if name.lower() == "linear" and a > 0 and p > 0]
        if batch < 2 or not linear:
            continue
        a, p = linear[-1]
        sample, whole = p % a == 0, a % batch == 0 and p % (a // batch) == 0
        if sample != whole:
            told += 1
            per_batch += whole
    if told == 0 or 2 * per_batch <= told:
        return False
    return all(a % int(batch) == 0 for layers, batch in zip(layer_lists, batch_sizes) for _, a, _ in layers)


def activation_code(names) -> np.ndarray:
    """GPUMemNet's encoding of the activation function: a point (sin, cos) on a half circle."""
    index = {a.lower(): i for i, a in enumerate(ACTIVATIONS)}
    angles = np.array(
        [index.get(str(n).lower(), len(ACTIVATIONS)) * math.pi / len(ACTIVATIONS) for n in names]
    )
    return np.column_stack([np.sin(angles), np.cos(angles)])
