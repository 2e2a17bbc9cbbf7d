"""What each aggregated table's page in the report shows: its title, report category and curated
columns (a column a run did not record is left out). The one list of them."""

from __future__ import annotations

import os
from dataclasses import dataclass

import pandas as pd

from membench.core.errors import InputError
from membench.core.validate import open_regular

__all__ = ["read_table", "RUN", "TABLE_VIEWS", "TableView", "TIMING"]

# Timing fields every timing job records (median of steady-state samples, first excluded).
TIMING = (
    "time_unit",
    "time_median_s",
    "time_spread_pct",
    "time_samples",
    "load_1m_max",
    "cpu_count",
    "timing_reliable",
    "timing_flag",
)
# Where and how a job ran; ``kernels`` (which compiled kernels ran, core.metrics) where it records it.
RUN = ("device", "device_name", "torch_threads", "kernels")


@dataclass(frozen=True)
class TableView:
    title: str
    category: str
    columns: tuple[str, ...]


TABLE_VIEWS: dict[str, TableView] = {
    "hotconv": TableView(
        "HotConv training runs: accuracy and epoch time (memory per step: the bench table)",
        "HotConv",
        (
            "variant",
            "dataset",
            "batch_size",
            "max_len",
            "num_filters",
            "epochs_run",
            "test_accuracy",
            "f1_weighted",
            "roc_auc",
            "train_activation_mib",
            "train_alloc_peak_mib",
            "malloc_keeps_freed",
            *TIMING,
            *RUN,
        ),
    ),
    "hotconv_sweep": TableView(
        "HotConv memory sweep: one training step per variant, batch size and input length",
        "HotConv",
        (
            "variant",
            "batch_size",
            "max_len",
            "num_filters",
            "status",
            "step_alloc_peak_mib",
            "step_activation_mib",
            "step_peak_tensor_mib",
            "alloc_vs_hotconv_eco",
            "activation_vs_hotconv_eco",
            "step_ms",
            "malloc_keeps_freed",
            *TIMING,
            *RUN,
        ),
    ),
    "hotconv_bench": TableView(
        "HotConv at hotconv.bench's model (the default config: the paper's, 256 filters, window 512, 2 MiB "
        "files): one training step per variant",
        "HotConv",
        (
            "variant",
            "batch_size",
            "max_len",
            "num_filters",
            "status",
            "nvml_peak_mib",
            "step_alloc_peak_mib",
            "step_activation_mib",
            "step_peak_tensor_mib",
            "alloc_vs_hotconv_eco",
            "activation_vs_hotconv_eco",
            "step_ms",
            "malloc_keeps_freed",
            *TIMING,
            *RUN,
        ),
    ),
    "division_memory": TableView(
        "DIVISION memory: activation bytes and the training step's peak per method, model and batch size",
        "DIVISION",
        (
            "variant",
            "model",
            "batch_size",
            "image_size",
            "status",
            "activation_mib",
            "step_alloc_peak_mib",
            "state_mib",
            "total_memory_mib",
            *RUN,
        ),
    ),
    "division_speed": TableView(
        "DIVISION throughput per method and batch size",
        "DIVISION",
        (
            "variant",
            "model",
            "batch_size",
            "image_size",
            "amp",
            "images_per_s",
            "vs_paired_vanilla",
            "paired_vanilla_images_per_s",
            "step_ms_median",
            "step_ms_min",
            "step_ms_max",
            "train_steps",
            "warmup_steps",
            "malloc_keeps_freed",
            "kernels_cpu_isa",
            *TIMING,
            *RUN,
        ),
    ),
    "division_accuracy": TableView(
        "DIVISION accuracy runs",
        "DIVISION",
        (
            "variant",
            "model",
            "dataset",
            "epochs",
            "batch_size",
            "val_accuracy",
            "best_val_accuracy",
            "train_activation_mib",
            "epoch_s_mean",
            *TIMING,
            *RUN,
        ),
    ),
    "division_max_batch": TableView(
        "DIVISION largest batch that fits per method",
        "DIVISION",
        (
            "variant",
            "model",
            "image_size",
            "amp",
            "largest_batch",
            "start",
            "limit",
            "probe_count",
            "probes",
            *RUN,
        ),
    ),
    "appclass": TableView(
        "Application classification: runtime, memory and agreement with the reference per implementation",
        "Application classification",
        (
            "dataset",
            "variant",
            "implementation",
            "threads",
            "precision",
            "prints_reference_bytes",
            "agrees_with_reference",
            "reference_max_abs_diff",
            "iterations_ms",
            "init_ms",
            "total_ms",
            "alloc_peak_mib",
            "iterations_alloc_peak_mib",
            "algorithm_rss_mib",
            "formula_mib",
            "data_nodes",
            "data_edges",
            "pattern_nodes",
            "pattern_edges",
            *TIMING,
            *RUN,
        ),
    ),
    "appclass_graphs": TableView(
        "Application classification: the graphs measured",
        "Application classification",
        (
            "graph",
            "role",
            "num_nodes",
            "num_edges",
            "node_feature_dim",
            "edge_feature_dim",
            "mean_out_degree",
            "max_out_degree",
            "max_in_degree",
            "isolated_nodes",
            "self_loops",
            "duplicate_edges",
        ),
    ),
    "memnet": TableView(
        "GPUMemNet: estimator accuracy and under-estimation at the requested risk, per data set (k-fold)",
        "GPUMemNet",
        (
            "dataset",
            "family",
            "jobs",
            "estimator",
            "too_small_to_judge",
            "max_under",
            "accuracy",
            "f1_weighted",
            "under_rate",
            "under_rate_ci_low",
            "under_rate_ci_high",
            "risk_met",
            "raw_accuracy",
            "raw_under_rate",
            "rows",
            "calibration_jobs",
            "min_calibration_jobs",
            "mib_under_rate",
            "over_rate",
            "mae_mib",
            "inference_ms",
            "folds",
            "members",
            "mlp_epochs",
            "transformer_epochs",
        ),
    ),
    "robust": TableView(
        "Robust training: clean and robust accuracy, time and scaling per run",
        "robust",
        (
            "variant",
            "scaling",
            "mode",
            "attack",
            "producers",
            "cores",
            "eps",
            "epochs",
            "clean_accuracy",
            "robust_accuracy",
            "robust_accuracy_delta",
            "eval_attack",
            "eval_alpha",
            "test_samples",
            "train_wall_s",
            "samples_per_s",
            "speedup",
            "staleness_mean",
            "staleness_max",
            *TIMING,
            *RUN,
        ),
    ),
    "meter": TableView(
        "Meter check: what this machine lets the meter read, and its overhead",
        "Meter check",
        (
            "device",
            "device_name",
            "torch_version",
            "cuda_version",
            "nvml_available",
            "rapl_available",
            "allocator_available",
            "activation_mib",
            "alloc_peak_mib",
            "peak_tensor_mib",
            "peak_rss_mib",
            "step_ms",
            "meter_overhead_pct",
            "activation_count_overhead_pct",
            "allocator_trace_overhead_pct",
            "sampler_cpu_pct",
        ),
    ),
    "datasets": TableView(
        "Datasets: samples, classes and file sizes per fold and split",
        "Datasets",
        (
            "dataset",
            "fold",
            "split",
            "samples",
            "classes",
            "class_counts",
            "min_bytes",
            "median_bytes",
            "p95_bytes",
            "max_bytes",
            "total_mib",
        ),
    ),
}


def read_table(path: str | os.PathLike) -> pd.DataFrame:
    """An aggregated table's CSV, typed as pandas reads it; InputError naming the file when it is
    missing or unreadable."""
    with open_regular(path, missing="table not found") as handle:
        try:
            return pd.read_csv(handle)
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
            raise InputError(
                path, f"not a readable CSV table ({str(exc).strip() or type(exc).__name__})"
            ) from None
