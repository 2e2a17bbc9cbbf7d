"""``membench memnet <step>``: will a training job fit on the GPU, and how likely is the answer too low?

Steps: ``generate`` configurations, ``measure`` them (one forked process each, resumable), ``clean``
into GPUMemNet's CSV format, ``evaluate`` every estimator on any such CSV at a requested risk of
under-estimation, ``train`` the estimators once (cached, with what they learned from) for
``predict``, which answers for a model factory from a CPU in well under a second; ``plot`` draws the
report figures and ``campaign`` runs the whole chain (plus real models) in one command, for a GPU
machine without Snakemake.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
from pathlib import Path

import pandas as pd

from membench import workflow_support
from membench.core.errors import InputError
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
    add_meter_options,
    fields_action,
    integer,
    real,
)
from membench.core.tables import parquet_path_for, write_table
from membench.core.validate import int_column, read_csv_columns, read_json_object
from membench.memnet.calibration import DEFAULT_CALIBRATION_FRACTION, DEFAULT_MAX_UNDER
from membench.memnet.dataset import SPLITS, STATUS_OK, STATUS_OOM

__all__ = [
    "BINS",
    "build_parser",
    "CALIBRATION_FRACTION",
    "CONFIG_KEYS",
    "CONFIGURATIONS",
    "FAMILIES",
    "FOLDS",
    "LOG",
    "MAX_UNDER",
    "MAX_KWARGS_CHARACTERS",
    "MAX_SAMPLE_ELEMENTS",
    "run",
    "SETTING",
    "WORKFLOW_ESTIMATORS",
]

FAMILIES = ("mlp", "cnn", "transformer")
LOG = logging.getLogger("membench.memnet")
# Memory classes: start and width up to 2**40 MiB, and at most 1000 classes.
BINS = fields_action(real(0, 2**40), real(0, 2**40, exclusive_low=True), integer(2, 1000), append=False)
# A generated setting (width, depth, batch, ...): what a model of it holds stays countable in int64.
SETTING = integer(1, 2**20)
CONFIGURATIONS = integer(1, 1_000_000)
FOLDS = integer(2, 1000)
# Processes measuring side by side on one machine.
JOBS_AT_ONCE = integer(1, 256)
# The risk a user accepts: above one half, "too low" would be the likelier answer.
MAX_UNDER = real(0, 0.5, exclusive_low=True)
CALIBRATION_FRACTION = real(0, 1, exclusive_low=True, exclusive_high=True)
# Where predict looks for trained estimators when --estimators names none: the workflow's.
WORKFLOW_ESTIMATORS = Path("results") / "memnet" / "estimators"
# predict runs a factory that cannot build on the meta device on two real samples: one sample of
# 2**26 values is 256 MiB of float32.
MAX_SAMPLE_ELEMENTS = 2**26
# Factory arguments are a few numbers and names; a longer text is no such object.
MAX_KWARGS_CHARACTERS = 65_536
PREDICT_DESCRIPTION = """\
How much GPU memory will this training job need, and how likely is the answer too low?

