"""memnet figures: estimator colours from the one mapping, the requested risk drawn, inference time
with flags, a grid of matrices, accuracy against under-estimation with the uncalibrated point."""

import figures
import pandas as pd

from membench.memnet import plots
from membench.memnet.plots import plot_comparison, plot_confusions, plot_tradeoff

ESTIMATORS = ("gpumemnet_mlp", "horus", "memtracker", "membench")


def _table():
    return pd.DataFrame(
        [
            {
                "dataset": d,
                "estimator": e,
                "max_under": 0.02,
                "accuracy": 0.5 + 0.1 * i,
                "under_rate": 0.01 * i,
                "under_rate_ci_low": 0.0,
                "under_rate_ci_high": 0.01 * i + 0.02,
                "raw_accuracy": 0.6,
                "raw_under_rate": 0.05 * i,
                "inference_ms": 1.0,
                "time_median_s": 0.001 * (i + 1),
                "time_min_s": 0.0009,
                "time_max_s": 0.004,
                "timing_reliable": True,
                "timing_flag": "",
                "too_small_to_judge": "10 jobs, fewer than 30" if d == "measured_cnn" else "",
                # 2% needs 49 calibration jobs: MemTracker's 3 on the MLP data make it answer the last class.
                "calibration_jobs": 3 if (d, e) == ("gpumemnet_mlp", "memtracker") else 60,
            }
            for d in ("gpumemnet_mlp", "measured_cnn")
            for i, e in enumerate(ESTIMATORS)
        ]
    )


def test_comparison_and_confusions(tmp_path, monkeypatch):
    predictions = pd.DataFrame(
        [
            {"dataset": d, "estimator": e, "split": "kfold", "true_bin": t, "pred_bin": p}
            for d in ("gpumemnet_mlp", "measured_cnn")
            for e in ESTIMATORS
            for t, p in ((0, 0), (1, 0), (1, 1))
        ]
    )
    drawn = figures.capture(monkeypatch, plots)
    plot_comparison(_table(), tmp_path / "comparison.png")
    plot_confusions(predictions, tmp_path / "confusion.png")
    figures.assert_readable(drawn, tmp_path / "comparison.png", tmp_path / "confusion.png")
    comparison, confusion = drawn
    assert len(comparison.axes) == 3 and comparison.axes[2].get_yscale() == "linear"
    assert [t.get_text() for t in comparison.axes[2].texts][:4] == ["x0.5", "x1", "x1.5", "x2"]
    assert [line.get_ydata()[0] for line in comparison.axes[1].lines] == [0.02]  # the requested rate
    heights = [round(bar.get_height(), 3) for bar in comparison.axes[0].patches]
    assert heights.count(0.5) == 2 and heights.count(0.7) == 1  # MemTracker's on measured_cnn only
    assert (
        "no bar at the requested risk: memtracker on gpumemnet_mlp"
        in comparison._supxlabel.get_text().replace("\n", " ")
    )
    assert len(confusion.axes) == 2 * len(ESTIMATORS)


def test_tradeoff_puts_each_estimator_at_its_rate_and_marks_a_dataset_too_small(tmp_path, monkeypatch):
    drawn = figures.capture(monkeypatch, plots)
    plot_tradeoff(_table(), tmp_path / "tradeoff.png")
    figures.assert_readable(drawn, tmp_path / "tradeoff.png")
    (figure,) = drawn
    judged, small = figure.axes[:2]
    assert judged.get_title() == "gpumemnet_mlp"
    assert small.get_title() == "measured_cnn\ntoo small to judge: 10 jobs, fewer than 30"
    vertical = [line for line in judged.lines if list(line.get_xdata()) == [0.02, 0.02]]
    assert len(vertical) == 1  # the requested rate
    calibrated = {
        (round(x, 3), round(y, 3))
        for line in judged.lines
        for x, y in zip(line.get_xdata(), line.get_ydata())
    }
    assert {(0.03, 0.8), (0.15, 0.6)} <= calibrated  # membench: at the risk and uncalibrated
    # MemTracker, calibrated on 3 jobs: its uncalibrated point only, and the note says why.
    assert (0.1, 0.6) in calibrated and (0.02, 0.7) not in calibrated
    assert "uncalibrated only: memtracker on gpumemnet_mlp" in figure._supxlabel.get_text().replace("\n", " ")
