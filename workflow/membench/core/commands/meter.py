"""``membench meter check``: measure the reference training step on this machine."""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

from membench.core.options import (
    BATCH_SIZE,
    DEVICE_CHOICES,
    SEED,
    STEPS,
    InputFile,
    OutputDir,
    OutputFile,
    add_meter_options,
    integer,
)

__all__ = ["build_parser", "CONFIG_KEYS", "run"]

# Config keys the workflow passes to each step (``*``: any name, ``[]``: each item), each as the
# step's option spelled the same way; tests/test_vocabulary.py checks them against the schema,
# these parsers and the rules.
CONFIG_KEYS = {
    "check": (
        "seed",
        "device",
        "meter.sample_interval_s",
        "meter.grid_intensity_g_per_kwh",
        "meter_check.batch_size",
        "meter_check.train_steps",
        "meter_check.repeats",
    ),
}


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    steps = parser.add_subparsers(dest="step", required=True, metavar="<step>")
    check = steps.add_parser("check", help="run the reference step under the meter; write metrics.json")
    check.add_argument(
        "--outdir", type=OutputDir, required=True, help="job directory for metrics.json and memlog.csv"
    )
    check.add_argument("--device", default="auto", help=f"one of {', '.join(DEVICE_CHOICES)} (or cuda:N)")
    check.add_argument("--batch-size", type=BATCH_SIZE, default=32)
    check.add_argument("--train-steps", type=STEPS, default=20, help="training steps per timed block")
    check.add_argument(
        "--repeats", type=integer(1, 1000), default=5, help="timed blocks with and without the meter"
    )
    add_meter_options(check)
    check.add_argument("--seed", type=SEED, default=0)
    plot = steps.add_parser("plot", help="plot a job's memlog.csv (memory over time)")
    plot.add_argument("--memlog", type=InputFile, required=True)
    plot.add_argument("--out", type=OutputFile, required=True, help="PNG path")
    return parser


def run(args: argparse.Namespace) -> None:
    if args.step == "plot":
        _plot(args)
    else:
        _check(args)


def _plot(args: argparse.Namespace) -> None:
    import pandas as pd

    from membench.core.metrics import MEMLOG_COLUMNS
    from membench.core.plots import plot_memlog
    from membench.core.validate import read_csv_columns

    memlog = read_csv_columns(args.memlog, MEMLOG_COLUMNS)
    for column in MEMLOG_COLUMNS:
        if column != "phase":
            memlog[column] = pd.to_numeric(memlog[column], errors="coerce")
    plot_memlog(memlog, args.out, title=_memlog_title(Path(args.memlog)))


def _memlog_title(memlog: Path) -> str:
    """``<system> <variant> on <device>: memory over time`` from the job's metrics.json beside the
    memlog (a figure is titled by what it shows, not by a file path)."""
    import json

    try:
        record = json.loads((memlog.parent / "metrics.json").read_text())
        return f"{record['system']} {record['variant']} on {record['device']}: memory over time"
    except (OSError, ValueError, KeyError, TypeError):
        return "memory over time"


def _check(args: argparse.Namespace) -> None:
    from membench.core.device import resolve_device
    from membench.core.meter_check import run_meter_check
    from membench.core.metrics import job_record, write_job_outputs

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    device = resolve_device(args.device)
    start = time.perf_counter()
    record = job_record("meter", "reference_cnn", "random_32x32", device, args.seed, args.batch_size)
    fields, memlog = run_meter_check(
        device,
        batch_size=args.batch_size,
        steps=args.train_steps,
        repeats=args.repeats,
        sample_interval_s=args.sample_interval_s,
        seed=args.seed,
        grid_intensity_g_per_kwh=args.grid_intensity_g_per_kwh,
    )
    record.update(fields)
    record["wall_s"] = time.perf_counter() - start
    path = write_job_outputs(args.outdir, record, memlog)
    logging.info(
        "meter check on %s (%s): overhead %.2f%% (sampler CPU %.3f%%), sources nvml=%s allocator=%s "
        "rapl=%s -> %s",
        record["device"],
        record["device_name"],
        record["meter_overhead_pct"],
        record["sampler_cpu_pct"],
        record["nvml_available"],
        record["allocator_available"],
        record["rapl_available"],
        path,
    )
