"""``membench summary``: the report's headline table and scale line, in a terminal.

Reads only the aggregated tables (``results/tables/*.csv`` by default), so it works on a cluster
login node; the lines fit in 100 columns.
"""

from __future__ import annotations

import argparse
import math
import textwrap

import pandas as pd

from membench.core.options import InputDir, InputFile
from membench.report.published import default_published_path, load_published
from membench.report.summary import headline_from_tables, read_tables, scale_line

__all__ = ["build_parser", "format_summary", "run", "WIDTH"]

WIDTH = 100
# method, memory MiB, memory ratio, time ratio, quality, change, verdict
_ROW = "  {:<26.26} {:>10} {:>7} {:>8} {:>8} {:>8}  {:<16}"


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    parser.add_argument(
        "--tables",
        type=InputDir,
        default="results/tables",
        help="directory of the aggregated tables (default: %(default)s)",
    )
    parser.add_argument(
        "--published",
        type=InputFile,
        default=None,
        help="published figures YAML (default: resources/published_figures.yaml of this checkout)",
    )
    return parser


def run(args: argparse.Namespace) -> None:
    published = load_published(args.published or default_published_path())
    tables = read_tables(args.tables)
    print(format_summary(headline_from_tables(tables, published), scale_line(tables, published)))


def _number(value, digits: int = 3, signed: bool = False) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:+.{digits}g}" if signed else f"{value:.{digits}g}"


def format_summary(headline: pd.DataFrame, scale: str) -> str:
    """The headline as plain text: one block per system and dataset, lines at most 100 columns."""
    lines = textwrap.wrap(scale, WIDTH)
    lines += textwrap.wrap(
        "ratios: method / baseline (below 1: less memory, faster); '?' marks a timing that is flagged "
        "(not a finding); change: quality minus the baseline's.",
        WIDTH,
    )
    for (system, dataset), block in headline.groupby(["system", "dataset"], sort=False):
        first = block.iloc[0]
        baselines = set(block["baseline"].dropna())
        baseline = first["baseline"] if len(baselines) == 1 else "per method, below"
        lines.append("")
        lines += textwrap.wrap(
            f"{system} ({dataset}), baseline {baseline}: memory = {_text(first['memory_figure'])}, "
            f"time = {_text(first.get('time_figure'))}, quality = {_text(first['quality'])}",
            WIDTH,
            subsequent_indent="    ",
        )
        lines.append(_ROW.format("method", "memory MiB", "mem x", "time x", "quality", "change", "verdict"))
        notes = []
        for _, row in block.iterrows():
            time = _number(row["time_ratio"]) + (
                "?" if isinstance(row["timing_flag"], str) and row["timing_flag"] else ""
            )
            lines.append(
                _ROW.format(
                    row["method"],
                    _number(row["memory_mib"], 4),
                    _number(row["memory_ratio"]),
                    time,
                    _number(row["quality_value"]),
                    _number(row["quality_change"], 2, signed=True),
                    row["verdict"],
                )
            )
            details = [f"baseline {row['baseline']}"] if baseline != row["baseline"] else []
            details += [row["quality_detail"]] if isinstance(row["quality_detail"], str) else []
            if details:
                notes.append(f"    {row['method']}: {'; '.join(details)}"[:WIDTH])
            if isinstance(row["published"], str) and row["published"]:
                notes += textwrap.wrap(
                    f"{row['method']}: published {row['published']}. {row['note']}",
                    WIDTH,
                    initial_indent="    ",
                    subsequent_indent="      ",
                )
        flags = sorted({flag for flag in block["timing_flag"] if isinstance(flag, str) and flag})
        notes += [
            line
            for flag in flags
            for line in textwrap.wrap(f"? {flag}", WIDTH, initial_indent="    ", subsequent_indent="      ")
        ]
        lines += notes
    return "\n".join(lines)


def _text(value) -> str:
    return value if isinstance(value, str) and value else "not recorded"
