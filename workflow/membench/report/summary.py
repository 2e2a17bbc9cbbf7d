"""The summary: each system's headline rows and a verdict on every published figure, computed from
the aggregated tables and the systems' declarations (:mod:`membench.report.headlines`) alone.

A headline block is one declared row at one setting: every method's memory, time and quality in it
come from jobs of that one configuration, and the block prints the setting. Ratios are against the
block's baseline; a row whose baseline column is empty has none (no ratio, no change), and a
baseline that did not run (out of memory, failed) gives none either, with a flag. A time ratio is
shown only where both timings have at least :data:`MIN_TIMED_SAMPLES` steady-state samples, and
stays flagged where a job marked its timing unreliable (spread, load). A quality figure measured
on fewer than :data:`MIN_CASES` test cases, on one class, calibrated on fewer jobs than its risk
needs, or by a run still improving in its last epoch is flagged as degenerate and not judged.

Each published figure gets one of four verdicts: ``reproduced`` (within the figure's own
tolerance, measured in its paper's setting), ``not reproduced``, ``indicative`` (measured with
another meter or at another scale, or in the paper's setting but not judgeable; the note says
which) or ``needs a GPU or data`` (with the command that would judge it). The measured value
beside a verdict is printed as the criterion reads it (the same metric, to at least the decimals of
the published value and its tolerance), so that one printed value never gets two verdicts.
membench's own reference points are judged the same way but reported apart, as ``met`` or ``not met``.
"""

from __future__ import annotations

import math
import os
import string
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from membench.core.errors import InputError
from membench.core.evaluation import MIN_CASES, epoch_history, still_improving
from membench.report.headlines import Figure, Headline, RowSpec, headline_tables
from membench.report.views import read_table
from membench.report.wording import (
    fill_setting,
    is_missing,
    memory_ratio_words,
    memory_words,
    number_words,
    points_words,
    time_ratio_words,
)

__all__ = [
    "Block",
    "HEADLINE_COLUMNS",
    "INDICATIVE",
    "KINDS",
    "MET",
    "method_cells",
    "MethodRow",
    "MIN_CASES",
    "MIN_TIMED_SAMPLES",
    "NEEDS",
    "NOT_MEASURED",
    "NOT_MET",
    "NOT_REPRODUCED",
    "read_table_files",
    "read_tables",
    "REPRODUCED",
    "summarize",
    "Summary",
    "Verdict",
    "VERDICT_COLUMNS",
]

REPRODUCED, NOT_REPRODUCED, INDICATIVE, NEEDS = (
    "reproduced",
    "not reproduced",
    "indicative",
    "needs a GPU or data",
)
KINDS = (REPRODUCED, NOT_REPRODUCED, INDICATIVE, NEEDS)
MET, NOT_MET, NOT_MEASURED = "met", "not met", "not measured"
MIN_TIMED_SAMPLES = 3
HEADLINE_COLUMNS = (
    "system",
    "row",
    "setting",
    "method",
    "baseline",
    "status",
    "memory_figure",
    "memory_mib",
    "memory_ratio",
    "memory_vs_baseline",
    "time_figure",
    "time_s",
    "time_samples",
    "time_ratio",
    "time_vs_baseline",
    "timing_flag",
    "quality_figure",
    "quality_value",
    "quality_change",
    "quality_vs_baseline",
    "evaluation_flag",
)
VERDICT_COLUMNS = (
    "system",
    "figure",
    "published",
    "measured",
    "verdict",
    "note",
    "source",
    "cited_at",
    "paper_setting",
    "tolerance",
    "command",
    "reference_point",
)


# -- reading the tables --------------------------------------------------------------------------


def _required_columns(headlines: list[Headline]) -> dict[str, set[str]]:
    required: dict[str, set[str]] = {}
    for headline in headlines:
        for row in headline.rows:
            required.setdefault(row.table, set()).update(
                column for column in (row.method, row.baseline_column) if column
            )
    return required


def read_tables(tables_dir: str | os.PathLike, headlines: list[Headline]) -> dict[str, pd.DataFrame]:
    """The aggregated tables of ``tables_dir`` the declarations read; a missing table is left out.

    Raises InputError when the directory is missing, holds none of them, or a table cannot be
    parsed or lacks a column a declaration needs.
    """
    directory = Path(tables_dir)
    if not directory.is_dir():
        raise InputError(directory, "no such tables directory (run the workflow first, or pass --tables)")
    names = headline_tables(headlines)
    paths = [directory / f"{name}.csv" for name in names if (directory / f"{name}.csv").exists()]
    if not paths:
        raise InputError(directory, f"holds none of the tables the summary reads ({_listing(names)})")
    return read_table_files(paths, headlines)


