"""Split-conformal calibration: answers that are too low at most as often as the user accepts.

An estimator is fitted on one part of its training jobs and calibrated on the other part, which it
has not seen. For each calibration job a *score* says how much the estimator's answer would have to
be raised for that job not to be under-estimated; the answer for a new job is raised by the
conformal quantile of the scores: the ``ceil((n + 1)(1 - alpha))``-th smallest of the ``n`` scores
(:func:`conformal_quantile`). When the new job and the calibration jobs are exchangeable (drawn
from the same distribution), it is then under-estimated with probability at most ``alpha``, for
any estimator and any number of jobs (Vovk, Gammerman and Shafer, "Algorithmic Learning in a
Random World"; Lei, G'Sell, Rinaldo, Tibshirani and Wasserman, "Distribution-Free Predictive
Inference for Regression", whose locally weighted scores :class:`MarginCalibration` uses). With
fewer than ``(1 - alpha) / alpha`` calibration jobs no finite raise is guaranteed and the answer is
the last class.

Calibration only raises answers: the class at the requested risk is the higher of the
calibrated class and the estimator's own, which keeps the guarantee (a job under-estimated by the
higher class is under-estimated by the calibrated one too). An estimator already safer than asked
keeps its answers, and achieves a lower rate than requested.

A job is *under-estimated* when its predicted memory class is below its measured one (the class
holding its peak; an out-of-memory job is in the last class), or, for a figure in MiB, when its
peak is above the figure.

- :class:`MarginCalibration` (estimators that answer in MiB): the score of a job with estimate
  ``m``, scale ``s`` and measured class ``k`` is ``(lower_edge(k) - m) / s`` for classes (the job is
  not under-estimated once ``m`` reaches its class's lower edge), ``(peak - m) / s`` for MiB. The
  scale ``s`` is the estimator's expected error for the job, so large jobs get larger margins.
- :class:`ThresholdCalibration` (classifiers): the predicted class is the smallest whose cumulative
  probability exceeds a threshold; a job of class ``k`` is under-estimated when the cumulative
  probability of the classes below ``k`` already exceeds it, so that cumulative probability is its
  score. The nominal threshold, 1 - alpha, is replaced by the scores' conformal quantile.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from membench.memnet.dataset import Bins

__all__ = [
    "binomial_interval",
    "calibration_split",
    "conformal_lower_quantile",
    "conformal_quantile",
    "DEFAULT_CALIBRATION_FRACTION",
    "DEFAULT_MAX_UNDER",
    "MarginCalibration",
    "min_calibration_jobs",
    "ThresholdCalibration",
]

# The under-estimation rate a user accepts unless they say otherwise, and the share of a learned
# estimator's training jobs held out to calibrate it on.
DEFAULT_MAX_UNDER = 0.02
DEFAULT_CALIBRATION_FRACTION = 0.3


def conformal_quantile(scores: np.ndarray, max_under: float) -> float:
    """The ``ceil((n + 1)(1 - max_under))``-th smallest of the ``n`` scores (``inf`` when that rank
    exceeds ``n``): a new exchangeable score exceeds it with probability at most ``max_under``."""
    scores = np.sort(np.asarray(scores, dtype=float))
    n = len(scores)
    rank = math.ceil((n + 1) * (1 - max_under) - 1e-9)
    if rank > n:
        return math.inf
    return float(scores[max(rank, 1) - 1])


def conformal_lower_quantile(scores: np.ndarray, max_under: float) -> float:
    """The ``floor((n + 1) max_under)``-th smallest score (``-inf`` when that rank is 0): a new
    exchangeable score falls below it with probability at most ``max_under``."""
    scores = np.sort(np.asarray(scores, dtype=float))
    rank = math.floor((len(scores) + 1) * max_under + 1e-9)
    return float(scores[rank - 1]) if rank >= 1 else -math.inf


def min_calibration_jobs(max_under: float) -> int:
    """The fewest calibration jobs with which a finite raise is guaranteed at ``max_under``."""
    return max(1, math.ceil((1 - max_under) / max_under - 1e-9)) if max_under > 0 else math.inf


def calibration_split(count: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(fit, calibration) indices of ``count`` jobs: a seeded random ``fraction`` to calibrate on
    (at least one job each way when there are two or more), the rest to fit on."""
    order = np.random.default_rng(seed).permutation(count)
    calibrate = int(round(count * fraction))
    if count >= 2:
        calibrate = min(max(calibrate, 1), count - 1)
    else:
        calibrate = 0
    return np.sort(order[calibrate:]), np.sort(order[:calibrate])


