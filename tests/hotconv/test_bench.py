"""The memory sweep: one row per point, exact counts that rank the variants as the method predicts."""

from __future__ import annotations

import pandas as pd
import torch

from membench.core.tables import write_table
from membench.hotconv.bench import SweepSpec, run_sweep
from membench.hotconv.plots import plot_sweep

SWEEP = SweepSpec(
    batch_sizes=(4,), max_lens=(1024, 4096), num_filters=32, window_size=32, stride=32,
    fp_slice_size=256, fp2_slice_size=32, steps=1,
)


def test_sweep_measures_every_point_and_ranks_the_variants(tmp_path):
    frame = run_sweep(SWEEP, torch.device("cpu"), sample_interval_s=0.0)
    assert len(frame) == 8 and set(frame["status"]) == {"ok"}
    peak = {(r.variant, r.max_len): r.step_peak_tensor_mib for r in frame.itertuples()}
    saved = {(r.variant, r.max_len): r.activation_mib for r in frame.itertuples()}
    # HotConv's and HotConv-Eco's memory does not grow with the input; MalConv's does.
    for variant in ("malconv2", "hotconv", "hotconv_eco"):
        assert peak[(variant, 4096)] == peak[(variant, 1024)]
        assert saved[(variant, 4096)] == saved[(variant, 1024)]
    assert peak[("malconv", 4096)] > 2 * peak[("malconv", 1024)]
    for max_len in (1024, 4096):
        assert peak[("hotconv_eco", max_len)] < peak[("hotconv", max_len)] < peak[("malconv2", max_len)]
        assert saved[("hotconv", max_len)] < saved[("malconv2", max_len)] <= saved[("malconv", max_len)]
    assert saved[("malconv2", 4096)] < saved[("malconv", 4096)]  # more windows than filters
    eco = frame[frame["variant"] == "hotconv_eco"]
    assert (eco["peak_tensor_vs_hotconv_eco"] == 1.0).all()
    assert (frame["step_ms"] > 0).all()
    write_table(frame, tmp_path / "sweep.csv", tmp_path / "sweep.parquet")
    plot_sweep(frame, tmp_path / "sweep.png")
    assert (tmp_path / "sweep.parquet").stat().st_size > 0 and (tmp_path / "sweep.png").stat().st_size > 0


def test_bench_command_reads_repeated_list_options_and_writes_the_table(tmp_path):
    from membench.cli import main

    out = tmp_path / "bench.csv"
    code = main([
        "hotconv", "bench", "--out", str(out), "--variants", "hotconv", "--variants", "hotconv_eco",
        "--batch-sizes", "2", "--max-lens", "512", "--max-lens", "1024", "--num-filters", "8", "--window-size", "16",
        "--stride", "16", "--fp-slice-size", "128", "--fp2-slice-size", "16", "--steps", "1", "--device", "cpu",
        "--sample-interval-s", "0",
    ])
    assert code == 0 and out.with_suffix(".parquet").exists()
    table = pd.read_csv(out)
    assert sorted(zip(table["variant"], table["max_len"])) == [
        ("hotconv", 512), ("hotconv", 1024), ("hotconv_eco", 512), ("hotconv_eco", 1024)
    ]