def read_table_files(
    paths: Iterable[str | os.PathLike], headlines: list[Headline]
) -> dict[str, pd.DataFrame]:
    """The aggregated tables at ``paths``, each named by its file (``.../hotconv.csv`` is ``hotconv``).

    Raises InputError for a file no declaration reads, a name given twice, or a table that cannot
    be parsed or lacks a column a declaration needs.
    """
    required = _required_columns(headlines)
    tables: dict[str, pd.DataFrame] = {}
    for path in map(Path, paths):
        name = path.name.removesuffix(".csv")
        if name not in required:
            raise InputError(path, f"not one of the tables the summary reads ({_listing(required)})")
        if name in tables:
            raise InputError(path, f"a second {name}.csv; give each table once")
        frame = read_table(path)
        missing = sorted(column for column in required[name] if column not in frame.columns)
        if missing:
            raise InputError(
                path, f"missing column(s) {', '.join(missing)}; expected a table written by membench"
            )
        tables[name] = frame
    return tables


def _listing(names) -> str:
    return ", ".join(f"{name}.csv" for name in names)


# -- headline rows -------------------------------------------------------------------------------


@dataclass
class MethodRow:
    """One method's figures in a block; ``context`` is what it was measured with (its table row, the
    block's setting, the memory column used, a scaled column's target value). ``baseline`` is None
    where the row has none, ``no_baseline`` saying why."""

    method: str
    baseline: str | None
    context: dict
    status: str = "ok"
    no_baseline: str = ""
    memory_mib: float | None = None
    memory_ratio: float | None = None
    time_s: float | None = None
    time_samples: float | None = None
    time_ratio: float | None = None
    timing_flags: list[str] = field(default_factory=list)
    quality_value: float | None = None
    quality_change: float | None = None
    evaluation_flags: list[str] = field(default_factory=list)

    @property
    def timing_flag(self) -> str:
        return "; ".join(self.timing_flags)

    @property
    def evaluation_flag(self) -> str:
        return "; ".join(self.evaluation_flags)

    @property
    def notes(self) -> list[str]:
        """What a reader is told under the block: the flags, and why there is no baseline."""
        no_baseline = [f"no baseline: {self.no_baseline}"] if self.baseline is None else []
        return [note for note in (self.timing_flag, self.evaluation_flag) if note] + no_baseline


@dataclass
class Block:
    """A declared row at one setting: its methods, all measured in that one configuration."""

    system: str
    system_title: str
    spec: RowSpec
    setting: str
    methods: list[MethodRow]
    memory_column: str | None = None
    baselines: tuple[str, ...] = ()

    @property
    def memory_what(self) -> str | None:
        return self._what(self.spec.memory, self.memory_column)

    @staticmethod
    def _what(quantity, column) -> str | None:
        if quantity is None:
            return None
        return f"{quantity.what} ({column})" if column else quantity.what


def _number(value) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return 1.0 if value.strip().lower() == "true" else 0.0
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _is_true(value) -> bool:
    return _number(value) == 1.0


def _template_fields(template: str) -> list[str]:
    return [name for _, name, _, _ in string.Formatter().parse(template) if name]


def _clean(row: pd.Series) -> dict:
    return {key: value for key, value in row.items() if not is_missing(value)}


def _rows_of(frame: pd.DataFrame, spec: RowSpec) -> pd.DataFrame:
    for column, value in spec.select:
        if column not in frame.columns:
            return frame.iloc[0:0]
        frame = frame[[_same(cell, value) for cell in frame[column]]]
    return frame


def _blocks(system: str, title: str, spec: RowSpec, frame: pd.DataFrame) -> list[Block]:
    frame = _rows_of(frame, spec)
    if frame.empty:
        return []
    scale_column = spec.scale[0] if spec.scale else None
    keys = [c for c in _template_fields(spec.setting) if c in frame.columns and c != scale_column]
    groups = frame.groupby(keys, dropna=False, sort=False) if keys else [((), frame)]
    return [_block(system, title, spec, group) for _, group in groups]


