"""``membench summary``: the report's verdicts and each system's headline, in a terminal.

Reads only the aggregated tables (``results/tables/*.csv`` by default) and the systems' headline
declarations, so it works on a cluster login node; the lines fit in 100 columns.
"""

from __future__ import annotations

import argparse
import textwrap

from membench.core.options import InputDir, InputFile
from membench.report.headlines import default_headlines_dir, load_headlines
from membench.report.summary import (
    INDICATIVE,
    NEEDS,
    NOT_REPRODUCED,
    REPRODUCED,
    Summary,
    method_cells,
    read_tables,
    summarize,
)

__all__ = ["build_parser", "format_summary", "run", "WIDTH"]

WIDTH = 100
# method, memory, vs baseline, time vs baseline, quality, vs baseline
_ROW = "  {:<31.31} {:>10} {:>13} {:>16} {:>10} {:>13}"


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    parser.add_argument(
        "--tables",
        type=InputDir,
        default="results/tables",
        help="directory of the aggregated tables (default: %(default)s)",
    )
    parser.add_argument(
        "--headline",
        type=InputFile,
        action="append",
        dest="headlines",
        default=None,
        help="a system's headline declaration; repeat for each "
        "(default: every resources/headlines/*.yaml of this checkout)",
    )
    return parser


def run(args: argparse.Namespace) -> None:
    headlines = load_headlines(args.headlines or default_headlines_dir())
    print(format_summary(summarize(read_tables(args.tables, headlines), headlines)))


def _wrap(text: str, indent: str = "", more: str = "    ") -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=indent + more)


def format_summary(summary: Summary) -> str:
    """The verdicts, then each system's headline blocks, as plain text of at most 100 columns."""
    verdicts = summary.verdict_frame()
    papers = verdicts[~verdicts["reference_point"]]
    numbers = summary.sources()
    lines = _wrap(summary.counts_line()) + _wrap(summary.devices_line())
    for title, kinds in (
        ("Judged in the paper's setting", (REPRODUCED, NOT_REPRODUCED)),
        ("Indicative (another meter or scale, or not judgeable)", (INDICATIVE,)),
    ):
        chosen = papers[papers["verdict"].isin(kinds)]
        lines += ["", f"{title} ({len(chosen)}):"]
        for _, row in chosen.iterrows():
            lines += _wrap(
                f"{row['verdict']}: {row['system']}: {row['published']} [{numbers[row['source']]}, "
                f"{row['cited_at']}]; measured {row['measured']}",
                "  ",
            )
            lines += _wrap(row["note"], "      ", "")
    needs = papers[papers["verdict"] == NEEDS]
    lines += ["", f"Needing a GPU or data ({len(needs)}), by the command that would judge them:"]
    for command, group in needs.groupby("command", sort=False):
        lines += textwrap.wrap(command, WIDTH, initial_indent="  $ ", subsequent_indent="      ")
        for _, row in group.iterrows():
            lines += _wrap(f"{row['system']}: {row['published']} [{numbers[row['source']]}]", "      ", "  ")
    points = verdicts[verdicts["reference_point"]]
    if not points.empty:
        lines += ["", "membench's own reference points (not a paper's):"]
        for _, row in points.iterrows():
            lines += _wrap(
                f"{row['verdict']}: {row['system']}: {row['published']}; measured {row['measured']}", "  "
            )
    lines += ["", "Sources:"]
    for citation, number in numbers.items():
        lines += _wrap(f"[{number}] {citation}", "  ", "    ")
    lines += ["", "What each method costs, per setting (ratios against the block's baseline):"]
    for block in summary.blocks:
        lines.append("")
        baselines = ", ".join(block.baselines) or "none" if len(block.baselines) <= 2 else "per method"
        lines += _wrap(f"{block.system}: {block.spec.title}: {block.setting}. Baseline {baselines}.")
        lines.append(
            _ROW.format("method", "memory", "vs baseline", "time vs baseline", "quality", "vs baseline")
        )
        flags = []
        for row in block.methods:
            lines.append(_ROW.format(*method_cells(block, row, "?")))
            flags += [f"{row.method}: {note}" for note in row.notes]
        for flag in dict.fromkeys(flags):
            lines += _wrap(f"! {flag}", "    ", "  ")
    return "\n".join(lines)
