"""``membench table metrics``: collect jobs' metrics.json into one CSV and Parquet table."""

from __future__ import annotations

import argparse

from membench.core.options import InputFile, OutputFile
from membench.core.tables import aggregate_metrics, parquet_path_for

__all__ = ["build_parser", "run"]


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    steps = parser.add_subparsers(dest="step", required=True, metavar="<step>")
    metrics = steps.add_parser("metrics", help="one row per job, stable columns")
    metrics.add_argument(
        "--out", type=OutputFile, required=True, help="table CSV path; the Parquet twin is written beside it"
    )
    metrics.add_argument("metrics", type=InputFile, nargs="+", help="metrics.json files")
    return parser


def run(args: argparse.Namespace) -> None:
    aggregate_metrics(args.metrics, args.out, parquet_path_for(args.out))
