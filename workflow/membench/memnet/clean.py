"""Measured records -> one CSV per family in GPUMemNet's own columns (so ``dataset.load_jobs`` reads
their published files and ours alike), plus membench's provenance columns."""

from __future__ import annotations

from collections import Counter

import pandas as pd

from membench.memnet.configs import ACTIVATIONS
from membench.memnet.dataset import ACTIVATIONS as ACTIVATION_NAMES
from membench.memnet.dataset import MEMORY_COLUMN, STATUS_OK, STATUS_OOM

__all__ = ["clean_records", "gpumemnet_activation", "gpumemnet_depth", "PROVENANCE_COLUMNS"]

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
            "Depth": gpumemnet_depth(family, counts),
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


def gpumemnet_depth(family: str, counts: dict[str, int]) -> int:
    """GPUMemNet's depth of a model from its module counts: linear layers (MLP), weight layers
    (CNN), encoder layers (Transformer: one attention module each, ``MultiheadAttention`` in
    torch's)."""
    if family == "mlp":
        return counts.get("Linear", 0)
    if family == "cnn":
        return counts.get("Conv2d", 0) + counts.get("Linear", 0)
    return sum(count for kind, count in counts.items() if kind.endswith("Attention"))


def gpumemnet_activation(family: str, layers: list) -> str:
    """GPUMemNet's activation function of a model that no configuration names (``predict``'s): the
    most common of GPUMemNet's activations in its layer list, as its rows spell it (``ReLU``), or
    ``Identity`` where it has none of them (a model without one applies no function); none for a
    Transformer, whose rows name none."""
    if family == "transformer":
        return ""
    spelled = {name.lower(): name for name in ACTIVATION_NAMES}
    found = Counter(spelled[name.lower()] for name, _, _ in layers if name.lower() in spelled)
    return found.most_common(1)[0][0] if found else "Identity"
