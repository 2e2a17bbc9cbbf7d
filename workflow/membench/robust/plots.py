"""Figures of the robust scaling table: speed-up beside robust accuracy, and staleness."""

from __future__ import annotations

import os

import pandas as pd

from membench.core.plots import BASELINE_COLOUR, method_colour, new_figure, save_figure

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


def plot_scaling(frame: pd.DataFrame, png_path: str | os.PathLike) -> None:
    """Left: speed-up over the best sequential run on the same cores against producers P, colour by
    k, solid strong and dashed weak scaling, with the ideal per-core line P + 1. Right: robust
    accuracy of the same runs and of their sequential baselines (grey dotted)."""
    fig, (speed_ax, acc_ax) = new_figure(ncols=2, height_in=3.8)
    producers = sorted(frame.loc[frame["mode"] == "parallel", "producers"].unique())
    for label, color, style, rows in _series(frame):
        speed_ax.plot(rows["producers"], rows["speedup"], marker="o", color=color, ls=style, label=label)
        acc_ax.plot(
            rows["producers"], rows["robust_accuracy"], marker="o", color=color, ls=style, label=label
        )
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
