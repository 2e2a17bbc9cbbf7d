"""Figures of the robust scaling table: speed-up beside robust accuracy, and staleness."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

from membench.core.plots import (
    BASELINE_COLOUR,
    figure_note,
    flagged_note,
    method_colour,
    new_figure,
    save_figure,
    timing_by_method,
    timing_reliable,
)

__all__ = ["plot_scaling", "plot_staleness"]

_SCALING_STYLE = {"strong": "-", "weak": "--"}


def _series(frame: pd.DataFrame):
    """``(label, colour, line style, rows)`` per scaling series and weight publication period k:
    the colour is the method (parallel generation with that k), the line style the scaling."""
    parallel = frame[frame["scaling"].isin(["strong", "weak"])]
    for (scaling, k), rows in parallel.groupby(["scaling", "publish_every"], sort=True):
        method = f"parallel_k{int(k)}"
        yield (
            f"{scaling}, k={int(k)}",
            method_colour(method),
            _SCALING_STYLE[scaling],
            rows.sort_values("producers"),
        )


def _timing_flagged(rows: pd.DataFrame) -> np.ndarray:
    """Whether each run's timing is flagged (``timing_reliable`` not true); none without the column."""
    if "timing_reliable" not in rows:
        return np.zeros(len(rows), dtype=bool)
    return (~timing_reliable(rows["timing_reliable"])).to_numpy(dtype=bool)


def _run_keys(rows: pd.DataFrame, prefix: str = "") -> list[tuple]:
    """``(variant, train_wall_s)`` naming each row's run, or with ``prefix`` ``baseline_`` the
    sequential run it was set against."""
    return list(zip(rows[f"{prefix}variant"], rows[f"{prefix}train_wall_s"]))


def _mark_flagged(ax, rows: pd.DataFrame, column: str, flagged: np.ndarray, color: str) -> None:
    """Open markers over the points of ``rows[column]`` that are ``flagged``."""
    ax.scatter(
        rows.loc[flagged, "producers"],
        rows.loc[flagged, column],
        marker="o",
        s=36,
        facecolor="white",
        edgecolor=color,
        zorder=3,
    )


def plot_scaling(frame: pd.DataFrame, png_path: str | os.PathLike) -> None:
    """Left: speed-up over the best sequential run on the same cores against producers P, colour by
    k, solid strong and dashed weak scaling, with the ideal per-core line P + 1. Right: robust
    accuracy of the same runs and of their sequential baselines (grey dotted). Open markers: runs
    whose timing is flagged; on the left also runs whose baseline's timing is."""
    fig, (speed_ax, acc_ax) = new_figure(ncols=2, height_in=3.8)
    producers = sorted(frame.loc[frame["mode"] == "parallel", "producers"].unique())
    series = list(_series(frame))
    parallel = pd.concat([rows for *_, rows in series]) if series else frame.iloc[:0]
    sequential = frame[frame["mode"] == "sequential"]
    compared = set(_run_keys(parallel, "baseline_"))
    baselines = sequential.loc[np.array([key in compared for key in _run_keys(sequential)], bool)]
    # A speed-up is the ratio of two runs' training times: as unreliable as either timing.
    flagged_baselines = set(_run_keys(baselines.loc[_timing_flagged(baselines)]))
    for label, color, style, rows in series:
        run_flagged = _timing_flagged(rows)
        baseline_flagged = np.array([key in flagged_baselines for key in _run_keys(rows, "baseline_")], bool)
        speed_ax.plot(rows["producers"], rows["speedup"], marker="o", color=color, ls=style, label=label)
        _mark_flagged(speed_ax, rows, "speedup", run_flagged | baseline_flagged, color)
        acc_ax.plot(
            rows["producers"], rows["robust_accuracy"], marker="o", color=color, ls=style, label=label
        )
        _mark_flagged(acc_ax, rows, "robust_accuracy", run_flagged, color)
        baseline = rows["robust_accuracy"] - rows["robust_accuracy_delta"]
        acc_ax.plot(rows["producers"], baseline, linestyle=":", marker="x", color=BASELINE_COLOUR)
    for ax in (speed_ax, acc_ax):
        ax.set_xticks(producers)
    if producers:
        speed_ax.plot(
            producers,
            [p + 1 for p in producers],
            linestyle="-.",
            color="black",
            lw=0.8,
            label="P + 1 (all cores busy)",
        )
    speed_ax.axhline(1.0, color="black", linewidth=0.8)
    speed_ax.set_xlabel("producers P")
    speed_ax.set_ylabel("over the best sequential run (x)")
    speed_ax.legend(fontsize=8)
    speed_ax.set_title("speed-up (x)")
    acc_ax.set_xlabel("producers P")
    acc_ax.set_ylabel("fraction (fresh PGD with restarts)")
    acc_ax.set_ylim(0, 1)
    acc_ax.set_title("robust accuracy (grey dotted: sequential)")
    acc_ax.legend(fontsize=8, loc="lower right")
    note = flagged_note(
        timing_by_method(pd.concat([parallel, baselines])),
        "epoch times of a run or its baseline",
        "open markers",
    )
    if note:
        figure_note(fig, note)
    save_figure(fig, png_path)


def plot_staleness(frame: pd.DataFrame, png_path: str | os.PathLike) -> None:
    """Mean (circles) and largest (triangles, faint) staleness, trainer step minus weight version,
    against P; colour by k, solid strong and dashed weak scaling."""
    fig, (ax,) = new_figure(height_in=3.8)
    for label, color, style, rows in _series(frame):
        ax.plot(
            rows["producers"],
            rows["staleness_mean"],
            marker="o",
            color=color,
            ls=style,
            label=f"{label} mean",
        )
        ax.plot(
            rows["producers"],
            rows["staleness_max"],
            marker="^",
            color=color,
            ls=style,
            alpha=0.5,
            label=f"{label} max",
        )
    ax.set_xticks(sorted(frame.loc[frame["mode"] == "parallel", "producers"].unique()))
    ax.set_xlabel("producers P")
    ax.set_ylabel("staleness (trainer steps)")
    ax.legend(fontsize=8)
    save_figure(fig, png_path)
