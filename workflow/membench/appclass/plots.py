"""Report figures from ``results/tables/appclass.csv``: runtime and speed-up per graph pair.

Graph pairs differ in size, so each gets its own panel: runtimes of different graphs are never
joined by a line. Bars take the colour of their implementation (the NumPy reference is the grey
baseline); their labels name the variant (implementation, device, threads, precision).
"""

from __future__ import annotations

import os

import pandas as pd

from membench.core.plots import (
    figure_note,
    flagged_note,
    label_methods,
    method_bars,
    method_legend,
    panel_grid,
    save_figure,
    timing_by_method,
    timing_reliable,
)

__all__ = ["BASELINE_IMPLEMENTATION", "plot_runtime", "plot_speedup", "speedups"]

BASELINE_IMPLEMENTATION = "reference"


def speedups(table: pd.DataFrame) -> pd.DataFrame:
    """Rows of ``table`` with ``speedup_vs_reference``: the reference job's median steady-state
    repeat time (``time_median_s``) on the same dataset divided by this job's (NaN where the
    dataset has no reference job), and ``speedup_reliable``: both timings were reliable."""
    baseline = table[table["implementation"] == BASELINE_IMPLEMENTATION]
    reference = baseline.groupby("dataset")["time_median_s"].median()
    reference_reliable = baseline.groupby("dataset")["timing_reliable"].agg(
        lambda values: timing_reliable(values).all()
    )
    out = table.copy()
    out["speedup_vs_reference"] = out["dataset"].map(reference) / out["time_median_s"]
    out["speedup_reliable"] = timing_reliable(out["timing_reliable"]) & out["dataset"].map(
        reference_reliable
    ).fillna(False)
    return out


def _pairs(table: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """(graph pair, its rows: reference first, then by variant name), smallest data graph first."""
    order = table.groupby("dataset")["data_edges"].max().sort_values().index
    pairs = []
    for dataset in order:
        rows = table[table["dataset"] == dataset].drop_duplicates("variant")
        rows = rows.assign(_baseline=rows["implementation"] != BASELINE_IMPLEMENTATION).sort_values(
            ["_baseline", "variant"]
        )
        pairs.append((dataset, rows))
    return pairs


def _panel_title(dataset: str, rows: pd.DataFrame) -> str:
    row = rows.iloc[0]
    return f"{dataset}\n({int(row['data_edges']):,} x {int(row['pattern_edges'])} edges)"


def plot_runtime(table: pd.DataFrame, png_path: str | os.PathLike) -> None:
    """One panel per graph pair: median steady-state time of one repeat (initialisation +
    iterations, ms) per variant, whiskers fastest..slowest repeat, hatched when flagged, with the
    ratio to the reference."""
    pairs = _pairs(table)
    fig, axes = panel_grid(max(len(pairs), 1), ncols=2, panel_height_in=3.6)
    for ax, (dataset, rows) in zip(axes, pairs):
        baseline = rows.loc[rows["implementation"] == BASELINE_IMPLEMENTATION, "variant"]
        ms = lambda column: pd.to_numeric(rows[column], errors="coerce") * 1e3  # noqa: E731
        method_bars(
            ax,
            list(rows["variant"]),
            ms("time_median_s"),
            ylabel="ms per repeat",
            title=_panel_title(dataset, rows),
            baseline=baseline.iloc[0] if len(baseline) else None,
            low=ms("time_min_s"),
            high=ms("time_max_s"),
            flagged=list(~timing_reliable(rows["timing_reliable"])),
            colour_methods=list(rows["implementation"]),
        )
        label_methods(ax, list(rows["variant"]))
    implementations = list(dict.fromkeys(table["implementation"]))
    timing = timing_by_method(table)
    method_legend(
        fig,
        implementations,
        flagged=bool(not timing.empty and timing["flagged"].any()),
        loc="outside upper center",
        ncols=len(implementations) + 1,
    )
    note = flagged_note(timing, "repeat time")
    if note:
        figure_note(fig, note)
    save_figure(fig, png_path)


def plot_speedup(table: pd.DataFrame, png_path: str | os.PathLike) -> None:
    """One panel per graph pair: speed-up of each torch variant over the NumPy reference (reference
    repeat time / variant repeat time, x; hatched when either timing is flagged); the line at 1 is
    the reference."""
    pairs = [
        (dataset, rows[rows["implementation"] != BASELINE_IMPLEMENTATION])
        for dataset, rows in _pairs(speedups(table))
    ]
    pairs = [(dataset, rows[rows["speedup_vs_reference"].notna()]) for dataset, rows in pairs]
    pairs = [(dataset, rows) for dataset, rows in pairs if len(rows)]
    fig, axes = panel_grid(max(len(pairs), 1), ncols=2, panel_height_in=3.6)
    for ax, (dataset, rows) in zip(axes, pairs):
        values = rows["speedup_vs_reference"].tolist()
        method_bars(
            ax,
            list(rows["variant"]),
            values,
            ylabel="speed-up over reference (x)",
            title=_panel_title(dataset, rows),
            log=False,
            colour_methods=list(rows["implementation"]),
            flagged=list(~rows["speedup_reliable"].astype(bool)),
        )
        for x, value in enumerate(values):
            ax.annotate(
                f"{value:.1f}x",
                (x, value),
                xytext=(0, 2),
                textcoords="offset points",
                ha="center",
                va="bottom",
                fontsize=8,
            )
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.margins(y=0.15)
        label_methods(ax, list(rows["variant"]))
    flagged = [rows for _, rows in pairs if not rows["speedup_reliable"].all()]
    if flagged:
        figure_note(
            fig,
            "hatched: the variant's or the reference's timing is flagged as unreliable; "
            "see timing_flag in the table",
        )
    if not pairs:
        axes[0].axis("off")
        axes[0].text(0.5, 0.5, "no graph pair has both a reference and a torch job", ha="center", va="center")
    save_figure(fig, png_path)
