"""DIVISION's figures: step activations and allocator peak, throughput with flags."""

import figures
import pandas as pd

from membench.division import plots
from membench.division.plots import plot_memory, plot_speed

METHODS = ("vanilla", "division", "actnn2bit", "checkpoint")


def test_memory_figure_shows_the_step_not_the_totals(tmp_path, monkeypatch):
    rows = [
        {
            "variant": m,
            "batch_size": b,
            "activation_mib": b * 4.0 / (1 + 13 * (m != "vanilla")),
            "step_alloc_peak_mib": b * 5.0,
            "total_memory_mib": 1000.0,
            "status": "ok",
        }
        for m in METHODS
        for b in (32, 64)
    ]
    pd.DataFrame(rows).to_csv(tmp_path / "memory.csv", index=False)
    drawn = figures.capture(monkeypatch, plots)
    plot_memory(tmp_path / "memory.csv", tmp_path / "memory.png")
    figures.assert_readable(drawn, tmp_path / "memory.png")
    activations, allocator = drawn[0].axes
    assert (
        activations.get_title() == "saved activations of a step"
        and allocator.get_title() == "allocator peak of a step"
    )
    assert max(p.get_height() for p in activations.patches) == 64 * 4.0  # not the 1000 MiB total
    assert "x0.071" in [t.get_text() for t in activations.texts]


def test_speed_figure_with_one_batch_size_is_bars_with_flags(tmp_path, monkeypatch):
    rows = [
        {
            "variant": m,
            "batch_size": 32,
            "images_per_s": 32 / (1.0 + i),
            "time_median_s": 1.0 + i,
            "time_min_s": 0.9 + i,
            "time_max_s": 1.5 + i,
            "timing_reliable": m != "vanilla",
            "timing_flag": "spread 50% > 25%" if m == "vanilla" else "",
        }
        for i, m in enumerate(METHODS)
    ]
    pd.DataFrame(rows).to_csv(tmp_path / "speed.csv", index=False)
    drawn = figures.capture(monkeypatch, plots)
    plot_speed(tmp_path / "speed.csv", tmp_path / "speed.png")
    figures.assert_readable(drawn, tmp_path / "speed.png")
    (ax,) = drawn[0].axes
    assert all(line.get_linestyle() == "None" for line in ax.lines)  # error bar caps only, no speed line
    assert [p.get_hatch() for p in ax.patches[:4]] == ["//", None, None, None]
    assert "flagged" in drawn[0].get_supxlabel()


def test_speed_figure_labels_the_bars_with_the_paired_ratio_where_measured(tmp_path, monkeypatch):
    # separate jobs give division 16 / 32 = x0.5 of vanilla; its own job measured x0.93 side by side
    rows = [
        {"variant": "vanilla", "batch_size": 32, "images_per_s": 32.0, "vs_paired_vanilla": None},
        {"variant": "division", "batch_size": 32, "images_per_s": 16.0, "vs_paired_vanilla": 0.93},
        {"variant": "checkpoint", "batch_size": 32, "images_per_s": 24.0, "vs_paired_vanilla": None},
    ]
    pd.DataFrame(rows).to_csv(tmp_path / "speed.csv", index=False)
    drawn = figures.capture(monkeypatch, plots)
    plot_speed(tmp_path / "speed.csv", tmp_path / "speed.png")
    (ax,) = drawn[0].axes
    assert [t.get_text() for t in ax.texts] == ["x1", "x0.93", "x0.75"]
