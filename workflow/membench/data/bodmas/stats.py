"""Dataset statistics (samples, classes, size quantiles per split) and the size-distribution plot."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from membench.core.errors import InputError
from membench.core.validate import int_column, read_csv_columns
from membench.data.bodmas import FOLD_COLUMNS

__all__ = [
    "dataset_statistics",
    "parse_fold_path",
    "plot_size_distribution",
    "read_class_names",
    "split_statistics",
    "STATS_COLUMNS",
]

STATS_COLUMNS = (
    "dataset",
    "fold",
    "split",
    "samples",
    "classes",
    "class_counts",
    "min_bytes",
    "p25_bytes",
    "median_bytes",
    "p75_bytes",
    "p95_bytes",
    "max_bytes",
    "total_mib",
)


def split_statistics(
    fold_csv: str | os.PathLike,
    dataset: str,
    fold: int,
    split: str,
    class_names: dict[int, str] | None = None,
) -> dict[str, object]:
    """One statistics row for one split file; ``class_names`` labels the per-class counts."""
    frame = _read_fold_table(fold_csv)
    sizes = frame["File_Size"].to_numpy()
    counts = frame["Label"].value_counts().sort_index()
    quantiles = np.quantile(sizes, [0.0, 0.25, 0.5, 0.75, 0.95, 1.0]) if len(sizes) else [np.nan] * 6
    return {
        "dataset": dataset,
        "fold": fold,
        "split": split,
        "samples": int(len(frame)),
        "classes": int(len(counts)),
        "class_counts": " ".join(
            f"{(class_names or {}).get(label, label)}:{count}" for label, count in counts.items()
        ),
        **{name: float(q) for name, q in zip(STATS_COLUMNS[6:12], quantiles)},
        "total_mib": float(sizes.sum()) / 2**20,
    }


def _read_fold_table(fold_csv: str | os.PathLike) -> pd.DataFrame:
    """A fold CSV's rows with integer ``Label`` (>= 0) and ``File_Size`` (>= 1)."""
    path = Path(fold_csv)
    frame = read_csv_columns(path, FOLD_COLUMNS)
    frame["Label"] = int_column(frame, "Label", path, 0)
    frame["File_Size"] = int_column(frame, "File_Size", path, 1)
    return frame


def parse_fold_path(path: str | os.PathLike) -> tuple[str, str, int]:
    """``(split, dataset, fold)`` from a fold file name ``<split>_<dataset>_fold_<i>.csv``; any other
    name is an :class:`InputError` (the name is how a fold file says what it holds)."""
    match = re.fullmatch(r"(train|val|test)_(.+)_fold_(\d{1,6})\.csv", Path(path).name)
    if match is None:
        raise InputError(
            path,
            "a fold file's name must be <train|val|test>_<dataset>_fold_<i>.csv,"
            " as membench bodmas fold writes it",
        )
    return match.group(1), match.group(2), int(match.group(3))


def read_class_names(classes_csv: str | os.PathLike) -> dict[int, str]:
    """Label -> class name from a fold directory's ``classes.csv`` (empty if there is none)."""
    path = Path(classes_csv)
    if not os.path.lexists(path):
        return {}
    frame = read_csv_columns(path, ("Label", "Name", "Count"))
    return dict(zip(int_column(frame, "Label", path, 0), frame["Name"]))


def dataset_statistics(fold_csvs: Sequence[str | os.PathLike]) -> pd.DataFrame:
    """Statistics rows for every fold file given, sorted by dataset, fold and split.

    Class names come from the ``classes.csv`` beside the fold files, where present.
    """
    rows = []
    for path in fold_csvs:
        split, dataset, fold = parse_fold_path(path)
        names = read_class_names(Path(path).parent / "classes.csv")
        rows.append(split_statistics(path, dataset, fold, split, names))
    order = {"train": 0, "val": 1, "test": 2}
    frame = pd.DataFrame(rows, columns=list(STATS_COLUMNS))
    frame["_order"] = frame["split"].map(order)
    return frame.sort_values(["dataset", "fold", "_order"]).drop(columns="_order").reset_index(drop=True)


def plot_size_distribution(fold_csvs: Sequence[str | os.PathLike], png_path: str | os.PathLike) -> None:
    """Histogram of file sizes (log scale) per dataset and class, from each dataset's fold-1 files."""
    from membench.core.plots import new_figure, save_figure

    by_dataset: dict[str, list[pd.DataFrame]] = {}
    for path in fold_csvs:
        split, dataset, fold = parse_fold_path(path)
        if fold == 1:
            by_dataset.setdefault(dataset, []).append(_read_fold_table(path))
    fig, axes = new_figure(max(1, len(by_dataset)), 4.0 * max(1, len(by_dataset)), 3.5)
    for ax, (dataset, frames) in zip(axes, sorted(by_dataset.items())):
        frame = pd.concat(frames)
        bins = np.logspace(np.log10(frame["File_Size"].min()), np.log10(frame["File_Size"].max() + 1), 30)
        for label, group in frame.groupby("Label"):
            ax.hist(group["File_Size"], bins=bins, alpha=0.6, label=f"class {label}")
        ax.set_xscale("log")
        ax.set_xlabel("file size (bytes)")
        ax.set_ylabel("files")
        ax.set_title(dataset)
        ax.legend()
    save_figure(fig, png_path)
