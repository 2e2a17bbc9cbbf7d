"""Evaluation at a stated risk: k-fold cross-validation that builds (and calibrates) fresh
estimators in every fold, and a split grouped by architecture.

For every estimator: accuracy, weighted F1, under- and over-estimation rates of its class at the
requested risk ``max_under``, next to the same of its uncalibrated class (``raw_*``), and the
fewest jobs it was calibrated on in a fold (``calibration_jobs``: with fewer than
``min_calibration_jobs``, :func:`calibration.min_calibration_jobs` at ``max_under``, it answers
the last class); the achieved under-estimation rate with its 95% Clopper-Pearson interval, and
whether the requested rate lies within sampling error of it or above (``risk_met``); for
estimators answering in MiB, the MAE of the estimate and how often the peak exceeded the
recommended MiB (``mib_under_rate``); the rows it answered (``rows``) and those it could not, and
why; inference time of one single-job prediction.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable

import numpy as np
import pandas as pd

from membench.core.timing import Timer
from membench.memnet.calibration import binomial_interval, min_calibration_jobs
from membench.memnet.dataset import SPLITS, Bins, Jobs
from membench.memnet.estimators import ESTIMATORS, new_estimator

__all__ = [
    "evaluate",
    "judgement",
    "METRICS",
    "MIN_JUDGED_JOBS",
    "split_indices",
    "summarise",
    "true_bins",
]

METRICS = (
    "accuracy",
    "f1_weighted",
    "under_rate",
    "under_rate_ci_low",
    "under_rate_ci_high",
    "risk_met",
    "over_rate",
    "raw_accuracy",
    "raw_under_rate",
    "mae_mib",
    "mib_under_rate",
    "inference_ms",
    "rows",
    "no_answer_rows",
    "no_answer_reason",
    "calibration_jobs",
)
# Fewer jobs than this, or a single class, and a data set cannot tell estimators apart.
MIN_JUDGED_JOBS = 30
# FakeTensor and MemTracker run a fake training step per job: they answer for a sample of rows.
_SAMPLED = ("faketensor", "memtracker")


def true_bins(jobs: Jobs, bins: Bins) -> np.ndarray:
    """Each job's memory class; OOM jobs are in the last class."""
    label = bins.label(jobs.frame["memory_mib"].to_numpy(float))
    return np.where(jobs.frame["oom"].to_numpy(), bins.count - 1, label)


