"""``membench division <step>``: build the kernels, benchmark memory, throughput and the largest
batch, run accuracy trainings, and draw the report figures."""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from pathlib import Path

from membench.core.options import (
    BATCH_SIZE,
    DEVICE_CHOICES,
    EPOCHS,
    IMAGE_SIZE,
    LEARNING_RATE,
    MOMENTUM,
    SEED,
    STEPS,
    THREADS,
    TIMEOUT_S,
    WEIGHT_DECAY,
    WORKERS,
    InputDir,
    InputFile,
    OutputDir,
    OutputFile,
    add_allocator_option,
    add_meter_options,
    command_line,
    integer,
)
from membench.division.extension import CUDA_CHOICES, DEFAULT_LOCK_TIMEOUT_S, KERNEL_CHOICES
from membench.division.options import AMP_CHOICES, METHODS, MODELS, STEMS, MethodSpec

__all__ = ["build_parser", "CONFIG_KEYS", "MAP_DTYPES", "memory_parser", "NUM_CLASSES", "run", "SYSTEM"]

SYSTEM = "division"
# The dtypes of a map the compressor benchmark measures (the kernels read and write these).
MAP_DTYPES = ("float32", "float16", "bfloat16")
# The methods that compress nothing (methods.convert_model): they run torch's own operators whatever
# --kernels says, record kernels "torch", and build nothing.
_UNCOMPRESSED = ("vanilla", "checkpoint")
NUM_CLASSES = integer(2, 100_000)


def _add_compressor_options(parser: argparse.ArgumentParser) -> None:
    """The compressors' settings and which kernels run them."""
    parser.add_argument(
        "--block-size", type=integer(1, 1024), default=MethodSpec.block_size, help="DIVISION LFC block B"
    )
    parser.add_argument(
        "--hfc-bits",
        type=integer(1, 8),
        default=MethodSpec.hfc_bits,
        choices=(1, 2, 4, 8),
        help="DIVISION HFC bits Q",
    )
    parser.add_argument(
        "--group-size",
        type=integer(1, 2**20),
        default=MethodSpec.group_size,
        help="ActNN values per min/scale group",
    )
    parser.add_argument(
        "--kernels",
        default="auto",
        choices=KERNEL_CHOICES,
        help="compressor kernels: extension (built on first use into the per-user cache), torch, or auto"
        " (extension when it builds, else torch, saying why)",
    )
    parser.add_argument(
        "--build-manifest",
        type=InputFile,
        default=None,
        help="manifest.json of `membench division build --outdir` (default: the per-user cache's build)",
    )


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--outdir", type=OutputDir, required=True, help="job directory for metrics.json and memlog.csv"
    )
    parser.add_argument("--variant", required=True, choices=METHODS, help="the training method")
    parser.add_argument("--model", default="resnet18", choices=MODELS)
    parser.add_argument(
        "--width",
        type=integer(1, 4096),
        default=None,
        help="first-stage channels (ResNets) or growth rate (DenseNet)",
    )
    parser.add_argument(
        "--stem", default=None, choices=STEMS, help="DenseNet-121/ResNet-50 stem (default imagenet)"
    )
    parser.add_argument("--device", default="auto", help=f"one of {', '.join(DEVICE_CHOICES)} (or cuda:N)")
    parser.add_argument("--seed", type=SEED, default=0)
    _add_compressor_options(parser)
    parser.add_argument(
        "--amp",
        default="none",
        choices=AMP_CHOICES,
        help="mixed precision: none (float32), bf16 or fp16 autocast (fp16 with a gradient scaler)",
    )
    add_meter_options(parser)


