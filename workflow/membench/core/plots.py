"""Figure helpers for the report: one colour per method, readable sizes, bars annotated with the
ratio to the baseline, flagged timings marked, and atomic PNG writes.

Every system's figures take their colours from :func:`method_colour`, so a method has the same
colour in every figure; baselines (the method the others are compared with) are grey.
"""

from __future__ import annotations

import math
import os
import zlib
from typing import Sequence

import matplotlib
import pandas as pd

__all__ = [
    "BASELINE_COLOUR",
    "BASELINE_METHODS",
    "figure_note",
    "FLAG_HATCH",
    "flagged_note",
    "FONT_SIZE",
    "grouped_method_bars",
    "label_methods",
    "LOG_SCALE_RATIO",
    "method_bars",
    "method_colour",
    "METHOD_COLOURS",
    "method_legend",
    "new_figure",
    "panel_grid",
    "plain_log_ticks",
    "plot_memlog",
    "ratio_label",
    "REPORT_WIDTH_IN",
    "SAVE_DPI",
    "save_figure",
    "timing_by_method",
    "timing_reliable",
    "use_log_scale",
]

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from membench.core import atomic  # noqa: E402
from membench.core.timing import SPREAD_PCT_MAX  # noqa: E402

# The width a report figure is drawn for (inches at SAVE_DPI: 960 px), and the font size that stays
# readable when the report shows it at that width.
REPORT_WIDTH_IN = 8.0
SAVE_DPI = 120
FONT_SIZE = 10
BASELINE_COLOUR = "#7f7f7f"
# The baseline of each system: the method every other one is compared with.
BASELINE_METHODS = ("malconv2", "vanilla", "reference", "horus", "sequential")
METHOD_COLOURS = {
    **{method: BASELINE_COLOUR for method in BASELINE_METHODS},
    # hotconv (MalConv2 is the baseline the HotConv papers compare with)
    "malconv": "#1f77b4",
    "hotconv": "#ff7f0e",
    "hotconv_eco": "#2ca02c",
    # division
    "division": "#d62728",
    "actnn2bit": "#9467bd",
    "checkpoint": "#8c564b",
    # appclass implementations
    "torch": "#e377c2",
    # memnet estimators
    "gpumemnet_mlp": "#17becf",
    "gpumemnet_transformer": "#bcbd22",
    "faketensor": "#393b79",
    "memtracker": "#9c9ede",
    "membench": "#e6550d",
    # robust: parallel adversary generation, by weight publication period k
    "parallel_k1": "#3182bd",
    "parallel_k4": "#31a354",
}
# Methods not named above (a configured variant) get one of these, chosen from the name alone so
# that the colour is the same in every figure.
_SPARE_COLOURS = ("#637939", "#8c6d31", "#843c39", "#7b4173", "#5254a3", "#ad494a", "#a55194", "#6b6ecf")
FLAG_HATCH = "//"
# Above this ratio between the largest and the smallest value, a bar or line axis is logarithmic.
LOG_SCALE_RATIO = 20.0

plt.rcParams.update(
    {"font.size": FONT_SIZE, "axes.titlesize": FONT_SIZE + 1, "legend.fontsize": FONT_SIZE - 1}
)


def method_colour(method: str) -> str:
    """The colour of ``method`` in every figure (grey for a baseline)."""
    if method in METHOD_COLOURS:
        return METHOD_COLOURS[method]
    return _SPARE_COLOURS[zlib.crc32(method.encode()) % len(_SPARE_COLOURS)]


def new_figure(ncols: int = 1, width_in: float = REPORT_WIDTH_IN, height_in: float = 4.0):
    """A figure of ``ncols`` panels side by side; returns ``(figure, list of axes)``."""
    fig, axes = plt.subplots(1, ncols, figsize=(width_in, height_in), layout="constrained", squeeze=False)
    return fig, list(axes[0])