def _measured_columns(spec: RowSpec) -> list[str]:
    quantities = (spec.memory, spec.time, spec.quality)
    return [c for q in quantities if q is not None for c in q.columns] + ["time_samples", "wall_s"]


def _block(system: str, title: str, spec: RowSpec, group: pd.DataFrame) -> Block:
    # One job listed twice (a run in two series of a table) is one run: identical measurements.
    measured = [c for c in _measured_columns(spec) if c in group.columns]
    if measured:
        group = group.drop_duplicates([spec.method, *([spec.scale[0]] if spec.scale else []), *measured])
    methods = []
    # The declared baseline first, then the methods in the table's order.
    order = sorted(dict.fromkeys(group[spec.method]), key=lambda method: method != spec.baseline)
    for method in order:
        rows = group[group[spec.method] == method]
        context = _clean(rows.iloc[0])
        # An empty baseline column is no baseline: never the method itself.
        baseline = spec.baseline or context.get(spec.baseline_column)
        if baseline is not None:
            context["baseline"] = baseline = str(baseline)
        no_baseline = "" if baseline is not None else spec.no_baseline or f"{spec.baseline_column} empty"
        status = str(context.get("status", "ok"))
        methods.append(MethodRow(str(method), baseline, context, status=status, no_baseline=no_baseline))
    block = Block(system, title, spec, "", methods)
    ok = {m.method: group[group[spec.method] == m.method] for m in methods if m.status == "ok"}
    if "status" in group.columns:
        ok = {method: rows[rows["status"].fillna("ok") == "ok"] for method, rows in ok.items()}
    if spec.memory is not None:
        _fill_memory(block, ok)
    if spec.time is not None:
        _fill_time(block, ok)
    if spec.quality is not None:
        _fill_quality(block, ok)
    setting_values = dict(methods[0].context)
    if spec.scale:
        setting_values[spec.scale[0]] = spec.scale[1]
    block.setting = fill_setting(spec.setting, setting_values)
    if spec.scale and block.memory_column:
        measured = sorted({_number(v) for rows in ok.values() for v in rows[spec.scale[0]] if _number(v)})
        how = (
            "extrapolated linearly (fixed + per-unit bytes)" if len(measured) > 1 else "scaled proportionally"
        )
        block.setting += (
            f"; memory {how} to {spec.scale[0]} {number_words(spec.scale[1])} from exact counts at "
            f"{spec.scale[0]} {', '.join(number_words(v) for v in measured)}"
        )
    if any(len(rows) > 1 for rows in ok.values()) and not spec.scale:
        block.setting += "; mean of the runs of each method"
    block.baselines = tuple(dict.fromkeys(m.baseline for m in methods if m.baseline is not None))
    return block


def _values(rows: pd.DataFrame, column: str) -> list[float]:
    if column not in rows.columns:
        return []
    return [v for v in map(_number, rows[column]) if v is not None]


def _mean(rows: pd.DataFrame, column: str) -> float | None:
    values = _values(rows, column)
    return sum(values) / len(values) if values else None


def _scaled(rows: pd.DataFrame, column: str, axis: str, target: float) -> float | None:
    """``column`` at ``axis`` = ``target``: measured there, else a line through the measured points
    (proportional through zero from a single point)."""
    points = [
        (x, y)
        for x, y in zip(map(_number, rows[axis]), map(_number, rows[column]))
        if x is not None and y is not None
    ]
    if not points:
        return None
    exact = [y for x, y in points if x == target]
    if exact:
        return sum(exact) / len(exact)
    xs = np.array([x for x, _ in points])
    ys = np.array([y for _, y in points])
    if len(set(xs)) == 1:
        return float(ys.mean() * target / xs[0])
    slope, intercept = np.polyfit(xs, ys, 1)
    return float(intercept + slope * target)


def _host_measure(column: str) -> bool:
    """Whether a memory column measures the process's host memory (its resident set)."""
    return "rss" in column.split("_")


def _on_gpu(rows: pd.DataFrame) -> bool:
    return "device" in rows.columns and any(str(device).startswith("cuda") for device in rows["device"])


