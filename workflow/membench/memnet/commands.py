"""``membench memnet <step>``: GPUMemNet's training-job memory estimation.

Steps: ``generate`` configurations, ``measure`` them (one forked process each, resumable), ``clean``
into GPUMemNet's CSV format, ``evaluate`` every estimator on any such CSV, ``train`` estimators for
``predict``, which answers for a model factory from a CPU; ``plot`` draws the report figures and
``campaign`` runs the whole chain (plus real models) in one command, for a GPU machine without
Snakemake.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
from pathlib import Path

import pandas as pd

from membench.core.errors import InputError
from membench.core.meter import add_meter_options
from membench.core.options import (
    BATCH_SIZE,
    IMAGE_SIZE,
    SEED,
    STEPS,
    THREADS,
    TIMEOUT_S,
    InputDir,
    InputFile,
    OutputDir,
    OutputFile,
    fields_action,
    integer,
    real,
)
from membench.core.tables import parquet_path_for, write_table
from membench.core.validate import read_csv_columns

__all__ = [
    "BINS",
    "build_parser",
    "CONFIG_KEYS",
    "CONFIGURATIONS",
    "FAMILIES",
    "FOLDS",
    "LOG",
    "MAX_KWARGS_CHARACTERS",
    "MAX_SAMPLE_ELEMENTS",
    "run",
    "SETTING",
]

FAMILIES = ("mlp", "cnn", "transformer")
LOG = logging.getLogger("membench.memnet")
# Memory classes: start and width up to 2**40 MiB, and at most 1000 classes.
BINS = fields_action(real(0, 2**40), real(0, 2**40, exclusive_low=True), integer(2, 1000), append=False)
# A generated setting (width, depth, batch, ...): what a model of it holds stays countable in int64.
SETTING = integer(1, 2**20)
CONFIGURATIONS = integer(1, 1_000_000)
FOLDS = integer(2, 1000)
# predict runs the model on two real samples: one sample of 2**26 values is 256 MiB of float32.
MAX_SAMPLE_ELEMENTS = 2**26
# Factory arguments are a few numbers and names; a longer text is no such object.
MAX_KWARGS_CHARACTERS = 65_536


def _add_estimator_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bins",
        nargs=3,
        action=BINS,
        metavar=("START_MIB", "WIDTH_MIB", "COUNT"),
        help="memory classes (default: 1000 1000 5 for mlp, 0 8000 6 for cnn/transformer)",
    )
    parser.add_argument(
        "--quantile",
        type=real(0, 1),
        default=0.7,
        help="membench estimator: residual quantile added before binning",
    )
    parser.add_argument(
        "--members", type=integer(1, 100), default=3, help="GPUMemNet ensembles: networks per ensemble"
    )
    parser.add_argument(
        "--mlp-epochs", type=STEPS, default=200, help="GPUMemNet MLP ensemble: full-batch steps"
    )
    parser.add_argument(
        "--transformer-epochs",
        type=STEPS,
        default=100,
        help="GPUMemNet transformer ensemble: full-batch steps",
    )
    parser.add_argument(
        "--optimizer",
        choices=("adam", "adamw", "sgd"),
        default="adam",
        help="optimizer of the jobs (FakeTensor's step)",
    )


def _add_data_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", type=InputFile, required=True, help="CSV in GPUMemNet's format")
    parser.add_argument("--family", choices=FAMILIES, required=True)
    _add_estimator_options(parser)


# Config keys the workflow passes to each step (``*``: any name, ``[]``: each item), each as the
# step's option spelled the same way; tests/test_vocabulary.py checks them against the schema,
# these parsers and the rules.
_ESTIMATOR_KEYS = (
    "seed",
    "memnet.published.*.family",
    *(f"memnet.{key}" for key in ("quantile", "members", "mlp_epochs", "transformer_epochs", "optimizer")),
    *(
        f"memnet.{section}.bins.{field}"
        for section in ("families.*", "published.*")
        for field in ("start_mib", "width_mib", "count")
    ),
)
CONFIG_KEYS = {
    "generate": ("seed", "memnet.families.*.count", "memnet.families.*.ranges.*.[]"),
    "measure": (
        "device",
        "meter.sample_interval_s",
        "meter.grid_intensity_g_per_kwh",
        *(f"memnet.{key}" for key in ("train_steps", "optimizer", "timeout_s", "threads")),
    ),
    "evaluate": (*_ESTIMATOR_KEYS, "memnet.folds", "memnet.faketensor_rows", "memnet.timing_rows"),
    "train": _ESTIMATOR_KEYS,
}


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    steps = parser.add_subparsers(dest="step", required=True, metavar="<step>")

    generate = steps.add_parser("generate", help="seeded training-job configurations of one family: a table")
    generate.add_argument("--family", choices=FAMILIES, required=True)
    generate.add_argument("--count", type=CONFIGURATIONS, required=True, help="configurations to draw")
    generate.add_argument("--seed", type=SEED, default=0)
    generate.add_argument(
        "--range",
        nargs=3,
        action=fields_action(str, SETTING, SETTING),
        default=[],
        metavar=("KEY", "LOW", "HIGH"),
        help="override a range of the family, e.g. --range batch 4 64 (repeatable)",
    )
    generate.add_argument("--out", type=OutputFile, required=True, help="configuration table (CSV)")

    measure = steps.add_parser(
        "measure", help="train each configuration a few steps under the meter, one process each"
    )
    measure.add_argument("--configs", type=InputFile, required=True, help="table written by `generate`")
    measure.add_argument("--family", choices=FAMILIES, required=True)
    measure.add_argument(
        "--records-dir",
        type=OutputDir,
        required=True,
        help="one JSON per measured configuration; a rerun measures only the missing ones",
    )
    measure.add_argument("--out", type=OutputFile, required=True, help="all records as one table (CSV)")
    measure.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    measure.add_argument("--train-steps", type=STEPS, default=2, help="training steps per configuration")
    measure.add_argument("--optimizer", choices=("adam", "adamw", "sgd"), default="adam")
    measure.add_argument(
        "--timeout-s", type=TIMEOUT_S, default=600.0, help="a configuration running longer is TIMEOUT"
    )
    measure.add_argument("--threads", type=THREADS, default=None, help="torch CPU threads in each child")
    add_meter_options(measure, sample_interval_s=0.02)

    clean = steps.add_parser("clean", help="measured records -> GPUMemNet-format CSV of the family")
    clean.add_argument("--configs", type=InputFile, required=True)
    clean.add_argument("--measurements", type=InputFile, required=True, help="table written by `measure`")
    clean.add_argument("--family", choices=FAMILIES, required=True)
    clean.add_argument("--out", type=OutputFile, required=True)

    evaluate = steps.add_parser(
        "evaluate", help="every estimator on a GPUMemNet-format CSV: k-fold and grouped split"
    )
    _add_data_options(evaluate)
    evaluate.add_argument("--folds", type=FOLDS, default=3)
    evaluate.add_argument("--seed", type=SEED, default=0)
    evaluate.add_argument(
        "--faketensor-rows",
        type=integer(0, 1_000_000),
        default=50,
        help="FakeTensor: test jobs per fold at most",
    )
    evaluate.add_argument(
        "--timing-rows", type=integer(1, 1_000_000), default=20, help="single-job predictions timed per fold"
    )
    evaluate.add_argument(
        "--dataset", default=None, help="name of the data in the table (default: the file name)"
    )
    evaluate.add_argument(
        "--out",
        type=OutputFile,
        required=True,
        help="one row per estimator (CSV; a .parquet twin is written)",
    )
    evaluate.add_argument(
        "--out-predictions", type=OutputFile, help="also write one row per prediction (CSV)"
    )

    train = steps.add_parser("train", help="fit the learned estimators on a whole CSV for `predict`")
    _add_data_options(train)
    train.add_argument("--seed", type=SEED, default=0)
    train.add_argument(
        "--outdir", type=OutputDir, required=True, help="directory for estimators.json and the networks"
    )

    predict = steps.add_parser(
        "predict", help="memory class and MiB of a model factory's training job, per estimator"
    )
    predict.add_argument("--model", required=True, help="package.module:factory returning a torch.nn.Module")
    predict.add_argument("--kwargs", default="{}", help="JSON object of keyword arguments for the factory")
    predict.add_argument("--batch-size", type=BATCH_SIZE, required=True)
    predict.add_argument("--input-shape", required=True, help="one sample's shape, e.g. 3,224,224")
    predict.add_argument(
        "--input-dtype", choices=("float32", "int64"), default="float32", help="int64 for token ids"
    )
    predict.add_argument("--optimizer", choices=("adam", "adamw", "sgd"), default="adam")
    predict.add_argument(
        "--estimators",
        type=InputDir,
        action="append",
        default=[],
        help="directory written by `train` (repeatable; the model's family is used)",
    )
    predict.add_argument("--family", choices=FAMILIES, help="default: from the model's layers")
    predict.add_argument(
        "--bins",
        nargs=3,
        action=BINS,
        metavar=("START_MIB", "WIDTH_MIB", "COUNT"),
        help="classes of the analytic estimators when no trained directory matches",
    )
    predict.add_argument("--out", type=OutputFile, help="also write the table (CSV)")

    table = steps.add_parser(
        "table", help="evaluation tables of several datasets -> one table (CSV and Parquet)"
    )
    table.add_argument("tables", type=InputFile, nargs="+", help="tables written by `evaluate`")
    table.add_argument("--out", type=OutputFile, required=True)

    plot = steps.add_parser("plot", help="confusion matrices and the estimator comparison")
    plot.add_argument("--table", type=InputFile, required=True, action="append", help="evaluation table(s)")
    plot.add_argument(
        "--predictions",
        type=InputFile,
        required=True,
        action="append",
        help="prediction table(s), same order",
    )
    plot.add_argument("--confusion-png", type=OutputFile, required=True)
    plot.add_argument("--comparison-png", type=OutputFile, required=True)

    campaign = steps.add_parser(
        "campaign", help="generate, measure, clean, evaluate and real models in one run"
    )
    campaign.add_argument(
        "--outdir", type=OutputDir, required=True, help="everything goes here (rerun resumes)"
    )
    campaign.add_argument(
        "--count",
        nargs=3,
        type=CONFIGURATIONS,
        default=[120, 60, 40],
        metavar=("MLP", "CNN", "TRANSFORMER"),
        help="configurations per family",
    )
    campaign.add_argument("--device", default="auto")
    campaign.add_argument("--train-steps", type=STEPS, default=3)
    campaign.add_argument("--seed", type=SEED, default=0)
    campaign.add_argument("--folds", type=FOLDS, default=3)
    campaign.add_argument("--timeout-s", type=TIMEOUT_S, default=300.0)
    campaign.add_argument(
        "--timm-models",
        nargs="*",
        default=[],
        help="timm model names to measure and predict (batch from --timm-batch-sizes)",
    )
    campaign.add_argument("--timm-batch-sizes", nargs="*", type=BATCH_SIZE, default=[32, 128])
    campaign.add_argument("--image-size", type=IMAGE_SIZE, default=224)
    add_meter_options(campaign, sample_interval_s=0.02)
    return parser


def run(args: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if args.step in ("evaluate", "train", "campaign"):
        import torch

        # The estimators' networks are so small that more threads only lose time to hand-offs
        # (campaign's measurements run in children that set their own threads).
        torch.set_num_threads(1)
    {
        "generate": _generate,
        "measure": _measure,
        "clean": _clean,
        "evaluate": _evaluate,
        "train": _train,
        "predict": _predict,
        "table": _table,
        "plot": _plot,
        "campaign": _campaign,
    }[args.step](args)


def _bins(args, family: str):
    from membench.memnet.dataset import DEFAULT_BINS, Bins

    if getattr(args, "bins", None) is None:
        return DEFAULT_BINS[family]
    return Bins(*args.bins)


def _estimator_options(args) -> dict:
    return {
        "quantile": args.quantile,
        "optimizer": args.optimizer,
        "gpumemnet_mlp": {"members": args.members, "epochs": args.mlp_epochs},
        "gpumemnet_transformer": {"members": args.members, "epochs": args.transformer_epochs},
    }


def _generate(args) -> None:
    from membench.memnet.generate import generate

    ranges = {key: (low, high) for key, low, high in args.range}
    frame = generate(args.family, args.count, args.seed, ranges)
    write_table(frame, args.out)
    LOG.info("%d %s configurations -> %s", len(frame), args.family, args.out)


def _read_configs(path: str, family: str) -> pd.DataFrame:
    from membench.memnet.models import CONFIG_KEYS

    return read_csv_columns(path, ["config_id", "filename", *CONFIG_KEYS[family]])


def _measure(args) -> None:
    from membench.memnet.measure import measure_configs

    configs = _read_configs(args.configs, args.family)
    records = measure_configs(
        configs,
        args.family,
        args.records_dir,
        device=args.device,
        steps=args.train_steps,
        optimizer=args.optimizer,
        sample_interval_s=args.sample_interval_s,
        timeout_s=args.timeout_s,
        threads=args.threads,
    )
    write_table(_records_table(records), args.out)


def _records_table(records: list[dict]) -> pd.DataFrame:
    """Records as rows; nested fields (layer lists, module counts) as JSON text."""
    rows = [{k: json.dumps(v) if isinstance(v, (list, dict)) else v for k, v in r.items()} for r in records]
    return pd.DataFrame(rows)


def _clean(args) -> None:
    from membench.memnet.clean import clean_records
    from membench.memnet.measure import config_of

    configs = _read_configs(args.configs, args.family)

    typed = pd.DataFrame(
        [{"config_id": r["config_id"], **config_of(r, args.family)} for r in configs.to_dict("records")]
    )
    measurements = read_csv_columns(
        args.measurements,
        ["config_id", "filename", "status"],
        optional=pd.read_csv(args.measurements, nrows=0).columns,
    )
    records = []
    for i, row in enumerate(measurements.to_dict("records")):
        record = dict(row)
        if row["status"] in ("SUCCESSFUL", "OOM_CRASH"):
            try:
                record["layers"] = json.loads(row["layers"])
                record["module_counts"] = json.loads(row["module_counts"])
                record["total_activations"] = int(row["total_activations"])
                record["total_parameters"] = int(row["total_parameters"])
                record["memory_mib"] = float(row["memory_mib"]) if row["memory_mib"] != "" else None
            except (KeyError, ValueError, json.JSONDecodeError) as exc:
                raise InputError(
                    args.measurements, f"malformed measurement record ({exc})", f"line {i + 2}"
                ) from None
        records.append(record)
    frame, skipped = clean_records(records, typed, args.family)
    write_table(frame, args.out)
    LOG.info("%d jobs -> %s (%d failed or timed out left out)", len(frame), args.out, skipped)


def _evaluate(args) -> None:
    from membench.memnet.dataset import load_jobs
    from membench.memnet.evaluate import evaluate

    jobs = load_jobs(args.data, args.family)
    if args.folds < 2 or args.folds > len(jobs):
        raise InputError(args.data, f"--folds {args.folds}: expected 2 to {len(jobs)} (the number of jobs)")
    table, predictions = evaluate(
        jobs,
        _bins(args, args.family),
        folds=args.folds,
        seed=args.seed,
        options=_estimator_options(args),
        faketensor_rows=args.faketensor_rows,
        timing_rows=args.timing_rows,
    )
    table.insert(0, "dataset", args.dataset or Path(args.data).stem)
    table.insert(1, "family", args.family)
    table.insert(2, "jobs", len(jobs))
    table["folds"], table["seed"], table["dropped_failed"] = args.folds, args.seed, jobs.dropped_failed
    write_table(table, args.out, parquet_path_for(args.out))
    if args.out_predictions:
        predictions.insert(0, "dataset", args.dataset or Path(args.data).stem)
        write_table(predictions, args.out_predictions)
    LOG.info(
        "\n%s",
        table[["estimator", "accuracy", "f1_weighted", "under_rate", "inference_ms"]].to_string(index=False),
    )


def _train(args) -> None:
    from membench.memnet.dataset import load_jobs
    from membench.memnet.estimators import new_estimator, save_estimators

    jobs = load_jobs(args.data, args.family)
    bins = _bins(args, args.family)
    trained = []
    for name in ("gpumemnet_mlp", "gpumemnet_transformer", "membench"):
        estimator = new_estimator(name, bins, seed=args.seed, **_estimator_options(args))
        estimator.fit(jobs)
        trained.append(estimator)
    save_estimators(args.outdir, args.family, bins, trained)
    LOG.info(
        "trained %s on %d %s jobs -> %s",
        ", ".join(e.name for e in trained),
        len(jobs),
        args.family,
        args.outdir,
    )


def _parse_shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(SETTING(v) for v in text.split(","))
    except argparse.ArgumentTypeError:
        shape = ()
    if not shape or math.prod(shape) > MAX_SAMPLE_ELEMENTS:
        raise InputError(
            None,
            f"--input-shape {text!r}: expected positive integers separated by commas, "
            f"at most {MAX_SAMPLE_ELEMENTS} values in all",
        )
    return shape


def _predict(args) -> None:
    from membench.memnet.estimators import load_estimators
    from membench.memnet.predict import family_of, load_factory, predict_model

    factory = load_factory(args.model)
    if len(args.kwargs) > MAX_KWARGS_CHARACTERS:
        raise InputError(
            None, f"--kwargs: {len(args.kwargs)} characters; at most {MAX_KWARGS_CHARACTERS} are read"
        )
    try:
        kwargs = json.loads(args.kwargs)
    except json.JSONDecodeError as exc:
        raise InputError(None, f"--kwargs: not JSON ({exc.msg})") from None
    if not isinstance(kwargs, dict):
        raise InputError(None, "--kwargs: expected a JSON object")
    shape = _parse_shape(args.input_shape)
    family = args.family or family_of(factory(**kwargs))
    trained, bins = [], _bins(args, family)
    for directory in args.estimators:
        trained_family, trained_bins, estimators = load_estimators(directory)
        if trained_family == family:
            trained, bins = estimators, trained_bins
    if args.estimators and not trained:
        LOG.warning("no trained estimators for family %s among %s", family, ", ".join(args.estimators))
    frame = predict_model(
        factory,
        kwargs,
        shape,
        args.input_dtype,
        args.batch_size,
        args.optimizer,
        trained,
        family,
        bins,
        args.model,
    )
    print(frame.to_string(index=False))
    if args.out:
        write_table(frame, args.out)


def _read_evaluation(path: str) -> pd.DataFrame:
    header = list(pd.read_csv(path, nrows=0).columns) if Path(path).is_file() else []
    return read_csv_columns(
        path,
        ["dataset", "estimator", "accuracy", "f1_weighted", "under_rate", "inference_ms"],
        optional=header,
        dtype={"dataset": str, "family": str, "estimator": str},
    )


def _table(args) -> None:
    frame = pd.concat([_read_evaluation(p) for p in args.tables], ignore_index=True)
    write_table(frame, args.out, parquet_path_for(args.out))
    LOG.info("%d rows -> %s", len(frame), args.out)


def _plot(args) -> None:
    from membench.memnet.plots import plot_comparison, plot_confusions

    if len(args.table) != len(args.predictions):
        raise InputError(None, "give one --predictions per --table")
    tables = pd.concat([_read_evaluation(p) for p in args.table], ignore_index=True)
    predictions = pd.concat([pd.read_csv(p) for p in args.predictions], ignore_index=True)
    plot_confusions(predictions, args.confusion_png)
    plot_comparison(tables, args.comparison_png)


def _campaign(args) -> None:
    from membench.memnet.campaign import run_campaign

    run_campaign(args)
