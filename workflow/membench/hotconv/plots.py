"""Report figures of the HotConv system, drawn from its tables."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from membench.core.errors import InputError
from membench.core.evaluation import MIN_CASES, epoch_history, still_improving
from membench.core.plots import (
    figure_note,
    flagged_note,
    label_methods,
    method_bars,
    method_colour,
    method_legend,
    panel_grid,
    plain_log_ticks,
    save_figure,
    timing_by_method,
    timing_reliable,
    use_log_scale,
)
from membench.core.validate import read_yaml
from membench.hotconv.options import VARIANTS

__all__ = ["BASELINE", "HEADLINE", "largest_sweep_point", "not_judged", "plot_sweep", "plot_variants"]

BASELINE = "malconv2"
# HotConv's headline declaration: the one home of what makes its test accuracy say little (the
# training row's ``evaluation``), read as a file since a system never imports the report package.
HEADLINE = Path(__file__).resolve().parents[3] / "resources" / "headlines" / "hotconv.yaml"


def _variants(*tables: pd.DataFrame) -> list[str]:
    present = set().union(*(set(t["variant"]) for t in tables if "variant" in t))
    return [v for v in VARIANTS if v in present]


def _numeric(frame: pd.DataFrame, column: str) -> pd.Series:
    return (
        pd.to_numeric(frame[column], errors="coerce")
        if column in frame
        else pd.Series(float("nan"), frame.index)
    )


def _accuracy_evaluation(headline: str | os.PathLike) -> dict:
    """The ``evaluation`` of the headline row on the hotconv table (empty when it has none)."""
    document = read_yaml(headline, missing="headline declaration not found")
    rows = document.get("rows") if isinstance(document, dict) else None
    for index, row in enumerate(rows if isinstance(rows, list) else []):
        if not (isinstance(row, dict) and row.get("table") == "hotconv" and row.get("evaluation")):
            continue
        evaluation, where = row["evaluation"], f"rows[{index}].evaluation"
        if not isinstance(evaluation, dict):
            raise InputError(headline, "expected a mapping", where)
        if "history" in evaluation and evaluation.get("goal") not in ("max", "min"):
            raise InputError(headline, "a history needs a goal, max or min", where)
        if "history" in evaluation and not isinstance(evaluation.get("min_change"), (int, float)):
            raise InputError(headline, "a history needs a numeric min_change", where)
        return evaluation
    return {}


def not_judged(table: pd.DataFrame, headline: str | os.PathLike = HEADLINE) -> dict[str, list[str]]:
    """Per variant, why the report's summary does not judge its test accuracy, by the rules of
    :mod:`membench.core.evaluation` with the settings of ``headline``: a run still improving in its
    last epoch, or fewer than ``MIN_CASES`` test cases. Variants with no such run are left out."""
    evaluation = _accuracy_evaluation(headline)
    measured = table[_numeric(table, "test_accuracy").notna()]
    cases = (
        _numeric(measured, evaluation["cases"])
        if "cases" in evaluation
        else pd.Series(float("nan"), measured.index)
    )
    reasons: dict[str, list[str]] = {}
    for (_, row), case_count in zip(measured.iterrows(), cases):
        found = reasons.setdefault(row["variant"], [])
        if "history" in evaluation:
            history = epoch_history(row.get(evaluation["history"]))
            relative = bool(evaluation.get("relative", False))
            if still_improving(history, evaluation["goal"], evaluation["min_change"], relative) is not None:
                found.append("still improving in its last epoch")
        if case_count < MIN_CASES:
            found.append(f"fewer than {MIN_CASES} test cases")
    return {variant: list(dict.fromkeys(found)) for variant, found in reasons.items() if found}


def largest_sweep_point(sweep: pd.DataFrame) -> pd.DataFrame:
    """The measured sweep rows at the largest max_len (and, there, the largest batch size) that
    every measured variant reached: the point where the variants' step memory differs most."""
    ok = sweep[sweep["status"] == "ok"] if "status" in sweep else sweep
    if ok.empty:
        return ok
    counts = ok.groupby(["max_len", "batch_size"])["variant"].nunique()
    complete = counts[counts == counts.max()].index.max()
    return ok[(ok["max_len"] == complete[0]) & (ok["batch_size"] == complete[1])]


