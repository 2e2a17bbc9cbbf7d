"""Predict a training job's memory from a CPU, before it is submitted: every estimator's class and MiB
for a model given as ``package.module:factory``."""

from __future__ import annotations

import importlib
from typing import Callable

import numpy as np
import pandas as pd
import torch

from membench.core.errors import InputError
from membench.memnet import faketensor
from membench.memnet.dataset import COUNT_COLUMNS, Bins, Jobs
from membench.memnet.estimators import FakeTensor, Horus
from membench.memnet.models import layer_summary, module_counts

__all__ = ["family_of", "job_frame", "load_factory", "make_input", "predict_model"]

# module class names -> Jobs count columns
_COUNTED = {
    "BatchNorm1d": "batchnorm_layers",
    "Dropout": "dropout_layers",
    "Conv2d": "conv2d_count",
    "BatchNorm2d": "batchnorm2d_count",
    "AdaptiveAvgPool2d": "adaptiveavgpool2d_count",
    "Linear": "linear_count",
    "LayerNorm": "layernorm_count",
    "NonDynamicallyQuantizableLinear": "mha_linear_count",
}


def load_factory(spec: str) -> Callable[..., torch.nn.Module]:
    """``package.module:factory`` -> the callable (imported, not evaluated from text)."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise InputError(None, f"--model {spec!r}: expected package.module:factory")
    try:
        target = importlib.import_module(module_name)
    except ImportError as exc:
        raise InputError(None, f"--model {spec!r}: cannot import {module_name} ({exc})") from None
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise InputError(None, f"--model {spec!r}: {module_name} has no attribute {attribute}")
        target = getattr(target, part)
    if not callable(target):
        raise InputError(None, f"--model {spec!r}: {attribute} is not callable")
    return target


def family_of(model: torch.nn.Module) -> str:
    """The GPUMemNet family a model is closest to: attention -> transformer, convolution -> cnn, else mlp."""
    kinds = {type(m).__name__ for m in model.modules()}
    if "MultiheadAttention" in kinds or any("Attention" in k for k in kinds):
        return "transformer"
    if any(k.startswith("Conv") for k in kinds):
        return "cnn"
    return "mlp"


def make_input(
    shape: tuple[int, ...],
    dtype: str,
    batch: int,
    high: int = 1000,
    device: torch.device | str = "cpu",
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """A batch of inputs: ``(batch, *shape)`` normal floats, or integers in [0, high) for token ids."""
    if dtype == "int64":
        return torch.randint(0, high, (batch, *shape), generator=generator).to(device)
    return torch.randn(batch, *shape, generator=generator).to(device)


def job_frame(
    model: torch.nn.Module, family: str, shape: tuple[int, ...], dtype: str, batch: int, name: str
) -> Jobs:
    """The one-row Jobs frame of a model: what the CSV would hold for it (memory unknown)."""
    layers = layer_summary(model, make_input(shape, dtype, 2))
    counts = module_counts(model)
    row = {name_: 0 for name_ in COUNT_COLUMNS.values()}
    row.update({_COUNTED[k]: v for k, v in counts.items() if k in _COUNTED})
    row.update(
        {
            "filename": name,
            "group": name,
            "depth": counts.get("Linear", 0) + counts.get("Conv2d", 0),
            "batch_size": batch,
            "total_activations": sum(a for _, a, _ in layers),
            "total_parameters": sum(p.numel() for p in model.parameters()),
            "input_elements": int(np.prod(shape)),
            "activation": "",
            "layers": layers,
            "oom": False,
            "memory_mib": np.nan,
        }
    )
    if family == "transformer" and dtype == "int64":
        row["seq_length"] = shape[0]
    return Jobs(family, pd.DataFrame([row]), name)


def predict_model(
    factory: Callable[..., torch.nn.Module],
    kwargs: dict,
    shape: tuple[int, ...],
    dtype: str,
    batch: int,
    optimizer: str,
    trained: list,
    family: str,
    bins: Bins,
    name: str,
) -> pd.DataFrame:
    """Every estimator's (bin, MiB) for the job: the analytic ones always, the trained ones given."""
    model = factory(**kwargs)
    jobs = job_frame(model, family, shape, dtype, batch, name)
    rows = []
    for estimator in [Horus(bins), *trained]:
        bins_, mib = estimator.predict(jobs)
        rows.append(
            {"estimator": estimator.name, "bin": int(bins_[0]), "mib": None if mib is None else float(mib[0])}
        )
    step = faketensor.step_bytes(
        lambda: factory(**kwargs),
        lambda: (make_input(shape, dtype, batch), torch.zeros(batch, dtype=torch.long)),
        optimizer,
    )
    rows.append(
        {
            "estimator": FakeTensor.name,
            "bin": int(bins.label(np.array([step.total_mib]))[0]),
            "mib": step.total_mib,
        }
    )
    frame = pd.DataFrame(rows)
    frame.insert(0, "model", name)
    frame.insert(1, "family", family)
    frame.insert(2, "batch_size", batch)
    frame["bin_upper_mib"] = bins.upper_mib(frame["bin"].to_numpy())
    return frame
