"""Predict a training job's GPU memory from a CPU, before it is submitted, at a stated risk.

The model is given as ``package.module:factory``. It is built on the meta device and run once on
fake tensors (shapes only, no weights, no compute) for its layer list, so a large model costs
milliseconds; each trained estimator (see :mod:`membench.memnet.trained`: trained once, loaded
from its cache on every call) then answers, and FakeTensor and MemTracker, when asked, count a
fake training step of the model itself. The recommended figure is the membench estimator's: the
MiB that the job's peak exceeds with probability at most the requested risk, with a range.
"""

from __future__ import annotations

import importlib
import math
from typing import Callable

import numpy as np
import pandas as pd
import torch

# Operators on the meta device run torch's Python decompositions, which load torch._dynamo (one to
# several seconds) on first use: imported with everything else, so that a call costs milliseconds.
import torch._dynamo  # noqa: F401, E402

from membench.core.errors import InputError
from membench.memnet import faketensor
from membench.memnet.clean import gpumemnet_activation, gpumemnet_depth
from membench.memnet.dataset import COUNT_COLUMNS, DEFAULT_BINS, Bins, Jobs
from membench.memnet.estimators import MIB, FakeTensor, Horus, MemTracker
from membench.memnet.models import layer_summary, module_counts
from membench.memnet.trained import Trained, describe_data, out_of_range

__all__ = [
    "family_of",
    "family_of_kinds",
    "format_prediction",
    "job_of_model",
    "job_of_summary",
    "load_factory",
    "make_input",
    "predict_job",
    "predict_model",
    "recommendation",
]

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
    return family_of_kinds({type(m).__name__ for m in model.modules()})


def family_of_kinds(kinds) -> str:
    """:func:`family_of` from the class names of a model's modules (a record's module counts)."""
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
    """A batch of inputs: ``(batch, *shape)`` normal floats, or integers in [0, high) for token ids
    (on the meta device, shapes only: drawing values there would load torch's compiler)."""
    if str(device) == "meta":
        return torch.empty(
            batch, *shape, dtype=torch.int64 if dtype == "int64" else torch.float32, device="meta"
        )
    if dtype == "int64":
        return torch.randint(0, high, (batch, *shape), generator=generator).to(device)
    return torch.randn(batch, *shape, generator=generator).to(device)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def _summary(factory: Callable, kwargs: dict, shape: tuple[int, ...], dtype: str):
    """(layer list, module counts, parameters, family) of the model, from a meta-device model run
    on a meta batch of two samples; from a real model and two real samples where the factory
    cannot build on the meta device (it loads weights, say)."""
    try:
        with torch.device("meta"):
            model = factory(**kwargs)
    except Exception:  # noqa: BLE001 - any failure on meta: build it for real below
        model = None
    if model is None:
        try:
            model = factory(**kwargs)
        except Exception as exc:  # noqa: BLE001 - the user's factory: its failure is their input's
            raise InputError(None, f"--kwargs: the factory fails with them ({_first_line(exc)})") from None
    if not isinstance(model, torch.nn.Module):
        raise InputError(None, f"--model: the factory returns {type(model).__name__}, not a torch.nn.Module")
    family = family_of(model)
    example = (2, *shape)
    try:
        if any(p.is_meta for p in model.parameters()):
            layers, counts, parameters = faketensor.meta_layer_summary(
                lambda: model, lambda: make_input(shape, dtype, 2, device="meta")
            )
        else:
            layers = layer_summary(model, make_input(shape, dtype, 2))
            counts, parameters = module_counts(model), sum(p.numel() for p in model.parameters())
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - a forward pass that fails on the given shape is bad input
        raise InputError(
            None,
            f"--input-shape {','.join(map(str, shape))}: the model's forward pass fails on a batch of "
            f"shape {example} {dtype} ({_first_line(exc)}); give one sample's shape, without the batch",
        ) from None
    return layers, counts, parameters, family


def job_of_model(
    factory: Callable[..., torch.nn.Module],
    kwargs: dict,
    shape: tuple[int, ...],
    dtype: str,
    batch: int,
    name: str,
    family: str | None = None,
) -> Jobs:
    """The one-row Jobs frame of a model's training job: what a GPUMemNet CSV would hold for it
    (memory unknown); its family is ``family``, or the one :func:`family_of` gives."""
    layers, counts, parameters, found = _summary(factory, kwargs, shape, dtype)
    return job_of_summary(layers, counts, parameters, shape, dtype, batch, name, family or found)


