"""``membench hotconv <step>``: train a variant on a BODMAS fold, run the memory sweep, plot."""

from __future__ import annotations

import argparse
import logging

from membench import workflow_support
from membench.core.options import (
    BATCH_SIZE,
    DEVICE_CHOICES,
    EPOCHS,
    LEARNING_RATE,
    SEED,
    STEPS,
    WORKERS,
    InputDir,
    InputFile,
    OutputDir,
    OutputFile,
    add_allocator_option,
    add_meter_options,
    integer,
)
from membench.hotconv.options import VARIANTS

__all__ = ["build_parser", "CONFIG_KEYS", "MAX_LEN", "run", "SLICE", "WINDOW"]

MAX_LEN = integer(1, 2**30)
WINDOW = integer(1, 2**20)
SLICE = integer(1, 2**30)


def _add_model_options(parser: argparse.ArgumentParser, defaults: dict) -> None:
    parser.add_argument("--num-filters", type=integer(1, 4096), default=defaults["num_filters"])
    parser.add_argument("--window-size", type=WINDOW, default=defaults["window_size"], help="bytes")
    parser.add_argument("--stride", type=WINDOW, default=defaults["stride"], help="bytes")
    parser.add_argument(
        "--fp-slice-size", type=SLICE, default=defaults["fp_slice_size"], help="bytes per sliced-pass slice"
    )
    parser.add_argument(
        "--fp2-slice-size",
        type=SLICE,
        default=defaults["fp2_slice_size"],
        help="hotconv_eco: bytes of hot windows streamed per chunk",
    )


def _add_job_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="auto", help=f"one of {', '.join(DEVICE_CHOICES)} (or cuda:N)")
    parser.add_argument("--seed", type=SEED, default=0)
    add_meter_options(parser)