def _fill_memory(block: Block, ok: dict[str, pd.DataFrame]) -> None:
    spec = block.spec
    baseline_rows = [ok[m.baseline] for m in block.methods if m.baseline in ok]
    held = [
        column
        for column in spec.memory.columns
        if any(_values(rows, column) for rows in (baseline_rows or ok.values()))
    ]
    if not held:
        return
    block.memory_column = column = held[0]
    values = {}
    for method, rows in ok.items():
        if _host_measure(column) and _on_gpu(rows):
            continue  # the process's host memory says nothing of what a GPU run holds: no figure
        values[method] = (
            _scaled(rows, column, spec.scale[0], spec.scale[1]) if spec.scale else _mean(rows, column)
        )
    for row in block.methods:
        row.context["memory_column"] = column
        if spec.scale:
            row.context[spec.scale[0]] = spec.scale[1]
        row.memory_mib = values.get(row.method)
        base = values.get(row.baseline)
        if row.memory_mib is not None and base:
            row.memory_ratio = row.memory_mib / base


def _fill_time(block: Block, ok: dict[str, pd.DataFrame]) -> None:
    column, paired_column = block.spec.time.columns[0], block.spec.time.paired
    timings, paired = {}, {}
    for method, rows in ok.items():
        first = rows.iloc[0]
        flags = []
        if "timing_reliable" in rows.columns and not all(_is_true(v) for v in rows["timing_reliable"]):
            flags += [str(v) for v in rows.get("timing_flag", pd.Series(dtype=object)) if not is_missing(v)]
            flags = flags or ["timing not marked reliable"]
        elif "timing_reliable" not in rows.columns:
            flags.append("no reliability recorded")
        timings[method] = (
            _mean(rows, column),
            _number(first.get("time_samples")),
            first.get("time_unit"),
            flags,
        )
        if paired_column:
            paired[method] = _mean(rows, paired_column)
    for row in block.methods:
        if row.method not in timings:
            continue
        row.time_s, row.time_samples, unit, flags = timings[row.method]
        row.context["time_unit"] = unit
        # The method's own flags first: they stand whatever its baseline did.
        row.timing_flags = list(flags)
        if row.time_s is None or row.baseline is None:
            continue
        # Timed in turns with the baseline in the method's own job: its ratio, whatever the
        # baseline's own job met.
        in_turns = paired.get(row.method) if row.method != row.baseline else None
        in_turns = in_turns if in_turns is not None and in_turns > 0 else None
        if in_turns is not None:
            fewest = row.time_samples or 0
        else:
            base = timings.get(row.baseline)
            if base is None or base[0] is None or base[0] <= 0:
                row.timing_flags.append(
                    _baseline_missing(block, row) or f"baseline {row.baseline}: no timing"
                )
                continue
            if row.baseline != row.method:
                row.timing_flags += [f"baseline {row.baseline}: {flag}" for flag in base[3]]
            row.timing_flags = list(dict.fromkeys(row.timing_flags))
            if base[2] != unit:
                row.timing_flags.append(f"units differ ({unit} vs the baseline's {base[2]})")
                continue
            fewest = min((s for s in (row.time_samples, base[1]) if s is not None), default=0)
        if fewest < MIN_TIMED_SAMPLES:
            row.timing_flags.append(
                f"ratio withheld: {fewest:g} timed sample(s), fewer than {MIN_TIMED_SAMPLES}"
            )
            continue
        row.time_ratio = 1 / in_turns if in_turns is not None else row.time_s / base[0]


def _baseline_missing(block: Block, row: MethodRow) -> str:
    """Why ``row`` has nothing to be compared with: no baseline, or a baseline that did not run
    (its status) or is not in the block; empty where the baseline ran."""
    if row.baseline is None:
        return f"no baseline: {row.no_baseline}"
    base = next((m for m in block.methods if m.method == row.baseline), None)
    if base is None:
        return f"baseline {row.baseline}: not measured in this setting"
    return f"baseline {row.baseline}: {base.status}" if base.status != "ok" else ""


def _fill_quality(block: Block, ok: dict[str, pd.DataFrame]) -> None:
    spec = block.spec
    column = spec.quality.columns[0]
    values = {method: _mean(rows, column) for method, rows in ok.items()}
    flags = {
        method: _degenerate(rows.iloc[0], spec) if spec.evaluation is not None else []
        for method, rows in ok.items()
    }
    for row in block.methods:
        row.quality_value = values.get(row.method)
        row.evaluation_flags = list(flags.get(row.method, []))
        base = values.get(row.baseline)
        if row.quality_value is not None and base is not None and row.baseline != row.method:
            row.quality_change = row.quality_value - base
            # A change against a degenerate baseline says as little as the baseline does.
            row.evaluation_flags += [
                f"baseline {row.baseline}: {flag}" for flag in flags.get(row.baseline, [])
            ]