def _add_synthetic(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--batch-size", type=BATCH_SIZE, required=True)
    parser.add_argument("--image-size", type=IMAGE_SIZE, default=32)
    parser.add_argument("--num-classes", type=NUM_CLASSES, default=10)


def _add_memory(parser: argparse.ArgumentParser) -> None:
    _add_common(parser)
    _add_synthetic(parser)
    parser.add_argument(
        "--memory-bound",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="after the measured step, one instrumented step computes a lower bound of its allocator "
        "peak (step_alloc_bound_mib) and the ratio of the peak to it (step_alloc_peak_vs_bound)",
    )
    parser.add_argument("--trace-live-tensors", action=argparse.BooleanOptionalAction, default=True)
    add_allocator_option(parser)


def memory_parser() -> argparse.ArgumentParser:
    """The options of ``membench division memory``, which the largest-batch search's probes run."""
    parser = argparse.ArgumentParser(prog="membench division memory")
    _add_memory(parser)
    return parser


# Config keys the workflow passes to each step (``*``: any name, ``[]``: each item), each as the
# step's option spelled the same way; tests/test_vocabulary.py checks them against the schema,
# these parsers and the rules.
_JOB_KEYS = (
    "seed",
    "device",
    "meter.sample_interval_s",
    "meter.grid_intensity_g_per_kwh",
    "division.variants.[]",
    *(f"division.{key}" for key in ("block_size", "hfc_bits", "group_size", "amp", "kernels")),
)
_MODEL_KEYS = ("model", "width", "stem", "image_size")
CONFIG_KEYS = {
    "build": ("division.cuda",),
    "memory": (
        *_JOB_KEYS,
        "meter.trace_allocator",
        *(
            f"division.memory.{key}"
            for key in (*_MODEL_KEYS, "num_classes", "batch_sizes.[]", "trace_live_tensors")
        ),
    ),
    "speed": (
        *_JOB_KEYS,
        *(
            f"division.speed.{key}"
            for key in (
                *_MODEL_KEYS,
                "num_classes",
                "batch_sizes.[]",
                "train_steps",
                "warmup_steps",
                "paired_vanilla",
            )
        ),
    ),
    "maxbatch": (
        *_JOB_KEYS,
        *(f"division.max_batch.{key}" for key in (*_MODEL_KEYS, "num_classes", "start", "limit")),
    ),
    "train": (
        *_JOB_KEYS,
        *(
            f"division.accuracy.{key}"
            for key in (
                "variants.[]",
                "dataset",
                *_MODEL_KEYS,
                "epochs",
                "batch_size",
                "learning_rate",
                "momentum",
                "weight_decay",
                "num_workers",
                "flip",
            )
        ),
    ),
}


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    steps = parser.add_subparsers(dest="step", required=True, metavar="<step>")

    build = steps.add_parser(
        "build",
        help="compile the C++ (and CUDA) kernels into the per-user cache ($MEMBENCH_CACHE_DIR, else "
        "$XDG_CACHE_HOME/membench or ~/.cache/membench), unless built there already",
    )
    build.add_argument(
        "--outdir",
        type=OutputDir,
        default=None,
        help="also write <outdir>/manifest.json naming the build (what the workflow's jobs load)",
    )
    build.add_argument("--cuda", default="auto", choices=CUDA_CHOICES)
    build.add_argument("--verbose", action="store_true")
    build.add_argument(
        "--lock-timeout-s",
        type=TIMEOUT_S,
        default=DEFAULT_LOCK_TIMEOUT_S,
        help="longest wait for another build of --outdir to finish",
    )

    _add_memory(steps.add_parser("memory", help="activation and total memory of one training step"))

    speed = steps.add_parser("speed", help="training throughput (median over timed steps)")
    _add_common(speed)
    _add_synthetic(speed)
    speed.add_argument("--train-steps", type=STEPS, default=16, help="timed training steps")
    speed.add_argument(
        "--warmup-steps", type=integer(0, 1_000_000), default=3, help="untimed training steps before timing"
    )
    speed.add_argument(
        "--paired-vanilla",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="time a vanilla step beside each step of the method, in the same process, and write "
        "vs_paired_vanilla (the method's throughput as a fraction of vanilla's, median over the rounds)",
    )

    compressors = steps.add_parser(
        "compressors",
        help="compress + decompress of one map by DIVISION, ActNN-style and the ReLU mask, against a clone",
    )
    compressors.add_argument("--outdir", type=OutputDir, required=True, help="job directory for metrics.json")
    compressors.add_argument("--batch-size", type=BATCH_SIZE, default=32, help="the map's N")
    compressors.add_argument("--channels", type=integer(1, 2**16), default=64, help="the map's C")
    compressors.add_argument("--image-size", type=IMAGE_SIZE, default=32, help="the map's H and W")
    compressors.add_argument("--dtype", default="float32", choices=MAP_DTYPES, help="the map's dtype")
    compressors.add_argument("--repeats", type=integer(1, 1000), default=20, help="timed rounds")
    compressors.add_argument("--threads", type=THREADS, default=1, help="torch CPU threads")
    compressors.add_argument(
        "--device", default="cpu", help=f"one of {', '.join(DEVICE_CHOICES)} (or cuda:N)"
    )
    compressors.add_argument("--seed", type=SEED, default=0)
    _add_compressor_options(compressors)

    maxbatch = steps.add_parser(
        "maxbatch", help="largest batch whose training step fits (binary search, one process per probe)"
    )
    _add_common(maxbatch)
    maxbatch.add_argument("--image-size", type=IMAGE_SIZE, default=224)
    maxbatch.add_argument("--num-classes", type=NUM_CLASSES, default=1000)
    maxbatch.add_argument("--start", type=BATCH_SIZE, default=64)
    maxbatch.add_argument("--limit", type=BATCH_SIZE, default=4096)

    train = steps.add_parser("train", help="accuracy run on image LMDBs")
    _add_common(train)
    train.add_argument("--train-lmdb", type=InputDir, required=True)
    train.add_argument("--val-lmdb", type=InputDir, required=True)
    train.add_argument("--dataset", required=True, help="dataset name recorded in the metrics")
    train.add_argument("--image-size", type=IMAGE_SIZE, default=32)
    train.add_argument("--epochs", type=EPOCHS, default=8)
    train.add_argument("--batch-size", type=BATCH_SIZE, default=64)
    train.add_argument("--learning-rate", type=LEARNING_RATE, default=0.05)
    train.add_argument("--momentum", type=MOMENTUM, default=0.9)
    train.add_argument("--weight-decay", type=WEIGHT_DECAY, default=5e-4)
    train.add_argument("--num-workers", type=WORKERS, default=0)
    train.add_argument(
        "--flip", action=argparse.BooleanOptionalAction, default=False, help="random horizontal flips"
    )

    for name, text in (
        ("plot-memory", "memory against batch size"),
        ("plot-speed", "throughput against batch size"),
    ):
        plot = steps.add_parser(name, help=text)
        plot.add_argument("--table", type=InputFile, required=True)
        plot.add_argument("--out", type=OutputFile, required=True, help="PNG path")
    return parser


def run(args: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if args.step == "build":
        from membench.core.extension import user_cache_dir
        from membench.division.extension import build_extension

        manifest = build_extension(
            user_cache_dir(os.environ), args.cuda, args.verbose, args.lock_timeout_s, args.outdir
        )
        if manifest["status"] == "built":
            logging.info("kernels built, or found built, in the cache: %s", json.dumps(manifest))
        else:
            logging.warning(
                "the build failed; jobs with kernels auto use the pure-torch kernels: %s",
                json.dumps(manifest),
            )
    elif args.step == "plot-memory":
        from membench.division.plots import plot_memory

        plot_memory(args.table, args.out)
    elif args.step == "plot-speed":
        from membench.division.plots import plot_speed

        plot_speed(args.table, args.out)
    elif args.step == "maxbatch":
        _maxbatch(args)
    elif args.step == "compressors":
        _compressors(args)
    else:
        _job(args)


def _job(args: argparse.Namespace) -> None:
    from membench.core.device import resolve_device
    from membench.core.distributed import process_group

    start = time.perf_counter()
    with process_group(resolve_device(args.device)) as (ranks, device):
        _measure(args, device, ranks, start)


def _measure(args, device, ranks, start: float) -> None:
    import torch

    from membench.core.extension import user_cache_dir
    from membench.core.malloc import keep_freed_memory
    from membench.core.meter import Meter
    from membench.core.metrics import job_record, write_job_outputs
    from membench.division.kernels import TORCH_KERNELS, select_kernels

    kernels = (
        TORCH_KERNELS
        if args.variant in _UNCOMPRESSED
        else select_kernels(
            args.kernels, args.build_manifest, device.type, cache_dir=user_cache_dir(os.environ)
        )
    )
    spec = MethodSpec(block_size=args.block_size, hfc_bits=args.hfc_bits, group_size=args.group_size)
    torch.manual_seed(args.seed)
    dataset = args.dataset if args.step == "train" else f"random_{args.image_size}px"
    record = job_record(SYSTEM, args.variant, dataset, device, args.seed, getattr(args, "batch_size", None))
    record.update(
        {
            "job": args.step,
            "model": args.model,
            "width": args.width,
            "image_size": args.image_size,
            "kernels": kernels.value,
            "kernels_fallback_reason": kernels.fallback_reason,
            "kernels_cpu_isa": kernels.cpu_isa,
            "block_size": spec.block_size,
            "hfc_bits": spec.hfc_bits,
            "group_size": spec.group_size,
            "world_size": ranks.world_size,
            "amp": args.amp,
            "stem": args.stem,
            "num_classes": getattr(args, "num_classes", None),
            "pid": os.getpid(),
            # Timed jobs run on reused memory (membench.core.malloc); memory jobs as they are.
            "malloc_keeps_freed": args.step != "memory" and keep_freed_memory(),
        }
    )
    trace_live = args.step == "memory" and args.trace_live_tensors
    trace_allocator = args.step == "memory" and args.trace_allocator
    meter = Meter(
        device,
        sample_interval_s=args.sample_interval_s,
        trace_live_tensors=trace_live,
        trace_allocator=trace_allocator,
        trace_saved_activations=args.step in ("memory", "train"),
        grid_intensity_g_per_kwh=args.grid_intensity_g_per_kwh,
    )
    with meter:
        if args.step == "train":
            fields = _train(args, device, spec, kernels, meter, ranks)
        else:
            fields = {"memory": _memory, "speed": _speed}[args.step](args, device, spec, kernels, meter)
    if not ranks.is_main:
        return
    record.update(meter.summary())
    record.update(fields)
    if record.get("step_alloc_bound_mib") and record.get("step_alloc_peak_mib") is not None:
        record["step_alloc_peak_vs_bound"] = record["step_alloc_peak_mib"] / record["step_alloc_bound_mib"]
        logging.info(
            "step allocator peak %.1f MiB = %.2fx its lower bound %.1f MiB (saved %.1f + gradients %.1f + "
            "maps %.1f MiB, at %s)",
            record["step_alloc_peak_mib"],
            record["step_alloc_peak_vs_bound"],
            record["step_alloc_bound_mib"],
            record["bound_saved_mib"],
            record["bound_grads_mib"],
            record["bound_maps_mib"],
            record["bound_at"],
        )
    record["wall_s"] = time.perf_counter() - start
    path = write_job_outputs(args.outdir, record, meter.memlog())
    logging.info(
        "%s %s %s: %s -> %s",
        args.step,
        args.model,
        args.variant,
        {k: v for k, v in fields.items() if isinstance(v, (int, float))},
        path,
    )


def _memory(args, device, spec, kernels, meter) -> dict:
    from membench.division.bench import (
        make_optimizer,
        measure_step_memory,
        prepare_model,
        random_batch,
        step_memory_bound,
    )
    from membench.division.precision import Precision

    model, _ = prepare_model(
        args.model, args.variant, args.num_classes, device, spec, kernels, args.seed, args.width, args.stem
    )
    optimizer = make_optimizer(model)
    inputs, targets = random_batch(args.batch_size, args.image_size, args.num_classes, device, args.seed)
    precision = Precision(args.amp, device)
    fields = measure_step_memory(model, optimizer, inputs, targets, meter, precision)
    if args.memory_bound and fields["status"] == "ok":
        fields.update(step_memory_bound(model, optimizer, inputs, targets, precision))
    return fields


def _speed(args, device, spec, kernels, meter) -> dict:
    from membench.division.bench import (
        make_optimizer,
        measure_paired_throughput,
        measure_throughput,
        prepare_model,
        random_batch,
    )
    from membench.division.precision import Precision

    def prepared(method: str):
        model, _ = prepare_model(
            args.model, method, args.num_classes, device, spec, kernels, args.seed, args.width, args.stem
        )
        return model, make_optimizer(model)

    inputs, targets = random_batch(args.batch_size, args.image_size, args.num_classes, device, args.seed)
    timing = (inputs, targets, args.train_steps, args.warmup_steps, Precision(args.amp, device))
    paired = args.paired_vanilla and args.variant != "vanilla"
    with meter.phase("train"):
        if paired:
            fields = measure_paired_throughput(*prepared(args.variant), *prepared("vanilla"), *timing)
        else:
            fields = measure_throughput(*prepared(args.variant), *timing)
    return {
        **fields,
        "train_steps": args.train_steps,
        "warmup_steps": args.warmup_steps,
        "paired_vanilla": paired,
    }


def _compressors(args) -> None:
    """Compress + decompress one map by each compressor against a clone; write metrics.json."""
    import torch

    from membench.core.device import resolve_device
    from membench.core.extension import user_cache_dir
    from membench.core.malloc import keep_freed_memory
    from membench.core.metrics import job_record, write_job_outputs
    from membench.division.bench import measure_compressors
    from membench.division.kernels import select_kernels

    start = time.perf_counter()
    torch.set_num_threads(args.threads)
    malloc_keeps_freed = keep_freed_memory()
    device = resolve_device(args.device)
    kernels = select_kernels(
        args.kernels, args.build_manifest, device.type, cache_dir=user_cache_dir(os.environ)
    )
    spec = MethodSpec(block_size=args.block_size, hfc_bits=args.hfc_bits, group_size=args.group_size)
    shape = (args.batch_size, args.channels, args.image_size, args.image_size)
    record = job_record(SYSTEM, "compressors", "random_map", device, args.seed, args.batch_size)
    record.update(
        {
            "job": "compressors",
            "kernels": kernels.value,
            "kernels_fallback_reason": kernels.fallback_reason,
            "kernels_cpu_isa": kernels.cpu_isa,
            "block_size": spec.block_size,
            "hfc_bits": spec.hfc_bits,
            "group_size": spec.group_size,
            "channels": args.channels,
            "image_size": args.image_size,
            "malloc_keeps_freed": malloc_keeps_freed,
        }
    )
    record.update(
        measure_compressors(kernels, shape, spec, args.repeats, getattr(torch, args.dtype), device, args.seed)
    )
    record["wall_s"] = time.perf_counter() - start
    path = write_job_outputs(args.outdir, record)
    logging.info(
        "%s map, %s kernels, %d thread(s): clone %.2f ms; DIVISION %.2f ms (%.1fx the clone); "
        "ActNN-style %.2f ms (%.1fx) -> %s",
        record["map_shape"],
        record["kernels"],
        args.threads,
        record["clone_ms"],
        record["division_ms"],
        record["division_vs_clone"],
        record["actnn2bit_ms"],
        record["actnn2bit_vs_clone"],
        path,
    )


def _maxbatch(args) -> None:
    """The search driver: probes are ``membench division memory`` subprocesses (see ``maxbatch``)."""
    import torch

    from membench.core.errors import InputError
    from membench.division.maxbatch import search

    # is_available() creates no CUDA context, so the probes still find the device untouched.
    if args.device == "auto" and not torch.cuda.is_available():
        raise InputError(
            None,
            "the largest-batch search needs a CUDA device; --device cpu searches the host "
            "allocator, which on most machines swaps or is killed before it refuses",
            "option --device",
        )
    # A probe takes the search's options as they were parsed; the search gives each its --outdir
    # and --batch-size. It only needs to know whether the step fits: no live-tensor or CPU
    # allocator tracing.
    probe_values = {key: value for key, value in vars(args).items() if key != "outdir"}
    probe_values.update(trace_live_tensors=False, trace_allocator=False)
    probe_arguments = command_line(memory_parser(), probe_values)
    expected = {
        "system": SYSTEM,
        "job": "memory",
        "variant": args.variant,
        "model": args.model,
        "width": args.width,
        "stem": args.stem,
        "dataset": f"random_{args.image_size}px",
        "image_size": args.image_size,
        "num_classes": args.num_classes,
        "seed": args.seed,
        "amp": args.amp,
        "block_size": args.block_size,
        "hfc_bits": args.hfc_bits,
        "group_size": args.group_size,
    }
    record = search(args.outdir, probe_arguments, expected, args.start, args.limit)
    logging.info(
        "largest batch %s %s: %d (%s; %d of %d probes measured now)",
        args.model,
        args.variant,
        record["largest_batch"],
        record["probes"],
        record["probes_measured"],
        record["probe_count"],
    )


def _train(args, device, spec, kernels, meter, ranks) -> dict:
    import pandas as pd
    import torch

    from membench.core.atomic import write_csv
    from membench.core.checkpoint import code_version, run_identity
    from membench.core.errors import InputError
    from membench.core.timing import timing_fields
    from membench.data.images.lmdb_store import ImageLMDB
    from membench.data.images.transforms import EvalTransform, TrainTransform
    from membench.division.bench import prepare_model
    from membench.division.train import TrainSpec, checkpoint_file, train_model

    # Per-channel statistics of natural images (ImageNet); close enough for any RGB data here.
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    train_set = ImageLMDB(
        args.train_lmdb,
        TrainTransform(args.image_size, mean, std, padding=args.image_size // 8, flip=args.flip),
    )
    val_set = ImageLMDB(args.val_lmdb, EvalTransform(args.image_size, mean, std))
    if val_set.classes != train_set.classes:
        raise InputError(
            args.val_lmdb,
            f"classes {val_set.classes} differ from the training LMDB's {train_set.classes}",
            "key '__classes__'",
        )
    model, context = prepare_model(
        args.model,
        args.variant,
        len(train_set.classes),
        device,
        spec,
        kernels,
        args.seed,
        args.width,
        args.stem,
    )
    train_spec = TrainSpec(
        args.epochs,
        args.batch_size,
        args.learning_rate,
        args.momentum,
        args.weight_decay,
        args.num_workers,
        args.seed,
        args.amp,
    )
    Path(args.outdir).mkdir(parents=True, exist_ok=True)
    # Options that do not change what is computed may differ between a killed run and its resumption.
    incidental = {
        "outdir",
        "device",
        "kernels",
        "build_manifest",
        "num_workers",
        "sample_interval_s",
        "grid_intensity_g_per_kwh",
        "train_lmdb",
        "val_lmdb",
    }
    identity = run_identity(
        {k: v for k, v in vars(args).items() if k not in incidental},
        (args.train_lmdb, args.val_lmdb),
        code_version("core", "data", "division"),
    )
    history = train_model(
        model,
        context,
        train_set,
        val_set,
        train_spec,
        device,
        meter,
        checkpoint_file(args.outdir),
        identity,
        ranks,
    )
    if ranks.is_main:
        write_csv(Path(args.outdir) / "history.csv", pd.DataFrame(history))
    last = history[-1]
    return {
        "epochs": args.epochs,
        "learning_rate": args.learning_rate,
        "train_images": len(train_set),
        "val_images": len(val_set),
        "val_classes": len(set(val_set.labels())),
        "num_classes": len(train_set.classes),
        "val_accuracy": last["val_accuracy"],
        "val_loss": last["val_loss"],
        "train_loss": last["train_loss"],
        "best_val_accuracy": max(h["val_accuracy"] for h in history),
        # Each epoch's, so that a run still improving in its last epoch can be told from one that
        # converged (the report does not judge the former).
        "val_accuracy_per_epoch": json.dumps([h["val_accuracy"] for h in history]),
        "epoch_s_mean": sum(h["epoch_s"] for h in history) / len(history),
        **timing_fields(
            [h["epoch_s"] for h in history],
            "epoch",
            [h["load_1m_max"] for h in history],
            threads=torch.get_num_threads() + args.num_workers,
            settings=[h["timing_setting"] for h in history],
            processes=[h["timing_process"] for h in history],
        ),
    }
