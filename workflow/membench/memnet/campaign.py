"""The whole chain in one command, for a GPU machine without Snakemake: generate configurations at
GPUMemNet's ranges, measure each (NVML on a GPU), clean, evaluate every estimator at the requested
risk, train them, then measure real timm models (where timm is installed) and set every estimator's
``predict`` beside each measurement.

Everything lands under ``--outdir``; a rerun resumes (measured configurations are not measured
again). With ``--measure-only`` the run stops once each family's GPUMemNet-format CSV is written,
so that the evaluation, which needs no GPU, can run elsewhere (``membench memnet evaluate``); with
``--skip-evaluation`` it leaves out only the k-fold evaluation, and still trains the estimators and
predicts the timm models, which need timm (installed where the GPU is, say).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from membench.core.tables import write_table
from membench.core.validate import open_regular
from membench.memnet.clean import clean_records
from membench.memnet.configs import config_of
from membench.memnet.dataset import DEFAULT_BINS, STATUS_OOM, load_jobs, memory_target
from membench.memnet.estimators import LEARNED, new_estimator
from membench.memnet.evaluate import evaluate, judgement
from membench.memnet.generate import generate
from membench.memnet.measure import measure_configs, run_isolated, train_steps
from membench.memnet.predict import family_of_kinds, job_of_summary, make_input, predict_job
from membench.memnet.trained import Trained, save_trained, trained_identity, training_ranges

__all__ = ["FAMILIES", "LOG", "real_model_table", "run_campaign"]

LOG = logging.getLogger(__name__)
FAMILIES = ("mlp", "cnn", "transformer")


def run_campaign(args) -> None:
    """See the module docstring; ``args`` are ``membench memnet campaign``'s options.

    Every measurement (configurations, then timm models) is forked before this process runs any
    torch operation itself (evaluation, training, predictions), so no child inherits a used
    OpenMP thread pool.
    """
    out = Path(args.outdir)
    measured = {}
    for family, count in zip(FAMILIES, args.count):
        configs_path = out / family / "configs.csv"
        if configs_path.is_file():
            with open_regular(configs_path) as handle:
                configs = pd.read_csv(handle, keep_default_na=False)
        else:
            configs = generate(family, count, args.seed)
            write_table(configs, configs_path)
        records = measure_configs(
            configs,
            family,
            out / family / "records",
            device=args.device,
            steps=args.train_steps,
            sample_interval_s=args.sample_interval_s,
            timeout_s=args.timeout_s,
            threads=_child_threads(args),
            jobs_at_once=args.jobs_at_once,
        )
        measured[family] = (configs, records)
    timm_records = _measure_timm(args, out) if args.timm_models else []

    trained: dict[str, Trained] = {}
    evaluations = []
    for family, (configs, records) in measured.items():
        base = out / family
        typed = pd.DataFrame(
            [{"config_id": r["config_id"], **config_of(r, family)} for r in configs.to_dict("records")]
        )
        frame, skipped = clean_records(records, typed, family)
        LOG.info("%s: %d jobs measured, %d failed or timed out", family, len(frame), skipped)
        if len(frame) < 2 * args.folds:
            LOG.warning("%s: too few jobs to evaluate", family)
            continue
        write_table(frame, base / "gpumemnet.csv")
        if args.measure_only:
            continue
        jobs = load_jobs(base / "gpumemnet.csv", family)
        bins = DEFAULT_BINS[family]
        if not args.skip_evaluation:
            table, predictions = evaluate(
                jobs,
                bins,
                folds=args.folds,
                seed=args.seed,
                max_under=args.max_under,
                faketensor_rows=args.faketensor_rows,
            )
            table.insert(0, "family", family)
            table.insert(1, "jobs", len(jobs))
            table.insert(2, "too_small_to_judge", judgement(jobs, bins))
            write_table(table, base / "evaluation.csv")
            write_table(predictions, base / "predictions.csv")
            evaluations.append(table)
        trained[family] = _train(args, jobs, bins, base / "gpumemnet.csv", base / "estimators")
    if evaluations:
        write_table(pd.concat(evaluations, ignore_index=True), out / "evaluation.csv")
    if timm_records and not args.measure_only:
        write_table(
            real_model_table(timm_records, trained, args.image_size, args.max_under), out / "timm.csv"
        )


def _child_threads(args) -> int:
    """CPU threads of each measuring child: one with ``--device cpu``, where the training steps are
    the measurement; else a share of the cores, which on a GPU only build the model (its
    initialisation). CUDA is not asked: this process must not initialise it before it forks."""
    if args.device == "cpu":
        return 1
    return max(1, (os.cpu_count() or 1) // args.jobs_at_once)


def _train(args, jobs, bins, data: Path, outdir: Path) -> Trained:
    """Every estimator fitted and calibrated on all of a family's jobs, saved for predict."""
    options = {"max_under": args.max_under, "calibration_rows": args.faketensor_rows}
    estimators = []
    for name in (*LEARNED, "horus", "faketensor", "memtracker"):
        estimator = new_estimator(name, bins, seed=args.seed, **options)
        estimator.fit(jobs)
        estimators.append(estimator)
    names = [e.name for e in estimators]
    identity = trained_identity(
        {"family": jobs.family, "seed": args.seed, "estimators": names, **options}, data
    )
    devices = sorted({name for name in jobs.frame["device_name"] if name})
    info = {
        "path": str(data),
        "dataset": f"campaign_{jobs.family}",
        "device_name": ", ".join(devices),
        "jobs": len(jobs),
        "target": memory_target(jobs),
        "ranges": training_ranges(jobs),
        "too_small_to_judge": judgement(jobs, bins),
    }
    result = Trained(jobs.family, bins, args.max_under, estimators, info, identity)
    save_trained(outdir, result)
    return result


