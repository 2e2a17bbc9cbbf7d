"""Each system's headline, declared as data (``resources/headlines/<system>.yaml``), read and checked.

A declaration says what the summary shows for its system and which published figures it judges,
so that the summary code names no system:

``system``, ``title``
    the system's name (its tables' ``system``) and how the summary titles it.
``sources``
    ``{id: citation}``: the works its figures come from, each cited by authors, title, venue or
    arXiv id, in words a reader can look up. The id ``membench`` is reserved for membench's own
    reference points, which are labelled as such and never counted as a paper's figures.
``rows``
    the headline rows, one entry per measured setting. Each names its aggregated ``table``, the
    ``method`` column, the ``baseline`` method (or ``baseline_column``: a column naming each row's
    own baseline, with ``no_baseline`` saying why the column may be empty: such a row has no ratio
    to a baseline), a ``setting`` text whose ``{column}`` fields are filled from the table (one
    headline block per distinct setting: a row's memory, time and quality always come from one
    configuration), an optional ``select`` (column: value) and what it shows: ``memory``
    (``columns``, the first that holds a value for the baseline is used; ``what``; optional ``unit``
    ``MiB`` | ``GiB``), ``time`` (``column``, seconds per ``time_unit``;
    optional ``paired``, a column of the baseline's time over the method's, timed in turns in the
    method's job), ``quality`` (``column``,
    ``what``, ``kind`` ``accuracy`` | ``agreement`` | ``fraction``) and ``evaluation`` (the columns
    that say how many test ``cases`` and ``classes`` the quality was measured on, how many jobs it
    was ``calibrated_on`` and the fewest its risk needs (``calibration_needed``), and the per-epoch
    ``history`` with its ``goal`` ``max`` | ``min`` and ``min_change``, ``relative`` or not, above
    which a last epoch counts as still improving). ``scale`` (``column``, ``to``) states a memory
    figure at another value of ``column`` (the batch size): exact byte counts measured at two or more
    values are extrapolated linearly (fixed + per-item bytes), at one value proportionally.
``figures``
    the published figures: ``row`` and ``method`` (a name, or a mapping of columns that picks the
    methods) say what is compared; ``metric`` is ``memory`` (in ``unit``), ``memory_factor`` (the
    baseline's memory / the method's), ``time_ratio`` (the method's time / the baseline's),
    ``speedup`` (its inverse), ``quality``, ``quality_change`` (the method's minus the baseline's)
    or ``value`` (of ``column``); ``value`` with ``compare`` ``within`` | ``at_least`` | ``at_most``
    and the figure's own ``tolerance`` (``tolerance_reason`` says where it comes from: the printed
    precision, or the paper's stated bound); ``text`` says it as the source does, ``source`` and
    ``cited_at`` (table or figure) where, ``setting`` in what setting; ``requires`` (column: value)
    is that setting as the table records it: a figure is judged only where the measured row matches
    it. A value may be a list of the values that match, ``null`` among them for a column the row
    leaves empty (an option left to its default: ``width: [null, 64]``). ``indicative`` (``when``,
    ``note``) is where the measured value is still worth setting beside the figure (another meter
    or scale; the note says which), and ``command`` is what would judge it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from membench.core.errors import InputError
from membench.core.validate import read_yaml

__all__ = [
    "COMPARISONS",
    "default_headlines_dir",
    "Evaluation",
    "Figure",
    "Headline",
    "headline_tables",
    "load_headline",
    "load_headlines",
    "MEMBENCH_SOURCE",
    "METRICS",
    "QUALITY_KINDS",
    "Quantity",
    "RowSpec",
]

MEMBENCH_SOURCE = "membench"
METRICS = ("memory", "memory_factor", "time_ratio", "speedup", "quality", "quality_change", "value")
COMPARISONS = ("within", "at_least", "at_most")
QUALITY_KINDS = ("accuracy", "agreement", "fraction")
MEMORY_UNITS = ("MiB", "GiB")


@dataclass(frozen=True)
class Quantity:
    """A figure a headline row shows: the first of ``columns`` that holds a value, what it is; for
    a time, ``paired``: a column holding the baseline's time over the method's, timed in turns in
    the method's own job, which gives the ratio where a row has it (a change of load between two
    jobs moves the ratio of their medians)."""

    columns: tuple[str, ...]
    what: str
    unit: str | None = None
    kind: str | None = None
    paired: str | None = None


@dataclass(frozen=True)
class Evaluation:
    """Columns that say whether a quality figure is degenerate (too few cases, one class, fewer
    calibration jobs than its risk needs, still improving)."""

    cases: str | None = None
    classes: str | None = None
    calibrated_on: str | None = None
    calibration_needed: str | None = None
    history: str | None = None
    goal: str = "max"
    min_change: float = 0.005
    relative: bool = False


@dataclass(frozen=True)
class RowSpec:
    """One measured setting of a system's headline (see the module docstring)."""

    id: str
    title: str
    table: str
    method: str
    setting: str
    baseline: str | None = None
    baseline_column: str | None = None
    no_baseline: str | None = None
    select: tuple[tuple[str, Any], ...] = ()
    scale: tuple[str, float] | None = None
    memory: Quantity | None = None
    time: Quantity | None = None
    quality: Quantity | None = None
    evaluation: Evaluation | None = None