def binomial_interval(under: int, count: int, confidence: float = 0.95) -> tuple[float, float]:
    """Clopper-Pearson interval of a rate observed as ``under`` of ``count``: the sampling error of
    an achieved under-estimation rate."""
    from scipy.stats import beta

    if count == 0:
        return math.nan, math.nan
    tail = (1 - confidence) / 2
    low = 0.0 if under == 0 else float(beta.ppf(tail, under, count - under + 1))
    high = 1.0 if under == count else float(beta.ppf(1 - tail, under + 1, count - under))
    return low, high


def _true_class(bins: Bins, memory_mib: np.ndarray, oom: np.ndarray) -> np.ndarray:
    return np.where(oom, bins.count - 1, bins.label(np.where(oom, 0.0, memory_mib)))


@dataclass
class MarginCalibration:
    """Calibration jobs of an estimator that answers in MiB: its estimate ``estimate_mib`` and scale
    ``scale_mib`` of each, and what was measured (``memory_mib``; ``oom``: ran out of memory).

    Kept whole, so that the margin can be set for any requested rate and any classes."""

    estimate_mib: np.ndarray
    scale_mib: np.ndarray
    memory_mib: np.ndarray
    oom: np.ndarray

    def __len__(self) -> int:
        return len(self.estimate_mib)

    def class_scores(self, bins: Bins) -> np.ndarray:
        """How many scales each job's estimate falls short of its class's lower edge (``-inf`` in
        the first class, which no estimate can fall below)."""
        truth = _true_class(bins, self.memory_mib, self.oom)
        lower_edge = bins.start_mib + truth * bins.width_mib
        return np.where(truth == 0, -np.inf, (lower_edge - self.estimate_mib) / self.scale_mib)

    def mib_scores(self) -> np.ndarray:
        """How many scales each job's peak lies above its estimate (``inf`` for out-of-memory jobs)."""
        return np.where(self.oom, np.inf, (self.memory_mib - self.estimate_mib) / self.scale_mib)

    def class_margin(self, bins: Bins, max_under: float) -> float:
        """Scales added to an estimate before it is binned, so that the class is too low with
        probability at most ``max_under``: the conformal quantile of the class scores."""
        return conformal_quantile(self.class_scores(bins), max_under)

    def mib_range(self, max_under: float) -> tuple[float, float]:
        """(low, high) scales around an estimate: the peak is above ``estimate + high x scale`` with
        probability at most ``max_under``, and below ``estimate + low x scale`` likewise."""
        scores = self.mib_scores()
        return conformal_lower_quantile(scores, max_under), conformal_quantile(scores, max_under)

    def state(self) -> dict:
        return {
            "estimate_mib": self.estimate_mib.tolist(),
            "scale_mib": self.scale_mib.tolist(),
            "memory_mib": self.memory_mib.tolist(),
            "oom": self.oom.astype(bool).tolist(),
        }

    @classmethod
    def from_state(cls, state: dict) -> "MarginCalibration":
        return cls(
            *(np.asarray(state[key], dtype=float) for key in ("estimate_mib", "scale_mib", "memory_mib")),
            np.asarray(state["oom"], dtype=bool),
        )


@dataclass
class ThresholdCalibration:
    """Calibration jobs of a classifier: the cumulative probability it gave the classes below each
    job's measured class (``-inf`` for jobs of the first class)."""

    scores: np.ndarray

    def __len__(self) -> int:
        return len(self.scores)

    @classmethod
    def from_probabilities(cls, probabilities: np.ndarray, truth: np.ndarray) -> "ThresholdCalibration":
        cumulative = np.cumsum(probabilities, axis=1)
        below = np.where(truth > 0, cumulative[np.arange(len(truth)), np.maximum(truth - 1, 0)], -np.inf)
        return cls(below)

    def threshold(self, max_under: float) -> float:
        """The threshold whose classes are too low with probability at most ``max_under``."""
        return conformal_quantile(self.scores, max_under)

    @staticmethod
    def classes(probabilities: np.ndarray, threshold: float) -> np.ndarray:
        """The smallest class whose cumulative probability exceeds ``threshold`` (the last class
        where none does)."""
        cumulative = np.cumsum(probabilities, axis=1)
        above = cumulative > threshold
        return np.where(above.any(axis=1), above.argmax(axis=1), probabilities.shape[1] - 1)

    def state(self) -> dict:
        return {"scores": self.scores.tolist()}

    @classmethod
    def from_state(cls, state: dict) -> "ThresholdCalibration":
        return cls(np.asarray(state["scores"], dtype=float))