The model is built on the meta device and run once on a meta batch (shapes only: no weights, no
compute), so the answer comes from a CPU in well under a second after the imports. It prints:

  recommended  the MiB that a job like this one exceeds with probability at most --max-under
               (membench's estimator, calibrated on measured jobs it was not fitted on), with the
               range the peak falls in and the estimate itself;
  class        the memory class (GPUMemNet's bins) at the same risk;
  trained on   the data and the GPU each group of estimators learned from;
  memory       what that data's MiB count, and so every figure here: membench's GPU measurements
               count NVML's peak above a baseline read once the CUDA context exists (the context
               is not in them), GPUMemNet's data nvidia-smi's memory used (the context is in it);
  warning      each of the job's parameters, activations, batch size and input values per
               sample outside that data's range (the answer is then an extrapolation);
  a table      every estimator's answer: bin (class at the risk), raw_bin (uncalibrated),
               bin_upper_mib, mib (estimate), low_mib and high_mib (the range at the risk).

Trained estimators come from `membench memnet train` (or the workflow, which writes them under
results/memnet/estimators/); they are loaded, never retrained, and refused when the code or the
data they were trained from has changed since. Predictions hold for jobs like the measured ones:
the same kind of GPU, framework and training loop."""
PREDICT_EXAMPLE = """\
example (after `snakemake --cores 2`, which trains the estimators on GPUMemNet's MLP data):
  membench memnet predict --model torch.nn:Linear --kwargs '{"in_features": 4096, "out_features": 10}' \\
      --batch-size 512 --input-shape 4096 --max-under 0.01"""


def _add_risk_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--max-under",
        type=MAX_UNDER,
        default=DEFAULT_MAX_UNDER,
        metavar="RATE",
        help="the under-estimation rate you accept (a fraction of jobs whose memory class or MiB "
        "comes out too low: an OOM after queueing); every estimator is calibrated to it "
        "(default: %(default)s)",
    )


def _add_estimator_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bins",
        nargs=3,
        action=BINS,
        metavar=("START_MIB", "WIDTH_MIB", "COUNT"),
        help="memory classes (default: 1000 1000 5 for mlp, 0 8000 6 for cnn/transformer)",
    )
    _add_risk_option(parser)
    parser.add_argument(
        "--calibration-fraction",
        type=CALIBRATION_FRACTION,
        default=DEFAULT_CALIBRATION_FRACTION,
        help="learned estimators: share of their training jobs held out to calibrate the risk on "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--faketensor-rows",
        type=integer(0, 1_000_000),
        default=50,
        help="FakeTensor and MemTracker (a fake training step per job): in train, the jobs they "
        "calibrate on at most; in evaluate, the test jobs per fold they answer, calibrating on the "
        "sample's training jobs (about folds - 1 times as many)",
    )
    parser.add_argument(
        "--device-name", default="", help="the GPU the data was measured on, recorded with the results"
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
    "memnet.published.*.device_name",
    *(f"memnet.{key}" for key in workflow_support.MEMNET_ESTIMATOR_KEYS),
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
    "evaluate": (*_ESTIMATOR_KEYS, "memnet.folds", "memnet.timing_rows", "memnet.splits.[]"),
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
    _add_jobs_at_once_option(measure)
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
        "--splits",
        nargs="+",
        choices=SPLITS,
        default=list(SPLITS),
        help="kfold: stratified k-fold; grouped: k-fold over architectures (default: both)",
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

    train = steps.add_parser(
        "train",
        help="fit and calibrate the estimators on a whole CSV, once, for `predict`",
        description="Fit the learned estimators on a GPUMemNet-format CSV and calibrate every "
        "estimator's risk on it; write them, with what they learned from, to --outdir "
        "(estimators.pt, estimators.json). A directory already holding estimators trained with the "
        "same options on the same data by the same code is left as it is.",
    )
    _add_data_options(train)
    train.add_argument("--seed", type=SEED, default=0)
    train.add_argument(
        "--dataset", default=None, help="name of the data, shown by predict (default: the file name)"
    )
    train.add_argument(
        "--outdir", type=OutputDir, required=True, help="directory for estimators.pt and estimators.json"
    )

    compare = steps.add_parser(
        "compare",
        help="every estimator's answer beside each measured real model (a campaign's timm records)",
    )
    compare.add_argument(
        "--records",
        type=InputDir,
        required=True,
        help="the measured models' records (a campaign's <outdir>/timm/records)",
    )
    compare.add_argument(
        "--estimators",
        type=InputDir,
        nargs="+",
        required=True,
        help="directories written by `train`, one per family at most",
    )
    compare.add_argument("--image-size", type=IMAGE_SIZE, default=224, help="the models' input size")
    _add_risk_option(compare)
    compare.add_argument(
        "--out", type=OutputFile, required=True, help="one row per model, batch and estimator"
    )

    predict = steps.add_parser(
        "predict",
        help="GPU memory of a model factory's training job at a stated risk, from a CPU",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=PREDICT_DESCRIPTION,
        epilog=PREDICT_EXAMPLE,
    )
    predict.add_argument(
        "--model",
        required=True,
        metavar="MODULE:FACTORY",
        help="a callable returning the torch.nn.Module to train, e.g. torchvision.models:resnet18",
    )
    predict.add_argument(
        "--kwargs", default="{}", metavar="JSON", help="JSON object of keyword arguments for the factory"
    )
    predict.add_argument("--batch-size", type=BATCH_SIZE, required=True, help="samples per training step")
    predict.add_argument(
        "--input-shape",
        required=True,
        metavar="D1,D2,...",
        help="one sample's shape, without the batch: 3,224,224 for an image, 512 for a sequence of token ids",
    )
    predict.add_argument(
        "--input-dtype", choices=("float32", "int64"), default="float32", help="int64 for token ids"
    )
    predict.add_argument(
        "--optimizer",
        choices=("adam", "adamw", "sgd"),
        default="adam",
        help="the job's optimizer (FakeTensor's and MemTracker's step)",
    )
    _add_risk_option(predict)
    predict.add_argument(
        "--estimators",
        type=InputDir,
        action="append",
        default=[],
        metavar="DIR",
        help="directory written by `membench memnet train` (repeatable; those of the model's family "
        f"answer). Default: every directory under {WORKFLOW_ESTIMATORS}/ (the workflow's)",
    )
    predict.add_argument("--family", choices=FAMILIES, help="default: from the model's layers")
    predict.add_argument(
        "--bins",
        nargs=3,
        action=BINS,
        metavar=("START_MIB", "WIDTH_MIB", "COUNT"),
        help="classes of the Horus formula when no trained estimators match",
    )
    predict.add_argument(
        "--baselines",
        action="store_true",
        help="also count a fake training step of the model with FakeTensor and MemTracker "
        "(slower: a second or more for a large model)",
    )
    predict.add_argument("--out", type=OutputFile, help="also write every estimator's answer (CSV)")

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
    plot.add_argument(
        "--tradeoff-png",
        type=OutputFile,
        required=True,
        help="accuracy against under-estimation rate, at the requested risk and uncalibrated",
    )

    campaign = steps.add_parser(
        "campaign",
        help="generate, measure, clean, evaluate, train and real models in one run (a GPU machine)",
    )
    campaign.add_argument(
        "--outdir", type=OutputDir, required=True, help="everything goes here (rerun resumes)"
    )
    campaign.add_argument(
        "--count",
        nargs=3,
        type=CONFIGURATIONS,
        default=[100, 70, 40],
        metavar=("MLP", "CNN", "TRANSFORMER"),
        help="configurations per family (default: %(default)s)",
    )
    campaign.add_argument("--device", default="auto")
    campaign.add_argument("--train-steps", type=STEPS, default=3)
    campaign.add_argument("--seed", type=SEED, default=0)
    campaign.add_argument("--folds", type=FOLDS, default=3)
    campaign.add_argument("--timeout-s", type=TIMEOUT_S, default=300.0)
    _add_jobs_at_once_option(campaign)
    _add_risk_option(campaign)
    campaign.add_argument(
        "--faketensor-rows",
        type=integer(0, 1_000_000),
        default=20,
        help="FakeTensor and MemTracker: test jobs per fold they answer (calibrating on about "
        "folds - 1 times as many), and the jobs they are trained to calibrate on at most",
    )
    campaign.add_argument(
        "--measure-only",
        action="store_true",
        help="stop after the measurements and the GPUMemNet-format CSVs: evaluate and train them "
        "elsewhere, so that the GPU is held only while it measures",
    )
    campaign.add_argument(
        "--skip-evaluation",
        action="store_true",
        help="leave out the k-fold evaluation (run `membench memnet evaluate` on the CSVs elsewhere); "
        "still train every estimator on all jobs and predict the timm models",
    )
    campaign.add_argument(
        "--timm-models",
        nargs="*",
        default=[],
        help="timm model names to measure and predict (batch from --timm-batch-sizes); skipped, "
        "with a warning, where timm is not installed",
    )
    campaign.add_argument("--timm-batch-sizes", nargs="*", type=BATCH_SIZE, default=[32, 128])
    campaign.add_argument("--image-size", type=IMAGE_SIZE, default=224)
    add_meter_options(campaign, sample_interval_s=0.02)
    return parser


def _add_jobs_at_once_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--jobs-at-once",
        type=JOBS_AT_ONCE,
        default=1,
        help="jobs measured side by side, each in its own process (default: %(default)s). Above 1, "
        "a GPU job is charged the memory NVML counts for its own process rather than the device's, "
        "and a job that runs out of memory beside others is measured again alone",
    )


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
        "compare": _compare,
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
        "optimizer": args.optimizer,
        "max_under": args.max_under,
        "calibration_fraction": args.calibration_fraction,
        "calibration_rows": args.faketensor_rows,
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
    from membench.memnet.configs import CONFIG_KEYS

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
        jobs_at_once=args.jobs_at_once,
    )
    write_table(_records_table(records), args.out)


def _records_table(records: list[dict]) -> pd.DataFrame:
    """Records as rows; nested fields (layer lists, module counts) as JSON text."""
    rows = [{k: json.dumps(v) if isinstance(v, (list, dict)) else v for k, v in r.items()} for r in records]
    return pd.DataFrame(rows)


def _clean(args) -> None:
    from membench.memnet.clean import clean_records
    from membench.memnet.configs import config_of

    configs = _read_configs(args.configs, args.family)

    typed = pd.DataFrame(
        [{"config_id": r["config_id"], **config_of(r, args.family)} for r in configs.to_dict("records")]
    )
    measurements = read_csv_columns(
        args.measurements, ["config_id", "filename", "status"], other_columns=True
    )
    records = []
    for i, row in enumerate(measurements.to_dict("records")):
        record = dict(row)
        if row["status"] in (STATUS_OK, STATUS_OOM):
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
    from membench.memnet.evaluate import evaluate, judgement

    jobs = load_jobs(args.data, args.family)
    if args.folds < 2 or args.folds > len(jobs):
        raise InputError(args.data, f"--folds {args.folds}: expected 2 to {len(jobs)} (the number of jobs)")
    bins = _bins(args, args.family)
    options = _estimator_options(args)
    table, predictions = evaluate(
        jobs,
        bins,
        folds=args.folds,
        seed=args.seed,
        options={k: v for k, v in options.items() if k not in ("max_under", "calibration_rows")},
        faketensor_rows=args.faketensor_rows,
        timing_rows=args.timing_rows,
        max_under=args.max_under,
        splits=tuple(dict.fromkeys(args.splits)),
    )
    dataset = args.dataset or Path(args.data).name.split(".")[0]
    too_small = judgement(jobs, bins)
    table.insert(0, "dataset", dataset)
    table.insert(1, "family", args.family)
    table.insert(2, "jobs", len(jobs))
    table.insert(3, "classes", len(set(predictions["true_bin"])) if len(predictions) else 0)
    table.insert(4, "too_small_to_judge", too_small)
    table["device_name"] = args.device_name or _measured_on(jobs)
    table["folds"], table["seed"], table["dropped_failed"] = args.folds, args.seed, jobs.dropped_failed
    # The ensembles' size and training steps: a published figure is judged only at its own.
    table["members"], table["mlp_epochs"] = args.members, args.mlp_epochs
    table["transformer_epochs"] = args.transformer_epochs
    write_table(table, args.out, parquet_path_for(args.out))
    if args.out_predictions:
        predictions.insert(0, "dataset", dataset)
        write_table(predictions, args.out_predictions)
    if too_small:
        LOG.warning("%s is too small to judge estimators by: %s", dataset, too_small)
    LOG.info(
        "requested under-estimation rate %s\n%s",
        args.max_under,
        table[
            ["estimator", "accuracy", "under_rate", "raw_accuracy", "raw_under_rate", "inference_ms"]
        ].to_string(index=False),
    )


def _measured_on(jobs) -> str:
    """The GPUs a file's rows say they were measured on (its ``Device Name`` column), or ''."""
    names = sorted({name for name in jobs.frame["device_name"] if name})
    return ", ".join(names)


def _train(args) -> None:
    from membench.memnet.dataset import load_jobs, memory_target
    from membench.memnet.estimators import LEARNED, new_estimator
    from membench.memnet.evaluate import judgement
    from membench.memnet.trained import (
        CACHE_FILE,
        Trained,
        load_trained,
        save_trained,
        trained_identity,
        training_ranges,
    )

    bins = _bins(args, args.family)
    names = [*LEARNED, "horus"] + (["faketensor", "memtracker"] if args.faketensor_rows else [])
    options = _estimator_options(args)
    dataset = args.dataset or Path(args.data).name.split(".")[0]
    identity = trained_identity(
        {
            "family": args.family,
            "bins": [bins.start_mib, bins.width_mib, bins.count],
            "seed": args.seed,
            "dataset": dataset,
            "device_name": args.device_name,
            "estimators": names,
            **options,
        },
        args.data,
    )
    cache = Path(args.outdir) / CACHE_FILE
    if cache.is_file():
        try:
            same = load_trained(args.outdir).identity == identity
        except InputError:
            same = False
        if same:
            LOG.info("%s: trained with the same options on the same data by the same code; kept", cache)
            return
    jobs = load_jobs(args.data, args.family)
    trained = []
    for name in names:
        estimator = new_estimator(name, bins, seed=args.seed, **options)
        estimator.fit(jobs)
        trained.append(estimator)
    data = {
        "path": str(args.data),
        "dataset": dataset,
        "device_name": args.device_name or _measured_on(jobs),
        "jobs": len(jobs),
        "target": memory_target(jobs),
        "ranges": training_ranges(jobs),
        "too_small_to_judge": judgement(jobs, bins),
    }
    save_trained(args.outdir, Trained(args.family, bins, args.max_under, trained, data, identity))
    LOG.info(
        "trained %s on %d %s jobs (%s) -> %s",
        ", ".join(e.name for e in trained),
        len(jobs),
        args.family,
        dataset,
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


def _trained_directories(args) -> list[str]:
    """--estimators, or every directory of trained estimators the workflow wrote."""
    if args.estimators:
        return list(args.estimators)
    if not WORKFLOW_ESTIMATORS.is_dir():
        return []
    return sorted(str(d) for d in WORKFLOW_ESTIMATORS.iterdir() if (d / "estimators.pt").is_file())


def _compare(args) -> None:
    from membench.memnet.campaign import real_model_table
    from membench.memnet.trained import load_trained

    trained = {}
    for directory in args.estimators:
        loaded = load_trained(directory)
        if loaded.family in trained:
            raise InputError(directory, f"a second set of {loaded.family} estimators; give one per family")
        trained[loaded.family] = loaded
    paths = sorted(Path(args.records).glob("*.json"))
    if not paths:
        raise InputError(args.records, "holds no records (*.json)")
    records = [read_json_object(path, missing="measure the models again") for path in paths]
    table = real_model_table(records, trained, args.image_size, args.max_under)
    if table.empty:
        raise InputError(args.records, "no record holds a layer list: every measurement failed")
    write_table(table, args.out)


def _predict(args) -> None:
    from membench.memnet.predict import format_prediction, load_factory, predict_model
    from membench.memnet.trained import load_trained

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
    loaded = []
    for directory in _trained_directories(args):
        try:
            loaded.append(load_trained(directory))
        except InputError as exc:
            if args.estimators:
                raise
            LOG.warning("skipped: %s", exc)
    if not args.estimators:
        # Of the workflow's, a smoke test's estimators answer only for a family nothing else covers.
        judged = {t.family for t in loaded if not t.data.get("too_small_to_judge")}
        loaded = [t for t in loaded if not t.data.get("too_small_to_judge") or t.family not in judged]
    # Judged data first (enough jobs, several classes), then the most jobs: the first answers.
    trained = sorted(loaded, key=lambda t: (bool(t.data.get("too_small_to_judge")), -t.data["jobs"]))
    family = args.family
    bins = _bins(args, family) if family or args.bins else None
    frame, warnings = predict_model(
        factory,
        kwargs,
        shape,
        args.input_dtype,
        args.batch_size,
        args.optimizer,
        trained,
        bins,
        args.model,
        args.max_under,
        family=family,
        baselines=args.baselines,
    )
    family = frame["family"].iloc[0]
    matching = [t for t in trained if t.family == family]
    header = (
        f"{args.model} {json.dumps(kwargs)}: {family} model, batch {args.batch_size}, "
        f"input {args.input_shape} {args.input_dtype}, {args.optimizer}"
    )
    print(format_prediction(frame, warnings, matching, args.max_under, header))
    if args.out:
        write_table(frame, args.out)


def _read_evaluation(path: str) -> pd.DataFrame:
    return read_csv_columns(
        path,
        ["dataset", "estimator", "max_under", "accuracy", "under_rate", "raw_accuracy", "raw_under_rate"],
        dtype={"dataset": str, "family": str, "estimator": str, "too_small_to_judge": str},
        other_columns=True,
    )


def _read_predictions(path: str) -> pd.DataFrame:
    """An ``evaluate --out-predictions`` table with the columns the confusion matrices use, the
    classes as integers (a bad one named by its line; -1: no answer)."""
    frame = read_csv_columns(
        path, ["dataset", "estimator", "split", "true_bin", "pred_bin"], other_columns=True
    )
    frame["true_bin"] = int_column(frame, "true_bin", path, minimum=0)
    frame["pred_bin"] = int_column(frame, "pred_bin", path, minimum=-1)
    return frame


def _table(args) -> None:
    frame = pd.concat([_read_evaluation(p) for p in args.tables], ignore_index=True)
    write_table(frame, args.out, parquet_path_for(args.out))
    LOG.info("%d rows -> %s", len(frame), args.out)


def _plot(args) -> None:
    from membench.memnet.plots import plot_comparison, plot_confusions, plot_tradeoff

    if len(args.table) != len(args.predictions):
        raise InputError(None, "give one --predictions per --table")
    tables = pd.concat([_read_evaluation(p) for p in args.table], ignore_index=True)
    predictions = pd.concat([_read_predictions(p) for p in args.predictions], ignore_index=True)
    plot_confusions(predictions, args.confusion_png)
    plot_comparison(tables, args.comparison_png)
    plot_tradeoff(tables, args.tradeoff_png)


def _campaign(args) -> None:
    from membench.memnet.campaign import run_campaign

    run_campaign(args)
