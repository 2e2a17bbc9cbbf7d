"""Self-contained HTML tables for the Snakemake report: the one place report tables are written.

A table is a real ``<table>`` with one ``<tr>`` per row; headers carry units taken from the column
names' suffixes; numbers are shown to four significant figures; clicking a header sorts (a few lines
of inline script, no network). The full CSV and Parquet tables ride along as ``data:`` links, so a
report item needs nothing beside it.
"""

from __future__ import annotations

import base64
import html
import math
import os
from pathlib import Path

import pandas as pd

from membench.core.validate import open_regular

__all__ = [
    "download_links",
    "format_cell",
    "header",
    "page",
    "SORT_SCRIPT",
    "STYLE",
    "table_html",
    "text_table",
    "unit_of",
    "UNITS",
]

# Column-name suffix -> unit shown in the header (longest suffix first).
UNITS = (
    ("_per_s", "1/s"),
    ("_mib", "MiB"),
    ("_pct", "%"),
    ("_ms", "ms"),
    ("_mhz", "MHz"),
    ("_bytes", "bytes"),
    ("_s", "s"),
    ("_j", "J"),
    ("_g", "g"),
)
# Scoped to .membench-table so that a fragment inlined into the report page restyles nothing else.
STYLE = """
.membench-table-wrap { overflow-x: auto; max-width: 100%; }
table.membench-table { border-collapse: collapse; font: 13px/1.35 system-ui, sans-serif; margin: 0.5em 0; }
table.membench-table th, table.membench-table td {
  border: 1px solid #d0d4da; padding: 3px 7px; vertical-align: top; }
table.membench-table th { background: #eef1f5; text-align: left; white-space: nowrap; cursor: pointer; }
table.membench-table td { white-space: nowrap; }
table.membench-table td.long { white-space: normal; min-width: 24em; max-width: 48em; }
table.membench-table td.num { text-align: right; font-variant-numeric: tabular-nums; }
table.membench-table tr:nth-child(even) td { background: #f8f9fb; }
table.membench-table td.flag { color: #8a5300; }
table.membench-table.wrap td { white-space: normal; overflow-wrap: break-word; min-width: 4em; }
table.membench-table td.heading { background: #eef1f5; font-weight: 600; }
table.membench-table td.reproduced, table.membench-table td.met { color: #116329; font-weight: 600; }
table.membench-table td.not-reproduced, table.membench-table td.not-met { color: #a40e26; font-weight: 600; }
table.membench-table td.indicative { color: #8a5300; }
table.membench-table.wrap td.reproduced, table.membench-table.wrap td.not-reproduced,
table.membench-table.wrap td.met, table.membench-table.wrap td.not-met { white-space: nowrap; }
.membench-downloads a { margin-right: 1em; }
"""
# Sorts a table by the clicked header: numbers by their data-value, text alphabetically.
SORT_SCRIPT = """
document.querySelectorAll("table.membench-table").forEach(function (table) {
  table.querySelectorAll("th").forEach(function (th, col) {
    th.addEventListener("click", function () {
      var body = table.tBodies[0], rows = Array.from(body.rows);
      var dir = th.dataset.dir === "asc" ? -1 : 1; th.dataset.dir = dir === 1 ? "asc" : "desc";
      rows.sort(function (a, b) {
        var x = a.cells[col].dataset.value, y = b.cells[col].dataset.value;
        if (x !== undefined && y !== undefined) { return dir * (parseFloat(x) - parseFloat(y)); }
        return dir * a.cells[col].textContent.localeCompare(b.cells[col].textContent);
      });
      rows.forEach(function (row) { body.appendChild(row); });
    });
  });
});
"""


def unit_of(column: str) -> str | None:
    """The unit a column's name says (``alloc_peak_mib`` -> ``MiB``), or None."""
    for suffix, unit in UNITS:
        if column.endswith(suffix):
            return unit
    return None


def header(column: str) -> str:
    """A column's header: its name, with its unit in parentheses when the name says one."""
    unit = unit_of(column)
    return f"{column} ({unit})" if unit else column


