"""Figures of the robust scaling table: speed-up beside robust accuracy, and staleness."""

from __future__ import annotations

import os

import pandas as pd

from membench.core.plots import new_figure, save_figure


def _series(frame: pd.DataFrame):
    parallel = frame[frame["scaling"].isin(["strong", "weak"])]
    for (scaling, k), rows in parallel.groupby(["scaling", "publish_every"], sort=True):
        yield f"{scaling}, k={int(k)}", rows.sort_values("producers")


def plot_scaling(frame: pd.DataFrame, png_path: str | os.PathLike) -> None:
    """Left: speed-up over the best sequential run on the same cores against producers P, one line
    per scaling series and k, with the ideal per-core line P + 1. Right: robust accuracy of the
    same runs (solid) and of their sequential baselines (dotted)."""
    fig, (speed_ax, acc_ax) = new_figure(ncols=2, width_in=11.0, height_in=4.2)
    producers = sorted(frame.loc[frame["mode"] == "parallel", "producers"].unique())
    for index, (label, rows) in enumerate(_series(frame)):
        color = f"C{index}"
        speed_ax.plot(rows["producers"], rows["speedup"], marker="o", color=color, label=label)
        acc_ax.plot(rows["producers"], rows["robust_accuracy"], marker="o", color=color, label=label)
        baseline = rows["robust_accuracy"] - rows["robust_accuracy_delta"]
        acc_ax.plot(rows["producers"], baseline, linestyle=":", marker="x", color=color)
    if producers:
        speed_ax.plot(producers, [p + 1 for p in producers], linestyle="--", color="grey", label="P + 1 (all cores busy)")
    speed_ax.axhline(1.0, color="black", linewidth=0.8)
    speed_ax.set_xlabel("producers P")
    speed_ax.set_ylabel("speed-up over best sequential run")
    speed_ax.legend(fontsize=8)
    acc_ax.set_xlabel("producers P")
    acc_ax.set_ylabel("robust accuracy (PGD, fresh, restarts)")
    acc_ax.set_ylim(0, 1)
    acc_ax.set_title("dotted: sequential baseline", fontsize=9)
    acc_ax.legend(fontsize=8)
    save_figure(fig, png_path)


def plot_staleness(frame: pd.DataFrame, png_path: str | os.PathLike) -> None:
    """Mean (solid) and largest (dashed) staleness, trainer step minus weight version, against P."""
    fig, (ax,) = new_figure(width_in=6.5, height_in=4.2)
    for index, (label, rows) in enumerate(_series(frame)):
        color = f"C{index}"
        ax.plot(rows["producers"], rows["staleness_mean"], marker="o", color=color, label=f"{label} mean")
        ax.plot(rows["producers"], rows["staleness_max"], marker="^", linestyle="--", color=color, label=f"{label} max")
    ax.set_xlabel("producers P")
    ax.set_ylabel("staleness (trainer steps)")
    ax.legend(fontsize=8)
    save_figure(fig, png_path)
