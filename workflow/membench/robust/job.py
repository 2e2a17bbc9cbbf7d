"""One training job of ``membench robust train``: options checked, data loaded, the run measured
under the meter, evaluated with a fresh PGD attack, and its outputs written atomically."""

from __future__ import annotations

import argparse
import contextlib
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

from membench.core import atomic
from membench.core.checkpoint import code_version, run_identity, tensors_sha256
from membench.core.device import resolve_device
from membench.core.distributed import process_group
from membench.core.errors import InputError
from membench.core.meter import Meter
from membench.core.metrics import job_record, write_job_outputs
from membench.core.timing import timing_fields
from membench.robust.attacks import evaluate, pgd_alpha
from membench.robust.data import load_dataset
from membench.robust.distributed import DistributedSource, run_producer
from membench.robust.models import build_model
from membench.robust.parallel import ModelSpec, ParallelSource
from membench.robust.train import SequentialSource, TrainResult, TrainSettings, train

__all__ = ["CHECKPOINT", "run_training_job", "variant_name"]

CHECKPOINT = "checkpoint.pt"


def _check_options(args: argparse.Namespace) -> None:
    """What the options' ranges (checked by the parser) cannot say alone."""
    if args.attack == "fgsm" and args.attack_steps != 1:
        raise InputError(
            None, f"FGSM-RS takes one step, got --attack-steps {args.attack_steps}", "option --attack-steps"
        )
    if args.max_staleness < args.publish_every - 1:
        raise InputError(
            None,
            f"must be at least publish_every - 1 = {args.publish_every - 1} (weights are only "
            f"that fresh), got {args.max_staleness}",
            "option --max-staleness",
        )


def variant_name(args: argparse.Namespace) -> str:
    """``seq-pgd10-t2``, ``par-pgd10-p2-k4``, ``seq-fgsm-t1``: mode, attack, and its parallelism."""
    attack = "fgsm" if args.attack == "fgsm" else f"pgd{args.attack_steps}"
    if args.mode == "sequential":
        return f"seq-{attack}-t{args.threads}"
    return f"par-{attack}-p{args.producers}-k{args.publish_every}"


def _identity(args: argparse.Namespace, data) -> dict:
    """The run's identity for its checkpoint: every option that shapes training, the data it was
    given (by content, whichever source it came from) and the code."""
    incidental = {
        "outdir",
        "device",
        "root",
        "threads",
        "timeout_s",
        "sample_interval_s",
        "grid_intensity_g_per_kwh",
    }
    options = {k: v for k, v in vars(args).items() if k not in incidental}
    options["data_sha256"] = tensors_sha256(data.x_train, data.y_train)
    return run_identity(options, code=code_version("core", "data", "robust"))


def run_training_job(args: argparse.Namespace) -> Path | None:
    """Run the job ``args`` describe; returns the path of its ``metrics.json`` (None on a producer
    rank of the distributed transport, which writes nothing)."""
    started = time.perf_counter()
    _check_options(args)
    if args.alpha is None:
        args.alpha = 1.25 * args.eps if args.attack == "fgsm" else pgd_alpha(args.eps, args.attack_steps)
    if args.eval_alpha is None:
        args.eval_alpha = pgd_alpha(args.eps, args.eval_attack_steps)
    device = resolve_device(args.device)
    if args.mode == "parallel" and args.transport == "distributed":
        with process_group(device, timeout_s=args.timeout_s, from_slurm=True) as (ranks, device):
            if ranks.world_size != args.producers + 1:
                raise InputError(
                    None,
                    f"the distributed transport runs one process per rank, trainer and "
                    f"{args.producers} producers: start {args.producers + 1} (torchrun --nproc-per-node "
                    f"or srun --ntasks), got {ranks.world_size}",
                    "option --transport",
                )
            return _run(args, started, device, ranks.rank)
    return _run(args, started, device, rank=0)