def _degenerate(row: pd.Series, spec: RowSpec) -> list[str]:
    """Why a quality figure says little: too few test cases, one class, too few calibration jobs,
    still improving."""
    evaluation, reasons = spec.evaluation, []
    cases = _number(row.get(evaluation.cases)) if evaluation.cases else None
    if cases is not None and cases < MIN_CASES:
        reasons.append(f"{cases:g} test cases (fewer than {MIN_CASES})")
    classes = _number(row.get(evaluation.classes)) if evaluation.classes else None
    if classes is not None and classes < 2:
        reasons.append("a single class")
    # The fewest jobs a calibration needs is the table's: the system that calibrates computes it.
    calibrated = _number(row.get(evaluation.calibrated_on)) if evaluation.calibrated_on else None
    needed = _number(row.get(evaluation.calibration_needed)) if evaluation.calibration_needed else None
    if calibrated is not None and needed is not None and calibrated < needed:
        reasons.append(f"calibrated on {calibrated:g} jobs, fewer than the {needed:g} its risk needs")
    history = epoch_history(row.get(evaluation.history)) if evaluation.history else []
    gain = still_improving(history, evaluation.goal, evaluation.min_change, evaluation.relative)
    if gain is not None:
        change = f"{gain:.1%}" if evaluation.relative else points_words(gain).replace("+", "")
        reasons.append(f"not converged: its last epoch still improved by {change}")
    return reasons


# -- verdicts ------------------------------------------------------------------------------------


@dataclass
class Verdict:
    """A published figure (or reference point) with what was measured beside it and the verdict."""

    figure: Figure
    verdict: str
    measured: str = "-"
    note: str = ""

    @property
    def counted(self) -> bool:
        """A paper's figure (reference points are reported apart)."""
        return not self.figure.is_reference_point


def _same(measured, published) -> bool:
    if isinstance(published, bool) or isinstance(measured, bool):
        return str(measured).strip().lower() in (str(published).strip().lower(), str(int(published)))
    if isinstance(published, (int, float)):
        number = _number(measured)
        return number is not None and math.isclose(number, float(published), rel_tol=1e-3)
    text, wanted = str(measured).strip().lower(), str(published).strip().lower()
    # A device names its kind and maybe an index: cuda:0 is cuda.
    return text == wanted or text.startswith(wanted + ":")


def _mismatches(context: dict, wanted: dict) -> list[str]:
    """How ``context`` differs from ``wanted`` (column: a value, or a list of the values that match,
    None matching a column the row leaves empty)."""
    differences = []
    for key, value in wanted.items():
        accepted = value if isinstance(value, list) else [value]
        if not any(_same(context[key], a) if key in context else a is None for a in accepted):
            paper = " or ".join("not recorded" if a is None else number_words(a) for a in accepted)
            differences.append(
                f"{key} {number_words(context[key]) if key in context else 'not recorded'} (paper: {paper})"
            )
    return differences


# The metrics that compare a method with its baseline.
_RELATIVE_METRICS = ("memory_factor", "time_ratio", "speedup", "quality_change")
# Beyond this, a value rounded across a bound is at the bound to within a float's error.
_MAX_DECIMALS = 10


def _places(number: float) -> int:
    """The decimals ``number`` is written with, at most 6: ``0.731`` -> 3, ``22.0`` -> 0."""
    return len(f"{abs(number):.6f}".rstrip("0").partition(".")[2])


def _shown(figure: Figure, value: float, scale: float = 1.0) -> str:
    """``value`` (the figure's metric) times ``scale`` (100 for percent and points) to the decimals
    of the published value or of the tolerance, whichever has more (one more than the value's with
    no tolerance), and to more where fewer would round ``value`` across the criterion's bound."""
    published = _places(figure.value * scale)
    tolerance = figure.tolerance * scale
    decimals = max(published, math.ceil(-math.log10(tolerance))) if tolerance > 0 else published + 1
    decimals = min(max(decimals, 0), _MAX_DECIMALS)
    held = _holds(figure, value)
    while decimals < _MAX_DECIMALS and _holds(figure, round(value * scale, decimals) / scale) != held:
        decimals += 1
    return f"{value * scale:.{decimals}f}"


