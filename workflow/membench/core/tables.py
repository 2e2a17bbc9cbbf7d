"""The one table aggregator: job metrics and other row sets to ``results/tables/*.csv|.parquet``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Sequence

import pandas as pd

from membench.core import atomic
from membench.core.metrics import KERNELS_FIELD, MEASURED_FIELDS, REQUIRED_FIELDS, read_metrics

__all__ = ["aggregate_metrics", "metrics_table", "parquet_path_for", "write_table"]


def metrics_table(metrics_paths: Iterable[str | os.PathLike]) -> pd.DataFrame:
    """One row per job from its ``metrics.json``; stable column order.

    Columns: the required fields, the measured fields, ``kernels`` where a job recorded which ran
    (:data:`~membench.core.metrics.KERNELS_FIELD`), then every other field in sorted order.
    Rows are sorted by the identifying fields so reruns give identical tables.
    """
    records = [read_metrics(p) for p in metrics_paths]
    frame = pd.DataFrame.from_records(records)
    leading = REQUIRED_FIELDS + MEASURED_FIELDS + ((KERNELS_FIELD,) if KERNELS_FIELD in frame.columns else ())
    extra = sorted(c for c in frame.columns if c not in leading)
    columns = list(leading) + extra
    frame = frame.reindex(columns=columns)
    if len(frame):
        frame = frame.sort_values(["system", "dataset", "variant", "seed"], kind="stable").reset_index(
            drop=True
        )
    return frame


def write_table(
    frame: pd.DataFrame, csv_path: str | os.PathLike, parquet_path: str | os.PathLike | None = None
) -> None:
    """Write ``frame`` as CSV and (optionally) Parquet, each atomically; both targets are checked by
    the write guard before either is written, so a refused twin leaves no half-written pair."""
    for path in (csv_path, parquet_path):
        if path is not None:
            atomic.refuse_inputs(path, contains=False)
            atomic.check_replaceable(path)
    atomic.write_csv(csv_path, frame)
    if parquet_path is not None:
        with atomic.atomic_path(parquet_path, suffix=".parquet") as tmp:
            _parquet_safe(frame).to_parquet(tmp, engine="pyarrow", index=False)


def _parquet_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """Give object columns with mixed Python types one type, so pyarrow can write them."""
    frame = frame.copy()
    for column in frame.columns:
        if frame[column].dtype == object:
            kinds = {type(v) for v in frame[column] if v is not None and v == v}
            if len(kinds) > 1:
                frame[column] = frame[column].map(lambda v: None if v is None or v != v else str(v))
    return frame


def aggregate_metrics(
    metrics_paths: Sequence[str | os.PathLike], csv_path: str | os.PathLike, parquet_path: str | os.PathLike
) -> pd.DataFrame:
    """Collect job metrics into one table and write it (CSV and Parquet); an output path that is one
    of the metrics files is refused before anything is read or written."""
    for path in (csv_path, parquet_path):
        atomic.refuse_inputs(path, metrics_paths)
    frame = metrics_table(metrics_paths)
    write_table(frame, csv_path, parquet_path)
    return frame


def parquet_path_for(csv_path: str | os.PathLike) -> Path:
    """The Parquet twin of a table's CSV path."""
    return Path(csv_path).with_suffix(".parquet")