def job_of_summary(
    layers: list,
    counts: dict[str, int],
    parameters: int,
    shape: tuple[int, ...],
    dtype: str,
    batch: int,
    name: str,
    family: str,
) -> Jobs:
    """The one-row Jobs frame of a training job from its model's summary: the layer list
    (``models.layer_summary``), module counts and parameters, as a measurement records them; its
    depth and activation function named as a cleaned measurement names them (:mod:`.clean`)."""
    row = {name_: 0 for name_ in COUNT_COLUMNS.values()}
    row.update({_COUNTED[k]: v for k, v in counts.items() if k in _COUNTED})
    row.update(
        {
            "filename": name,
            "group": name,
            "depth": gpumemnet_depth(family, counts),
            "batch_size": batch,
            "total_activations": sum(a for _, a, _ in layers),
            "total_parameters": parameters,
            "input_elements": int(np.prod(shape)),
            "activation": gpumemnet_activation(family, layers),
            "layers": [tuple(layer) for layer in layers],
            "oom": False,
            "memory_mib": np.nan,
            "device_name": "",
        }
    )
    if family == "transformer" and dtype == "int64":
        row["seq_length"] = shape[0]
    return Jobs(family, pd.DataFrame([row]), name)


def _row(estimator, answer, bins: Bins, trained: Trained | None, max_under: float) -> dict:
    bin_ = int(answer.bins[0])
    mib = None if answer.mib is None else float(answer.mib[0])
    return {
        "estimator": estimator.name,
        "trained_on": trained.data["dataset"] if trained else "",
        "device_name": trained.data.get("device_name", "") if trained else "",
        "max_under": max_under,
        "bin": bin_,
        "raw_bin": int(answer.raw_bins[0]),
        "bin_upper_mib": float(bins.upper_mib(bin_)) if 0 <= bin_ < bins.count - 1 else math.inf,
        "mib": mib,
        "low_mib": None if answer.low_mib is None else float(answer.low_mib[0]),
        "high_mib": None if answer.high_mib is None else float(answer.high_mib[0]),
        "calibration_jobs": len(estimator.calibration),
        "no_answer_reason": answer.reasons[0] if answer.reasons else "",
    }


def predict_model(
    factory: Callable[..., torch.nn.Module],
    kwargs: dict,
    shape: tuple[int, ...],
    dtype: str,
    batch: int,
    optimizer: str,
    trained: list[Trained],
    bins: Bins | None,
    name: str,
    max_under: float,
    family: str | None = None,
    baselines: bool = False,
) -> tuple[pd.DataFrame, list[str]]:
    """Every estimator's answer for the job at risk ``max_under``: (one row per estimator, warnings).

    The trained estimators of the job's family answer (each with the data it was trained on);
    without them, the Horus formula alone, uncalibrated (its class at the risk is then the last).
    ``bins``: the Horus formula's classes without trained estimators (default: the family's).
    ``baselines``: also FakeTensor's and MemTracker's count of a fake training step of the model
    (calibrated where training calibrated them). Warnings name each value of the job outside the
    training data's range.
    """
    jobs = job_of_model(factory, kwargs, shape, dtype, batch, name, family)
    counts = None
    if baselines:
        make_batch = lambda: (make_input(shape, dtype, batch), torch.zeros(batch, dtype=torch.long))  # noqa: E731
        build = lambda: factory(**kwargs)  # noqa: E731
        counts = {
            FakeTensor.name: lambda: faketensor.step_bytes(build, make_batch, optimizer).total_mib,
            MemTracker.name: lambda: faketensor.tracked_peak_bytes(build, make_batch, optimizer) / MIB,
        }
    return predict_job(jobs, trained, bins, max_under, optimizer, counts)


