"""The memory sweep's table, from the points' ``metrics.json`` (no torch: a table job only reads)."""

from __future__ import annotations

import os
from typing import Sequence

import pandas as pd

from membench.core.tables import metrics_table
from membench.hotconv.options import VARIANTS

__all__ = ["RATIO_COLUMNS", "REFERENCE_VARIANT", "sweep_table"]

# Each variant's step figures are set against this variant's at the same point.
REFERENCE_VARIANT = "hotconv_eco"
RATIO_COLUMNS = {
    "alloc_vs_hotconv_eco": "step_alloc_peak_mib",
    "peak_tensor_vs_hotconv_eco": "step_peak_tensor_mib",
    "activation_vs_hotconv_eco": "activation_mib",
}


def sweep_table(metrics_paths: Sequence[str | os.PathLike]) -> pd.DataFrame:
    """The sweep's points (their ``metrics.json``), one row each, ordered by max_len, batch size and
    variant, with each variant's step figures over HotConv-Eco's at the same point
    (:data:`RATIO_COLUMNS`; empty where HotConv-Eco was not measured there)."""
    frame = metrics_table(metrics_paths)
    if frame.empty:
        return frame
    order = {variant: i for i, variant in enumerate(VARIANTS)}
    frame = frame.sort_values(
        ["max_len", "batch_size", "variant"],
        key=lambda c: c.map(order) if c.name == "variant" else c,
        kind="stable",
    ).reset_index(drop=True)
    for column, source in RATIO_COLUMNS.items():
        frame[column] = [_ratio(frame, row, source) for _, row in frame.iterrows()]
    return frame


def _ratio(frame: pd.DataFrame, row: pd.Series, column: str) -> float | None:
    if column not in frame or pd.isna(row[column]):
        return None
    reference = frame[
        (frame["variant"] == REFERENCE_VARIANT)
        & (frame["batch_size"] == row["batch_size"])
        & (frame["max_len"] == row["max_len"])
    ][column].dropna()
    if reference.empty or reference.iloc[0] <= 0:
        return None
    return float(row[column] / reference.iloc[0])
