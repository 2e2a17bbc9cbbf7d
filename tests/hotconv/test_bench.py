"""The memory benchmark: one point per call, exact counts that rank the variants as the method
predicts, figures independent of the order points are measured in, the sweep table and figure."""

from __future__ import annotations

import json
import platform

import pandas as pd
import pytest
import torch

from membench.core.metrics import write_job_outputs
from membench.core.timing import TIMING_FIELDS
from membench.hotconv.bench import SweepSpec, measure_point
from membench.hotconv.options import VARIANTS
from membench.hotconv.plots import plot_sweep
from membench.hotconv.tables import sweep_table

SWEEP = SweepSpec(num_filters=32, window_size=32, stride=32, fp_slice_size=256, fp2_slice_size=32, steps=1)
CPU = torch.device("cpu")
EXACT_FIELDS = (
    "step_alloc_peak_mib",
    "step_peak_tensor_mib",
    "activation_mib",
    "optimizer_alloc_peak_mib",
    "optimizer_peak_tensor_mib",
)


def _point(variant: str, max_len: int) -> dict:
    return measure_point(SWEEP, variant, 4, max_len, CPU, sample_interval_s=0.0)


def test_points_rank_the_variants_and_the_table_compares_them_on_the_allocator_peak(tmp_path):
    paths = []
    for max_len in (4096, 1024):
        for variant in reversed(VARIANTS):
            record = _point(variant, max_len)
            paths.append(write_job_outputs(tmp_path / f"{variant}_{max_len}", {**record, "wall_s": 1.0}))
    frame = sweep_table(paths)
    assert len(frame) == 8 and set(frame["status"]) == {"ok"}
    assert list(frame["max_len"]) == [1024] * 4 + [4096] * 4
    assert list(frame["variant"][:4]) == list(VARIANTS)
    alloc = {(r.variant, r.max_len): r.step_alloc_peak_mib for r in frame.itertuples()}
    peak = {(r.variant, r.max_len): r.step_peak_tensor_mib for r in frame.itertuples()}
    saved = {(r.variant, r.max_len): r.activation_mib for r in frame.itertuples()}
    # HotConv's and HotConv-Eco's memory does not grow with the input; MalConv's does.
    for variant in ("malconv2", "hotconv", "hotconv_eco"):
        assert peak[(variant, 4096)] == peak[(variant, 1024)]
        assert saved[(variant, 4096)] == saved[(variant, 1024)]
    assert peak[("malconv", 4096)] > 2 * peak[("malconv", 1024)]
    assert alloc[("malconv", 4096)] > 2 * alloc[("malconv", 1024)]
    for max_len in (1024, 4096):
        assert peak[("hotconv_eco", max_len)] < peak[("hotconv", max_len)] < peak[("malconv2", max_len)]
        assert alloc[("hotconv_eco", max_len)] < alloc[("malconv2", max_len)]
        assert saved[("hotconv", max_len)] < saved[("malconv2", max_len)] <= saved[("malconv", max_len)]
        for variant in VARIANTS:  # the allocator sees every tensor and the kernels' workspaces too
            assert alloc[(variant, max_len)] >= peak[(variant, max_len)]
    eco = frame[frame["variant"] == "hotconv_eco"]
    assert (eco["alloc_vs_hotconv_eco"] == 1.0).all() and (eco["peak_tensor_vs_hotconv_eco"] == 1.0).all()
    assert (frame["step_ms"] > 0).all() and (frame["step_ms"] == frame["time_median_s"] * 1000).all()
    assert set(TIMING_FIELDS) <= set(frame.columns) and (frame["time_unit"] == "step").all()
    plot_sweep(frame, tmp_path / "sweep.png")
    assert (tmp_path / "sweep.png").stat().st_size > 0


def test_variants_measured_in_two_orders_give_the_same_figures():
    first = {variant: _point(variant, 2048) for variant in ("malconv", "hotconv_eco")}
    second = {variant: _point(variant, 2048) for variant in ("hotconv_eco", "malconv")}
    for variant in first:
        for field in EXACT_FIELDS:
            assert first[variant][field] == second[variant][field], (variant, field)


def test_the_model_is_built_after_the_meter_reads_its_baseline(monkeypatch):
    """On a GPU the meter's NVML baseline is read as it opens: a model built after it is counted in
    nvml_peak_mib, as the HotConv README's GRMM_peak counts it."""
    import membench.hotconv.bench as bench

    events = []

    class Meter(bench.Meter):
        def __enter__(self):
            events.append("meter opened")
            return super().__enter__()

    class MalConvNet(bench.MalConvNet):
        def __init__(self, spec):
            events.append("model built")
            super().__init__(spec)

    monkeypatch.setattr(bench, "Meter", Meter)
    monkeypatch.setattr(bench, "MalConvNet", MalConvNet)
    assert _point("hotconv_eco", 1024)["status"] == "ok"
    assert events[:2] == ["meter opened", "model built"]


def test_an_out_of_memory_point_is_a_result(monkeypatch):
    import membench.hotconv.bench as bench

    def fail(*args, **kwargs):
        raise RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`")

    monkeypatch.setattr(bench, "_measure", fail)
    record = _point("malconv", 1024)
    assert record["status"] == "oom" and "CUBLAS_STATUS_ALLOC_FAILED" in record["status_message"]


def test_another_error_is_not_a_result(monkeypatch):
    import membench.hotconv.bench as bench

    def fail(*args, **kwargs):
        raise RuntimeError("an illegal memory access was encountered")

    monkeypatch.setattr(bench, "_measure", fail)
    with pytest.raises(RuntimeError, match="illegal memory access"):
        _point("malconv", 1024)


def test_bench_and_sweep_table_commands(tmp_path):
    from membench.cli import main

    options = [
        "--batch-size",
        "2",
        "--max-len",
        "512",
        "--num-filters",
        "8",
        "--window-size",
        "16",
        "--stride",
        "16",
        "--fp-slice-size",
        "128",
        "--fp2-slice-size",
        "16",
        "--train-steps",
        "1",
        "--device",
        "cpu",
        "--sample-interval-s",
        "0",
    ]
    for variant in ("hotconv", "hotconv_eco"):
        assert (
            main(["hotconv", "bench", "--outdir", str(tmp_path / variant), "--variant", variant, *options])
            == 0
        )
    record = json.loads((tmp_path / "hotconv" / "metrics.json").read_text())
    assert record["status"] == "ok" and record["trace_allocator"] is True and record["max_len"] == 512
    assert record["malloc_keeps_freed"] is (platform.libc_ver()[0] == "glibc")  # the step is timed
    out = tmp_path / "sweep.csv"
    metrics = [str(tmp_path / v / "metrics.json") for v in ("hotconv_eco", "hotconv")]
    assert main(["hotconv", "sweep-table", "--out", str(out), *metrics]) == 0
    table = pd.read_csv(out)
    assert list(table["variant"]) == ["hotconv", "hotconv_eco"] and out.with_suffix(".parquet").exists()
    assert table["alloc_vs_hotconv_eco"].iloc[0] > 1


def test_bench_command_rejects_a_bad_point(tmp_path, capsys):
    from membench.cli import main

    with pytest.raises(SystemExit) as exit_:  # a value out of its range: argparse's usage error
        main(
            [
                "hotconv",
                "bench",
                "--outdir",
                str(tmp_path),
                "--variant",
                "hotconv",
                "--batch-size",
                "0",
                "--max-len",
                "512",
                "--device",
                "cpu",
            ]
        )
    assert exit_.value.code == 2 and "--batch-size" in capsys.readouterr().err
    assert not (tmp_path / "metrics.json").exists()
