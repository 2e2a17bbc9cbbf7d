"""When a quality figure says little: measured on too few test cases, or by a run still improving
in its last epoch. The report's summary does not judge such a figure and a system's figure marks it,
both by these rules (the settings of "still improving" are each headline's ``evaluation``)."""

from __future__ import annotations

import json
import math
from typing import Sequence

__all__ = ["epoch_history", "MIN_CASES", "still_improving"]

# Below this, one test case moves an accuracy by more than 3 points.
MIN_CASES = 30


def epoch_history(value) -> list[float]:
    """The per-epoch values of a table cell holding a JSON list (or a list), finite numbers only;
    empty when the cell is missing or holds no list."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value == "":
        return []
    try:
        values = json.loads(value) if isinstance(value, str) else list(value)
    except (ValueError, TypeError):
        return []
    if not isinstance(values, list):
        return []
    numbers = []
    for item in values:
        try:
            number = float(item)
        except (TypeError, ValueError):
            continue
        if math.isfinite(number):
            numbers.append(number)
    return numbers


def still_improving(history: Sequence[float], goal: str, min_change: float, relative: bool) -> float | None:
    """How much the last epoch of ``history`` improved on the best earlier epoch towards ``goal``
    (``max`` | ``min``), as a fraction of that best when ``relative``, where that exceeds
    ``min_change``; None when it does not or there are fewer than 2 epochs."""
    if len(history) < 2:
        return None
    last, earlier = history[-1], history[:-1]
    best = max(earlier) if goal == "max" else min(earlier)
    gain = (last - best) if goal == "max" else (best - last)
    if relative and best:
        gain /= abs(best)
    return gain if gain > min_change else None