def predict_job(
    jobs: Jobs,
    trained: list[Trained],
    bins: Bins | None,
    max_under: float,
    optimizer: str = "adam",
    counts: dict[str, Callable[[], float]] | None = None,
    baselines_from_row: bool = False,
) -> tuple[pd.DataFrame, list[str]]:
    """Every estimator's answer for the one job of ``jobs`` at risk ``max_under``: (one row per
    estimator, warnings); see :func:`predict_model`. FakeTensor and MemTracker answer when asked:
    ``counts`` holds their MiB for the job by name, counted on the model itself; with
    ``baselines_from_row`` (a job known only by its row, as in a CSV) the trained ones answer from
    the row as they do in evaluation: on the model its layer list rebuilds, or with the reason
    they cannot.
    """
    family = jobs.family
    bins = bins or DEFAULT_BINS[family]
    matching = [t for t in trained if t.family == family]
    warnings = []
    if not matching:
        warnings.append(
            f"no trained estimators for {family} models: only the uncalibrated Horus formula (raw_bin) "
            "answers; train them with `membench memnet train` or run the workflow"
        )
    rows = []
    analytic: dict[str, tuple[object, Trained | None]] = {}
    for t in matching:
        warnings += out_of_range(t, jobs.frame.iloc[0])
        for estimator in t.estimators:
            if estimator.name in ("faketensor", "memtracker", "horus"):
                analytic.setdefault(estimator.name, (estimator, t))
                continue
            rows.append(_row(estimator, estimator.predict(jobs, max_under), t.bins, t, max_under))
    horus, source = analytic.get("horus", (Horus(bins), None))
    rows.append(_row(horus, horus.predict(jobs, max_under), horus.bins, source, max_under))
    for kind in (FakeTensor, MemTracker):
        if counts is None:
            if baselines_from_row and kind.name in analytic:
                estimator, source = analytic[kind.name]
                rows.append(
                    _row(estimator, estimator.predict(jobs, max_under), estimator.bins, source, max_under)
                )
            continue
        estimator, source = analytic.get(kind.name, (kind(bins, optimizer=optimizer), None))
        try:
            estimate, reason = counts[kind.name](), ""
        except InputError as exc:
            estimate, reason = math.nan, exc.problem
        answer = estimator.answer(np.array([estimate]), [reason], max_under)
        rows.append(_row(estimator, answer, estimator.bins, source, max_under))
    frame = pd.DataFrame(rows)
    frame.insert(0, "model", jobs.frame["filename"].iloc[0])
    frame.insert(1, "family", family)
    frame.insert(2, "batch_size", int(jobs.frame["batch_size"].iloc[0]))
    return frame, warnings


def recommendation(frame: pd.DataFrame) -> pd.Series | None:
    """The row whose figure is recommended: the membench estimator's (the first trained one)."""
    rows = frame[frame["estimator"] == "membench"]
    return rows.iloc[0] if len(rows) else None


def _mib(value: float) -> str:
    return f"{value:,.0f} MiB"


def format_prediction(
    frame: pd.DataFrame, warnings: list[str], trained: list[Trained], max_under: float, header: str
) -> str:
    """The text ``membench memnet predict`` prints: the recommended figure at the risk, its range
    and class, what it was trained on, warnings, then every estimator's answer."""
    lines = [header]
    best = recommendation(frame)
    risk = f"<= {max_under:.1%} risk of under-estimation"
    if best is None:
        lines.append(f"recommended: none at {risk} (no trained membench estimator for this family)")
    else:
        source = next(t for t in trained if t.data["dataset"] == best["trained_on"])
        if np.isfinite(best["high_mib"]):
            lines.append(
                f"recommended: {_mib(best['high_mib'])} at {risk} "
                f"(range {_mib(best['low_mib']) if np.isfinite(best['low_mib']) else 'below'}"
                f" to {_mib(best['high_mib'])}; estimate {_mib(best['mib'])})"
            )
        else:
            lines.append(
                f"recommended: no finite figure at {risk}: {best['calibration_jobs']} calibration jobs "
                f"cannot promise it (estimate {_mib(best['mib'])}); accept a larger risk or train on "
                "more jobs"
            )
        bins, k = source.bins, int(best["bin"])
        lower, upper = bins.start_mib + k * bins.width_mib, bins.upper_mib(k)
        if k == bins.count - 1:
            span = f"{_mib(lower)} or more"
        else:
            span = f"up to {_mib(upper)}" if k == 0 else f"{_mib(lower)} to {_mib(upper)}"
        lines.append(
            f"class at {risk}: bin {k} ({span}; {bins.count} classes of {_mib(bins.width_mib)} "
            f"from {_mib(bins.start_mib)})"
        )
    for t in trained:
        lines.append(f"trained on {describe_data(t)}: {', '.join(e.name for e in t.estimators)}")
        lines.append(f"memory of {t.data['dataset']}: {t.data.get('target', 'not recorded')}")
    lines += [f"warning: {w}" for w in warnings]
    shown = frame.drop(columns=["model", "family", "batch_size", "device_name", "max_under"])
    lines.append("every estimator:")
    lines.append(shown.to_string(index=False, float_format=lambda v: f"{v:,.1f}"))
    return "\n".join(lines)
