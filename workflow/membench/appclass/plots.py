"""Report figures from ``results/tables/appclass.csv``: runtime vs graph size, and speed-up."""

from __future__ import annotations

import os

import pandas as pd

from membench.core.plots import new_figure, save_figure


def speedups(table: pd.DataFrame) -> pd.DataFrame:
    """Rows of ``table`` with ``speedup_vs_reference``: the reference job's ``total_ms`` on the same
    dataset divided by this job's (NaN where the dataset has no reference job)."""
    reference = table[table["implementation"] == "reference"].groupby("dataset")["total_ms"].median()
    out = table.copy()
    out["speedup_vs_reference"] = out["dataset"].map(reference) / out["total_ms"]
    return out


def plot_runtime(table: pd.DataFrame, png_path: str | os.PathLike) -> None:
    """Init + iterations time (ms) against data edges x pattern edges, one line per variant."""
    fig, (ax,) = new_figure()
    table = table.assign(work=table["data_edges"] * table["pattern_edges"])
    for variant, rows in table.sort_values("work").groupby("variant"):
        ax.plot(rows["work"], rows["total_ms"], marker="o", label=variant)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("data edges x pattern edges")
    ax.set_ylabel("init + iterations (ms)")
    ax.set_title("appclass runtime by graph size")
    ax.legend(fontsize=8)
    save_figure(fig, png_path)


def plot_speedup(table: pd.DataFrame, png_path: str | os.PathLike) -> None:
    """Speed-up over the NumPy reference per dataset (bars), one bar group per non-reference variant."""
    fig, (ax,) = new_figure()
    rows = speedups(table)
    rows = rows[(rows["implementation"] != "reference") & rows["speedup_vs_reference"].notna()]
    pivot = rows.pivot_table(index="dataset", columns="variant", values="speedup_vs_reference", aggfunc="median")
    if len(pivot):
        order = table.groupby("dataset")["data_edges"].max().reindex(pivot.index).sort_values().index
        pivot.loc[order].plot.bar(ax=ax, rot=30)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_ylabel("speed-up over NumPy reference (x)")
    ax.set_xlabel("graph (data graph / pattern)")
    ax.set_title("appclass speed-up (init + iterations)")
    save_figure(fig, png_path)
