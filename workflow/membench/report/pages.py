"""The report's pages: the landing summary (headline table, scale line, provenance) and one page per
aggregated table."""

from __future__ import annotations

import html
import os
from pathlib import Path

import pandas as pd

from membench.core.errors import InputError
from membench.core.tables import parquet_path_for
from membench.report.html import STYLE, download_links, page, table_html
from membench.report.views import TABLE_VIEWS

# The headline's columns as the summary page shows them, with what each means.
SUMMARY_COLUMNS = (
    "system", "dataset", "method", "baseline", "memory_figure", "memory_mib", "memory_ratio", "time_ratio",
    "timing_flag", "quality", "quality_value", "quality_change", "published", "verdict", "note",
)
READING = (
    "memory_ratio and time_ratio are the method's figure over the baseline's (below 1: less memory, faster); "
    "memory_figure names the column used (a training step's allocator peak or its exact activation bytes, "
    "never a job peak dominated by the input or optimizer state). A time ratio with a timing_flag is not a "
    "finding: the timing was taken without a steady-state median or under load. quality_change is the "
    "method's quality figure minus the baseline's (fractions: 0.01 = 1 point). The verdict compares with the "
    "published figure only in the paper's hardware, scale and data; the note says why a figure is not comparable."
)


# On the report's landing page the fragment sits in a narrow text column beside the job graph:
# widen that column and let the graph wrap below it, for this page only.
LANDING_STYLE = (
    ".prose:has(#membench-summary) { max-width: none; } "
    "div.flex:has(> div > .prose #membench-summary) { flex-wrap: wrap; }"
)


def summary_fragment(headline: pd.DataFrame, scale: str, provenance: dict, machine: dict, loads: dict) -> str:
    """The summary as an HTML fragment (no document around it), for the report's landing text."""
    parts = [
        f"<style>{STYLE}{LANDING_STYLE}</style>",
        '<div id="membench-summary">',
        f"<p><strong>{html.escape(scale)}</strong></p>",
        f"<p>{html.escape(READING)}</p>",
        table_html(headline, list(SUMMARY_COLUMNS), flag_columns=("timing_flag",)),
        "<h3>Provenance</h3>",
        _provenance_table(provenance, machine, loads),
        "</div>",
    ]
    return "\n".join(parts)


def _provenance_table(provenance: dict, machine: dict, loads: dict) -> str:
    differences = provenance.get("config_differences") or []
    rows = [
        ("command", provenance.get("command", "")),
        ("commit", provenance.get("commit", "")),
        ("configuration", "the default (config/config.yaml with the schema's defaults)" if not differences
         else f"differs from the default at {len(differences)} key(s): " + "; ".join(differences)),
        ("CPU", f"{provenance.get('cpu_model', '')}, {provenance.get('cpu_cores', '')} cores"),
        ("platform", provenance.get("platform", "")),
    ]
    rows += [(column, value) for column, value in machine.items()]
    rows.append((
        "load while timing (1-minute load average, highest)",
        ", ".join(f"{name} {load:.2f}" for name, load in loads.items()) or "not recorded by the timing jobs",
    ))
    frame = pd.DataFrame(rows, columns=["what", "value"])
    return table_html(frame, ["what", "value"])


def table_page(name: str, csv_path: str | os.PathLike) -> str:
    """The page of an aggregated table: its curated columns, and the full CSV and Parquet to download."""
    view = TABLE_VIEWS.get(name)
    if view is None:
        raise InputError(csv_path, f"no page is defined for table {name!r} (known: {', '.join(TABLE_VIEWS)})")
    try:
        frame = pd.read_csv(csv_path)
    except FileNotFoundError:
        raise InputError(csv_path, "table not found") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise InputError(csv_path, f"not a readable CSV table ({str(exc).strip() or type(exc).__name__})") from None
    files = [Path(csv_path)]
    if parquet_path_for(csv_path).exists():
        files.append(parquet_path_for(csv_path))
    shown = [column for column in view.columns if column in frame.columns]
    body = (
        f"<p>{len(frame)} row(s); {len(shown)} of {len(frame.columns)} columns shown (units in the headers; "
        "click a header to sort). The downloads hold every column.</p>\n"
        f"{download_links(files)}\n{table_html(frame, shown, flag_columns=('timing_flag',))}"
    )
    return page(view.title, body)
