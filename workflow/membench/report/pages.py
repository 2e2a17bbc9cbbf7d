"""The report's pages: the landing summary (verdicts on the papers' figures, what each method
costs, provenance) and one page per aggregated table."""

from __future__ import annotations

import html
import os
from pathlib import Path

import pandas as pd

from membench.core.errors import InputError
from membench.report.html import STYLE, download_links, page, table_html, text_table
from membench.report.summary import (
    INDICATIVE,
    MET,
    NEEDS,
    NOT_MET,
    NOT_REPRODUCED,
    REPRODUCED,
    Summary,
    method_cells,
)
from membench.report.views import TABLE_VIEWS, read_table

__all__ = ["LANDING_STYLE", "OPEN_CATEGORY_SCRIPT", "READING", "summary_fragment", "table_page", "TITLE"]

TITLE = "membench: which published claims hold, and what each method costs"
READING = (
    "A published figure is judged (reproduced or not) only where membench measured it in its paper's "
    "setting, against the figure's own tolerance (its printed precision or the paper's stated bound). "
    "Indicative: measured with another meter or at another scale (the note says which), or in the "
    "paper's setting on a timing or an evaluation that cannot be judged. The rest need a GPU or data: "
    "each lists the command that would judge it."
)
# On the report's landing page the fragment sits in a narrow text column beside the job graph,
# inside a view that centres its content (a tall page would overflow above the top, out of reach):
# align that view to the top, let the column take the width (its text wraps at the window's), and
# put the graph below it, for this page only.
LANDING_STYLE = (
    "div.overflow-auto:has(#membench-summary) { align-items: flex-start; justify-content: flex-start; } "
    ".prose:has(#membench-summary) { max-width: none; } "
    "div.flex:has(> div > .prose #membench-summary) { flex-wrap: wrap; } "
    "#membench-summary { max-width: 100%; overflow-wrap: break-word; } "
    "#membench-summary p, #membench-summary li { max-width: 72em; } "
    "#membench-summary .counts { font-size: 1.1em; } "
    "#membench-summary details > summary { cursor: pointer; } "
    "#membench-summary .membench-table-wrap { max-width: 100%; }"
)
# Snakemake's report keeps the last result on screen when a category (or subcategory) of the menu is
# opened, so a reader of "DIVISION" still looks at a HotConv figure. The landing text is inserted as
# HTML, where scripts do not run but an image's load handler does: a 1x1 GIF's handler wraps the
# report's setView so that opening a category also shows its first figure or page. It changes only
# what the content area shows; done once per page (app.membenchOpensResults).
OPEN_CATEGORY_SCRIPT = (
    "if (typeof app !== 'undefined' && !app.membenchOpensResults) {"
    " app.membenchOpensResults = true; var setView = app.setView;"
    " app.setView = function (view) {"
    " var mode = view.navbarMode;"
    " if ((mode === 'category' || mode === 'subcategory') && view.content === undefined && view.category) {"
    " var groups = categories[view.category] || {};"
    " var names = view.subcategory ? [view.subcategory] : Object.keys(groups).sort();"
    " var paths = [].concat.apply([], names.map(function (name) { return groups[name] || []; }));"
    " var path = paths.find(function (p) { var m = results[p].mime_type;"
    " return m === 'text/html' || m.indexOf('image/') === 0; });"
    " if (path) { var html = results[path].mime_type === 'text/html';"
    " view = Object.assign({}, view, { content: html ? 'html' : 'img',"
    " contentPath: results[path].data_uri, resultPath: path }); } }"
    " return setView(view); }; }"
)
_PIXEL_GIF = "data:image/gif;base64,R0lGODlhAQABAIAAAP///wAAACH5BAEAAAAALAAAAAABAAEAAAICRAEAOw=="
_VERDICT_CLASSES = {
    REPRODUCED: "reproduced",
    NOT_REPRODUCED: "not-reproduced",
    INDICATIVE: "indicative",
    MET: "met",
    NOT_MET: "not-met",
}


def summary_fragment(summary: Summary, provenance: dict, machine: dict, loads: dict, generated: str) -> str:
    """The summary as an HTML fragment (no document around it), for the report's landing text.

    ``generated`` is when the summary was made (a date and time, as it should read).
    """
    verdicts = summary.verdict_frame()
    papers = verdicts[~verdicts["reference_point"]]
    parts = [
        f"<style>{STYLE}{LANDING_STYLE}</style>",
        f'<img src="{_PIXEL_GIF}" alt="" width="1" height="1" onload="{html.escape(OPEN_CATEGORY_SCRIPT)}">',
        '<div id="membench-summary">',
        f"<h1>{html.escape(TITLE)}</h1>",
        f"<p>{html.escape(_versions_line(provenance, generated))} {html.escape(summary.devices_line())} "
        f"{html.escape(_configuration(provenance))}</p>",
        f'<p class="counts"><strong>{html.escape(summary.counts_line())}</strong></p>',
        f"<p>{html.escape(READING)}</p>",
        *_verdict_sections(papers, summary.sources()),
        *_reference_points(verdicts[verdicts["reference_point"]]),
        "<h2>What each method costs, per setting</h2>",
        "<p>Each block is one configuration: its memory, time and quality come from the same setting, "
        "which its heading states, against the baseline it names. A time ratio needs at least three "
        "timed samples on both sides; a flagged timing or evaluation is listed under the block and not "
        "judged.</p>",
        *_system_sections(summary),
        "<h2>Provenance</h2>",
        "<details><summary>Command line, commit, configuration, machine, versions, load while timing"
        "</summary>",
        _provenance_table(provenance, machine, loads),
        "</details>",
        "</div>",
    ]
    return "\n".join(parts)