def plot_variants(
    table: pd.DataFrame,
    sweep: pd.DataFrame,
    png_path: str | os.PathLike,
    headline: str | os.PathLike = HEADLINE,
) -> None:
    """The variants compared: one training step's allocator peak and saved activations (from the
    step table ``sweep``, at its largest point; the training jobs' own memory is of their model, on
    files of varying length, and on a CPU their allocator is not traced), the median steady-state
    epoch time (whiskers fastest..slowest epoch, hatched when flagged), test accuracy (hatched where
    the summary does not judge it, :func:`not_judged`), and CO2e per job where energy was measured.
    Bars carry their ratio to :data:`BASELINE` (MalConv2)."""
    unjudged = not_judged(table, headline)
    point = largest_sweep_point(sweep)
    panels = []
    if not point.empty:
        for column, label in (
            ("step_alloc_peak_mib", "allocator peak of a step"),
            ("activation_mib", "saved activations of a step"),
        ):
            values = _numeric(point, column).groupby(point["variant"]).max()
            if values.notna().any():
                panels.append(("memory", label, values))
    timing = timing_by_method(table)
    if not timing.empty:
        panels.append(("time", "training epoch time (median)", timing))
    accuracy = _numeric(table, "test_accuracy").groupby(table["variant"]).mean()
    panels.append(("accuracy", "test accuracy", accuracy))
    co2e = _numeric(table, "co2e_g").groupby(table["variant"]).mean()
    if co2e.notna().any():
        panels.append(("co2e", "CO2e of a training job", co2e))
    variants = _variants(table, point)
    fig, axes = panel_grid(len(panels), ncols=2, panel_height_in=3.0)
    units = {"memory": "MiB", "time": "s", "accuracy": "fraction", "co2e": "g"}
    for ax, (kind, title, values) in zip(axes, panels):
        if kind == "time":
            shown = [v for v in variants if v in values.index]
            method_bars(
                ax,
                shown,
                values["median_s"].reindex(shown),
                ylabel=units[kind],
                title=title,
                baseline=BASELINE,
                low=values["min_s"].reindex(shown),
                high=values["max_s"].reindex(shown),
                flagged=values["flagged"].reindex(shown).tolist(),
            )
        else:
            shown = [v for v in variants if v in values.index and pd.notna(values[v])]
            method_bars(
                ax,
                shown,
                values.reindex(shown),
                ylabel=units[kind],
                title=title,
                baseline=None if kind == "accuracy" else BASELINE,
                log=False if kind == "accuracy" else None,
                flagged=[kind == "accuracy" and v in unjudged for v in shown],
            )
        label_methods(ax, shown)
        if kind == "accuracy":
            ax.set_ylim(0, 1.05)
            if "majority_accuracy" in table:
                ax.axhline(
                    _numeric(table, "majority_accuracy").mean(),
                    color="black",
                    ls="--",
                    lw=0.8,
                    label="majority class",
                )
                ax.legend(loc="lower right")
    if not point.empty:
        row = point.iloc[0]
        # Two settings in one figure: each is named.
        step = (
            f"step memory: {int(row['num_filters'])} filters, batch {int(row['batch_size'])}, "
            f"max_len {int(row['max_len']) // 1024} KiB"
            if "num_filters" in row
            else f"step memory: batch {int(row['batch_size'])}, max_len {int(row['max_len']) // 1024} KiB"
        )
        training = table.iloc[0]
        trained = (
            f"training: {int(training['num_filters'])} filters, batch {int(training['batch_size'])}, "
            f"max_len {int(training['max_len']) // 1024} KiB"
            if {"num_filters", "batch_size", "max_len"} <= set(table.columns)
            else "training"
        )
        fig.suptitle(f"{step}; {trained}; ratios to {BASELINE}")
    notes = [flagged_note(timing, "epoch time")]
    if unjudged:
        notes.append(
            "hatched accuracy: not judged in the summary ("
            + "; ".join(f"{v} {' and '.join(unjudged[v])}" for v in _variants(table) if v in unjudged)
            + ")"
        )
    if not co2e.notna().any():
        notes.append("CO2e: not measured on this machine (no GPU energy counter or readable RAPL)")
    if point.empty:
        notes.append("step memory: no measured sweep point")
    text = "\n".join(n for n in notes if n)
    if text:
        figure_note(fig, text)
    save_figure(fig, png_path)


