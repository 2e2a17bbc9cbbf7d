"""The headline table: per system and method, the memory figure that reflects the method, its
ratio to the system's baseline, the time ratio, the quality change, and the published figure with
a verdict (met / not met / not comparable).

Memory figures are a training step's allocator-level peak or its exact activation bytes (never a
job-level peak dominated by the input batch or optimizer state). Times are the median of
steady-state epochs or steps (``time_median_s``) where a job recorded one; otherwise the best
column the table holds, labelled, and flagged as of unknown reliability.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from membench.core.errors import InputError
from membench.report.views import read_table

__all__ = [
    "HEADLINE_COLUMNS",
    "headline_from_tables",
    "headline_table",
    "read_table_files",
    "read_tables",
    "scale_line",
    "TABLE_KEYS",
]

# The aggregated tables the headline reads, with the columns each must hold to be read at all.
TABLE_KEYS: dict[str, tuple[str, ...]] = {
    "hotconv": ("variant",),
    "hotconv_sweep": ("variant", "max_len", "batch_size"),
    "hotconv_bench": ("variant", "max_len", "batch_size"),
    "division_memory": ("variant", "batch_size"),
    "division_speed": ("variant", "batch_size"),
    "division_accuracy": ("variant",),
    "appclass": ("variant", "dataset", "implementation"),
    "memnet": ("dataset", "family", "estimator"),
    "robust": ("variant", "baseline_variant"),
}
HEADLINE_COLUMNS = (
    "system",
    "dataset",
    "method",
    "baseline",
    "memory_figure",
    "memory_mib",
    "memory_ratio",
    "time_figure",
    "time_ratio",
    "timing_flag",
    "quality",
    "quality_value",
    "quality_change",
    "quality_detail",
    "published",
    "verdict",
    "note",
)
MET, NOT_MET, NOT_COMPARABLE, NO_FIGURE = "met", "not met", "not comparable", "no published figure"
_UNRELIABLE = "no steady-state median or reliability recorded"


def read_tables(tables_dir: str | os.PathLike) -> dict[str, pd.DataFrame]:
    """The aggregated tables of ``tables_dir`` the headline reads; a missing table is left out.

    Raises InputError when the directory is missing, holds none of the tables, or a table cannot
    be parsed or lacks a column the headline needs.
    """
    directory = Path(tables_dir)
    if not directory.is_dir():
        raise InputError(directory, "no such tables directory (run the workflow first, or pass --tables)")
    paths = [directory / f"{name}.csv" for name in TABLE_KEYS if (directory / f"{name}.csv").exists()]
    if not paths:
        expected = ", ".join(f"{name}.csv" for name in TABLE_KEYS)
        raise InputError(directory, f"holds none of the aggregated tables ({expected})")
    return read_table_files(paths)


def read_table_files(paths: Iterable[str | os.PathLike]) -> dict[str, pd.DataFrame]:
    """The aggregated tables at ``paths``, each named by its file (``.../hotconv.csv`` is ``hotconv``).

    Raises InputError for a file whose name is not one of the tables the headline reads
    (:data:`TABLE_KEYS`), a name given twice, or a table that cannot be parsed or lacks a column
    the headline needs.
    """
    tables = {}
    for path in map(Path, paths):
        name = path.name.removesuffix(".csv")
        if name not in TABLE_KEYS:
            expected = ", ".join(f"{known}.csv" for known in TABLE_KEYS)
            raise InputError(path, f"not one of the aggregated tables the headline reads ({expected})")
        if name in tables:
            raise InputError(path, f"a second {name}.csv; give each table once")
        frame = read_table(path)
        missing = [key for key in TABLE_KEYS[name] if key not in frame.columns]
        if missing:
            raise InputError(
                path, f"missing column(s) {', '.join(missing)}; expected a table written by membench"
            )
        tables[name] = frame
    return tables


def headline_table(tables_dir: str | os.PathLike, published: list[dict]) -> pd.DataFrame:
    """One row per system, dataset and method (columns ``HEADLINE_COLUMNS``).

    ``memory_ratio`` and ``time_ratio`` are the method's figure divided by the baseline's (below 1:
    less memory, faster); ``quality_change`` is the method's quality figure minus the baseline's;
    ``quality_detail`` adds what one number cannot say (under-estimation rate, clean accuracy,
    difference from the reference); ``timing_flag`` is empty only when both timings were marked
    reliable by their jobs. Systems whose tables are missing have no rows.
    """
    return headline_from_tables(read_tables(tables_dir), published)


def headline_from_tables(tables: dict[str, pd.DataFrame], published: list[dict]) -> pd.DataFrame:
    """``headline_table`` over tables already read (see ``read_tables``)."""
    rows = [row for row, _ in _judged_rows(tables, published)]
    frame = pd.DataFrame([{column: row.get(column) for column in HEADLINE_COLUMNS} for row in rows])
    return frame if rows else pd.DataFrame(columns=HEADLINE_COLUMNS)


def _judged_rows(tables: dict[str, pd.DataFrame], published: list[dict]) -> list[tuple[dict, list[str]]]:
    """Each headline row (as a dict) with the verdicts of the published figures beside it."""
    rows = [row for extract in (_hotconv, _division, _appclass, _memnet, _robust) for row in extract(tables)]
    return [(row, _judge(row, published)) for row in rows]


def scale_line(tables: dict[str, pd.DataFrame], published: list[dict]) -> str:
    """One line saying where and at what scale the run was measured, from the tables alone."""
    devices: dict[str, set[str]] = {}
    for frame in tables.values():
        if "device" not in frame.columns:
            continue
        for device, name in zip(frame["device"], frame.get("device_name", pd.Series([None] * len(frame)))):
            if isinstance(device, str):
                kind = "GPU" if device.startswith("cuda") else device.upper()
                devices.setdefault(kind, set())
                if isinstance(name, str) and name:
                    devices[kind].add(name)
    where = ", ".join(
        f"{kind} ({', '.join(sorted(names))})" if names else kind for kind, names in sorted(devices.items())
    )
    verdicts = [verdict for _, row_verdicts in _judged_rows(tables, published) for verdict in row_verdicts]
    total, comparable = len(verdicts), sum(verdict in (MET, NOT_MET) for verdict in verdicts)
    if total == 0:
        setting = "no published figure applies to the methods measured"
    elif comparable == 0:
        setting = (
            f"none of the {total} published figures beside a measured one is in its paper's hardware,"
            " scale and data: not the paper setting"
        )
    elif comparable == total:
        setting = f"all {total} published figures beside a measured one are in their paper's setting"
    else:
        setting = (
            f"{comparable} of {total} published figures beside a measured one are in their paper's setting"
        )
    return f"Measured on {where or 'an unrecorded device'}; {setting}."


# -- reading figures out of the tables ---------------------------------------------------------------


def _value(row: pd.Series | dict, column: str) -> float | None:
    """A finite number from ``row[column]``, else None."""
    value = row.get(column) if column in row else None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _first_column(
    frame: pd.DataFrame, columns: tuple[str, ...], baseline: pd.Series | None = None
) -> str | None:
    """The first of ``columns`` that holds a number in ``frame``; with ``baseline`` (a row mask),
    the first that holds one in a baseline row too (so that it gives ratios), if any does."""
    held = [
        c for c in columns if c in frame.columns and pd.to_numeric(frame[c], errors="coerce").notna().any()
    ]
    if baseline is not None:
        for column in held:
            if pd.to_numeric(frame.loc[baseline, column], errors="coerce").notna().any():
                return column
    return held[0] if held else None


def _is_true(value) -> bool:
    return (
        value is True
        or (isinstance(value, str) and value.strip().lower() == "true")
        or (isinstance(value, (int, float)) and not isinstance(value, bool) and value == 1)
    )


def _timing(row: pd.Series, fallbacks: tuple[tuple[str, str, bool], ...]) -> tuple[float, str, str] | None:
    """(seconds, what they are, flag) of a job's timing; flag is empty only when reliable.

    ``fallbacks``: (column, label, per_second) tried in order when the job recorded no
    ``time_median_s``; a per-second column (a throughput) is inverted into seconds per unit.
    """
    median = _value(row, "time_median_s")
    if median is not None:
        unit = row.get("time_unit")
        label = f"median s per {unit}" if isinstance(unit, str) and unit else "median s (steady state)"
        if _is_true(row.get("timing_reliable")):
            return median, label, ""
        flag = row.get("timing_flag")
        return median, label, flag if isinstance(flag, str) and flag else "timing not marked reliable"
    for column, label, per_second in fallbacks:
        value = _value(row, column)
        if value is not None and value > 0:
            return (1.0 / value if per_second else value), label, _UNRELIABLE
    return None


def _context(row: pd.Series) -> dict:
    return {key: value for key, value in row.items() if not (isinstance(value, float) and math.isnan(value))}


def _method_row(system: str, dataset: str, method: str, baseline: str) -> dict:
    return {
        "system": system,
        "dataset": dataset,
        "method": method,
        "baseline": baseline,
        "figures": {},
        "context": {},
    }


def _values_by(frame: pd.DataFrame, key: str, column: str) -> dict:
    """``{row[key]: (value of column, the row's context)}`` over the rows that hold a value."""
    return {
        row[key]: (_value(row, column), _context(row))
        for _, row in frame.iterrows()
        if _value(row, column) is not None
    }


def _set_memory(rows: dict[str, dict], frame: pd.DataFrame, column: str, key: str, baseline_of) -> None:
    values = _values_by(frame, key, column)
    for method, (value, context) in values.items():
        if method not in rows:
            continue
        target = rows[method]
        target["memory_figure"], target["memory_mib"] = column, value
        target["context"].update(context)
        base = values.get(baseline_of(method))
        if base is not None and base[0] > 0:
            target["memory_ratio"] = value / base[0]
            target["figures"]["memory_ratio"] = (value / base[0], context)


def _set_time(rows: dict[str, dict], frame: pd.DataFrame, key: str, baseline_of, fallbacks) -> None:
    timings = {}
    for _, row in frame.iterrows():
        timing = _timing(row, fallbacks)
        if timing is not None:
            timings[row[key]] = (*timing, _context(row))
    for method, (seconds, label, flag, context) in timings.items():
        if method not in rows:
            continue
        target = rows[method]
        target["context"].update(context)
        base = timings.get(baseline_of(method))
        if base is None or base[1] != label or base[0] <= 0:
            continue
        if flag == base[2] or baseline_of(method) == method:
            flags = [flag] if flag else []
        else:
            flags = [
                f"{who}: {text}" for who, text in ((method, flag), (baseline_of(method), base[2])) if text
            ]
        target["time_figure"], target["time_ratio"] = label, seconds / base[0]
        target["timing_flag"] = "; ".join(flags)
        target["figures"]["time_ratio"] = (seconds / base[0], context, bool(flags))
        target["figures"]["speedup"] = (base[0] / seconds, context, bool(flags))


def _set_quality(
    rows: dict[str, dict], frame: pd.DataFrame, key: str, column: str, label: str, baseline_of
) -> None:
    values = _values_by(frame, key, column)
    for method, (value, context) in values.items():
        if method not in rows:
            continue
        target = rows[method]
        target["context"].update(context)
        target["quality"], target["quality_value"] = label, value
        base = values.get(baseline_of(method))
        if base is not None:
            target["quality_change"] = value - base[0]
            target["figures"]["accuracy_delta"] = (value - base[0], context)


def _largest_point(frame: pd.DataFrame, axes: tuple[str, ...]) -> pd.DataFrame:
    """The rows of ``frame`` at its largest point along ``axes`` (compared in order) that ran."""
    if "status" in frame.columns:
        frame = frame[frame["status"].fillna("ok") == "ok"]
    if frame.empty:
        return frame
    top = frame.sort_values(list(axes), ascending=False).iloc[0]
    return frame[(frame[list(axes)] == top[list(axes)]).all(axis=1)]


def _hotconv(tables: dict[str, pd.DataFrame]) -> list[dict]:
    # The paper model's sweep (run by name: hotconv_bench) is the closer to the paper where it exists.
    sweep = tables.get("hotconv_bench", tables.get("hotconv_sweep"))
    train = tables.get("hotconv")
    methods = set()
    point = None
    if sweep is not None:
        point = _largest_point(sweep, ("max_len", "batch_size"))
        methods |= set(point["variant"])
    if train is not None:
        methods |= set(train["variant"])
    if not methods:
        return []
    baseline = "malconv2"
    dataset = str(train["dataset"].iloc[0]) if train is not None and "dataset" in train.columns else ""
    rows = {m: _method_row("hotconv", dataset, m, baseline) for m in sorted(methods)}
    if point is not None and (column := _first_column(point, ("step_alloc_peak_mib", "step_activation_mib"))):
        _set_memory(rows, point, column, "variant", lambda m: baseline)
    elif train is not None and (column := _first_column(train, ("train_activation_mib",))):
        _set_memory(rows, train, column, "variant", lambda m: baseline)
    if train is not None:
        _set_time(
            rows,
            train,
            "variant",
            lambda m: baseline,
            (("time_per_epoch_s", "mean s per epoch (first included)", False),),
        )
        _set_quality(rows, train, "variant", "test_accuracy", "test accuracy", lambda m: baseline)
    return list(rows.values())


def _division(tables: dict[str, pd.DataFrame]) -> list[dict]:
    memory, speed, accuracy = (tables.get(f"division_{part}") for part in ("memory", "speed", "accuracy"))
    parts = [frame for frame in (memory, speed, accuracy) if frame is not None]
    if not parts:
        return []
    baseline = "vanilla"
    methods = sorted(set().union(*(set(frame["variant"]) for frame in parts)))
    dataset = (
        str(accuracy["dataset"].iloc[0]) if accuracy is not None and "dataset" in accuracy.columns else ""
    )
    rows = {m: _method_row("division", dataset, m, baseline) for m in methods}
    if memory is not None:
        point = _largest_point(memory, ("batch_size",))
        if column := _first_column(point, ("activation_mib", "step_activation_mib", "step_alloc_peak_mib")):
            _set_memory(rows, point, column, "variant", lambda m: baseline)
    if speed is not None:
        fallbacks = (("images_per_s", "s per image (1 / median throughput)", True),)
        _set_time(rows, _largest_point(speed, ("batch_size",)), "variant", lambda m: baseline, fallbacks)
    if accuracy is not None:
        _set_quality(rows, accuracy, "variant", "val_accuracy", "val accuracy", lambda m: baseline)
    return list(rows.values())


def _appclass(tables: dict[str, pd.DataFrame]) -> list[dict]:
    frame = tables.get("appclass")
    if frame is None or frame.empty:
        return []
    # The largest graph pair measured: where implementations differ most.
    if "data_edges" in frame.columns and frame["data_edges"].notna().any():
        dataset = frame.loc[frame["data_edges"].idxmax(), "dataset"]
    else:
        dataset = frame["dataset"].iloc[-1]
    pair = frame[frame["dataset"] == dataset]
    references = pair.loc[pair["implementation"] == "reference", "variant"]
    baseline = references.iloc[0] if len(references) else pair["variant"].iloc[0]
    rows = {m: _method_row("appclass", str(dataset), m, baseline) for m in pair["variant"]}
    # The NumPy reference allocates outside torch, so it may have no allocator peak: then the
    # RSS growth of the algorithm is the figure both sides have.
    memory_columns = ("iterations_alloc_peak_mib", "alloc_peak_mib", "algorithm_rss_mib")
    if column := _first_column(pair, memory_columns, baseline=pair["variant"] == baseline):
        _set_memory(rows, pair, column, "variant", lambda m: baseline)
    _set_time(
        rows,
        pair,
        "variant",
        lambda m: baseline,
        (("iterations_ms", "ms of belief-propagation iterations", False),),
    )
    for _, row in pair.iterrows():
        target = rows[row["variant"]]
        target["quality"] = "agrees with the reference (1 yes, 0 no)"
        if row["variant"] == baseline:
            target["quality_detail"] = "the reference"
            continue
        agrees = row.get("agrees_with_reference")
        if agrees is None or (isinstance(agrees, float) and math.isnan(agrees)):
            continue
        difference = _value(row, "reference_max_abs_diff")
        target["quality_value"] = 1.0 if _is_true(agrees) else 0.0
        target["quality_detail"] = ("agrees" if _is_true(agrees) else "DIFFERS") + (
            f", max abs diff {difference:.2g}" if difference is not None else ""
        )
    return list(rows.values())


def _memnet(tables: dict[str, pd.DataFrame]) -> list[dict]:
    frame = tables.get("memnet")
    if frame is None:
        return []
    rows = []
    for dataset, group in frame.groupby("dataset", sort=False):
        horus = group[group["estimator"] == "horus"]
        horus_accuracy = _value(horus.iloc[0], "accuracy") if len(horus) else None
        for _, row in group.iterrows():
            target = _method_row("memnet", str(dataset), str(row["estimator"]), "horus")
            context = _context(row) | {"published_data": not str(dataset).startswith("measured_")}
            target["context"] = context
            accuracy, under = _value(row, "accuracy"), _value(row, "under_rate")
            if accuracy is not None:
                target["quality"], target["quality_value"] = "estimator accuracy", accuracy
                target["figures"]["accuracy"] = (accuracy, context)
                if horus_accuracy is not None:
                    target["quality_change"] = accuracy - horus_accuracy
            if under is not None:
                target["quality_detail"] = f"under-estimation {under:.1%}"
                target["figures"]["under_rate"] = (under, context)
            rows.append(target)
    return rows


def _robust(tables: dict[str, pd.DataFrame]) -> list[dict]:
    frame = tables.get("robust")
    if frame is None or frame.empty:
        return []
    # A run listed under both strong and weak scaling is one job: keep one row per run.
    keys = [column for column in ("variant", "eps") if column in frame.columns]
    runs = frame.drop_duplicates(keys).copy()
    several_eps = "eps" in runs.columns and runs["eps"].nunique() > 1
    runs["method"] = [
        f"{row['variant']} (eps {row['eps']:g})" if several_eps else row["variant"]
        for _, row in runs.iterrows()
    ]
    baseline_of = {}
    for _, row in runs.iterrows():
        base = row["baseline_variant"]
        same = runs[(runs["variant"] == base) & ((runs["eps"] == row["eps"]) if several_eps else True)]
        baseline_of[row["method"]] = same["method"].iloc[0] if len(same) else row["method"]
    dataset = str(runs["dataset"].iloc[0]) if "dataset" in runs.columns else ""
    rows = {m: _method_row("robust", dataset, m, baseline_of[m]) for m in runs["method"]}
    if column := _first_column(runs, ("train_alloc_peak_mib",)):
        _set_memory(rows, runs, column, "method", baseline_of.get)
    _set_time(rows, runs, "method", baseline_of.get, (("train_wall_s", "s of training (wall)", False),))
    _set_quality(rows, runs, "method", "robust_accuracy", "robust accuracy", baseline_of.get)
    for _, row in runs.iterrows():
        target = rows[row["method"]]
        for metric in ("clean_accuracy", "robust_accuracy"):
            if _value(row, metric) is not None:
                target["figures"][metric] = (_value(row, metric), _context(row))
        if _value(row, "clean_accuracy") is not None:
            target["quality_detail"] = f"clean accuracy {_value(row, 'clean_accuracy'):.3g}"
    return list(rows.values())


# -- the verdict ----------------------------------------------------------------------------------


def _same(measured, published) -> bool:
    if isinstance(published, bool) or isinstance(measured, bool):
        return str(measured).strip().lower() == str(published).strip().lower()
    if isinstance(published, (int, float)):
        try:
            return math.isclose(float(measured), float(published), rel_tol=1e-3)
        except (TypeError, ValueError):
            return False
    return str(measured).strip().lower() == str(published).strip().lower()


def _matches(context: dict, match: dict) -> bool:
    return all(key in context and _same(context[key], value) for key, value in match.items())


def _mismatches(context: dict, requires: dict) -> list[str]:
    differences = []
    for key, value in requires.items():
        if key not in context:
            differences.append(f"{key} not recorded (paper {value})")
        elif not _same(context[key], value):
            differences.append(f"{key} {context[key]} (paper {value})")
    return differences


def _judge(row: dict, published: list[dict]) -> list[str]:
    """Fill the row's published, verdict and note columns; return the verdict of each figure."""
    texts, notes, verdicts = [], [], []
    for figure in published:
        if figure["system"] != row["system"] or not _matches(row["context"], figure["match"]):
            continue
        texts.append(f"{figure['text']} [{figure['id']}]")
        measured = row["figures"].get(figure["metric"])
        if measured is None:
            verdicts.append(NOT_COMPARABLE)
            notes.append(f"{figure['id']}: {figure['metric']} not measured in this run")
            continue
        value, context, *flagged = measured
        differences = _mismatches(context, figure["requires"])
        if differences:
            verdicts.append(NOT_COMPARABLE)
            notes.append(f"{figure['id']}: other setting: {', '.join(differences)}")
        elif flagged and flagged[0]:
            verdicts.append(NOT_COMPARABLE)
            notes.append(f"{figure['id']}: timing flagged (see timing_flag)")
        else:
            if figure["compare"] == "at_most":
                met = value <= figure["value"] + figure["tolerance"]
            else:
                met = value >= figure["value"] - figure["tolerance"]
            verdicts.append(MET if met else NOT_MET)
            notes.append(
                f"{figure['id']}: measured {figure['metric']} {value:.4g} vs published {figure['value']:g}"
            )
    row["published"] = "; ".join(texts)
    row["note"] = "; ".join(notes)
    comparable = [v for v in verdicts if v != NOT_COMPARABLE]
    if not verdicts:
        row["verdict"] = NO_FIGURE
    elif not comparable:
        row["verdict"] = NOT_COMPARABLE
    else:
        row["verdict"] = NOT_MET if NOT_MET in comparable else MET
    return verdicts