def _run(args: argparse.Namespace, started: float, device: torch.device, rank: int) -> Path | None:
    """Read the data, measure the run (rank 0; another rank is a producer), write its outputs."""
    data = load_dataset(
        args.dataset,
        args.root,
        test_fraction=args.test_fraction,
        seed=args.seed,
        train_limit=args.train_limit,
        test_limit=args.test_limit,
    )
    spec = ModelSpec(args.model, data.input_shape, data.num_classes, args.hidden_units)
    settings = _settings(args)
    # NCCL carries tensors on the GPU, gloo on the CPU.
    comm_device = device if device.type == "cuda" else torch.device("cpu")
    if rank != 0:
        run_producer(rank, args.producers, spec, settings, data.x_train, data.y_train, device, comm_device)
        return None
    outdir = Path(args.outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    record = job_record("robust", variant_name(args), args.dataset, device, args.seed, args.batch_size)
    measured = _measure_run(args, data, spec, settings, device, comm_device, outdir / CHECKPOINT)
    record.update(_fields(args, settings, data, measured))
    record["wall_s"] = time.perf_counter() - started
    result = measured.result
    atomic.write_csv(outdir / "history.csv", pd.DataFrame(result.history))
    atomic.write_csv(
        outdir / "staleness.csv",
        pd.DataFrame({"batch": range(len(result.staleness)), "staleness": result.staleness}),
    )
    return write_job_outputs(outdir, record, measured.meter.memlog())


def _settings(args: argparse.Namespace) -> TrainSettings:
    parallel = args.mode == "parallel"
    return TrainSettings(
        attack=args.attack,
        eps=args.eps,
        steps=args.attack_steps,
        alpha=args.alpha,
        epochs=args.epochs,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        optimizer=args.optimizer,
        learning_rate_schedule=args.learning_rate_schedule,
        momentum=args.momentum,
        weight_decay=args.weight_decay,
        seed=args.seed,
        guard_steps=args.guard_attack_steps,
        guard_samples=args.guard_samples,
        guard_drop=args.guard_drop,
        guard_action=args.guard_action,
        guard_shrink=args.guard_shrink,
        max_staleness=args.max_staleness if parallel else None,
    )


@dataclass
class _MeasuredRun:
    """What a training job measured: the training, the accuracies on ``test_samples`` test images,
    the meter (phases ``startup``, ``train``, ``evaluate``) and the batch source (its waits)."""

    result: TrainResult
    clean_accuracy: float
    robust_accuracy: float
    test_samples: int
    meter: Meter
    source: object


def _measure_run(
    args: argparse.Namespace,
    data,
    spec: ModelSpec,
    settings: TrainSettings,
    device: torch.device,
    comm_device: torch.device,
    checkpoint: Path,
) -> _MeasuredRun:
    """Train the seeded model under the meter (resuming from ``checkpoint``), then test it with a
    fresh PGD attack."""
    model = build_model(spec.name, spec.input_shape, spec.num_classes, spec.hidden_units, args.seed).to(
        device
    )
    source = _batch_source(args, data, spec, settings, device, comm_device)
    with (
        Meter(
            device,
            sample_interval_s=args.sample_interval_s,
            grid_intensity_g_per_kwh=args.grid_intensity_g_per_kwh,
        ) as meter,
        contextlib.ExitStack() as producers,
    ):
        if args.mode == "parallel":
            with meter.phase("startup"):
                producers.enter_context(source)
        with meter.phase("train"):
            result = train(
                model, data.x_train, data.y_train, settings, source, checkpoint, device, _identity(args, data)
            )
        producers.close()
        with meter.phase("evaluate"):
            x_test, y_test = data.x_test[: args.eval_samples], data.y_test[: args.eval_samples]
            clean_accuracy, robust_accuracy = evaluate(
                model,
                x_test,
                y_test,
                args.eps,
                args.eval_attack_steps,
                args.eval_restarts,
                alpha=args.eval_alpha,
                seed=args.seed + 1,
            )
    return _MeasuredRun(result, clean_accuracy, robust_accuracy, len(x_test), meter, source)


def _batch_source(
    args: argparse.Namespace,
    data,
    spec: ModelSpec,
    settings: TrainSettings,
    device: torch.device,
    comm_device: torch.device,
):
    """The trainer's batches: attacked by itself (sequential), by producer processes on this node, or
    by producer ranks (distributed)."""
    queue_size = args.queue_size or 2 * args.producers
    if args.mode == "parallel" and args.transport == "distributed":
        return DistributedSource(
            spec,
            data.y_train,
            args.producers,
            args.publish_every,
            queue_size,
            args.timeout_s,
            comm_device=str(comm_device),
        )
    if args.mode == "parallel":
        return ParallelSource(
            spec,
            data.x_train,
            data.y_train,
            settings,
            args.producers,
            args.publish_every,
            queue_size,
            args.timeout_s,
            device=str(device),
            threads_per_producer=args.threads,
        )
    return SequentialSource(data.x_train, data.y_train, settings, device)


def _fields(
    args: argparse.Namespace, settings: TrainSettings, data, measured: _MeasuredRun
) -> dict[str, object]:
    """The metrics of a measured run: the meter's, the epochs' timing, the options and the results."""
    result, source, staleness = measured.result, measured.source, measured.result.staleness
    parallel = args.mode == "parallel"
    cores = args.threads * (args.producers + 1 if parallel else 1)
    return {
        **measured.meter.summary(),
        **timing_fields(
            [h["epoch_wall_s"] for h in result.history],
            "epoch",
            [h["load_1m_max"] for h in result.history],
            threads=cores,
            settings=[h["timing_setting"] for h in result.history],
            processes=[h["timing_process"] for h in result.history],
        ),
        "mode": args.mode,
        "attack": args.attack,
        "attack_steps": args.attack_steps,
        "alpha": args.alpha,
        "final_alpha": result.alpha,
        "eps": args.eps,
        "epochs": args.epochs,
        "epochs_done": result.epochs_done,
        "resumed_from_epoch": result.resumed_from_epoch,
        "model": args.model,
        "threads": args.threads,
        "producers": args.producers if parallel else 0,
        "publish_every": args.publish_every if parallel else None,
        "transport": args.transport if parallel else None,
        "max_staleness": settings.max_staleness,
        "cores": cores,
        "learning_rate": args.learning_rate,
        "optimizer": args.optimizer,
        "learning_rate_schedule": args.learning_rate_schedule,
        "train_samples": len(data.x_train),
        "test_samples": measured.test_samples,
        "clean_accuracy": measured.clean_accuracy,
        "robust_accuracy": measured.robust_accuracy,
        "eval_attack": f"pgd{args.eval_attack_steps}x{args.eval_restarts}",
        "eval_alpha": args.eval_alpha,
        "train_wall_s": result.train_wall_s,
        "samples_per_s": result.trained_samples / result.train_wall_s if result.train_wall_s else None,
        "startup_s": source.startup_s if parallel else 0.0,
        "trainer_wait_s": source.wait_s if parallel else 0.0,
        "staleness_mean": sum(staleness) / len(staleness) if staleness else None,
        "staleness_max": max(staleness) if staleness else None,
        "regenerated_batches": result.regenerated_batches,
        "guard_events": result.guard_events,
        "guard_stopped": result.guard_stopped,
        "producer_memory_measured": False if parallel else None,
    }