def panel_grid(panels: int, ncols: int = 2, panel_height_in: float = 3.2, width_in: float = REPORT_WIDTH_IN):
    """A figure of ``panels`` panels in rows of ``ncols`` at report width, without empty axes;
    returns ``(figure, list of axes)``."""
    ncols = max(1, min(ncols, panels))
    nrows = max(1, math.ceil(panels / ncols))
    fig, grid = plt.subplots(
        nrows, ncols, figsize=(width_in, panel_height_in * nrows), layout="constrained", squeeze=False
    )
    axes = list(grid.flat)
    for ax in axes[panels:]:
        fig.delaxes(ax)
    return fig, axes[:panels]


def use_log_scale(values: Sequence[float]) -> bool:
    """Whether positive ``values`` span more than :data:`LOG_SCALE_RATIO`."""
    positive = [v for v in values if v is not None and not math.isnan(v) and v > 0]
    return len(positive) >= 2 and max(positive) / min(positive) > LOG_SCALE_RATIO


def ratio_label(value: float, baseline: float) -> str:
    """``value / baseline`` as a bar annotation, two significant digits below 10 and whole numbers
    above: ``x0.0048``, ``x1``, ``x2.5``, ``x390``."""
    ratio = value / baseline
    return f"x{ratio:.0f}" if ratio >= 10 else f"x{ratio:.2g}"


def method_bars(
    ax,
    methods: Sequence[str],
    values: Sequence[float],
    *,
    ylabel: str,
    title: str = "",
    baseline: str | None = None,
    low: Sequence[float] | None = None,
    high: Sequence[float] | None = None,
    flagged: Sequence[bool] | None = None,
    positions: Sequence[float] | None = None,
    width: float = 0.8,
    log: bool | None = None,
    colour_methods: Sequence[str] | None = None,
    ratios: Sequence[float] | None = None,
) -> None:
    """Bars of ``values`` coloured by method under ``title``, ``ylabel`` naming the unit, each
    annotated with its ratio to ``baseline``'s value (when it is among ``methods``), or with its
    entry of ``ratios`` where that is a number (a ratio measured otherwise, e.g. side by side). ``low`` and
    ``high`` draw error bars from low to high; ``flagged`` bars are hatched (an unreliable timing).
    ``log`` defaults to :func:`use_log_scale`; a log axis says so in its label. ``colour_methods``
    names the method whose colour each bar takes when the bars are configurations of methods
    (appclass variants of the torch implementation)."""
    positions = list(range(len(methods))) if positions is None else list(positions)
    values = [float("nan") if v is None else float(v) for v in values]
    flagged = [False] * len(values) if flagged is None else list(flagged)
    bars = ax.bar(
        positions,
        values,
        width,
        color=[method_colour(m) for m in (colour_methods or methods)],
        edgecolor="black",
        linewidth=0.5,
    )
    for bar, is_flagged in zip(bars, flagged):
        if is_flagged:
            bar.set_hatch(FLAG_HATCH)
    if low is not None and high is not None:
        below = [
            max(0.0, v - lo) if not math.isnan(v) and not math.isnan(lo) else 0.0
            for v, lo in zip(values, low)
        ]
        above = [
            max(0.0, hi - v) if not math.isnan(v) and not math.isnan(hi) else 0.0
            for v, hi in zip(values, high)
        ]
        ax.errorbar(
            positions, values, yerr=[below, above], fmt="none", ecolor="black", capsize=3, linewidth=0.8
        )
    log = use_log_scale(values) if log is None else log
    if log:
        ax.set_yscale("log")
    ax.set_ylabel(f"{ylabel}, log scale" if log else ylabel)
    if title:
        ax.set_title(title)
    reference = dict(zip(methods, values)).get(baseline) if baseline is not None else None
    if reference is not None and reference > 0 and not math.isnan(reference):
        tops = (
            values if high is None else [v if math.isnan(hi) else max(v, hi) for v, hi in zip(values, high)]
        )
        ratios = [math.nan] * len(values) if ratios is None else [float(r) for r in ratios]
        for x, value, top, ratio in zip(positions, values, tops, ratios):
            if not math.isnan(value):
                ax.annotate(
                    ratio_label(value, reference) if math.isnan(ratio) else ratio_label(ratio, 1.0),
                    (x, top),
                    xytext=(0, 2),
                    textcoords="offset points",
                    ha="center",
                    va="bottom",
                    fontsize=FONT_SIZE - 2,
                )
        ax.margins(y=0.25 if log else 0.15)


