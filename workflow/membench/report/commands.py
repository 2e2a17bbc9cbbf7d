"""``membench report <step>``: the report's pages, from the aggregated tables.

Steps: ``provenance`` (command line, commit, configuration differences, machine, versions),
``summary`` (the landing summary: verdicts on the papers' figures, each system's headline,
provenance), ``table`` (one table's page).
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime, timezone

from membench.core.atomic import write_json, write_text
from membench.core.errors import InputError
from membench.core.options import InputDir, InputFile, OutputFile
from membench.report.headlines import load_headlines
from membench.report.html import page
from membench.report.pages import TITLE, summary_fragment, table_page
from membench.report.provenance import machine_from_tables, provenance, read_provenance, timing_load
from membench.report.summary import read_table_files, summarize

__all__ = ["build_parser", "run"]


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    steps = parser.add_subparsers(dest="step", required=True, metavar="<step>")

    record = steps.add_parser("provenance", help="command line, commit, configuration differences, machine")
    record.add_argument("--command", required=True, help="the command line that ran the workflow")
    record.add_argument(
        "--config-json", type=InputFile, required=True, help="the run's configuration as JSON"
    )
    record.add_argument("--default-config", type=InputFile, required=True, help="the default config.yaml")
    record.add_argument(
        "--schema",
        type=InputFile,
        required=True,
        help="the config schema (its defaults complete the default)",
    )
    record.add_argument(
        "--checkout",
        type=InputDir,
        required=True,
        help="directory of the workflow's checkout (for its commit)",
    )
    record.add_argument("--out", type=OutputFile, required=True, help="provenance JSON to write")

    summary = steps.add_parser(
        "summary", help="the landing summary: verdicts, each system's headline, provenance"
    )
    summary.add_argument(
        "--table",
        type=InputFile,
        action="append",
        required=True,
        dest="tables",
        help="an aggregated table a headline reads (<name>.csv, e.g. hotconv.csv); repeat for each",
    )
    summary.add_argument(
        "--headline",
        type=InputFile,
        action="append",
        required=True,
        dest="headlines",
        help="a system's headline declaration (resources/headlines/<system>.yaml); repeat for each",
    )
    summary.add_argument(
        "--provenance", type=InputFile, required=True, help="provenance JSON (membench report provenance)"
    )
    summary.add_argument(
        "--out-html", type=OutputFile, required=True, help="the summary as a page of its own"
    )
    summary.add_argument(
        "--out-fragment",
        type=OutputFile,
        required=True,
        help="the summary as a fragment for the landing text",
    )
    summary.add_argument(
        "--out-csv",
        type=OutputFile,
        required=True,
        help="the headline rows (one per setting and method) as CSV",
    )
    summary.add_argument(
        "--out-verdicts", type=OutputFile, required=True, help="the verdict on every published figure as CSV"
    )

    table = steps.add_parser("table", help="one aggregated table's page: curated columns, downloads")
    table.add_argument("--name", required=True, help="the table's name (e.g. hotconv_sweep)")
    table.add_argument("--csv", type=InputFile, required=True, help="the table's CSV")
    table.add_argument(
        "--parquet", type=InputFile, help="the table's Parquet twin, to download beside the CSV"
    )
    table.add_argument("--out", type=OutputFile, required=True, help="HTML page to write")
    return parser


def run(args: argparse.Namespace) -> None:
    if args.step == "provenance":
        try:
            config = json.loads(args.config_json)
        except json.JSONDecodeError as exc:
            raise InputError(None, f"--config-json is not valid JSON ({exc.msg})") from None
        write_json(
            args.out, provenance(args.command, config, args.default_config, args.schema, args.checkout)
        )
    elif args.step == "summary":
        headlines = load_headlines(args.headlines)
        tables = read_table_files(args.tables, headlines)
        summary = summarize(tables, headlines)
        fragment = summary_fragment(
            summary,
            read_provenance(args.provenance),
            machine_from_tables(tables),
            timing_load(tables),
            datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        )
        write_text(args.out_fragment, fragment)
        write_text(args.out_html, page(TITLE, fragment, heading=False))
        write_text(args.out_csv, summary.headline_frame().to_csv(index=False))
        write_text(args.out_verdicts, summary.verdict_frame().to_csv(index=False))
    else:
        write_text(args.out, table_page(args.name, args.csv, args.parquet))