# Config keys the workflow passes to each step (``*``: any name, ``[]``: each item), each as the
# step's option spelled the same way; tests/test_vocabulary.py checks them against the schema,
# these parsers and the rules.
_JOB_KEYS = (
    "seed",
    "device",
    "meter.sample_interval_s",
    "meter.grid_intensity_g_per_kwh",
)
CONFIG_KEYS = {
    "train": (
        *_JOB_KEYS,
        "meter.trace_live_tensors",
        "meter.trace_saved_activations",
        *(
            f"hotconv.{key}"
            for key in ("variants.[]", "datasets.[]", "folds.[]", *workflow_support.HOTCONV_TRAIN_KEYS)
        ),
    ),
    "bench": (
        *_JOB_KEYS,
        "meter.trace_allocator",
        *(
            f"hotconv.{sweep}.{key}"
            for sweep in ("sweep", "bench")
            for key in ("variants.[]", "batch_sizes.[]", "max_lens.[]", *workflow_support.HOTCONV_SWEEP_KEYS)
        ),
    ),
}


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    steps = parser.add_subparsers(dest="step", required=True, metavar="<step>")

    train = steps.add_parser(
        "train", help="train one variant on one fold; write metrics.json, memlog.csv, checkpoint.pt"
    )
    train.add_argument("--variant", required=True, choices=VARIANTS)
    train.add_argument("--train", type=InputFile, required=True, help="train_<dataset>_fold_<i>.csv")
    train.add_argument("--val", type=InputFile, required=True, help="val_<dataset>_fold_<i>.csv")
    train.add_argument("--test", type=InputFile, required=True, help="test_<dataset>_fold_<i>.csv")
    train.add_argument("--classes", type=InputFile, required=True, help="classes.csv (Label, Name, Count)")
    train.add_argument(
        "--binaries", type=InputDir, required=True, help="directory of the binaries the fold files name"
    )
    train.add_argument("--dataset", required=True)
    train.add_argument("--fold", type=integer(0, 1000), required=True)
    train.add_argument("--outdir", type=OutputDir, required=True)
    train.add_argument("--epochs", type=EPOCHS, default=6)
    train.add_argument("--batch-size", type=BATCH_SIZE, default=16)
    train.add_argument("--max-len", type=MAX_LEN, default=32768, help="bytes read per file")
    train.add_argument("--learning-rate", type=LEARNING_RATE, default=0.01)
    train.add_argument("--early-stopping-patience", type=EPOCHS, default=2)
    train.add_argument("--num-workers", type=WORKERS, default=0)
    train.add_argument("--memory-probe-steps", type=integer(0, 1_000_000), default=5)
    train.add_argument(
        "--sort-by-size",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="feed the largest files first, unshuffled",
    )
    train.add_argument("--trace-live-tensors", action=argparse.BooleanOptionalAction, default=False)
    train.add_argument("--trace-saved-activations", action=argparse.BooleanOptionalAction, default=True)
    add_allocator_option(train, default=False)
    _add_model_options(
        train,
        {"num_filters": 32, "window_size": 32, "stride": 32, "fp_slice_size": 4096, "fp2_slice_size": 256},
    )
    _add_job_options(train)

    bench = steps.add_parser(
        "bench", help="memory benchmark of one variant at one batch size x max_len point; write metrics.json"
    )
    bench.add_argument("--outdir", type=OutputDir, required=True, help="directory for metrics.json")
    bench.add_argument("--variant", required=True, choices=VARIANTS)
    bench.add_argument("--batch-size", type=BATCH_SIZE, required=True)
    bench.add_argument("--max-len", type=MAX_LEN, required=True, help="bytes")
    bench.add_argument("--train-steps", type=STEPS, default=2, help="timed training steps (median)")
    bench.add_argument("--learning-rate", type=LEARNING_RATE, default=1e-4)
    add_allocator_option(bench)
    _add_model_options(
        bench,
        {"num_filters": 256, "window_size": 512, "stride": 512, "fp_slice_size": 8192, "fp2_slice_size": 512},
    )
    _add_job_options(bench)

    sweep_table = steps.add_parser("sweep-table", help="gather the points' metrics.json into the sweep table")
    sweep_table.add_argument(
        "--out", type=OutputFile, required=True, help="table CSV; the Parquet twin is written beside it"
    )
    sweep_table.add_argument("metrics", type=InputFile, nargs="+", help="metrics.json of each point")

    plot = steps.add_parser(
        "plot", help="per-variant figure (step memory, activations, epoch time, accuracy, CO2e)"
    )
    plot.add_argument("--table", type=InputFile, required=True, help="results/tables/hotconv.csv")
    plot.add_argument(
        "--sweep",
        type=InputFile,
        required=True,
        help="results/tables/hotconv_sweep.csv (the per-step memory)",
    )
    plot.add_argument("--out", type=OutputFile, required=True, help="PNG path")

    plot_sweep = steps.add_parser(
        "plot-sweep", help="sweep figure (step peak memory and time against max_len)"
    )
    plot_sweep.add_argument("--table", type=InputFile, required=True, help="the sweep table CSV")
    plot_sweep.add_argument("--out", type=OutputFile, required=True, help="PNG path")
    return parser


