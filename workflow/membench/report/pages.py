"""The report's pages: the landing summary (headline table, scale line, provenance) and one page per
aggregated table."""

from __future__ import annotations

import html
import os
from pathlib import Path

import pandas as pd

from membench.core.errors import InputError
from membench.report.html import STYLE, download_links, page, table_html
from membench.report.views import TABLE_VIEWS, read_table

__all__ = [
    "LANDING_STYLE",
    "PUBLISHED_COLUMNS",
    "READING",
    "summary_fragment",
    "SYSTEM_COLUMNS",
    "table_page",
]

# The headline as the summary page shows it: one table per system and dataset, whose baseline and
# figure definitions head it; the published figures with their notes, and the reasons of timing
# flags, follow in a table and a list of their own, so that every row stays one line high.
SYSTEM_COLUMNS = (
    "method",
    "memory_mib",
    "memory_ratio",
    "time_ratio",
    "timing",
    "quality_value",
    "quality_change",
    "quality_detail",
    "verdict",
)
PUBLISHED_COLUMNS = ("system", "dataset", "method", "published", "verdict", "note")
READING = (
    "memory_ratio and time_ratio are the method's figure over the baseline's (below 1: less memory, faster); "
    "memory_figure names the column used (a training step's allocator peak or its exact activation bytes, "
    "never a job peak dominated by the input or optimizer state). A time ratio marked flagged is not a "
    "finding: the timing was taken without a steady-state median or under load (reasons below). "
    "quality_change is the method's quality figure minus the baseline's (fractions: 0.01 = 1 point). The "
    "verdict compares with the published figure only in the paper's hardware, scale and data; the note "
    "says why a figure is not comparable."
)
# On the report's landing page the fragment sits in a narrow text column beside the job graph,
# inside a view that centres its content (a tall page would overflow above the top, out of reach):
# align that view to the top, widen the column and let the graph wrap below it, for this page only.
LANDING_STYLE = (
    "div.overflow-auto:has(#membench-summary) { align-items: flex-start; justify-content: flex-start; } "
    ".prose:has(#membench-summary) { max-width: none; } "
    "div.flex:has(> div > .prose #membench-summary) { flex-wrap: wrap; }"
)


def summary_fragment(headline: pd.DataFrame, scale: str, provenance: dict, machine: dict, loads: dict) -> str:
    """The summary as an HTML fragment (no document around it), for the report's landing text."""
    flags = headline["timing_flag"].fillna("")
    shown = headline.assign(timing=["flagged" if flag else "" for flag in flags])
    reasons = "".join(
        f"<li>{html.escape(flag)}: {html.escape(', '.join(headline.loc[flags == flag, 'method']))}</li>"
        for flag in dict.fromkeys(flag for flag in flags if flag)
    )
    published = headline[headline["published"].fillna("") != ""]
    parts = [
        f"<style>{STYLE}{LANDING_STYLE}</style>",
        '<div id="membench-summary">',
        f"<p><strong>{html.escape(scale)} {html.escape(_configuration(provenance))}</strong></p>",
        f"<p>{html.escape(READING)}</p>",
        *(_system_table(block) for _, block in shown.groupby(["system", "dataset"], sort=False)),
        f"<p>Timing flags:</p><ul>{reasons}</ul>" if reasons else "<p>Every timing was marked reliable.</p>",
        "<h3>Published figures beside the measured ones</h3>",
        table_html(published, list(PUBLISHED_COLUMNS)),
        "<h3>Provenance</h3>",
        _provenance_table(provenance, machine, loads),
        "</div>",
    ]
    return "\n".join(parts)


def _configuration(provenance: dict) -> str:
    differences = provenance.get("config_differences") or []
    if not differences:
        return "Configuration: the default."
    return f"Configuration: the default with {len(differences)} key(s) changed (see the provenance)."


def _system_table(block: pd.DataFrame) -> str:
    """One system's (and dataset's) rows under a heading naming its baseline and figures."""
    first = block.iloc[0]
    columns = [c for c in SYSTEM_COLUMNS if c != "quality_detail" or block["quality_detail"].notna().any()]
    baselines = set(block["baseline"].dropna())
    if len(baselines) > 1:
        columns.insert(1, "baseline")
    heading = (
        f"{first['system']} ({first['dataset']}): baseline "
        f"{first['baseline'] if len(baselines) == 1 else 'per method'}; memory: "
        f"{_named(first['memory_figure'])}; time: {_named(first['time_figure'])}; quality: "
        f"{_named(first['quality'])}"
    )
    return f"<h4>{html.escape(heading)}</h4>\n{table_html(block, columns, flag_columns=('timing',))}"


def _named(value) -> str:
    return value if isinstance(value, str) and value else "not recorded"


def _provenance_table(provenance: dict, machine: dict, loads: dict) -> str:
    differences = provenance.get("config_differences") or []
    rows = [
        ("command", provenance.get("command", "")),
        ("commit", provenance.get("commit", "")),
        (
            "configuration",
            "the default (config/config.yaml with the schema's defaults)"
            if not differences
            else f"differs from the default at {len(differences)} key(s), listed below",
        ),
        ("CPU", f"{provenance.get('cpu_model', '')}, {provenance.get('cpu_cores', '')} cores"),
        ("platform", provenance.get("platform", "")),
    ]
    rows += [(column, value) for column, value in machine.items()]
    rows.append(
        (
            "load while timing (1-minute load average, highest)",
            ", ".join(f"{name} {load:.2f}" for name, load in loads.items())
            or "not recorded by the timing jobs",
        )
    )
    frame = pd.DataFrame(rows, columns=["what", "value"])
    listing = "".join(f"<li><code>{html.escape(line)}</code></li>" for line in differences)
    folded = (
        f"<details><summary>{len(differences)} configuration key(s) differ from the default</summary>"
        f"<ul>{listing}</ul></details>"
        if differences
        else ""
    )
    return table_html(frame, ["what", "value"]) + folded


def table_page(name: str, csv_path: str | os.PathLike, parquet_path: str | os.PathLike | None = None) -> str:
    """The page of an aggregated table: its curated columns, and the full CSV (and Parquet, when
    given) to download."""
    view = TABLE_VIEWS.get(name)
    if view is None:
        raise InputError(csv_path, f"no page is defined for table {name!r} (known: {', '.join(TABLE_VIEWS)})")
    frame = read_table(csv_path)
    files = [Path(csv_path)] + ([Path(parquet_path)] if parquet_path is not None else [])
    shown = [column for column in view.columns if column in frame.columns]
    body = (
        f"<p>{len(frame)} row(s); {len(shown)} of {len(frame.columns)} columns shown (units in the headers; "
        "click a header to sort). The downloads hold every column.</p>\n"
        f"{download_links(files)}\n{table_html(frame, shown, flag_columns=('timing_flag',))}"
    )
    return page(view.title, body)
