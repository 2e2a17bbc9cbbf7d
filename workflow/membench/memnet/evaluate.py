"""Evaluation: k-fold cross-validation that builds fresh estimators in every fold, and a split
grouped by architecture; accuracy, weighted F1, under-estimation rate, MAE and inference time."""

from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd

from membench.core.timing import Timer
from membench.memnet.dataset import Bins, Jobs
from membench.memnet.estimators import ESTIMATORS, new_estimator

__all__ = ["evaluate", "METRICS", "split_indices", "SPLITS", "summarise", "true_bins"]

SPLITS = ("kfold", "grouped")
METRICS = ("accuracy", "f1_weighted", "under_rate", "over_rate", "mae_mib", "inference_ms", "rows")


def true_bins(jobs: Jobs, bins: Bins) -> np.ndarray:
    """Each job's memory class; OOM jobs are in the last class."""
    label = bins.label(jobs.frame["memory_mib"].to_numpy(float))
    return np.where(jobs.frame["oom"].to_numpy(), bins.count - 1, label)


def split_indices(
    jobs: Jobs, labels: np.ndarray, split: str, folds: int, seed: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train, test) index pairs: stratified k-fold (plain k-fold when a class has fewer than
    ``folds`` jobs), or k-fold over architecture groups (none when there is a single group)."""
    from sklearn.model_selection import GroupKFold, KFold, StratifiedKFold

    index = np.arange(len(jobs))
    if split == "kfold":
        counts = np.bincount(labels)
        if counts[counts > 0].min(initial=0) >= folds:
            return list(StratifiedKFold(folds, shuffle=True, random_state=seed).split(index, labels))
        return list(KFold(folds, shuffle=True, random_state=seed).split(index))
    groups = jobs.frame["group"].to_numpy()
    n_groups = len(set(groups))
    if n_groups < 2:
        return []
    return list(GroupKFold(min(folds, n_groups)).split(index, labels, groups))


def evaluate(
    jobs: Jobs,
    bins: Bins,
    folds: int = 3,
    seed: int = 0,
    estimators: tuple[str, ...] = ESTIMATORS,
    options: dict | None = None,
    faketensor_rows: int = 50,
    timing_rows: int = 20,
    factory: Callable = new_estimator,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Evaluate every estimator on ``jobs``; returns (one row per estimator, one row per prediction).

    ``factory(name, bins, seed=..., **options)`` is called for every estimator in every fold of
    every split: nothing trained on one fold is reused in another. FakeTensor, which runs a fake
    training step per job, answers for at most ``faketensor_rows`` test jobs per fold. Inference time
    is the median over ``timing_rows`` single-job predictions per fold, features included; the
    timing fields of :mod:`membench.core.timing` (unit ``iteration``: one single-job prediction)
    cover every timed prediction of an estimator, both splits.
    """
    options = options or {}
    labels = true_bins(jobs, bins)
    rng = np.random.default_rng(seed)
    predictions = []
    timers = {name: Timer("iteration") for name in estimators}
    for split in SPLITS:
        for fold, (train, test) in enumerate(split_indices(jobs, labels, split, folds, seed)):
            for name in estimators:
                estimator = factory(name, bins, seed=seed + fold, **options)
                estimator.fit(jobs.subset(train))
                rows = test if name != "faketensor" else np.sort(rng.permutation(test)[:faketensor_rows])
                subset = jobs.subset(rows)
                predicted, mib = estimator.predict(subset)
                times_ms = []
                for i in range(min(timing_rows, len(rows))):
                    one = subset.subset(np.array([i]))
                    with timers[name].sample():
                        estimator.predict(one)
                    times_ms.append(timers[name].samples_s[-1] * 1e3)
                predictions.append(
                    pd.DataFrame(
                        {
                            "estimator": name,
                            "split": split,
                            "fold": fold,
                            "filename": subset.frame["filename"],
                            "true_bin": labels[rows],
                            "pred_bin": predicted,
                            "memory_mib": subset.frame["memory_mib"].to_numpy(float),
                            "oom": subset.frame["oom"].to_numpy(),
                            "pred_mib": np.nan if mib is None else mib,
                            "inference_ms": np.median(times_ms) if times_ms else np.nan,
                        }
                    )
                )
    frame = pd.concat(predictions, ignore_index=True) if predictions else pd.DataFrame()
    table = summarise(frame, estimators)
    timing = pd.DataFrame([timers[name].fields() for name in table["estimator"]])
    return pd.concat([table, timing], axis=1), frame


def summarise(predictions: pd.DataFrame, estimators: tuple[str, ...]) -> pd.DataFrame:
    """One row per estimator: k-fold metrics, then ``grouped_<metric>`` for the grouped split."""
    from sklearn.metrics import f1_score

    rows = []
    for name in estimators:
        row = {"estimator": name}
        for split in SPLITS:
            part = (
                predictions[(predictions["estimator"] == name) & (predictions["split"] == split)]
                if len(predictions)
                else predictions
            )
            part = part[part["pred_bin"] >= 0] if len(part) else part
            prefix = "" if split == "kfold" else "grouped_"
            if not len(part):
                row.update({prefix + m: np.nan for m in METRICS})
                continue
            truth, pred = part["true_bin"].to_numpy(), part["pred_bin"].to_numpy()
            measured = part[~part["oom"] & part["pred_mib"].notna()]
            row.update(
                {
                    prefix + "accuracy": float((truth == pred).mean()),
                    prefix + "f1_weighted": float(f1_score(truth, pred, average="weighted", zero_division=0)),
                    prefix + "under_rate": float((pred < truth).mean()),
                    prefix + "over_rate": float((pred > truth).mean()),
                    prefix + "mae_mib": float((measured["pred_mib"] - measured["memory_mib"]).abs().mean())
                    if len(measured)
                    else np.nan,
                    prefix + "inference_ms": float(part.groupby("fold")["inference_ms"].first().median()),
                    prefix + "rows": int(len(part)),
                }
            )
        rows.append(row)
    return pd.DataFrame(rows)