def run(args: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if args.step == "train":
        _train(args)
    elif args.step == "bench":
        _bench(args)
    elif args.step == "sweep-table":
        _sweep_table(args)
    else:
        _plot(args)


def _model_spec(args: argparse.Namespace, variant: str, num_classes: int):
    from membench.hotconv.models import ModelSpec

    return ModelSpec(
        variant,
        num_classes,
        args.num_filters,
        args.window_size,
        args.stride,
        args.fp_slice_size,
        args.fp2_slice_size,
    )


def _train(args: argparse.Namespace) -> None:
    from membench.core.device import resolve_device
    from membench.core.malloc import keep_freed_memory
    from membench.hotconv.train import FoldFiles, TrainSpec, read_num_classes, train_job

    # Epochs are timed on reused memory (membench.core.malloc), as DIVISION's timed jobs.
    malloc_keeps_freed = keep_freed_memory()
    device = resolve_device(args.device)
    files = FoldFiles(args.train, args.val, args.test, args.classes, args.binaries)
    model_spec = _model_spec(args, args.variant, read_num_classes(args.classes))
    train_spec = TrainSpec(
        epochs=args.epochs,
        batch_size=args.batch_size,
        max_len=args.max_len,
        learning_rate=args.learning_rate,
        early_stopping_patience=args.early_stopping_patience,
        num_workers=args.num_workers,
        memory_probe_steps=args.memory_probe_steps,
        sort_by_size=args.sort_by_size,
        seed=args.seed,
    )
    path = train_job(
        files,
        model_spec,
        train_spec,
        args.dataset,
        args.fold,
        args.outdir,
        device,
        sample_interval_s=args.sample_interval_s,
        trace_live_tensors=args.trace_live_tensors,
        trace_allocator=args.trace_allocator,
        trace_saved_activations=args.trace_saved_activations,
        grid_intensity_g_per_kwh=args.grid_intensity_g_per_kwh,
        malloc_keeps_freed=malloc_keeps_freed,
    )
    logging.info("wrote %s", path)


def _bench(args: argparse.Namespace) -> None:
    from membench.core.device import resolve_device
    from membench.core.malloc import keep_freed_memory
    from membench.core.metrics import write_job_outputs
    from membench.hotconv.bench import SweepSpec, measure_point

    # The step is timed on reused memory (membench.core.malloc); the allocator figures count
    # torch's allocations, whatever glibc does with freed blocks.
    malloc_keeps_freed = keep_freed_memory()
    sweep = SweepSpec(
        num_filters=args.num_filters,
        window_size=args.window_size,
        stride=args.stride,
        fp_slice_size=args.fp_slice_size,
        fp2_slice_size=args.fp2_slice_size,
        learning_rate=args.learning_rate,
        steps=args.train_steps,
        seed=args.seed,
    )
    _model_spec(args, args.variant, sweep.num_classes)  # a bad model setting fails before measuring
    record = measure_point(
        sweep,
        args.variant,
        args.batch_size,
        args.max_len,
        resolve_device(args.device),
        sample_interval_s=args.sample_interval_s,
        trace_allocator=args.trace_allocator,
        grid_intensity_g_per_kwh=args.grid_intensity_g_per_kwh,
    )
    record["malloc_keeps_freed"] = malloc_keeps_freed
    path = write_job_outputs(args.outdir, record)
    logging.info(
        "%s batch %d max_len %d: %s, step allocator peak %s MiB, step tensor peak %s MiB, "
        "activations %s MiB, "
        "step %s ms -> %s",
        args.variant,
        args.batch_size,
        args.max_len,
        record["status"],
        record.get("step_alloc_peak_mib"),
        record.get("step_peak_tensor_mib"),
        record.get("activation_mib"),
        record.get("step_ms"),
        path,
    )


def _sweep_table(args: argparse.Namespace) -> None:
    from membench.core.tables import parquet_path_for, write_table
    from membench.hotconv.tables import sweep_table

    frame = sweep_table(args.metrics)
    write_table(frame, args.out, parquet_path_for(args.out))
    logging.info("wrote %s (%d points)", args.out, len(frame))


_SWEEP_COLUMNS = ("variant", "status", "max_len", "batch_size", "step_alloc_peak_mib", "activation_mib")
# The settings the figures name: numbers where a table has them, integers in the sweep (required there).
_SETTING_COLUMNS = ("max_len", "batch_size", "num_filters")


def _read_plot_table(path, required):
    """A table with the ``required`` columns; the settings (:data:`_SETTING_COLUMNS`) it has as
    numbers, the sweep's max_len and batch size as integers (a bad one named by its line)."""
    import pandas as pd

    from membench.core.validate import int_column, read_csv_columns

    table = read_csv_columns(path, required, other_columns=True)
    for column in _SETTING_COLUMNS:
        if column in required:
            table[column] = int_column(table, column, path, minimum=1)
        elif column in table:
            table[column] = pd.to_numeric(table[column], errors="coerce")
    return table


def _plot(args: argparse.Namespace) -> None:
    from membench.hotconv.plots import plot_sweep, plot_variants

    if args.step == "plot-sweep":
        plot_sweep(_read_plot_table(args.table, _SWEEP_COLUMNS), args.out)
    else:
        plot_variants(
            _read_plot_table(args.table, ("variant", "test_accuracy")),
            _read_plot_table(args.sweep, _SWEEP_COLUMNS),
            args.out,
        )
