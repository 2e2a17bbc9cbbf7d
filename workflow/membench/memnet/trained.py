"""Trained estimators on disk: what ``membench memnet train`` writes and ``predict`` reads.

A directory holds ``estimators.pt``: every trained estimator's state (plain values and tensors,
written atomically by ``core.checkpoint.save_checkpoint`` and read back with ``weights_only=True``),
the memory classes, what the estimators were trained on (the data file, its name in the workflow,
the GPU it was measured on, its number of jobs, what its memory figures count and the ranges of
its parameters, activations and batch sizes) and the run's identity
(``core.checkpoint.run_identity``: the training options, the data file's content and the memnet
code). ``estimators.json`` says the same for people and for the workflow. ``predict`` loads a
directory only while its identity holds: the same code, and the data file, where it is still
there, unchanged.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from membench.core import atomic
from membench.core.checkpoint import (
    IDENTITY_KEY,
    code_version,
    load_checkpoint,
    run_identity,
    save_checkpoint,
)
from membench.core.errors import InputError
from membench.memnet.dataset import Bins, Jobs
from membench.memnet.estimators import restore_estimator

__all__ = [
    "CACHE_FILE",
    "describe_data",
    "load_trained",
    "out_of_range",
    "RANGE_COLUMNS",
    "save_trained",
    "SUMMARY_FILE",
    "Trained",
    "trained_identity",
    "training_ranges",
]

CACHE_FILE = "estimators.pt"
SUMMARY_FILE = "estimators.json"
# Frame columns whose training range predict checks a model against, with their words.
RANGE_COLUMNS = {
    "total_parameters": "parameters",
    "total_activations": "activations per sample",
    "batch_size": "batch size",
    # An image given to a Transformer trained on token sequences lies far outside (ViT: 150,528).
    "input_elements": "input values per sample",
}
_RETRAIN = "retrain them (`membench memnet train`, or `snakemake --forcerun memnet_train` for the workflow's)"


@dataclass
class Trained:
    """Trained estimators of one family and what they learned from.

    ``data``: ``path`` (the CSV), ``dataset`` (its name), ``device_name`` (the GPU it was measured
    on, '' when unknown), ``jobs``, ``target`` (what its MiB count: ``dataset.memory_target``),
    ``ranges`` ({column: [low, high]} of :data:`RANGE_COLUMNS`) and ``too_small_to_judge`` (why
    the data cannot tell estimators apart, '' when it can).
    """

    family: str
    bins: Bins
    max_under: float
    estimators: list
    data: dict
    identity: dict = field(default_factory=dict)
    directory: str = ""


def trained_identity(options: dict, data_path: str | os.PathLike) -> dict:
    """The identity of a training run: its options, the data file's content, the memnet code."""
    return run_identity(options, [data_path], code=code_version("memnet"))


def training_ranges(jobs: Jobs) -> dict[str, list[int]]:
    """[low, high] of each :data:`RANGE_COLUMNS` column over the measured (not out-of-memory) jobs."""
    frame = jobs.frame[~jobs.frame["oom"]] if (~jobs.frame["oom"]).any() else jobs.frame
    return {column: [int(frame[column].min()), int(frame[column].max())] for column in RANGE_COLUMNS}


def save_trained(directory: str | os.PathLike, trained: Trained) -> None:
    """Write ``estimators.pt`` and ``estimators.json`` into ``directory`` (atomically)."""
    directory = Path(directory)
    bins = [trained.bins.start_mib, trained.bins.width_mib, trained.bins.count]
    state = {
        "family": trained.family,
        "bins": bins,
        "max_under": trained.max_under,
        "data": trained.data,
        "estimators": {est.name: est.state() for est in trained.estimators},
    }
    save_checkpoint(directory / CACHE_FILE, state, trained.identity)
    atomic.write_json(
        directory / SUMMARY_FILE,
        {
            "family": trained.family,
            "bins": bins,
            "max_under": trained.max_under,
            "data": trained.data,
            "estimators": [est.name for est in trained.estimators],
            "calibration_jobs": {est.name: len(est.calibration) for est in trained.estimators},
            IDENTITY_KEY: trained.identity,
        },
    )


def load_trained(directory: str | os.PathLike) -> Trained:
    """Read what :func:`save_trained` wrote, checking its identity: estimators trained by other
    memnet code, or on a data file that has changed since, are refused with one line saying so."""
    directory = Path(directory)
    path = directory / CACHE_FILE
    if not path.exists():
        raise InputError(path, "trained estimators not found (run `membench memnet train`)")
    state = load_checkpoint(path)
    try:
        identity = state[IDENTITY_KEY]
        if identity.get("code") != code_version("memnet"):
            raise InputError(path, f"trained by another version of membench's memnet code; {_RETRAIN}")
        for data_path, digest in identity["inputs"].items():
            if Path(data_path).is_file() and trained_identity({}, data_path)["inputs"][data_path] != digest:
                raise InputError(
                    path, f"the data it was trained on ({data_path}) has changed since; {_RETRAIN}"
                )
        bins = Bins(*state["bins"])
        estimators = [
            restore_estimator(name, bins, entry, state["max_under"])
            for name, entry in state["estimators"].items()
        ]
        return Trained(
            state["family"],
            bins,
            float(state["max_under"]),
            estimators,
            dict(state["data"]),
            identity,
            str(directory),
        )
    except InputError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, RuntimeError) as exc:
        raise InputError(path, f"not a membench estimator file ({type(exc).__name__}: {exc})") from None


def out_of_range(trained: Trained, row: dict) -> list[str]:
    """Warnings for each of a job's :data:`RANGE_COLUMNS` values outside the training data's range."""
    warnings = []
    for column, words in RANGE_COLUMNS.items():
        low, high = trained.data["ranges"][column]
        value = row[column]
        if not low <= value <= high:
            side = "below" if value < low else "above"
            warnings.append(
                f"{words} {value:,} is {side} the {low:,}-{high:,} of the data {trained.data['dataset']} "
                "was trained on: an extrapolation"
            )
    return warnings


def describe_data(trained: Trained) -> str:
    """``<dataset> (<path>, <jobs> jobs, <GPU>)`` for the output of predict."""
    data = trained.data
    gpu = data.get("device_name") or "GPU not recorded"
    return f"{data['dataset']} ({data['path']}, {data['jobs']:,} jobs, measured on {gpu})"
