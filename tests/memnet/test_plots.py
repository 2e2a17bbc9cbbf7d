"""memnet figures: estimator colours from the one mapping, inference time with flags, a grid of matrices."""

import figures
import pandas as pd

from membench.memnet import plots
from membench.memnet.plots import plot_comparison, plot_confusions

ESTIMATORS = ("gpumemnet_mlp", "horus", "membench")


def test_comparison_and_confusions(tmp_path, monkeypatch):
    table = pd.DataFrame(
        [
            {
                "dataset": d,
                "estimator": e,
                "accuracy": 0.5,
                "under_rate": 0.1,
                "inference_ms": 1.0,
                "time_median_s": 0.001 * (i + 1),
                "time_min_s": 0.0009,
                "time_max_s": 0.004,
                "timing_reliable": True,
                "timing_flag": "",
            }
            for d in ("measured_mlp", "measured_cnn")
            for i, e in enumerate(ESTIMATORS)
        ]
    )
    predictions = pd.DataFrame(
        [
            {"dataset": d, "estimator": e, "split": "kfold", "true_bin": t, "pred_bin": p}
            for d in ("measured_mlp", "measured_cnn")
            for e in ESTIMATORS
            for t, p in ((0, 0), (1, 0), (1, 1))
        ]
    )
    drawn = figures.capture(monkeypatch, plots)
    plot_comparison(table, tmp_path / "comparison.png")
    plot_confusions(predictions, tmp_path / "confusion.png")
    figures.assert_readable(drawn, tmp_path / "comparison.png", tmp_path / "confusion.png")
    comparison, confusion = drawn
    assert len(comparison.axes) == 3 and comparison.axes[2].get_yscale() == "linear"
    assert [t.get_text() for t in comparison.axes[2].texts][:3] == ["x0.5", "x1", "x1.5"]
    assert len(confusion.axes) == 2 * len(ESTIMATORS)