def _measure_timm(args, out: Path) -> list[dict]:
    """Each timm model x batch size trained ``steps`` steps in its own process: the records."""
    try:
        import timm
    except ImportError:
        LOG.warning(
            "timm is not installed: the real models (%s) are not measured", ", ".join(args.timm_models)
        )
        return []
    shape = (3, args.image_size, args.image_size)
    jobs = []
    for name in args.timm_models:
        for batch in args.timm_batch_sizes:
            identity = {
                "config_id": f"{name}_b{batch}",
                "filename": name,
                "family": "timm",
                "batch_size": batch,
            }

            def job(device, steps, optimizer, interval, name=name, batch=batch):
                return train_steps(
                    lambda: timm.create_model(name, pretrained=False),
                    lambda dev, gen: (
                        make_input(shape, "float32", batch, device=dev, generator=gen),
                        torch.randint(0, 1000, (batch,), generator=gen).to(dev),
                    ),
                    device,
                    steps,
                    optimizer,
                    interval,
                )

            jobs.append((identity, {"model": name, "batch": batch, "image_size": args.image_size}, job))
    return run_isolated(
        jobs,
        out / "timm" / "records",
        device=args.device,
        steps=args.train_steps,
        sample_interval_s=args.sample_interval_s,
        timeout_s=args.timeout_s,
        threads=_child_threads(args),
        jobs_at_once=args.jobs_at_once,
    )


def real_model_table(
    records: list[dict], trained: dict[str, Trained], image_size: int, max_under: float
) -> pd.DataFrame:
    """Every estimator's answer for each measured real model (the records of ``--timm-models``),
    beside the measured peak: one row per model, batch and estimator.

    A model is given to the estimators as its GPUMemNet-format row (layer list, module counts,
    parameters, batch, from its record; the input 3 x ``image_size`` x ``image_size``), so the table
    needs no timm: the estimators of the family its modules make it (attention: transformer;
    convolution: cnn; else mlp) answer, FakeTensor and MemTracker on the model its layer list
    rebuilds or with the reason they cannot. A record without a layer list (its process failed or
    timed out) has no row.
    """
    rows = []
    for record in records:
        if "layers" not in record:
            LOG.warning("%s: %s, no layer list to predict from", record["config_id"], record["status"])
            continue
        family = family_of_kinds(record["module_counts"])
        source = trained.get(family)
        bins = source.bins if source else DEFAULT_BINS[family]
        jobs = job_of_summary(
            record["layers"],
            record["module_counts"],
            record["total_parameters"],
            (3, image_size, image_size),
            "float32",
            record["batch_size"],
            # Named as a GPUMemNet CNN row names its input, so that a CNN's layer list can be rebuilt.
            f"channels:3_input:{image_size}_model:{record['filename']}",
            family,
        )
        predicted, warnings = predict_job(
            jobs, [source] if source else [], bins, max_under, baselines_from_row=True
        )
        predicted["model"] = record["filename"]
        predicted["warnings"] = "; ".join(warnings)
        measured = record.get("memory_mib")
        true_bin = (
            bins.count - 1
            if record["status"] == STATUS_OOM
            else (int(bins.label(np.array([measured]))[0]) if measured is not None else -1)
        )
        predicted["status"] = record["status"]
        predicted["measured_mib"] = measured
        predicted["true_bin"] = true_bin
        # A class of -1 is no answer (see no_answer_reason), not an under-estimate.
        predicted["under"] = (predicted["bin"] >= 0) & (predicted["bin"] < true_bin)
        # An out-of-memory job exceeded any figure in MiB, as evaluate's mib_under_rate counts it.
        predicted["mib_under"] = predicted["mib"].notna() & (
            record["status"] == STATUS_OOM or predicted["high_mib"] < (measured or 0)
        )
        predicted["estimate_over_measured"] = predicted["mib"] / measured if measured else np.nan
        predicted["measured_on"] = record.get("device_name")
        rows.append(predicted)
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()