def _measure(figure: Figure, block: Block, row: MethodRow) -> tuple[float | None, str]:
    """The figure's metric for ``row``, and how it reads beside the figure's criterion."""
    metric = figure.metric
    if metric == "memory":
        if row.memory_mib is None:
            return None, "-"
        value = row.memory_mib / 1024 if figure.unit == "GiB" else row.memory_mib
        return value, f"{_shown(figure, value)} {figure.unit}"
    if metric == "memory_factor":
        if not row.memory_ratio:
            return None, "-"
        return 1 / row.memory_ratio, f"{_shown(figure, 1 / row.memory_ratio)}x less"
    if metric == "time_ratio":
        if row.time_ratio is None:
            return None, "-"
        return (
            row.time_ratio,
            f"time ratio {_shown(figure, row.time_ratio)} ({time_ratio_words(row.time_ratio)})",
        )
    if metric == "speedup":
        if row.time_ratio is None:
            return None, "-"
        return 1 / row.time_ratio, f"speedup {_shown(figure, 1 / row.time_ratio)}x"
    if metric == "quality_change":
        if row.quality_change is None:
            return None, "-"
        points = _shown(figure, row.quality_change, 100)
        return row.quality_change, f"{'' if points.startswith('-') else '+'}{points} points"
    kind = block.spec.quality.kind if metric == "quality" else figure.unit
    value = row.quality_value if metric == "quality" else _number(row.context.get(figure.column))
    if value is None:
        return None, "-"
    if kind == "agreement":
        return value, "yes" if value == 1 else (
            "no" if value == 0 else f"{_shown(figure, value, 100)}% of runs"
        )
    if kind in ("accuracy", "fraction"):
        return value, f"{_shown(figure, value, 100)}%"
    return value, _shown(figure, value)


def _holds(figure: Figure, value: float) -> bool:
    if figure.compare == "at_least":
        return value >= figure.value - figure.tolerance - 1e-12
    if figure.compare == "at_most":
        return value <= figure.value + figure.tolerance + 1e-12
    return abs(value - figure.value) <= figure.tolerance + 1e-12


def _not_judgeable(figure: Figure, block: Block, row: MethodRow) -> str:
    if figure.metric in _RELATIVE_METRICS:
        missing = _baseline_missing(block, row)
        if missing:
            return missing
    if figure.metric in ("time_ratio", "speedup") and row.timing_flags:
        return "timing flagged: " + row.timing_flag
    if figure.metric in ("quality", "quality_change", "value") and row.evaluation_flags:
        return "degenerate evaluation: " + row.evaluation_flag
    return ""


def _picks(figure: Figure, row: MethodRow) -> bool:
    if isinstance(figure.method, str):
        return row.method == figure.method
    return all(key in row.context and _same(row.context[key], value) for key, value in figure.method.items())


def _judge(figure: Figure, blocks: list[Block]) -> Verdict:
    judged, withheld, indicative, elsewhere = [], [], [], []
    for block in blocks:
        if block.system != figure.system or block.spec.id != figure.row:
            continue
        for row in block.methods:
            if not _picks(figure, row):
                continue
            value, words = _measure(figure, block, row)
            context = {**row.context, "setting": block.setting}
            differences = _mismatches(row.context, figure.requires)
            reason = _not_judgeable(figure, block, row)
            if value is None and (differences or not reason):
                reason = reason or f"{figure.metric} not measured ({row.status})"
                elsewhere.append((words, f"{row.method}: {reason}"))
            elif not differences and not reason:
                judged.append((words, _holds(figure, value)))
            elif not differences:
                # In the paper's setting, on a timing or evaluation that cannot be judged (a withheld
                # ratio, a missing baseline included): not a verdict, and not a missing GPU either.
                withheld.append((words, reason))
            elif figure.indicative_when is not None and not _mismatches(row.context, figure.indicative_when):
                note = fill_setting(figure.indicative_note, context)
                indicative.append((words, note + (f"; {reason}" if reason else "")))
            else:
                elsewhere.append((words, "another setting: " + ", ".join(differences)))
    if judged:
        held = all(ok for _, ok in judged)
        if figure.is_reference_point:
            kind = MET if held else NOT_MET
        else:
            kind = REPRODUCED if held else NOT_REPRODUCED
        note = _criterion(figure)
        if withheld:
            note += f"; {len(withheld)} more row(s) in the paper's setting not judged: " + _joined(
                reason for _, reason in withheld
            )
        return Verdict(figure, kind, _joined(w for w, _ in judged), note)
    indicative = [(w, f"in the paper's setting, not judged: {reason}") for w, reason in withheld] + indicative
    if indicative:
        return Verdict(
            figure, INDICATIVE, _joined(w for w, _ in indicative), _joined(n for _, n in indicative)
        )
    note = _joined(n for _, n in elsewhere) if elsewhere else f"{figure.row} not measured in this run"
    # A reference point of membench's own needs no paper's hardware: it was only not measured.
    kind = NOT_MEASURED if figure.is_reference_point else NEEDS
    return Verdict(figure, kind, _joined(w for w, _ in elsewhere) if elsewhere else "-", note)


