"""Small hand-made aggregated tables for the report tests, in the shape membench's jobs write them."""

import json

import pandas as pd
import pytest

# Exact activation bytes per sample of each method (MiB) and the fixed part (batch-norm statistics).
PER_SAMPLE_MIB = {"vanilla": 80.0, "division": 7.0, "actnn2bit": 6.25, "checkpoint": 29.0}
FIXED_MIB = 0.5


def _write_division(directory, reliable=True, samples=4, history=(0.5, 0.8, 0.9, 0.95, 0.95)):
    """division_memory.csv at ResNet-50 224 px, batches 1 and 2; division_speed.csv; and
    division_accuracy.csv with per-epoch histories."""
    common = {"model": "resnet50", "image_size": 224, "num_classes": 1000, "amp": "none", "device": "cpu"}
    pd.DataFrame(
        [
            {**common, "variant": variant, "batch_size": batch, "block_size": 8, "hfc_bits": 2}
            | {"activation_mib": FIXED_MIB + per_sample * batch, "status": "ok"}
            for variant, per_sample in PER_SAMPLE_MIB.items()
            for batch in (1, 2)
        ]
    ).to_csv(directory / "division_memory.csv", index=False)
    pd.DataFrame(
        [
            {**common, "model": "resnet18", "image_size": 32, "num_classes": 10, "batch_size": 16}
            | {"variant": variant, "time_median_s": seconds, "time_samples": samples, "time_unit": "step"}
            | {"timing_reliable": reliable or variant == "vanilla"}
            | {"timing_flag": "" if reliable or variant == "vanilla" else "load 5.1 on 2 CPUs (limit 2.5)"}
            for variant, seconds in (("vanilla", 1.0), ("division", 1.9), ("checkpoint", 1.25))
        ]
    ).to_csv(directory / "division_speed.csv", index=False)
    pd.DataFrame(
        [
            {"variant": variant, "model": "resnet18", "width": 8, "dataset": "digits", "image_size": 16}
            | {"epochs": len(history), "batch_size": 32, "device": "cpu", "val_images": 360}
            | {
                "num_classes": 10,
                "val_classes": 10,
                "val_accuracy": final,
                "val_accuracy_per_epoch": json.dumps(trace),
            }
            for variant, final, trace in (
                ("vanilla", history[-1], list(history)),
                ("division", history[-1] - 0.02, [h - 0.02 for h in history]),
            )
        ]
    ).to_csv(directory / "division_accuracy.csv", index=False)


def _write_hotconv(directory, device="cpu", batch_size=16, memory_column="step_alloc_peak_mib"):
    """hotconv_bench.csv at the paper's model (256 filters, window 512, 2 MiB files)."""
    pd.DataFrame(
        [
            {"variant": variant, "num_filters": 256, "window_size": 512, "stride": 512}
            | {"max_len": 2097152, "batch_size": batch_size, "device": device, "status": status}
            | {memory_column: mib}
            for variant, status, mib in (
                ("malconv", "oom", None),
                ("malconv2", "ok", 408.25),
                ("hotconv", "ok", 156.39),
                ("hotconv_eco", "ok", 17.88),
            )
        ]
    ).to_csv(directory / "hotconv_bench.csv", index=False)


@pytest.fixture
def write_division():
    return _write_division


@pytest.fixture
def write_hotconv():
    return _write_hotconv
