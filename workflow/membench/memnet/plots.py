"""Report figures: confusion matrices of every estimator (k-fold split), the estimator comparison,
and each estimator's accuracy against its under-estimation rate (at the requested risk and
uncalibrated)."""

from __future__ import annotations

import os
import textwrap

import numpy as np
import pandas as pd

from membench.core.plots import (
    FONT_SIZE,
    figure_note,
    flagged_note,
    grouped_method_bars,
    method_colour,
    method_legend,
    panel_grid,
    save_figure,
    timing_by_method,
)
from membench.memnet.calibration import min_calibration_jobs

__all__ = ["BASELINE", "plot_comparison", "plot_confusions", "plot_tradeoff"]

BASELINE = "horus"


def plot_confusions(predictions: pd.DataFrame, png_path: str | os.PathLike) -> None:
    """A grid, one row per dataset and one column per estimator: true class (rows) against
    predicted class (columns), counts of the k-fold test predictions; cells left of the diagonal
    are under-estimates."""
    kfold = predictions[(predictions["split"] == "kfold") & (predictions["pred_bin"] >= 0)]
    datasets = list(dict.fromkeys(kfold["dataset"])) or [""]
    estimators = list(dict.fromkeys(kfold["estimator"])) or [""]
    fig, axes = panel_grid(len(datasets) * len(estimators), ncols=len(estimators), panel_height_in=2.0)
    for index, ax in enumerate(axes):
        dataset, estimator = datasets[index // len(estimators)], estimators[index % len(estimators)]
        part = kfold[(kfold["dataset"] == dataset) & (kfold["estimator"] == estimator)]
        # One size per dataset, so that its estimators' matrices line up.
        of_dataset = kfold[kfold["dataset"] == dataset]
        size = (
            int(max(of_dataset["true_bin"].max(), of_dataset["pred_bin"].max(), 0)) + 1
            if len(of_dataset)
            else 1
        )
        matrix = np.zeros((size, size), dtype=int)
        np.add.at(matrix, (part["true_bin"].to_numpy(int), part["pred_bin"].to_numpy(int)), 1)
        ax.imshow(matrix, cmap="Blues", vmin=0, vmax=max(int(matrix.max()), 1))
        for (i, j), count in np.ndenumerate(matrix):
            if count:
                ax.text(
                    j,
                    i,
                    str(count),
                    ha="center",
                    va="center",
                    fontsize=FONT_SIZE - 2,
                    color="white" if count > matrix.max() / 2 else "black",
                )
        ax.set_xticks(range(size))
        ax.set_yticks(range(size))
        ax.tick_params(labelsize=FONT_SIZE - 3)
        if index < len(estimators):
            ax.set_title(estimator, fontsize=FONT_SIZE - 1)
        if index % len(estimators) == 0:
            ax.set_ylabel(f"{dataset}\ntrue class", fontsize=FONT_SIZE - 2)
        if index // len(estimators) == len(datasets) - 1:
            ax.set_xlabel("predicted class", fontsize=FONT_SIZE - 2)
    save_figure(fig, png_path)


def plot_comparison(table: pd.DataFrame, png_path: str | os.PathLike) -> None:
    """Accuracy and under-estimation rate at the requested risk (a dashed line marks the requested
    rate), and inference time of one single-job prediction (median, whiskers fastest..slowest,
    hatched when flagged; ratios to the Horus formula) of every estimator (k-fold), one group of
    bars per dataset, those that can judge estimators first. The rate's axis ends a quarter above
    the largest rate or requested rate, so that small rates stay visible. An estimator calibrated
    on fewer jobs than the requested rate needs has no accuracy or rate bar; the note names it."""
    table = _judged_first(table)
    too_few = _too_few_to_calibrate(table)
    table = _without_calibrated_figures(table, too_few)
    estimators = list(dict.fromkeys(table["estimator"]))
    timed = "time_median_s" in table and pd.to_numeric(table["time_median_s"], errors="coerce").notna().any()
    fig, axes = panel_grid(3 if timed else 2, ncols=2, panel_height_in=3.2)
    for ax, column, title, unit in (
        (axes[0], "accuracy", "accuracy (k-fold)", "fraction"),
        (axes[1], "under_rate", "under-estimation rate (k-fold)", "fraction of jobs"),
    ):
        grouped_method_bars(
            ax,
            table,
            "dataset",
            estimators,
            column,
            ylabel=unit,
            title=title,
            method_column="estimator",
            log=False,
        )
    axes[0].set_ylim(0, 1.05)
    requested = sorted(set(pd.to_numeric(table["max_under"], errors="coerce").dropna()))
    rates = pd.to_numeric(table["under_rate"], errors="coerce").dropna().tolist()
    axes[1].set_ylim(0, 1.25 * max([*rates, *requested, 0.01]))
    for rate in requested:
        axes[1].axhline(rate, color="black", linestyle="--", linewidth=0.8)
    timing = timing_by_method(table, "estimator") if timed else None
    if timed:
        frame = table.assign(
            **{
                name: pd.to_numeric(table[source], errors="coerce") * 1e3
                for name, source in (
                    ("inference_median_ms", "time_median_s"),
                    ("inference_min_ms", "time_min_s"),
                    ("inference_max_ms", "time_max_s"),
                )
            }
        )
        grouped_method_bars(
            axes[2],
            frame,
            "dataset",
            estimators,
            "inference_median_ms",
            ylabel="ms",
            title="inference time of one job (median)",
            baseline=BASELINE,
            method_column="estimator",
            low_column="inference_min_ms",
            high_column="inference_max_ms",
            flag_timing=True,
        )
    for ax in axes:
        ax.tick_params(axis="x", labelrotation=15)
    method_legend(
        fig, estimators, flagged=bool(timed and timing["flagged"].any()), loc="outside upper center", ncols=3
    )
    _figure_notes(
        fig,
        flagged_note(timing, "inference time") if timed else "",
        _too_few_note(table, too_few, "no bar at the requested risk"),
    )
    save_figure(fig, png_path)


def _judged_first(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of data sets that can judge estimators first (in their order), the smoke tests
    (``too_small_to_judge``) after them."""
    small = _too_small(table).astype(bool).to_numpy()
    return pd.concat([table[~small], table[small]], ignore_index=True)


def _too_small(table: pd.DataFrame) -> pd.Series:
    reason = (
        table["too_small_to_judge"] if "too_small_to_judge" in table else pd.Series("", index=table.index)
    )
    return reason.fillna("").astype(str).replace("nan", "")


def _too_few_to_calibrate(table: pd.DataFrame) -> pd.Series:
    """Rows of data sets that can judge whose estimator was calibrated on fewer jobs than the
    requested rate needs (it then answers the last class, so its figures at that risk say nothing
    of the estimator). A smoke test's rows are left as they are: its panel says it is too small."""
    if "calibration_jobs" not in table:
        return pd.Series(False, index=table.index)
    jobs = pd.to_numeric(table["calibration_jobs"], errors="coerce")
    needed = pd.to_numeric(table["max_under"], errors="coerce").map(
        lambda rate: min_calibration_jobs(rate) if np.isfinite(rate) else 0
    )
    return jobs.notna() & (jobs < needed) & (_too_small(table) == "")


def _without_calibrated_figures(table: pd.DataFrame, too_few: pd.Series) -> pd.DataFrame:
    """``table`` with the accuracy and rate at the requested risk blanked on the ``too_few`` rows."""
    return table.assign(
        **{column: table[column].where(~too_few) for column in ("accuracy", "under_rate") if column in table}
    )


def _figure_notes(fig, *notes: str) -> None:
    """The non-empty ``notes`` under the panels, wrapped to the figure's width."""
    text = "; ".join(note for note in notes if note)
    if text:
        figure_note(fig, "\n".join(textwrap.wrap(text, 105)))


def _too_few_note(table: pd.DataFrame, too_few: pd.Series, shown: str) -> str:
    named = sorted({f"{row.estimator} on {row.dataset}" for row in table[too_few].itertuples()})
    if not named:
        return ""
    return (
        f"calibrated on too few jobs for the requested rate (it would answer the last class), so {shown}: "
        + ", ".join(named)
    )


def plot_tradeoff(table: pd.DataFrame, png_path: str | os.PathLike) -> None:
    """One panel per dataset: each estimator's accuracy against its under-estimation rate (k-fold),
    a filled marker at the requested risk (whiskers: the rate's 95% interval) and a hollow one
    uncalibrated, joined by a line; a dashed line at the requested rate. Up and left is better; a
    dataset too small to judge by says so in its title. An estimator calibrated on fewer jobs than
    the requested rate needs has only its hollow marker, and the figure's note names it."""
    table = _judged_first(table)
    reasons = _too_small(table)
    too_few = _too_few_to_calibrate(table)
    table = _without_calibrated_figures(table, too_few)
    datasets = list(dict.fromkeys(table["dataset"]))
    estimators = list(dict.fromkeys(table["estimator"]))
    fig, axes = panel_grid(len(datasets), ncols=2, panel_height_in=3.2)
    for ax, dataset in zip(axes, datasets):
        part = table[table["dataset"] == dataset]
        for _, row in part.iterrows():
            colour = method_colour(str(row["estimator"]))
            x, y = float(row["under_rate"]), float(row["accuracy"])
            raw_x, raw_y = float(row["raw_under_rate"]), float(row["raw_accuracy"])
            if np.isfinite(raw_x) and np.isfinite(x):
                ax.plot([raw_x, x], [raw_y, y], color=colour, linewidth=0.8)
            if np.isfinite(raw_x):
                ax.plot(raw_x, raw_y, "o", markerfacecolor="white", markeredgecolor=colour, markersize=6)
            if np.isfinite(x):
                low = float(row.get("under_rate_ci_low", np.nan))
                high = float(row.get("under_rate_ci_high", np.nan))
                xerr = (
                    [[max(x - low, 0)], [max(high - x, 0)]]
                    if np.isfinite(low) and np.isfinite(high)
                    else None
                )
                ax.errorbar(x, y, xerr=xerr, fmt="o", color=colour, markersize=6, capsize=2, linewidth=0.8)
        for requested in sorted(set(pd.to_numeric(part["max_under"], errors="coerce").dropna())):
            ax.axvline(requested, color="black", linestyle="--", linewidth=0.8)
        reason = next((r for r in reasons[part.index] if r), "")
        note = "\n".join(textwrap.wrap(f"too small to judge: {reason}", 48)) if reason else ""
        ax.set_title(f"{dataset}\n{note}" if note else dataset, fontsize=FONT_SIZE - (1 if note else 0))
        ax.set_xlabel("under-estimation rate (fraction of jobs)")
        ax.set_ylabel("accuracy")
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlim(left=-0.01)
    method_legend(fig, estimators, loc="outside upper center", ncols=3)
    _figure_notes(
        fig,
        "filled: at the requested risk (dashed line), whiskers its 95% interval; hollow: uncalibrated",
        _too_few_note(table, too_few, "shown uncalibrated only"),
    )
    save_figure(fig, png_path)
