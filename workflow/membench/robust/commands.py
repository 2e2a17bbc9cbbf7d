"""``membench robust <step>``: adversarial training runs (sequential or with parallel adversary
generation), the scaling table with speed-ups over the best sequential run, and its figures."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

from membench.core.options import (
    BATCH_SIZE,
    DEVICE_CHOICES,
    EPOCHS,
    LEARNING_RATE,
    MOMENTUM,
    SEED,
    THREADS,
    TIMEOUT_S,
    WEIGHT_DECAY,
    InputDir,
    InputFile,
    OutputDir,
    OutputFile,
    add_meter_options,
    integer,
    real,
)
from membench.robust.options import (
    ATTACKS,
    GUARD_ACTIONS,
    LEARNING_RATE_SCHEDULES,
    MODELS,
    OPTIMIZERS,
    SOURCES,
)

__all__ = [
    "ATTACK_STEPS",
    "build_parser",
    "CONFIG_KEYS",
    "FRACTION",
    "MODES",
    "run",
    "SAMPLES",
    "SYSTEM",
    "TRANSPORTS",
]

SYSTEM = "robust"
MODES = ("sequential", "parallel")
TRANSPORTS = ("shared_memory", "distributed")
SAMPLES = integer(1, 10**9)
ATTACK_STEPS = integer(1, 100_000)
FRACTION = real(0, 1, exclusive_low=True, exclusive_high=True)


# Config keys the workflow passes to each step (``*``: any name, ``[]``: each item), each as the
# step's option spelled the same way; tests/test_vocabulary.py checks them against the schema,
# these parsers and the rules.
CONFIG_KEYS = {
    "train": (
        "seed",
        "device",
        "meter.sample_interval_s",
        "meter.grid_intensity_g_per_kwh",
        *(
            f"robust.{key}"
            for key in (
                "dataset",
                "root",
                "test_fraction",
                "train_limit",
                "test_limit",
                "model",
                "hidden_units",
                "eps",
                "hard_eps.[]",
                "attack_steps",
                "epochs",
                "batch_size",
                "learning_rate",
                "optimizer",
                "learning_rate_schedule",
                "momentum",
                "weight_decay",
                "sequential_threads.[]",
                "producers.[]",
                "publish_every.[]",
                "max_staleness",
                "queue_size",
                "timeout_s",
                "transport",
                "eval.attack_steps",
                "eval.alpha",
                "eval.restarts",
                "eval.samples",
                "guard.attack_steps",
                "guard.samples",
                "guard.drop",
                "guard.action",
                "guard.shrink",
            )
        ),
    ),
    "table": ("robust.attack_steps", "robust.weak_base_attack_steps"),
}


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    steps = parser.add_subparsers(dest="step", required=True, metavar="<step>")

    train = steps.add_parser("train", help="one adversarial training run, evaluated with a fresh PGD attack")
    train.add_argument(
        "--outdir",
        type=OutputDir,
        required=True,
        help="job directory: metrics.json, memlog.csv, history.csv, checkpoint",
    )
    train.add_argument("--mode", default="sequential", choices=MODES)
    train.add_argument("--dataset", default="digits", choices=SOURCES)
    train.add_argument(
        "--root",
        type=InputDir,
        default=None,
        help="directory of the MNIST idx files or CIFAR-10 python batches",
    )
    train.add_argument(
        "--test-fraction", type=FRACTION, default=0.2, help="digits: share held out for testing"
    )
    train.add_argument("--train-limit", type=SAMPLES, default=None, help="keep the first N training samples")
    train.add_argument("--test-limit", type=SAMPLES, default=None, help="keep the first N test samples")
    train.add_argument("--model", default="mlp", choices=MODELS)
    train.add_argument("--hidden-units", type=integer(1, 65536), default=256, help="MLP hidden width")
    train.add_argument("--attack", default="pgd", choices=ATTACKS, help="training attack (fgsm: FGSM-RS)")
    train.add_argument(
        "--eps", type=real(0, 1, exclusive_low=True), default=0.1, help="L-inf radius on [0, 1] inputs"
    )
    train.add_argument(
        "--attack-steps", type=ATTACK_STEPS, default=10, help="PGD steps of the training attack (FGSM-RS: 1)"
    )
    train.add_argument(
        "--alpha",
        type=real(0, 1, exclusive_low=True),
        default=None,
        help="training attack step; default 2.5 eps / attack steps (PGD), 1.25 eps (FGSM-RS)",
    )
    train.add_argument("--epochs", type=EPOCHS, default=10)
    train.add_argument("--batch-size", type=BATCH_SIZE, default=32)
    train.add_argument("--learning-rate", type=LEARNING_RATE, default=0.01, help="(peak) learning rate")
    train.add_argument("--optimizer", default="adam", choices=OPTIMIZERS)
    train.add_argument("--learning-rate-schedule", default="cyclic", choices=LEARNING_RATE_SCHEDULES)
    train.add_argument("--momentum", type=MOMENTUM, default=0.9, help="SGD momentum")
    train.add_argument("--weight-decay", type=WEIGHT_DECAY, default=0.0)
    train.add_argument(
        "--threads", type=THREADS, default=1, help="torch threads of the trainer (and of each producer)"
    )
    train.add_argument(
        "--producers", type=integer(1, 1024), default=1, help="parallel: adversary-generating processes P"
    )
    train.add_argument(
        "--publish-every",
        type=integer(1, 1_000_000),
        default=1,
        help="parallel: trainer steps between weight publications k",
    )
    train.add_argument(
        "--max-staleness",
        type=integer(0, 1_000_000),
        default=4,
        help="parallel: a batch staler than this is attacked again on current weights",
    )
    train.add_argument(
        "--transport",
        default="shared_memory",
        choices=TRANSPORTS,
        help="parallel: producers as child processes on this node (shared_memory), or as ranks "
        "1..P of a process group started by torchrun or srun (distributed; this process is a rank)",
    )
    train.add_argument(
        "--queue-size",
        type=integer(1, 1024),
        default=None,
        help="parallel: attacked batches in flight (default 2 P)",
    )
    train.add_argument(
        "--timeout-s", type=TIMEOUT_S, default=300.0, help="parallel: longest wait for any process"
    )
    train.add_argument(
        "--eval-attack-steps", type=ATTACK_STEPS, default=40, help="PGD steps of the final evaluation"
    )
    train.add_argument(
        "--eval-alpha",
        type=real(0, 1, exclusive_low=True),
        default=None,
        help="PGD step of the final evaluation; default 2.5 eps / eval attack steps",
    )
    train.add_argument(
        "--eval-restarts", type=integer(1, 1000), default=5, help="random restarts of the final evaluation"
    )
    train.add_argument("--eval-samples", type=SAMPLES, default=None, help="evaluate the first N test samples")
    train.add_argument(
        "--guard-attack-steps",
        type=ATTACK_STEPS,
        default=10,
        help="PGD steps of the per-epoch overfitting check",
    )
    train.add_argument(
        "--guard-samples", type=SAMPLES, default=256, help="training samples the check attacks"
    )
    train.add_argument(
        "--guard-drop",
        type=real(0, 1, exclusive_low=True),
        default=0.5,
        help="relative fall of the check's robust accuracy below its best that triggers the guard",
    )
    train.add_argument("--guard-action", default="shrink", choices=GUARD_ACTIONS)
    train.add_argument(
        "--guard-shrink", type=FRACTION, default=0.5, help="factor on alpha when the guard shrinks it"
    )
    train.add_argument("--device", default="auto", help=f"one of {', '.join(DEVICE_CHOICES)} (or cuda:N)")
    train.add_argument("--seed", type=SEED, default=0)
    add_meter_options(parser=train)

    table = steps.add_parser(
        "table", help="scaling table: one row per run and scaling series, with speed-ups"
    )
    table.add_argument(
        "--out", type=OutputFile, required=True, help="CSV path (the Parquet twin is written beside it)"
    )
    table.add_argument(
        "--attack-steps", type=ATTACK_STEPS, required=True, help="attack steps of the strong-scaling series"
    )
    table.add_argument(
        "--weak-base-attack-steps",
        type=ATTACK_STEPS,
        required=True,
        help="weak scaling: attack steps = this x producers",
    )
    table.add_argument("metrics", type=InputFile, nargs="+", help="metrics.json of the runs")

    scaling = steps.add_parser("plot-scaling", help="speed-up and robust accuracy against producers")
    scaling.add_argument("--table", type=InputFile, required=True)
    scaling.add_argument("--out", type=OutputFile, required=True)

    staleness = steps.add_parser("plot-staleness", help="staleness against producers and k")
    staleness.add_argument("--table", type=InputFile, required=True)
    staleness.add_argument("--out", type=OutputFile, required=True)
    return parser


def _sigterm_as_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def run(args: argparse.Namespace) -> None:
    if args.step == "train":
        import torch

        from membench.robust.distributed import TrainerGone
        from membench.robust.job import run_training_job
        from membench.robust.parallel import ProducerFailed

        # SIGTERM (Slurm, snakemake) unwinds like Ctrl-C, so the producers are always stopped.
        signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
        torch.set_num_threads(args.threads)
        try:
            run_training_job(args)
        except (ProducerFailed, TrainerGone) as exc:
            print(f"membench robust: error: {exc}", file=sys.stderr)
            sys.exit(1)
        except KeyboardInterrupt:
            print(
                "membench robust: interrupted; producers stopped, last finished epoch checkpointed",
                file=sys.stderr,
            )
            sys.exit(130)
    elif args.step == "table":
        from membench.core.tables import parquet_path_for, write_table
        from membench.robust.scaling import scaling_table

        started = time.perf_counter()
        frame = scaling_table(args.metrics, args.attack_steps, args.weak_base_attack_steps)
        write_table(frame, args.out, parquet_path_for(args.out))
        print(f"{len(frame)} rows -> {args.out} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    else:
        from membench.robust.plots import plot_scaling, plot_staleness
        from membench.robust.scaling import read_scaling_table

        frame = read_scaling_table(Path(args.table))
        (plot_scaling if args.step == "plot-scaling" else plot_staleness)(frame, args.out)