def format_cell(value) -> str:
    """A cell as text: four significant figures for floats, yes/no for booleans, empty for missing."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def table_html(
    frame: pd.DataFrame, columns: list[str] | None = None, flag_columns: tuple[str, ...] = ()
) -> str:
    """``frame`` (or its ``columns`` that exist) as one HTML ``<table>``, every value escaped.

    Numeric cells carry their value in ``data-value`` (for sorting) and align right; cells of
    ``flag_columns`` are styled as warnings; long texts wrap, other cells keep to one line.
    """
    shown = [column for column in (columns or list(frame.columns)) if column in frame.columns]
    heads = "".join(f"<th>{html.escape(header(column))}</th>" for column in shown)
    lines = []
    for _, row in frame[shown].iterrows():
        cells = []
        for column in shown:
            value = row[column]
            text = html.escape(format_cell(value))
            if isinstance(value, (int, float)) and not isinstance(value, bool) and not pd.isna(value):
                cells.append(f'<td class="num" data-value="{float(value)!r}">{text}</td>')
            elif column in flag_columns and text:
                cells.append(f'<td class="flag">{text}</td>')
            elif len(text) > 40:
                cells.append(f'<td class="long">{text}</td>')
            else:
                cells.append(f"<td>{text}</td>")
        lines.append(f"<tr>{''.join(cells)}</tr>")
    body = "\n".join(lines)
    return (
        '<div class="membench-table-wrap"><table class="membench-table">'
        f"<thead><tr>{heads}</tr></thead>\n<tbody>\n{body}\n</tbody></table></div>"
    )


def text_table(columns: list[str], rows: list, cell_classes: dict[str, dict[str, str]] | None = None) -> str:
    """Rows of words as one wrapping HTML ``<table>``, every value escaped.

    A row is a list of texts, one per column, or a single text: a heading row spanning the table.
    ``cell_classes`` maps a column to ``{text: CSS class}`` (a verdict's colour).
    """
    heads = "".join(f"<th>{html.escape(column)}</th>" for column in columns)
    lines = []
    for row in rows:
        if isinstance(row, str):
            lines.append(f'<tr><td class="heading" colspan="{len(columns)}">{html.escape(row)}</td></tr>')
            continue
        cells = []
        for column, text in zip(columns, row):
            css = (cell_classes or {}).get(column, {}).get(text)
            attribute = f' class="{css}"' if css else ""
            cells.append(f"<td{attribute}>{html.escape(text)}</td>")
        lines.append(f"<tr>{''.join(cells)}</tr>")
    body = "\n".join(lines)
    return (
        '<div class="membench-table-wrap"><table class="membench-table wrap">'
        f"<thead><tr>{heads}</tr></thead>\n<tbody>\n{body}\n</tbody></table></div>"
    )


def download_links(paths: list[str | os.PathLike]) -> str:
    """Links that download each file, embedded as ``data:`` URIs (the report is one file)."""
    links = []
    for path in paths:
        path = Path(path)
        mime = "text/csv" if path.suffix == ".csv" else "application/vnd.apache.parquet"
        with open_regular(path) as handle:
            data = base64.b64encode(handle.read()).decode("ascii")
        name = html.escape(path.name)
        links.append(f'<a href="data:{mime};base64,{data}" download="{name}">download {name}</a>')
    return f'<p class="membench-downloads">{"".join(links)}</p>'


def page(title: str, body: str, heading: bool = True) -> str:
    """A complete HTML document around ``body``, with the table style and the sort script; the title
    heads the page unless ``body`` brings its own heading (``heading=False``)."""
    top = f"<h2>{html.escape(title)}</h2>\n" if heading else ""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{STYLE}"
        "body { font: 14px/1.45 system-ui, sans-serif; margin: 1em; color: #1f2328; }</style></head>\n"
        f"<body>\n{top}{body}\n<script>{SORT_SCRIPT}</script>\n</body></html>\n"
    )