def _versions_line(provenance: dict, generated: str) -> str:
    versions = ", ".join(
        f"{name} {provenance[key]}"
        for name, key in (("membench", "membench_version"), ("Snakemake", "snakemake_version"))
        if provenance.get(key)
    )
    return f"Results of {generated}" + (f"; {versions}." if versions else ".")


def _configuration(provenance: dict) -> str:
    differences = provenance.get("config_differences") or []
    if not differences:
        return "Configuration: the default."
    return f"Configuration: the default with {len(differences)} key(s) changed (see the provenance)."


def _cited(row, numbers: dict[str, int]) -> str:
    """A figure's words with its source's number and where in it: ``... [2: Table 3]``."""
    return f"{row['published']} [{numbers[row['source']]}: {row['cited_at']}]"


def _sources_list(numbers: dict[str, int]) -> str:
    items = "".join(f"<li>{html.escape(citation)}</li>" for citation in numbers)
    return f"<p>Sources:</p><ol>{items}</ol>"


def _verdict_sections(papers: pd.DataFrame, numbers: dict[str, int]) -> list[str]:
    judged = papers[papers["verdict"].isin([REPRODUCED, NOT_REPRODUCED])]
    indicative = papers[papers["verdict"] == INDICATIVE]
    needs = papers[papers["verdict"] == NEEDS]
    parts = [f"<h2>Judged in the paper's setting ({len(judged)})</h2>"]
    if judged.empty:
        parts.append("<p>None: no figure was measured in its paper's setting by this run.</p>")
    else:
        parts.append(
            text_table(
                ["system", "published [source]", "measured here", "verdict", "held to"],
                [
                    [r["system"], _cited(r, numbers), r["measured"], r["verdict"], r["note"]]
                    for _, r in judged.iterrows()
                ],
                {"verdict": _VERDICT_CLASSES},
            )
        )
    parts.append(f"<h2>Indicative ({len(indicative)})</h2>")
    if indicative.empty:
        parts.append("<p>None.</p>")
    else:
        parts.append(
            text_table(
                ["system", "published [source]", "measured here", "why only indicative"],
                [
                    [r["system"], _cited(r, numbers), r["measured"], r["note"]]
                    for _, r in indicative.iterrows()
                ],
            )
        )
    parts.append(f"<h2>Needs a GPU or data ({len(needs)})</h2>")
    if needs.empty:
        parts.append("<p>None.</p>")
    else:
        items = []
        for command, group in needs.groupby("command", sort=False):
            figures = "".join(
                f"<li>{html.escape(r['system'])}: {html.escape(_cited(r, numbers))}; "
                f"here: {html.escape(r['note'])}</li>"
                for _, r in group.iterrows()
            )
            items.append(f"<p><code>{html.escape(command)}</code> judges {len(group)}:</p><ul>{figures}</ul>")
        parts.append(
            f"<details><summary>{len(needs)} figures, by the command that would judge them</summary>"
            f"{''.join(items)}</details>"
        )
    parts.append(_sources_list(numbers))
    return parts


def _reference_points(points: pd.DataFrame) -> list[str]:
    if points.empty:
        return []
    return [
        "<h2>membench's own reference points (not a paper's)</h2>",
        text_table(
            ["system", "reference point", "measured here", "verdict", "held to"],
            [
                [r["system"], r["published"], r["measured"], r["verdict"], r["note"]]
                for _, r in points.iterrows()
            ],
            {"verdict": _VERDICT_CLASSES},
        ),
    ]


def _system_sections(summary: Summary) -> list[str]:
    """One table for every system: a heading row per system and setting, a row per method; the
    flagged timings and evaluations listed under it."""
    rows, notes = [], []
    for headline in summary.headlines:
        for block in (block for block in summary.blocks if block.system == headline.system):
            what = [
                f"{name}: {quantity}"
                for name, quantity in (
                    ("memory", block.memory_what),
                    ("time", block.spec.time.what if block.spec.time else None),
                    ("quality", block.spec.quality.what if block.spec.quality else None),
                )
                if quantity
            ]
            baseline = (
                ", ".join(block.baselines) or "none"
                if len(block.baselines) <= 2
                else "per method (see the CSV)"
            )
            rows.append(
                f"{headline.title}. {block.spec.title}: {block.setting}. Baseline {baseline}; "
                f"{'; '.join(what)}."
            )
            for row in block.methods:
                rows.append(method_cells(block, row, " (flagged)"))
                notes += [f"{block.system}, {block.spec.title}, {row.method}: {note}" for note in row.notes]
    if not rows:
        return ["<p>No system's table was measured.</p>"]
    parts = [
        text_table(["method", "memory", "vs baseline", "time vs baseline", "quality", "vs baseline"], rows)
    ]
    if notes:
        listing = "".join(f"<li>{html.escape(note)}</li>" for note in dict.fromkeys(notes))
        parts.append(f"<p>Flagged (not judged):</p><ul>{listing}</ul>")
    return parts


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