def plot_sweep(table: pd.DataFrame, png_path: str | os.PathLike) -> None:
    """Step allocator peak (the live-tensor peak where the allocator was not traced), saved
    activations and median step time of every measured sweep point: against max_len (log axes,
    one line per variant, a line style per batch size) when the sweep has several lengths, as bars
    per variant and batch size when it has one."""
    measured = table[table["status"] == "ok"]
    traced = _numeric(measured, "step_alloc_peak_mib").notna().all()
    memory_column, memory_label = (
        ("step_alloc_peak_mib", "allocator peak of a step")
        if traced
        else ("step_peak_tensor_mib", "live-tensor peak of a step")
    )
    metrics = (
        (memory_column, memory_label, "MiB"),
        ("activation_mib", "saved activations of a step", "MiB"),
        ("time_median_s", "step time (median)", "s"),
    )
    variants = _variants(measured)
    lengths = sorted(measured["max_len"].unique())
    batches = sorted(measured["batch_size"].unique())
    lines = len(lengths) > 1
    # Lines: a fourth panel holds the legend (variant x batch size); bars: a legend above them.
    fig, axes = panel_grid(len(metrics) + lines, ncols=2, panel_height_in=3.2)
    timing = timing_by_method(measured)
    for ax, (column, title, unit) in zip(axes, metrics):
        ax.set_title(title)
        if lines:
            for variant in variants:
                for style, batch_size in zip(("-", "--", ":", "-."), batches):
                    rows = measured[(measured["variant"] == variant) & (measured["batch_size"] == batch_size)]
                    rows = rows.sort_values("max_len")
                    ax.plot(
                        rows["max_len"] / 2**10,
                        _numeric(rows, column),
                        marker="o",
                        ls=style,
                        color=method_colour(variant),
                        label=f"{variant}, batch {batch_size}",
                    )
                    if column == "time_median_s":
                        flagged = rows[~timing_reliable(rows["timing_reliable"])]
                        ax.scatter(
                            flagged["max_len"] / 2**10,
                            _numeric(flagged, column),
                            marker="o",
                            s=36,
                            facecolor="white",
                            edgecolor=method_colour(variant),
                            zorder=3,
                        )
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            plain_log_ticks(ax.xaxis)
            ax.set_xlabel("max_len (KiB), log scale")
            ax.set_ylabel(f"{unit}, log scale")
        else:
            timed = column == "time_median_s"
            log = use_log_scale(_numeric(measured, column).tolist())
            for group, batch_size in enumerate(batches):
                rows = measured[measured["batch_size"] == batch_size].set_index("variant").reindex(variants)
                rows = rows[_numeric(rows, column).notna()]
                method_bars(
                    ax,
                    list(rows.index),
                    _numeric(rows, column),
                    positions=[group * (len(variants) + 1) + variants.index(v) for v in rows.index],
                    ylabel=unit,
                    baseline=BASELINE,
                    log=log,
                    low=_numeric(rows, "time_min_s") if timed else None,
                    high=_numeric(rows, "time_max_s") if timed else None,
                    flagged=[timed and str(r).lower() != "true" for r in rows.get("timing_reliable", [])],
                )
            ax.set_xticks(
                [g * (len(variants) + 1) + (len(variants) - 1) / 2 for g in range(len(batches))],
                [f"batch {b}" for b in batches],
            )
            ax.set_xlabel(f"max_len {int(lengths[0]) // 1024} KiB" if lengths else "")
    if lines:
        axes[-1].axis("off")
        axes[-1].legend(*axes[0].get_legend_handles_labels(), loc="center")
    else:
        method_legend(
            fig,
            variants,
            flagged=bool(timing["flagged"].any()) if not timing.empty else False,
            loc="outside upper center",
            ncols=3,
        )
    notes = [flagged_note(timing, "step time", "open markers" if lines else "hatched")]
    oom = table[table["status"] == "oom"]
    if len(oom):
        notes.append(
            f"{len(oom)} point(s) ran out of device memory: "
            + ", ".join(f"{r.variant} batch {r.batch_size} max_len {r.max_len}" for r in oom.itertuples())
        )
    text = "\n".join(n for n in notes if n)
    if text:
        figure_note(fig, text)
    save_figure(fig, png_path)