def grouped_method_bars(
    ax,
    frame,
    group_column: str,
    methods: Sequence[str],
    value_column: str,
    *,
    ylabel: str,
    title: str = "",
    baseline: str | None = None,
    group_label: str = "{}",
    low_column: str | None = None,
    high_column: str | None = None,
    flag_timing: bool = False,
    method_column: str = "variant",
    log: bool | None = None,
    ratio_column: str | None = None,
) -> None:
    """One group of bars per value of ``group_column`` (e.g. batch size), one bar per method of
    ``frame[method_column]`` in the order of ``methods``; ratios to ``baseline`` within each group,
    or ``frame[ratio_column]`` where that is a number.
    ``flag_timing`` hatches rows whose ``timing_reliable`` is not true. The axis is logarithmic when
    all values together span :data:`LOG_SCALE_RATIO` (unless ``log`` says). Numeric groups are
    sorted, others keep the order they first appear in."""
    values_all = pd.to_numeric(frame[value_column], errors="coerce")
    log = use_log_scale(values_all.tolist()) if log is None else log
    groups = list(dict.fromkeys(frame[group_column].dropna()))
    if pd.api.types.is_numeric_dtype(frame[group_column]):
        groups = sorted(groups)
    for index, group in enumerate(groups):
        rows = frame[frame[group_column] == group].drop_duplicates(method_column).set_index(method_column)
        shown = [
            m
            for m in methods
            if m in rows.index and pd.notna(pd.to_numeric(rows.at[m, value_column], errors="coerce"))
        ]
        rows = rows.loc[shown]
        column = lambda name: pd.to_numeric(rows[name], errors="coerce").tolist() if name else None  # noqa: E731
        flagged = (
            list(~timing_reliable(rows["timing_reliable"]))
            if flag_timing and "timing_reliable" in rows
            else None
        )
        method_bars(
            ax,
            shown,
            column(value_column),
            ylabel=ylabel,
            title=title,
            baseline=baseline,
            log=log,
            positions=[index * (len(methods) + 1) + methods.index(m) for m in shown],
            low=column(low_column),
            high=column(high_column),
            flagged=flagged,
            ratios=column(ratio_column if ratio_column in rows else None),
        )
    ax.set_xticks(
        [index * (len(methods) + 1) + (len(methods) - 1) / 2 for index in range(len(groups))],
        [group_label.format(g) for g in groups],
    )


def timing_reliable(values: pd.Series) -> pd.Series:
    """Whether each value of a ``timing_reliable`` column marks a reliable timing (``True``, or
    ``"true"`` as a table read back from CSV holds it)."""
    return values.map(lambda v: v is True or str(v).lower() == "true")


def timing_by_method(frame, method_column: str = "variant"):
    """Per method of ``frame`` (rows carrying :mod:`membench.core.timing`'s fields): the median of
    ``time_median_s``, the smallest ``time_min_s``, the largest ``time_max_s`` and whether any
    timing was flagged; methods without a timing are left out. Returns a frame indexed by method
    with columns ``median_s``, ``min_s``, ``max_s``, ``flagged``, ``flag``."""
    columns = ["median_s", "min_s", "max_s", "flagged", "flag"]
    if "time_median_s" not in frame:
        return pd.DataFrame(columns=columns)
    timed = frame[pd.to_numeric(frame["time_median_s"], errors="coerce").notna()]
    rows = {}
    for method, part in timed.groupby(method_column, sort=False):
        reliable = timing_reliable(part["timing_reliable"])
        flags = sorted({str(f) for f in part["timing_flag"] if isinstance(f, str) and f})
        rows[method] = {
            "median_s": pd.to_numeric(part["time_median_s"]).median(),
            "min_s": pd.to_numeric(part["time_min_s"], errors="coerce").min(),
            "max_s": pd.to_numeric(part["time_max_s"], errors="coerce").max(),
            "flagged": not reliable.all(),
            "flag": "; ".join(flags),
        }
    return pd.DataFrame.from_dict(rows, orient="index", columns=columns)