def judgement(jobs: Jobs, bins: Bins) -> str:
    """Why a data set is too small to judge estimators by ('' when it is not): fewer than
    :data:`MIN_JUDGED_JOBS` jobs, or every job in one class (every estimator that always answers
    that class scores 1.0)."""
    reasons = []
    if len(jobs) < MIN_JUDGED_JOBS:
        reasons.append(f"{len(jobs)} jobs, fewer than {MIN_JUDGED_JOBS}")
    if len(np.unique(true_bins(jobs, bins))) < 2:
        reasons.append("every job in one class")
    return "; ".join(reasons)


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
    max_under: float = 0.02,
    splits: tuple[str, ...] = SPLITS,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Evaluate every estimator on ``jobs`` at the requested risk ``max_under``; returns (one row
    per estimator, one row per prediction).

    ``factory(name, bins, seed=..., max_under=..., **options)`` is called for every estimator in
    every fold of every split: nothing trained or calibrated on one fold is reused in another.

    FakeTensor and MemTracker run a fake training step per job, so they see a seeded sample of
    ``faketensor_rows`` x ``folds`` jobs: in each fold they answer for the sample's test jobs and
    calibrate on its training jobs (each job counted once, its count shared by the folds). Their
    inference time is one timed single-job prediction per fold.

    Inference time is the median over ``timing_rows`` single-job predictions per fold, features
    included; the timing fields of :mod:`membench.core.timing` (unit ``iteration``: one single-job
    prediction) cover every timed prediction of an estimator, all splits.
    """
    labels = true_bins(jobs, bins)
    sample = np.sort(np.random.default_rng(seed).permutation(len(jobs))[: faketensor_rows * folds])
    counts: dict[str, dict] = {name: {} for name in _SAMPLED}
    options = {**(options or {}), "calibration_rows": None, "counts": counts}
    predictions = []
    timers = {name: Timer("iteration") for name in estimators}
    for split in splits:
        for fold, (train, test) in enumerate(split_indices(jobs, labels, split, folds, seed)):
            for name in estimators:
                estimator = factory(name, bins, seed=seed + fold, max_under=max_under, **options)
                sampled = name in _SAMPLED
                estimator.fit(jobs.subset(np.intersect1d(train, sample) if sampled else train))
                rows = np.intersect1d(test, sample) if sampled else test
                subset = jobs.subset(rows)
                answer = estimator.predict(subset)
                times_ms = []
                if sampled:
                    estimator.counts = None  # time a count, not a look-up
                for i in range(min(1 if sampled else timing_rows, len(rows))):
                    one = subset.subset(np.array([i]))
                    with timers[name].sample():
                        estimator.predict(one)
                    times_ms.append(timers[name].samples_s[-1] * 1e3)
                no_mib = np.full(len(rows), np.nan)
                predictions.append(
                    pd.DataFrame(
                        {
                            "estimator": name,
                            "split": split,
                            "fold": fold,
                            "filename": subset.frame["filename"],
                            "true_bin": labels[rows],
                            "pred_bin": answer.bins,
                            "raw_bin": answer.raw_bins,
                            "memory_mib": subset.frame["memory_mib"].to_numpy(float),
                            "oom": subset.frame["oom"].to_numpy(),
                            "pred_mib": no_mib if answer.mib is None else answer.mib,
                            "low_mib": no_mib if answer.low_mib is None else answer.low_mib,
                            "high_mib": no_mib if answer.high_mib is None else answer.high_mib,
                            "no_answer_reason": answer.reasons or [""] * len(rows),
                            "calibration_jobs": len(estimator.calibration),
                            "inference_ms": np.median(times_ms) if times_ms else np.nan,
                        }
                    )
                )
    frame = pd.concat(predictions, ignore_index=True) if predictions else pd.DataFrame()
    table = summarise(frame, estimators, splits, max_under)
    table.insert(1, "max_under", max_under)
    table.insert(2, "min_calibration_jobs", min_calibration_jobs(max_under))
    timing = pd.DataFrame([timers[name].fields() for name in table["estimator"]])
    return pd.concat([table, timing], axis=1), frame


def _most_common(reasons: pd.Series) -> str:
    counted = Counter(r for r in reasons if r)
    if not counted:
        return ""
    reason, count = counted.most_common(1)[0]
    return f"{count} of {len(reasons)}: {reason}"


def _metrics(part: pd.DataFrame, max_under: float | None) -> dict:
    """The :data:`METRICS` of one estimator's predictions in one split."""
    from sklearn.metrics import f1_score

    answered = part[part["pred_bin"] >= 0]
    result: dict = {m: np.nan for m in METRICS}
    result.update(
        {
            "rows": int(len(answered)),
            "no_answer_rows": int(len(part) - len(answered)),
            "no_answer_reason": _most_common(part["no_answer_reason"]) if len(part) else "",
            "calibration_jobs": int(part["calibration_jobs"].min()) if len(part) else 0,
        }
    )
    if not len(answered):
        return result
    truth, pred, raw = (answered[c].to_numpy() for c in ("true_bin", "pred_bin", "raw_bin"))
    under = int((pred < truth).sum())
    low, high = binomial_interval(under, len(answered))
    with_mib = answered[answered["pred_mib"].notna()]
    measured = with_mib[~with_mib["oom"]]
    result.update(
        {
            "accuracy": float((truth == pred).mean()),
            "f1_weighted": float(f1_score(truth, pred, average="weighted", zero_division=0)),
            "under_rate": under / len(answered),
            "under_rate_ci_low": low,
            "under_rate_ci_high": high,
            "risk_met": bool(max_under is None or low <= max_under),
            "over_rate": float((pred > truth).mean()),
            "raw_accuracy": float((truth == raw).mean()),
            "raw_under_rate": float((raw < truth).mean()),
            "mae_mib": float((measured["pred_mib"] - measured["memory_mib"]).abs().mean())
            if len(measured)
            else np.nan,
            "mib_under_rate": float(
                (with_mib["oom"] | (with_mib["memory_mib"] > with_mib["high_mib"])).mean()
            )
            if len(with_mib)
            else np.nan,
            "inference_ms": float(answered.groupby("fold")["inference_ms"].first().median()),
        }
    )
    return result


def summarise(
    predictions: pd.DataFrame,
    estimators: tuple[str, ...],
    splits: tuple[str, ...] = SPLITS,
    max_under: float | None = None,
) -> pd.DataFrame:
    """One row per estimator: k-fold metrics (:data:`METRICS`), then ``grouped_<metric>`` for the
    grouped split (NaN for a split not run). ``risk_met``: the requested rate ``max_under`` is not
    below the interval of the achieved one."""
    rows = []
    for name in estimators:
        row = {"estimator": name}
        for split in SPLITS:
            prefix = "" if split == "kfold" else "grouped_"
            part = (
                predictions[(predictions["estimator"] == name) & (predictions["split"] == split)]
                if len(predictions) and split in splits
                else None
            )
            metrics = _metrics(part, max_under) if part is not None else {m: np.nan for m in METRICS}
            row.update({prefix + key: value for key, value in metrics.items()})
        rows.append(row)
    return pd.DataFrame(rows)
