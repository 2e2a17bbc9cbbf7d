"""Report figures of the DIVISION benchmarks, drawn from the aggregated tables."""

from __future__ import annotations

import os

import pandas as pd

from membench.core.errors import InputError
from membench.core.plots import new_figure, save_figure
from membench.core.validate import read_csv_columns

METHOD_ORDER = ("vanilla", "division", "actnn2bit", "checkpoint")


def _numeric_table(path, columns) -> pd.DataFrame:
    try:
        header = list(pd.read_csv(path, nrows=0).columns)
    except (FileNotFoundError, pd.errors.EmptyDataError):
        raise InputError(path, "table not found or empty (expected a membench table CSV)") from None
    frame = read_csv_columns(path, ["variant", "batch_size", *columns], optional=header)
    for column in ["batch_size", *columns]:
        frame[column] = pd.to_numeric(frame[column], errors="coerce")
    if frame["batch_size"].isna().any():
        raise InputError(path, "column batch_size holds a non-number")
    return frame


def _methods(frame: pd.DataFrame) -> list[str]:
    present = list(dict.fromkeys(frame["variant"]))
    return [m for m in METHOD_ORDER if m in present] + [m for m in present if m not in METHOD_ORDER]


def plot_memory(table_csv: str | os.PathLike, png_path: str | os.PathLike) -> None:
    """Activation memory and total memory (MiB, log scale) against batch size, one line per method."""
    frame = _numeric_table(table_csv, ["activation_mib", "total_memory_mib"])
    fig, axes = new_figure(ncols=2, width_in=10.0, height_in=4.0)
    for ax, column, title in zip(axes, ("activation_mib", "total_memory_mib"), ("activation memory", "total memory")):
        for method in _methods(frame):
            rows = frame[frame["variant"] == method].sort_values("batch_size")
            ax.plot(rows["batch_size"], rows[column], marker="o", label=method)
        ax.set_xlabel("batch size")
        ax.set_ylabel("MiB")
        ax.set_yscale("log")
        ax.set_title(title)
        ax.legend()
    save_figure(fig, png_path)


def plot_speed(table_csv: str | os.PathLike, png_path: str | os.PathLike) -> None:
    """Training throughput (images/s, median step) against batch size, one line per method."""
    frame = _numeric_table(table_csv, ["images_per_s"])
    fig, (ax,) = new_figure()
    for method in _methods(frame):
        rows = frame[frame["variant"] == method].sort_values("batch_size")
        ax.plot(rows["batch_size"], rows["images_per_s"], marker="o", label=method)
    ax.set_xlabel("batch size")
    ax.set_ylabel("images / s (median over timed steps)")
    ax.set_title("training throughput")
    ax.legend()
    save_figure(fig, png_path)
