"""Write docs/benchmarks/gpu.md from a .ci/gpu-acceptance results directory.

Every figure comes from a metrics.json that run wrote; a headline that did not run or failed is
listed as such, never filled in.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

import torch

HOTCONV_VARIANTS = ("malconv", "malconv2", "hotconv", "hotconv_eco")
DIVISION_METHODS = ("vanilla", "division", "actnn2bit", "checkpoint")


def _metrics(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _fmt(value, digits: int = 1) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(r) + " |" for r in rows),
    ]


def _device_lines() -> list[str]:
    query = "name,driver_version,memory.total"
    try:
        smi = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        smi = "nvidia-smi not readable"
    return [
        f"- device (nvidia-smi name, driver, memory): {smi}",
        f"- torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}",
        f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
    ]


def _hotconv(results: Path) -> list[str]:
    rows, records = [], {}
    for variant in HOTCONV_VARIANTS:
        record = _metrics(results / "hotconv" / variant / "metrics.json")
        records[variant] = record
        if record is None:
            rows.append([variant, "not run or failed", *["-"] * 5])
            continue
        rows.append(
            [
                variant,
                record["status"],
                _fmt(record.get("nvml_peak_mib")),
                _fmt(record.get("step_alloc_peak_mib")),
                _fmt(record.get("activation_mib")),
                _fmt(record.get("step_ms")),
                _fmt(record.get("host_peak_tensor_mib")),
            ]
        )
    lines = [
        "## HotConv: paper model (256 filters, window = stride = 512), batch 256, 2 MiB files",
        "",
        "One process per variant (`membench hotconv bench`); `nvml_peak_mib` is the job's NVML peak above",
        "the baseline (GRMM_peak), `step_alloc_peak_mib` the training step's allocator peak, `step_ms` the",
        "median of 3 timed training steps.",
        "",
        *_table(
            [
                "variant",
                "status",
                "nvml_peak_mib",
                "step_alloc_peak_mib",
                "activation_mib",
                "step_ms",
                "host_peak_tensor_mib",
            ],
            rows,
        ),
    ]
    eco, malconv2 = records.get("hotconv_eco"), records.get("malconv2")
    if eco and malconv2 and eco.get("nvml_peak_mib") and malconv2.get("nvml_peak_mib"):
        lines += [
            "",
            f"MalConv2 / HotConv-Eco NVML peak: {malconv2['nvml_peak_mib'] / eco['nvml_peak_mib']:.1f}x "
            "(the paper: about 22x on an RTX 6000 Ada).",
        ]
    return lines


def _division(results: Path) -> list[str]:
    rows = []
    for method in DIVISION_METHODS:
        memory = _metrics(results / "division" / "memory" / method / "metrics.json") or {}
        speed = _metrics(results / "division" / "speed" / method / "metrics.json") or {}
        rows.append(
            [
                method,
                _fmt(memory.get("status", "not run or failed")),
                _fmt(None if memory.get("activation_mib") is None else memory["activation_mib"] / 1024, 2),
                _fmt(
                    None if memory.get("total_memory_mib") is None else memory["total_memory_mib"] / 1024, 2
                ),
                _fmt(memory.get("nvml_peak_mib")),
                _fmt(speed.get("images_per_s")),
                _fmt(speed.get("step_ms_median")),
                _fmt(speed.get("kernels")),
            ]
        )
    return [
        "## DIVISION: ResNet-50, 224 px, batch 256, 1000 classes",
        "",
        "Memory of one training step in float32 (`membench division memory --amp none`: activation bytes",
        "saved for backward, allocator peak of the step); throughput with AMP (`membench division speed",
        "--amp fp16`, median of 16 steps after 3 warm-up steps). The paper: activations 20.48 / "
        "1.97 / 1.94 /",
        "3.59 GB and 469 / 381 / 308 / 122 img/s (vanilla / DIVISION / ActNN / checkpoint, AMP).",
        "",
        *_table(
            [
                "method",
                "status",
                "activation_gib",
                "total_gib",
                "nvml_peak_mib",
                "images_per_s (fp16)",
                "step_ms",
                "kernels",
            ],
            rows,
        ),
    ]


def _division_profile(results: Path) -> list[str]:
    """Device milliseconds per step by kind of kernel (.ci/gpu_profile.py), where it ran."""
    profiles = {
        method: record
        for method in DIVISION_METHODS
        if (record := _metrics(results / "division" / "profile" / f"{method}.json")) is not None
    }
    if not profiles:
        return []
    kinds = list(next(iter(profiles.values()))["kinds_ms_per_step"])
    rows = [
        [method, _fmt(record["device_ms_per_step"]), *(_fmt(record["kinds_ms_per_step"][k]) for k in kinds)]
        for method, record in profiles.items()
    ]
    lines = [
        "Device time of a step by kind of kernel, ms (`.ci/gpu_profile.py`: the same setting, fp16, the",
        "kernels' self time over 3 steps under the PyTorch profiler, which slows the step: shares, not",
        "speed):",
        "",
        *_table(["method", "device ms / step", *kinds], rows),
    ]
    for method, record in profiles.items():
        if method == "vanilla":
            continue
        top = [
            [f"`{r['name'][:90]}`", r["kind"], _fmt(r["ms_per_step"], 2), _fmt(r["calls_per_step"], 0)]
            for r in record["top"]
        ]
        lines += [
            "",
            f"Longest kernels of {method}'s step:",
            "",
            *_table(["kernel", "kind", "ms / step", "calls / step"], top),
        ]
    return lines


def _appclass(results: Path) -> list[str]:
    record = _metrics(results / "appclass" / "rmat18" / "metrics.json")
    lines = ["## appclass: RMAT-18 data graph, georgiy-sized pattern (10 nodes), float64 on CUDA", ""]
    if record is None:
        return lines + ["Not run or failed."]
    lines += [
        f"Data graph {record['data_nodes']:,} nodes / {record['data_edges']:,} edges; pattern "
        f"{record['pattern_nodes']} nodes /"
        f" {record['pattern_edges']} edges; median of {record['repeats']} runs (`membench appclass bench`).",
        "",
        *_table(
            ["init_ms", "iterations_ms", "total_ms", "nvml_peak_mib", "formula_mib"],
            [
                [
                    _fmt(record["init_ms"]),
                    _fmt(record["iterations_ms"]),
                    _fmt(record["total_ms"]),
                    _fmt(record.get("nvml_peak_mib")),
                    _fmt(record.get("formula_mib")),
                ]
            ],
        ),
        "",
        "Target: under 20 ms per run on an H100 (Gunrock's CUDA implementation took 828 ms on a P100).",
    ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--results", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--command", required=True)
    args = parser.parse_args()
    results = args.results
    suite = (
        (results / "suite_summary.txt").read_text().strip()
        if (results / "suite_summary.txt").is_file()
        else "not run"
    )
    failures = (results / "failures.txt").read_text().split() if (results / "failures.txt").is_file() else []
    stages = (results / "stages.txt").read_text().split("\n") if (results / "stages.txt").is_file() else []
    lines = [
        "# GPU acceptance",
        "",
        "Written by `.ci/gpu-acceptance` from the figures it measured; nothing else ran on the machine.",
        "",
        *_device_lines(),
        f"- command: `{args.command.strip()}` (stages and seconds: "
        f"{'; '.join(s for s in stages if s) or '-'})",
        f"- `pytest -m gpu`: {suite}",
        f"- failed steps: {', '.join(failures) or 'none'}",
        "",
        *_hotconv(results),
        "",
        *_division(results),
        "",
        *_division_profile(results),
        "",
        *_appclass(results),
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