def _criterion(figure: Figure) -> str:
    """What a judged figure was held to, in words."""
    value = number_words(figure.value, 4)
    if figure.compare == "within":
        return f"published {value} within {figure.tolerance:g} ({figure.tolerance_reason})"
    bound = "at least" if figure.compare == "at_least" else "at most"
    return f"{bound} {value}, tolerance {figure.tolerance:g} ({figure.tolerance_reason})"


def _joined(texts) -> str:
    """Texts joined, a repeated one counted once (``"yes (4 runs)"``)."""
    texts = [t for t in texts if t]
    counts = {text: texts.count(text) for text in dict.fromkeys(texts)}
    return "; ".join(f"{text} ({n} runs)" if n > 1 else text for text, n in counts.items()) or "-"


# -- the summary ---------------------------------------------------------------------------------


@dataclass
class Summary:
    """Headline blocks and verdicts of one run."""

    headlines: list[Headline]
    blocks: list[Block]
    verdicts: list[Verdict]

    def sources(self) -> dict[str, int]:
        """Each cited work (its citation) and its number in the reference list, in order of use."""
        cited = [v.figure.citation for v in self.verdicts if v.counted]
        return {citation: number for number, citation in enumerate(dict.fromkeys(cited), 1)}

    def counts(self) -> dict[str, int]:
        """How many of the papers' figures got each verdict (every kind listed, in order)."""
        counts = dict.fromkeys(KINDS, 0)
        for verdict in self.verdicts:
            if verdict.counted:
                counts[verdict.verdict] += 1
        return counts

    def counts_line(self) -> str:
        """The line that opens the summary: how many figures got each verdict."""
        counts = self.counts()
        total = sum(counts.values())
        judged = counts[REPRODUCED] + counts[NOT_REPRODUCED]
        line = (
            f"{total} published figures: {judged} judged in their paper's setting "
            f"({counts[REPRODUCED]} reproduced, {counts[NOT_REPRODUCED]} not reproduced), "
            f"{counts[INDICATIVE]} indicative, {counts[NEEDS]} need a GPU or data."
        )
        points = [v for v in self.verdicts if not v.counted]
        if points:
            met = sum(v.verdict == MET for v in points)
            unmeasured = sum(v.verdict == NOT_MEASURED for v in points)
            line += f" membench's own reference points (not a paper's): {met} of {len(points)} met" + (
                f", {unmeasured} not measured." if unmeasured else "."
            )
        return line

    def devices_line(self) -> str:
        """Where the run was measured, from the rows' device columns."""
        devices: dict[str, set[str]] = {}
        for block in self.blocks:
            for row in block.methods:
                device = row.context.get("device")
                if isinstance(device, str):
                    kind = "GPU" if device.startswith("cuda") else device.upper()
                    devices.setdefault(kind, set())
                    name = row.context.get("device_name")
                    if isinstance(name, str) and name:
                        devices[kind].add(name)
        where = ", ".join(
            f"{kind} ({', '.join(sorted(names))})" if names else kind
            for kind, names in sorted(devices.items())
        )
        return f"Measured on {where or 'an unrecorded device'}."

    def headline_frame(self) -> pd.DataFrame:
        """One row per block and method (columns :data:`HEADLINE_COLUMNS`)."""
        records = []
        for block in self.blocks:
            spec = block.spec
            for row in block.methods:
                records.append(
                    {
                        "system": block.system,
                        "row": spec.id,
                        "setting": block.setting,
                        "method": row.method,
                        "baseline": row.baseline or f"none ({row.no_baseline})",
                        "status": row.status,
                        "memory_figure": block.memory_what,
                        "memory_mib": row.memory_mib,
                        "memory_ratio": row.memory_ratio,
                        "memory_vs_baseline": _vs(row, row.memory_ratio, memory_ratio_words),
                        "time_figure": _time_what(block, row),
                        "time_s": row.time_s,
                        "time_samples": row.time_samples,
                        "time_ratio": row.time_ratio,
                        "time_vs_baseline": _vs(row, row.time_ratio, time_ratio_words),
                        "timing_flag": row.timing_flag,
                        "quality_figure": spec.quality.what if spec.quality else None,
                        "quality_value": row.quality_value,
                        "quality_change": row.quality_change,
                        "quality_vs_baseline": _vs(row, row.quality_change, points_words)
                        if spec.quality and spec.quality.kind == "accuracy"
                        else "",
                        "evaluation_flag": row.evaluation_flag,
                    }
                )
        return pd.DataFrame(records, columns=list(HEADLINE_COLUMNS))

    def verdict_frame(self) -> pd.DataFrame:
        """One row per figure (columns :data:`VERDICT_COLUMNS`), papers' figures first."""
        records = [
            {
                "system": v.figure.system,
                "figure": v.figure.id,
                "published": v.figure.text,
                "measured": v.measured,
                "verdict": v.verdict,
                "note": v.note,
                "source": v.figure.citation,
                "cited_at": v.figure.cited_at,
                "paper_setting": v.figure.setting,
                "tolerance": v.figure.tolerance,
                "command": v.figure.command,
                "reference_point": v.figure.is_reference_point,
            }
            for v in sorted(self.verdicts, key=lambda v: v.figure.is_reference_point)
        ]
        return pd.DataFrame(records, columns=list(VERDICT_COLUMNS))


