"""HotConv's figures: step memory from the sweep, steady-state epoch time, no empty panels."""

import json

import figures
import pandas as pd
import pytest

from membench.core.errors import InputError
from membench.hotconv import plots
from membench.hotconv.plots import largest_sweep_point, plot_sweep, plot_variants

VARIANTS = ("malconv", "malconv2", "hotconv", "hotconv_eco")


def _timing(n, reliable=True):
    return {
        "time_median_s": [1.0] * n,
        "time_min_s": [0.9] * n,
        "time_max_s": [1.2] * n,
        "timing_reliable": [reliable] * n,
        "timing_flag": ["" if reliable else "1 sample"] * n,
    }


def _sweep(lengths=(131072,)):
    rows = []
    for max_len in lengths:
        for i, variant in enumerate(VARIANTS):
            rows.append(
                {
                    "variant": variant,
                    "status": "ok",
                    "max_len": max_len,
                    "batch_size": 16,
                    "step_alloc_peak_mib": 400.0 / 10**i,
                    "activation_mib": 96.0 / 10**i,
                    "time_median_s": 1.0,
                    "time_min_s": 0.9,
                    "time_max_s": 1.1,
                    "timing_reliable": i % 2 == 0,
                    "timing_flag": "" if i % 2 == 0 else "1 sample",
                }
            )
    return pd.DataFrame(rows)


def test_variants_figure_compares_step_memory_not_the_job_peak(tmp_path, monkeypatch):
    drawn = figures.capture(monkeypatch, plots)
    table = pd.DataFrame(
        {
            "variant": list(VARIANTS),
            "test_accuracy": [0.9] * 4,
            "majority_accuracy": [0.6] * 4,
            "alloc_peak_mib": [6.166] * 4,
            "co2e_g": [None] * 4,
            **_timing(4, reliable=False),
        }
    )
    plot_variants(table, _sweep(), tmp_path / "variants.png")
    figures.assert_readable(drawn, tmp_path / "variants.png")
    memory = drawn[0].axes[0]
    assert memory.get_title() == "allocator peak of a step"
    assert [round(p.get_height(), 3) for p in memory.patches] == [400.0, 40.0, 4.0, 0.4]
    assert [t.get_text() for t in memory.texts] == ["x10", "x1", "x0.1", "x0.01"]  # to MalConv2
    assert [p.get_hatch() for p in drawn[0].axes[2].patches] == ["//"] * 4  # flagged epoch times
    assert len(drawn[0].axes) == 4  # no CO2e panel without an energy counter
    assert "CO2e: not measured" in drawn[0].get_supxlabel()
    assert figures.bar_colours(drawn[0]) >= {"#7f7f7f", "#2ca02c"}


def test_sweep_figure_uses_bars_for_one_length_and_lines_for_several(tmp_path, monkeypatch):
    drawn = figures.capture(monkeypatch, plots)
    plot_sweep(_sweep(), tmp_path / "one.png")
    plot_sweep(_sweep((65536, 131072)), tmp_path / "two.png")
    figures.assert_readable(drawn, tmp_path / "one.png", tmp_path / "two.png")
    assert drawn[0].axes[0].patches and not drawn[0].axes[0].lines
    assert drawn[1].axes[0].get_xscale() == "log" and len(drawn[1].axes[0].lines) == len(VARIANTS)


def test_largest_point_is_one_every_variant_reached():
    sweep = pd.concat([_sweep((65536,)), _sweep((131072,)).iloc[:2]])
    assert set(largest_sweep_point(sweep)["max_len"]) == {65536}


def _trained(histories, test_samples):
    return pd.DataFrame(
        {
            "variant": list(VARIANTS),
            "test_accuracy": [0.9] * 4,
            "test_samples": test_samples,
            "val_loss_per_epoch": [json.dumps(h) for h in histories],
            **_timing(4),
        }
    )


def test_accuracy_the_summary_does_not_judge_is_hatched(tmp_path, monkeypatch):
    # By the headline's settings (val loss, goal min, min_change 2% relative): malconv's last epoch
    # is 10% below its best earlier one; malconv2's 0.2%. hotconv has 20 test cases.
    table = _trained(
        [[0.6, 0.5, 0.45], [0.6, 0.5, 0.499], [0.6, 0.5, 0.5], [0.5, 0.6, 0.55]], [100, 100, 20, 100]
    )
    assert plots.not_judged(table) == {
        "malconv": ["still improving in its last epoch"],
        "hotconv": ["fewer than 30 test cases"],
    }
    drawn = figures.capture(monkeypatch, plots)
    plot_variants(table, _sweep(), tmp_path / "variants.png")
    figures.assert_readable(drawn, tmp_path / "variants.png")
    accuracy = drawn[0].axes[3]
    assert accuracy.get_title() == "test accuracy"
    assert [p.get_hatch() for p in accuracy.patches] == ["//", None, "//", None]
    assert [p.get_hatch() for p in drawn[0].axes[2].patches] == [None] * 4  # reliable epoch times
    note = drawn[0].get_supxlabel()
    assert (
        "hatched accuracy: not judged in the summary "
        "(malconv still improving in its last epoch; hotconv fewer than 30 test cases)"
    ) in note


def test_accuracy_evaluation_is_read_from_the_headline(tmp_path):
    table = _trained([[0.6, 0.5, 0.45]] * 4, [100] * 4)
    headline = tmp_path / "hotconv.yaml"
    row = "rows:\n  - table: hotconv\n    evaluation: {history: val_loss_per_epoch, goal: min"
    headline.write_text(row + ", min_change: 0.2}\n")
    assert plots.not_judged(table, headline) == {}  # a fall of 0.05 is within an absolute 0.2
    headline.write_text(row + "}\n")
    with pytest.raises(InputError, match="a history needs a numeric min_change"):
        plots.not_judged(table, headline)
    headline.write_text("rows: [")
    with pytest.raises(InputError, match="not valid YAML"):
        plots.not_judged(table, headline)


def test_the_figure_reads_the_evaluation_the_summary_reads():
    from membench.report.headlines import load_headline

    (spec,) = [row for row in load_headline(plots.HEADLINE).rows if row.table == "hotconv" and row.evaluation]
    evaluation = plots._accuracy_evaluation(plots.HEADLINE)
    read = (evaluation["cases"], evaluation["history"], evaluation["goal"], evaluation["min_change"])
    assert read == (
        spec.evaluation.cases,
        spec.evaluation.history,
        spec.evaluation.goal,
        spec.evaluation.min_change,
    )
    assert bool(evaluation.get("relative", False)) == spec.evaluation.relative