@dataclass(frozen=True)
class Figure:
    """One published figure (or membench reference point) and how it is judged."""

    id: str
    system: str
    row: str
    method: Any
    metric: str
    value: float
    compare: str
    tolerance: float
    tolerance_reason: str
    text: str
    source: str
    citation: str
    cited_at: str
    setting: str
    requires: dict
    command: str
    column: str | None = None
    unit: str | None = None
    indicative_when: dict | None = None
    indicative_note: str | None = None

    @property
    def is_reference_point(self) -> bool:
        """membench's own reference point, not a paper's figure."""
        return self.source == MEMBENCH_SOURCE


@dataclass(frozen=True)
class Headline:
    """A system's declared headline: its rows and its figures."""

    system: str
    title: str
    rows: tuple[RowSpec, ...]
    figures: tuple[Figure, ...]
    path: str


def default_headlines_dir() -> Path:
    """``resources/headlines`` of the checkout this package runs from."""
    return Path(__file__).resolve().parents[3] / "resources" / "headlines"


def load_headlines(paths) -> list[Headline]:
    """The declarations at ``paths`` (files, or directories whose ``*.yaml`` are read), in order.

    Raises InputError naming the file and the key for a malformed declaration, a system declared
    twice or a figure id used twice.
    """
    files: list[Path] = []
    for path in map(Path, [paths] if isinstance(paths, (str, os.PathLike)) else paths):
        files.extend(sorted(path.glob("*.yaml")) if path.is_dir() else [path])
    headlines: list[Headline] = []
    figure_ids: set[str] = set()
    for path in files:
        headline = load_headline(path)
        if any(other.system == headline.system for other in headlines):
            raise InputError(path, f"system {headline.system!r} is declared twice", "key 'system'")
        for figure in headline.figures:
            if figure.id in figure_ids:
                raise InputError(path, f"figure id {figure.id!r} is used twice", "key 'figures'")
            figure_ids.add(figure.id)
        headlines.append(headline)
    return headlines


def headline_tables(headlines: list[Headline]) -> list[str]:
    """The aggregated tables the declarations read, in order of first mention."""
    return list(dict.fromkeys(row.table for headline in headlines for row in headline.rows))


def load_headline(path: str | os.PathLike) -> Headline:
    """One system's declaration (see the module docstring), checked."""
    document = read_yaml(path, missing="headline declaration not found")
    reader = _Reader(path)
    document = reader.mapping(document, "the document")
    system = reader.text(document, "system")
    sources = reader.mapping(document.get("sources"), "sources")
    for key, citation in sources.items():
        reader.text(sources, key, f"sources.{key}")
    if MEMBENCH_SOURCE in sources:
        raise InputError(
            path, f"source id {MEMBENCH_SOURCE!r} is reserved for membench's own reference points"
        )
    rows = tuple(reader.row(entry, index) for index, entry in enumerate(reader.items(document, "rows")))
    row_ids = [row.id for row in rows]
    if len(set(row_ids)) != len(row_ids):
        raise InputError(path, "two rows share an id", "key 'rows'")
    figures = tuple(
        reader.figure(entry, index, system, sources, rows)
        for index, entry in enumerate(reader.items(document, "figures", allow_empty=True))
    )
    return Headline(system, reader.text(document, "title"), rows, figures, os.fspath(path))


