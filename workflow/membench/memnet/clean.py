"""Measured records -> one CSV per family in GPUMemNet's own columns (so ``dataset.load_jobs`` reads
their published files and ours alike), plus membench's provenance columns."""

from __future__ import annotations

import pandas as pd

from membench.memnet.configs import ACTIVATIONS
from membench.memnet.dataset import MEMORY_COLUMN, STATUS_OK, STATUS_OOM

__all__ = ["clean_records", "PROVENANCE_COLUMNS"]

PROVENANCE_COLUMNS = {
    "device": "Device",
    "device_name": "Device Name",
    "torch_version": "Torch Version",
    "memory_source": "Memory Source",
    "activation_mib": "Saved Activation (MiB)",
    "cuda_peak_allocated_mib": "CUDA Peak Allocated (MiB)",
    "cuda_peak_reserved_mib": "CUDA Peak Reserved (MiB)",
    "nvml_baseline_mib": "NVML Baseline (MiB)",
    "peak_rss_mib": "Peak RSS (MiB)",
}


def clean_records(records: list[dict], configs: pd.DataFrame, family: str) -> tuple[pd.DataFrame, int]:
    """GPUMemNet-format rows of the successful and out-of-memory records (OOM rows hold 0 MiB and
    Status OOM_CRASH); returns (table, number of failed or timed-out records left out)."""
    by_id = configs.set_index("config_id").to_dict("index")
    rows, skipped = [], 0
    for record in records:
        if record["status"] not in (STATUS_OK, STATUS_OOM):
            skipped += 1
            continue
        config = by_id[record["config_id"]]
        counts = record["module_counts"]
        row = {
            "Filename": record["filename"],
            "Depth": _depth(family, counts, config),
            "Activations-Params": repr([tuple(layer) for layer in record["layers"]]),
            "Activation Function": ACTIVATIONS[config["act"]] if "act" in config else "",
            "Total Activations": record["total_activations"],
            "Total Parameters": record["total_parameters"],
            "Batch Size": config["batch"],
        }
        if family == "mlp":
            row["Batch Normalization Layers"] = counts.get("BatchNorm1d", 0)
            row["Dropout Layers"] = counts.get("Dropout", 0)
        elif family == "cnn":
            row.update(
                {
                    f"{name} Count": counts.get(name, 0)
                    for name in ("Conv2d", "BatchNorm2d", "Dropout", "AdaptiveAvgPool2d", "Linear")
                }
            )
            row["architecture"] = config["arch"]
        else:
            row.update(
                {
                    "Seq Length": config["seq"],
                    "Embedding Size": config["embed"],
                    "Num Layers": config["layers"],
                    "Num Heads": config["heads"],
                }
            )
            row.update(
                {
                    f"{name} Count": counts.get(name, 0)
                    for name in ("NonDynamicallyQuantizableLinear", "Linear", "LayerNorm", "Dropout")
                }
            )
        row[MEMORY_COLUMN] = record["memory_mib"] if record["status"] == STATUS_OK else 0
        row["Status"] = record["status"]
        row.update({title: record.get(key) for key, title in PROVENANCE_COLUMNS.items()})
        rows.append(row)
    return pd.DataFrame(rows), skipped


def _depth(family: str, counts: dict[str, int], config: dict) -> int:
    """GPUMemNet's depth: linear layers (MLP), weight layers (CNN), encoder layers (Transformer)."""
    if family == "mlp":
        return counts.get("Linear", 0)
    if family == "cnn":
        return counts.get("Conv2d", 0) + counts.get("Linear", 0)
    return int(config["layers"])
