"""Report figures of the DIVISION benchmarks, drawn from the aggregated tables."""

from __future__ import annotations

import os

import pandas as pd

from membench.core.errors import InputError
from membench.core.plots import (
    figure_note,
    flagged_note,
    grouped_method_bars,
    method_legend,
    panel_grid,
    save_figure,
    timing_by_method,
)
from membench.core.validate import read_csv_columns

__all__ = ["BASELINE", "METHOD_ORDER", "plot_memory", "plot_speed"]

METHOD_ORDER = ("vanilla", "division", "actnn2bit", "checkpoint")
BASELINE = "vanilla"


def _numeric_table(path, columns, optional=()) -> pd.DataFrame:
    frame = read_csv_columns(path, ["variant", "batch_size", *columns], other_columns=True)
    for column in ["batch_size", *columns, *optional]:
        if column in frame:
            frame[column] = pd.to_numeric(frame[column], errors="coerce")
    if frame["batch_size"].isna().any():
        raise InputError(path, "column batch_size holds a non-number")
    return frame


def _methods(frame: pd.DataFrame) -> list[str]:
    present = list(dict.fromkeys(frame["variant"]))
    return [m for m in METHOD_ORDER if m in present] + [m for m in present if m not in METHOD_ORDER]


def plot_memory(table_csv: str | os.PathLike, png_path: str | os.PathLike) -> None:
    """Per batch size, one bar per method: the bytes saved for backward in one training step
    (``activation_mib``) and the allocator's peak during that step (``step_alloc_peak_mib``), in
    MiB, each with its ratio to vanilla. Totals that include weights and optimizer state are in
    the table, not here: they hide the activations the methods compress."""
    frame = _numeric_table(table_csv, ["activation_mib"], optional=["step_alloc_peak_mib"])
    if "status" in frame:
        frame = frame[frame["status"].fillna("ok") == "ok"]
    methods = _methods(frame)
    panels = [("activation_mib", "saved activations of a step")]
    if "step_alloc_peak_mib" in frame and frame["step_alloc_peak_mib"].notna().any():
        panels.append(("step_alloc_peak_mib", "allocator peak of a step"))
    fig, axes = panel_grid(len(panels), ncols=2, panel_height_in=3.4)
    for ax, (column, title) in zip(axes, panels):
        grouped_method_bars(
            ax,
            frame,
            "batch_size",
            methods,
            column,
            ylabel="MiB",
            title=title,
            baseline=BASELINE,
            group_label="batch {:g}",
        )
    method_legend(fig, methods, loc="outside upper center", ncols=len(methods))
    if len(panels) == 1:
        figure_note(fig, "allocator step peak: not measured (allocator tracing off)")
    save_figure(fig, png_path)


def plot_speed(table_csv: str | os.PathLike, png_path: str | os.PathLike) -> None:
    """Training throughput (images/s = batch / median steady-state step time) per batch size, one
    bar per method with its ratio to vanilla (``vs_paired_vanilla``, measured side by side, where
    the table has it); whiskers span the fastest..slowest step, hatched bars are timings flagged as
    unreliable."""
    frame = _numeric_table(
        table_csv, ["images_per_s"], optional=["time_min_s", "time_max_s", "vs_paired_vanilla"]
    )
    if "status" in frame:
        frame = frame[frame["status"].fillna("ok") == "ok"]
    if {"time_min_s", "time_max_s"} <= set(frame):
        frame = frame.assign(
            images_per_s_low=frame["batch_size"] / frame["time_max_s"],
            images_per_s_high=frame["batch_size"] / frame["time_min_s"],
        )
    ranged = "images_per_s_low" in frame
    methods = _methods(frame)
    fig, (ax,) = panel_grid(1, ncols=1, panel_height_in=3.6)
    grouped_method_bars(
        ax,
        frame,
        "batch_size",
        methods,
        "images_per_s",
        ylabel="images / s",
        title="training throughput (median step)",
        baseline=BASELINE,
        group_label="batch {:g}",
        low_column="images_per_s_low" if ranged else None,
        high_column="images_per_s_high" if ranged else None,
        flag_timing=True,
        ratio_column="vs_paired_vanilla",
    )
    timing = timing_by_method(frame)
    method_legend(
        ax,
        methods,
        flagged=bool(not timing.empty and timing["flagged"].any()),
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
    )
    note = flagged_note(timing, "step time")
    if note:
        figure_note(fig, note)
    save_figure(fig, png_path)
