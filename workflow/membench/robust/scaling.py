"""The robust scaling table: one row per run and scaling series, each parallel run set against the
best (fastest) sequential run of the same attack, attack steps, eps and epochs on at most its cores.

``speedup`` = the baseline's training time / this run's training time (equal epochs and data, so
also the samples/s ratio). ``robust_accuracy_delta`` = this run's robust accuracy minus the
baseline's. Series: ``sequential``; ``strong`` (attack steps fixed at ``attack_steps``); ``weak``
(attack steps = ``weak_base_attack_steps`` x producers). A parallel run in both series appears once in each.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import pandas as pd

from membench.core.errors import InputError
from membench.core.tables import metrics_table
from membench.core.validate import open_regular

__all__ = ["read_scaling_table", "scaling_table", "TABLE_COLUMNS"]

TABLE_COLUMNS = (
    "mode",
    "attack",
    "producers",
    "eps",
    "epochs",
    "clean_accuracy",
    "robust_accuracy",
    "samples_per_s",
    "wall_s",
    "staleness_mean",
    "staleness_max",
    "scaling",
    "attack_steps",
    "publish_every",
    "threads",
    "cores",
    "train_wall_s",
    "speedup",
    "speedup_per_core",
    "baseline_variant",
    "baseline_train_wall_s",
    "robust_accuracy_delta",
    "variant",
    "dataset",
)
_MATCH = ("dataset", "attack", "attack_steps", "eps", "epochs")


def _baseline(row: pd.Series, sequential: pd.DataFrame) -> pd.Series | None:
    same = sequential
    for key in _MATCH:
        same = same[same[key] == row[key]]
    same = same[same["cores"] <= row["cores"]]
    if same.empty:
        return None
    return same.loc[same["train_wall_s"].idxmin()]


def scaling_table(
    metrics_paths: Sequence[str | os.PathLike], attack_steps: int, weak_base_attack_steps: int
) -> pd.DataFrame:
    """The table described in the module docstring, from the runs' ``metrics.json`` files."""
    jobs = metrics_table(metrics_paths)
    missing = [
        c
        for c in TABLE_COLUMNS
        if c not in jobs.columns
        and c
        not in (
            "scaling",
            "speedup",
            "speedup_per_core",
            "baseline_variant",
            "baseline_train_wall_s",
            "robust_accuracy_delta",
        )
    ]
    if missing:
        raise InputError(metrics_paths[0], f"not robust training metrics: missing {', '.join(missing)}")
    sequential = jobs[jobs["mode"] == "sequential"]
    rows = []
    for _, job in jobs.iterrows():
        base = _baseline(job, sequential)
        extra = {
            "baseline_variant": None,
            "baseline_train_wall_s": None,
            "speedup": None,
            "speedup_per_core": None,
            "robust_accuracy_delta": None,
        }
        if base is not None:
            speedup = base["train_wall_s"] / job["train_wall_s"]
            extra = {
                "baseline_variant": base["variant"],
                "baseline_train_wall_s": base["train_wall_s"],
                "speedup": speedup,
                "speedup_per_core": speedup / job["cores"],
                "robust_accuracy_delta": job["robust_accuracy"] - base["robust_accuracy"],
            }
        if job["mode"] == "sequential":
            series = ["sequential"]
        else:
            series = [
                name
                for name, steps in (
                    ("strong", attack_steps),
                    ("weak", weak_base_attack_steps * job["producers"]),
                )
                if job["attack"] == "pgd" and job["attack_steps"] == steps
            ] or ["other"]
        for name in series:
            rows.append({**job.to_dict(), **extra, "scaling": name})
    frame = pd.DataFrame(rows)
    others = [c for c in frame.columns if c not in TABLE_COLUMNS]
    frame = frame.reindex(columns=list(TABLE_COLUMNS) + others)
    return frame.sort_values(
        ["eps", "scaling", "attack_steps", "producers", "publish_every", "threads"], kind="stable"
    ).reset_index(drop=True)


def read_scaling_table(path: Path) -> pd.DataFrame:
    """Read a table written by :func:`scaling_table`, checking its columns."""
    with open_regular(path, missing="robust table not found") as handle:
        try:
            frame = pd.read_csv(handle)
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
            raise InputError(path, f"not a readable CSV file ({exc})") from None
    missing = [c for c in TABLE_COLUMNS if c not in frame.columns]
    if missing:
        raise InputError(path, f"missing column(s) {', '.join(missing)}", "line 1")
    return frame