def flagged_note(timing, what: str, mark: str = "hatched") -> str:
    """``"<mark>: <what> flagged as unreliable (no or one sample, machine loaded); ..."``, the kinds
    of :mod:`membench.core.timing`'s flags found (none named where none is known), or ``""`` when no
    timing of ``timing`` (:func:`timing_by_method`) is flagged."""
    if timing.empty or not timing["flagged"].any():
        return ""
    flags = " ".join(timing["flag"])
    kinds = [
        kind
        for kind, words in (
            ("no or one sample", "sample"),
            ("each sample the first of its process", "the first of its process"),
            ("samples timed in another setting left out", "timed in another setting"),
            (f"spread over {SPREAD_PCT_MAX:.0f}%", "spread"),
            ("machine loaded", "load"),
        )
        if words in flags
    ]
    named = f" ({', '.join(kinds)})" if kinds else ""
    return f"{mark}: {what} flagged as unreliable{named}; see timing_flag in the table"


def label_methods(ax, methods: Sequence[str], positions: Sequence[float] | None = None) -> None:
    """Method names under bars, slanted so that long names stay readable."""
    positions = list(range(len(methods))) if positions is None else list(positions)
    ax.set_xticks(positions, methods, rotation=25, ha="right")


def method_legend(ax, methods: Sequence[str], flagged: bool = False, **kwargs) -> None:
    """A legend of the methods' colours (and of the hatch, when a timing is flagged) on ``ax``
    (an axes or the figure)."""
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=method_colour(m), edgecolor="black", linewidth=0.5, label=m) for m in methods]
    if flagged:
        handles.append(Patch(facecolor="white", edgecolor="black", hatch=FLAG_HATCH, label="timing flagged"))
    ax.legend(handles=handles, **kwargs)


def plain_log_ticks(axis) -> None:
    """Tick labels of a log ``axis`` (``ax.xaxis``) as plain numbers (64, 128) instead of powers."""
    from matplotlib.ticker import FuncFormatter

    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))


def figure_note(fig, text: str) -> None:
    """A line of text under the panels (what was not measured, which timings are flagged)."""
    fig.supxlabel(text, fontsize=FONT_SIZE - 1, color="#444444")


def save_figure(fig, path: str | os.PathLike) -> None:
    """Write ``fig`` as PNG to ``path`` atomically and close it."""
    with atomic.atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=SAVE_DPI)
    plt.close(fig)


def plot_memlog(memlog, png_path: str | os.PathLike, title: str = "") -> None:
    """Memory over time from a job's ``memlog.csv`` frame, one line per available source, with the
    meter's phases shaded and named."""
    fig, (ax,) = new_figure()
    for column, label in (
        ("rss_mib", "process RSS"),
        ("nvml_used_mib", "NVML memory.used"),
        ("cuda_allocated_mib", "CUDA allocated"),
    ):
        values = memlog[column].astype(float)
        if values.notna().any():
            ax.plot(memlog["t_s"], values, marker=".", label=label)
    duration_s = float(memlog["t_s"].max() - memlog["t_s"].min()) if len(memlog) else 0.0
    # Spans of consecutive samples of one phase: a job returns to "setup" between phases.
    runs = (memlog["phase"] != memlog["phase"].shift()).cumsum()
    phases = list(dict.fromkeys(memlog["phase"]))
    for _, rows in memlog.groupby(runs, sort=False):
        phase = rows["phase"].iloc[0]
        index = phases.index(phase)
        start, end = rows["t_s"].min(), rows["t_s"].max()
        # A phase of a single sample has no extent to shade or to name without covering another.
        if end <= start or end - start < 0.02 * duration_s:
            continue
        ax.axvspan(start, end, alpha=0.08, color=f"C{index}")
        ax.annotate(
            phase,
            ((start + end) / 2, 1.0),
            xycoords=("data", "axes fraction"),
            ha="center",
            va="top",
            xytext=(0, -2),
            textcoords="offset points",
        )
    ax.set_xlabel("time since job start (s)")
    ax.set_ylabel("MiB")
    ax.set_title(title)
    ax.legend(loc="lower right")
    save_figure(fig, png_path)