class _Reader:
    """Typed lookups into a declaration, each failure an InputError naming the file and key."""

    def __init__(self, path):
        self.path = path

    def fail(self, where: str, problem: str):
        raise InputError(self.path, problem, f"key '{where}'")

    def mapping(self, value, where: str) -> dict:
        if not isinstance(value, dict) or not value:
            self.fail(where, "expected a non-empty mapping")
        return value

    def items(self, document: dict, key: str, allow_empty: bool = False) -> list:
        value = document.get(key, [] if allow_empty else None)
        if not isinstance(value, list) or not (value or allow_empty):
            self.fail(key, "expected a non-empty list")
        return value

    def text(self, entry: dict, key: str, where: str | None = None, optional: bool = False) -> str | None:
        value = entry.get(key)
        if value is None and optional:
            return None
        if not isinstance(value, str) or not value.strip():
            self.fail(where or key, "expected a non-empty text")
        return value.strip()

    def number(self, entry: dict, key: str, where: str, optional: bool = False) -> float | None:
        value = entry.get(key)
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(where, f"expected a number, not {value!r}")
        return float(value)

    def choice(self, entry: dict, key: str, allowed, where: str, default=None) -> str:
        value = entry.get(key, default)
        if value not in allowed:
            self.fail(where, f"is {value!r}, expected one of {', '.join(map(str, allowed))}")
        return value

    def known(self, entry: dict, keys: tuple[str, ...], where: str) -> None:
        unknown = sorted(set(entry) - set(keys))
        if unknown:
            self.fail(f"{where}.{unknown[0]}", f"unknown key (known: {', '.join(keys)})")

    def quantity(self, entry: dict, key: str, where: str) -> Quantity | None:
        value = entry.get(key)
        if value is None:
            return None
        value = self.mapping(value, f"{where}.{key}")
        allowed = ("columns", "column", "what", "unit", "kind") + (("paired",) if key == "time" else ())
        self.known(value, allowed, f"{where}.{key}")
        columns = value.get("columns", [value.get("column")])
        if not isinstance(columns, list) or not all(isinstance(c, str) and c for c in columns):
            self.fail(f"{where}.{key}.columns", "expected a list of column names")
        unit = value.get("unit")
        if key == "memory" and unit is not None and unit not in MEMORY_UNITS:
            self.fail(f"{where}.{key}.unit", f"expected one of {', '.join(MEMORY_UNITS)}")
        kind = None
        if key == "quality":
            kind = self.choice(value, "kind", QUALITY_KINDS, f"{where}.{key}.kind", default="accuracy")
        paired = self.text(value, "paired", f"{where}.{key}.paired", optional=True)
        return Quantity(tuple(columns), self.text(value, "what", f"{where}.{key}.what"), unit, kind, paired)

    def row(self, entry, index: int) -> RowSpec:
        where = f"rows[{index}]"
        entry = self.mapping(entry, where)
        self.known(
            entry,
            (
                "id",
                "title",
                "table",
                "method",
                "baseline",
                "baseline_column",
                "no_baseline",
                "setting",
                "select",
                "scale",
                "memory",
                "time",
                "quality",
                "evaluation",
            ),
            where,
        )
        baseline = self.text(entry, "baseline", f"{where}.baseline", optional=True)
        baseline_column = self.text(entry, "baseline_column", f"{where}.baseline_column", optional=True)
        if (baseline is None) == (baseline_column is None):
            self.fail(where, "give exactly one of baseline and baseline_column")
        no_baseline = self.text(entry, "no_baseline", f"{where}.no_baseline", optional=True)
        if no_baseline is not None and baseline_column is None:
            self.fail(f"{where}.no_baseline", "only a baseline_column can be empty")
        scale = None
        if entry.get("scale") is not None:
            spec = self.mapping(entry["scale"], f"{where}.scale")
            scale = (
                self.text(spec, "column", f"{where}.scale.column"),
                self.number(spec, "to", f"{where}.scale.to"),
            )
        select = entry.get("select") or {}
        if not isinstance(select, dict):
            self.fail(f"{where}.select", "expected a mapping of column: value")
        evaluation = None
        if entry.get("evaluation") is not None:
            spec = self.mapping(entry["evaluation"], f"{where}.evaluation")
            self.known(
                spec,
                (
                    "cases",
                    "classes",
                    "calibrated_on",
                    "calibration_needed",
                    "history",
                    "goal",
                    "min_change",
                    "relative",
                ),
                f"{where}.evaluation",
            )
            evaluation = Evaluation(
                cases=self.text(spec, "cases", f"{where}.evaluation.cases", optional=True),
                classes=self.text(spec, "classes", f"{where}.evaluation.classes", optional=True),
                calibrated_on=self.text(
                    spec, "calibrated_on", f"{where}.evaluation.calibrated_on", optional=True
                ),
                calibration_needed=self.text(
                    spec, "calibration_needed", f"{where}.evaluation.calibration_needed", optional=True
                ),
                history=self.text(spec, "history", f"{where}.evaluation.history", optional=True),
                goal=self.choice(spec, "goal", ("max", "min"), f"{where}.evaluation.goal", default="max"),
                min_change=self.number(spec, "min_change", f"{where}.evaluation.min_change", optional=True)
                or 0.005,
                relative=bool(spec.get("relative", False)),
            )
        row = RowSpec(
            id=self.text(entry, "id", f"{where}.id"),
            title=self.text(entry, "title", f"{where}.title"),
            table=self.text(entry, "table", f"{where}.table"),
            method=self.text(entry, "method", f"{where}.method"),
            setting=self.text(entry, "setting", f"{where}.setting"),
            baseline=baseline,
            baseline_column=baseline_column,
            no_baseline=no_baseline,
            select=tuple(select.items()),
            scale=scale,
            memory=self.quantity(entry, "memory", where),
            time=self.quantity(entry, "time", where),
            quality=self.quantity(entry, "quality", where),
            evaluation=evaluation,
        )
        if not (row.memory or row.time or row.quality):
            self.fail(where, "a row shows at least one of memory, time and quality")
        return row

    def figure(self, entry, index: int, system: str, sources: dict, rows: tuple[RowSpec, ...]) -> Figure:
        where = f"figures[{index}]"
        entry = self.mapping(entry, where)
        self.known(
            entry,
            (
                "id",
                "row",
                "method",
                "metric",
                "column",
                "unit",
                "value",
                "compare",
                "tolerance",
                "tolerance_reason",
                "text",
                "source",
                "cited_at",
                "setting",
                "requires",
                "indicative",
                "command",
            ),
            where,
        )
        figure_id = self.text(entry, "id", f"{where}.id")
        where = f"figures.{figure_id}"
        row_id = self.text(entry, "row", f"{where}.row")
        row = next((row for row in rows if row.id == row_id), None)
        if row is None:
            self.fail(f"{where}.row", f"no row {row_id!r} (rows: {', '.join(r.id for r in rows)})")
        metric = self.choice(entry, "metric", METRICS, f"{where}.metric")
        needs = {
            "memory": row.memory,
            "memory_factor": row.memory,
            "time_ratio": row.time,
            "speedup": row.time,
            "quality": row.quality,
            "quality_change": row.quality,
        }
        if metric in needs and needs[metric] is None:
            self.fail(f"{where}.metric", f"{metric} needs a row that shows it; row {row_id!r} does not")
        column = self.text(entry, "column", f"{where}.column", optional=True)
        if metric == "value" and column is None:
            self.fail(f"{where}.column", "metric 'value' needs the column it reads")
        unit = entry.get("unit")
        if metric == "memory" and unit not in MEMORY_UNITS:
            self.fail(f"{where}.unit", f"a memory figure needs its unit, one of {', '.join(MEMORY_UNITS)}")
        method = entry.get("method")
        if not (isinstance(method, str) and method) and not (isinstance(method, dict) and method):
            self.fail(f"{where}.method", "expected a method name or a mapping of column: value")
        source = self.text(entry, "source", f"{where}.source")
        if source != MEMBENCH_SOURCE and source not in sources:
            self.fail(f"{where}.source", f"no source {source!r} (sources: {', '.join(sources)}, membench)")
        tolerance = self.number(entry, "tolerance", f"{where}.tolerance")
        if tolerance < 0:
            self.fail(f"{where}.tolerance", "must not be negative")
        requires = entry.get("requires")
        if not isinstance(requires, dict) or not requires:
            self.fail(f"{where}.requires", "expected the paper's setting as a mapping of column: value")
        for key, value in requires.items():
            if isinstance(value, list) and not (value and all(_is_scalar(item) for item in value)):
                self.fail(f"{where}.requires.{key}", "expected a value or a non-empty list of values")
        indicative_when = indicative_note = None
        if entry.get("indicative") is not None:
            spec = self.mapping(entry["indicative"], f"{where}.indicative")
            indicative_when = spec.get("when") or {}
            if not isinstance(indicative_when, dict):
                self.fail(f"{where}.indicative.when", "expected a mapping of column: value")
            indicative_note = self.text(spec, "note", f"{where}.indicative.note")
        return Figure(
            id=figure_id,
            system=system,
            row=row_id,
            method=method,
            metric=metric,
            value=self.number(entry, "value", f"{where}.value"),
            compare=self.choice(entry, "compare", COMPARISONS, f"{where}.compare"),
            tolerance=tolerance,
            tolerance_reason=self.text(entry, "tolerance_reason", f"{where}.tolerance_reason"),
            text=self.text(entry, "text", f"{where}.text"),
            source=source,
            citation="membench's own reference point, not a paper's figure"
            if source == MEMBENCH_SOURCE
            else sources[source],
            cited_at=self.text(entry, "cited_at", f"{where}.cited_at"),
            setting=self.text(entry, "setting", f"{where}.setting"),
            requires=requires,
            command=self.text(entry, "command", f"{where}.command"),
            column=column,
            unit=unit,
            indicative_when=indicative_when,
            indicative_note=indicative_note,
        )


def _is_scalar(value) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))