def _vs(row: MethodRow, value, words) -> str:
    if row.baseline is None:
        return "no baseline"
    return "baseline" if row.method == row.baseline else words(value)


def method_cells(block: Block, row: MethodRow, flagged: str) -> list[str]:
    """``row`` as the terminal and the page show it: method, memory, memory against the baseline,
    time against the baseline, quality, quality against the baseline, with ``flagged`` after a
    flagged timing or evaluation. A method that did not run shows its status (out of memory,
    failed) in place of each figure, a baseline's included."""
    spec = block.spec
    is_baseline = row.method == row.baseline
    memory = memory_vs = time = quality = change = "-"
    if row.status != "ok":
        memory, time, quality = (
            row.status if q is not None else "-" for q in (spec.memory, spec.time, spec.quality)
        )
    else:
        if spec.memory is not None:
            memory = memory_words(row.memory_mib, spec.memory.unit)
            memory_vs = _vs(row, row.memory_ratio, memory_ratio_words)
        if spec.time is not None:
            time = _vs(row, row.time_ratio, time_ratio_words)
            if row.timing_flags and (is_baseline or row.time_ratio is not None):
                time += flagged
        if spec.quality is not None:
            if row.quality_value is not None:
                quality = _quality_words(row.quality_value, spec.quality.kind)
                quality += flagged if row.evaluation_flags else ""
            if spec.quality.kind == "accuracy" or is_baseline or row.baseline is None:
                change = _vs(row, row.quality_change, points_words)
    # Each method against its own baseline (robust: the sequential run on the same cores): named.
    named = len(block.baselines) > 2 and not is_baseline and row.baseline is not None
    return [
        f"{row.method} (vs {row.baseline})" if named else row.method,
        memory,
        memory_vs,
        time,
        quality,
        change,
    ]


def _quality_words(value: float, kind: str | None) -> str:
    if kind == "agreement":
        return "yes" if value == 1 else ("no" if value == 0 else f"{value:.0%} of runs")
    return f"{value:.1%}"


def _time_what(block: Block, row: MethodRow) -> str | None:
    if block.spec.time is None:
        return None
    unit = row.context.get("time_unit")
    return f"{block.spec.time.what}" + (f" (median s per {unit})" if isinstance(unit, str) and unit else "")


def summarize(tables: dict[str, pd.DataFrame], headlines: list[Headline]) -> Summary:
    """The headline blocks of every declared row found in ``tables`` and a verdict on every figure."""
    blocks = [
        block
        for headline in headlines
        for spec in headline.rows
        if spec.table in tables
        for block in _blocks(headline.system, headline.title, spec, tables[spec.table])
    ]
    verdicts = [_judge(figure, blocks) for headline in headlines for figure in headline.figures]
    return Summary(headlines, blocks, verdicts)
