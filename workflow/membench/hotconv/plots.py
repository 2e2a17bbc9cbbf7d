"""Report figures of the HotConv system, drawn from its tables."""

from __future__ import annotations

import os

import pandas as pd

from membench.core.plots import new_figure, save_figure
from membench.hotconv.models import VARIANTS

# (column, axis label) per panel of the variants figure; the first present column of a tuple is drawn.
_VARIANT_PANELS = (
    (("alloc_peak_mib", "nvml_peak_mib", "peak_tensor_mib"), "allocator peak (MiB)"),
    (("activation_mib",), "saved activations, one step (MiB)"),
    (("time_per_epoch_s",), "time per epoch (s)"),
    (("co2e_g",), "CO2e (g)"),
    (("test_accuracy",), "test accuracy"),
)


def plot_variants(table: pd.DataFrame, png_path: str | os.PathLike) -> None:
    """Bars per variant (mean over datasets and folds, whiskers min..max) of the training table."""
    variants = [v for v in VARIANTS if v in set(table["variant"])]
    fig, axes = new_figure(ncols=len(_VARIANT_PANELS), width_in=3.2 * len(_VARIANT_PANELS), height_in=3.6)
    for ax, (columns, label) in zip(axes, _VARIANT_PANELS):
        column = next((c for c in columns if c in table and pd.to_numeric(table[c], errors="coerce").notna().any()), None)
        if column is None:
            ax.text(0.5, 0.5, "not measured\non this machine", ha="center", va="center", transform=ax.transAxes)
            ax.set_title(label, fontsize=9)
            ax.set_xticks([])
            continue
        values = pd.to_numeric(table[column], errors="coerce").groupby(table["variant"])
        means = values.mean().reindex(variants)
        low = means - values.min().reindex(variants)
        high = values.max().reindex(variants) - means
        ax.bar(range(len(variants)), means, yerr=[low, high], capsize=3, color="tab:blue")
        ax.set_xticks(range(len(variants)), variants, rotation=30, ha="right")
        ax.set_title(label if column == columns[0] else f"{label.split(' (')[0]} ({column})", fontsize=9)
        if column == "test_accuracy" and "majority_accuracy" in table:
            ax.axhline(pd.to_numeric(table["majority_accuracy"]).mean(), color="gray", ls="--", label="majority class")
            ax.legend(fontsize=7, loc="lower right")
    save_figure(fig, png_path)


def plot_sweep(table: pd.DataFrame, png_path: str | os.PathLike) -> None:
    """Step allocator peak (the live-tensor peak where the allocator was not traced) and step time
    against max_len, one line per variant and batch size."""
    fig, (ax_memory, ax_time) = new_figure(ncols=2, width_in=11, height_in=4)
    measured = table[table["status"] == "ok"]
    traced = pd.to_numeric(measured["step_alloc_peak_mib"], errors="coerce").notna().all()
    memory_column, memory_label = (("step_alloc_peak_mib", "step allocator peak (MiB)") if traced
                                   else ("step_peak_tensor_mib", "step live-tensor peak (MiB)"))
    for (variant, batch_size), rows in measured.groupby(["variant", "batch_size"], sort=False):
        rows = rows.sort_values("max_len")
        label = f"{variant}, batch {batch_size}"
        ax_memory.plot(rows["max_len"] / 2**10, rows[memory_column], marker="o", label=label)
        ax_time.plot(rows["max_len"] / 2**10, rows["step_ms"], marker="o", label=label)
    for ax, ylabel in ((ax_memory, memory_label), (ax_time, "step time, median (ms)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("max_len (KiB)")
        ax.set_ylabel(ylabel)
    oom = table[table["status"] == "oom"]
    if len(oom):
        ax_memory.set_title(f"{len(oom)} point(s) ran out of device memory", fontsize=9)
    ax_time.legend(fontsize=7)
    save_figure(fig, png_path)
