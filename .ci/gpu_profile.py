"""Where a DIVISION-family training step spends its device time, by kind of kernel.

One method per process (as `.ci/gpu-acceptance` runs it): a few warm-up steps, then `--steps` steps
under the PyTorch profiler, whose kernel times (self time: a kernel is counted once) are summed by
name into membench's compression and decompression kernels, convolutions, batch norm and the rest,
per step. Written to `--out` as JSON for `.ci/gpu_report.py`. The profiler slows the steps down, so
these are shares of the step, not its throughput (`membench division speed` measures that, with no
tracer). On a CPU (`--device cpu`, for tests) it sums the operators' CPU time instead.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from membench.division.bench import make_optimizer, prepare_model, random_batch, training_step
from membench.division.kernels import TORCH_KERNELS, select_kernels
from membench.division.options import AMP_CHOICES, METHODS, MethodSpec
from membench.division.precision import Precision

# Kinds of kernel, by what their lower-cased names contain; the first that matches wins.
KINDS = (
    ("compression", ("division_compress", "group_compress", "relu_pack", "dropout_pack", "maxpool_forward")),
    ("decompression", ("division_decompress", "group_decompress", "masked_grad", "maxpool_backward")),
    ("batch_norm", ("batch_norm", "batchnorm", "bn_")),  # before cuDNN's other kernels
    ("convolution", ("conv", "gemm", "xmma", "cutlass", "cudnn", "wgrad", "dgrad", "fprop", "sm90")),
)
OTHER = "other"
TOP_KERNELS = 12


def kind_of(name: str) -> str:
    """The kind of the kernel (or, on a CPU, operator) called ``name``."""
    lowered = name.lower()
    for kind, parts in KINDS:
        if any(part in lowered for part in parts):
            return kind
    return OTHER


def profile_steps(args: argparse.Namespace) -> dict:
    device = torch.device(args.device)
    uses_extension = args.method not in ("vanilla", "checkpoint")
    kernels = select_kernels("extension", args.manifest, device.type) if uses_extension else TORCH_KERNELS
    model, _ = prepare_model(
        args.model, args.method, args.num_classes, device, MethodSpec(), kernels, seed=0, width=args.width
    )
    optimizer = make_optimizer(model)
    inputs, targets = random_batch(args.batch_size, args.image_size, args.num_classes, device, seed=0)
    precision = Precision(args.amp, device)

    def steps(count: int) -> None:
        for _ in range(count):
            training_step(model, optimizer, inputs, targets, precision=precision)
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    steps(args.warmup_steps)
    activity = ProfilerActivity.CUDA if device.type == "cuda" else ProfilerActivity.CPU
    with profile(activities=[activity]) as profiler:
        steps(args.steps)
    per_step_ms: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    for event in profiler.key_averages():
        if device.type == "cuda":
            self_us = getattr(event, "self_device_time_total", None)
            if self_us is None:
                self_us = event.self_cuda_time_total
        else:
            self_us = event.self_cpu_time_total
        if self_us > 0:
            per_step_ms[event.key] += self_us / 1000 / args.steps
            calls[event.key] += event.count
    kinds = {kind: 0.0 for kind, _ in KINDS} | {OTHER: 0.0}
    for name, ms in per_step_ms.items():
        kinds[kind_of(name)] += ms
    top = sorted(per_step_ms.items(), key=lambda item: -item[1])[:TOP_KERNELS]
    return {
        "method": args.method,
        "model": args.model,
        "batch_size": args.batch_size,
        "image_size": args.image_size,
        "amp": args.amp,
        "device": device.type,
        "kernels": kernels.value,
        "steps": args.steps,
        "device_ms_per_step": sum(per_step_ms.values()),
        "kinds_ms_per_step": kinds,
        "top": [
            {
                "name": name,
                "kind": kind_of(name),
                "ms_per_step": ms,
                "calls_per_step": calls[name] / args.steps,
            }
            for name, ms in top
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--method", required=True, choices=METHODS)
    parser.add_argument("--manifest", type=Path, help="the kernels' build manifest (compressed methods)")
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--width", type=int, default=None)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--num-classes", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--amp", default="fp16", choices=AMP_CHOICES)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup-steps", type=int, default=3)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    if args.method not in ("vanilla", "checkpoint") and args.manifest is None:
        parser.error(f"--manifest is needed for {args.method}")
    record = profile_steps(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
