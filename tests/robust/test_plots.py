"""robust figures: colour by k from the one mapping, sequential baseline grey, no empty panels."""

import figures
import pandas as pd
from matplotlib.colors import to_hex

from membench.core.plots import BASELINE_COLOUR, method_colour
from membench.robust import plots
from membench.robust.plots import plot_scaling, plot_staleness


def test_scaling_and_staleness(tmp_path, monkeypatch):
    frame = pd.DataFrame(
        [
            {
                "mode": "parallel",
                "scaling": s,
                "publish_every": k,
                "producers": p,
                "speedup": 1.0 + p / 4,
                "robust_accuracy": 0.8,
                "robust_accuracy_delta": -0.01,
                "staleness_mean": k / 2,
                "staleness_max": k,
            }
            for s in ("strong", "weak")
            for k in (1, 4)
            for p in (1, 2)
        ]
    )
    drawn = figures.capture(monkeypatch, plots)
    plot_scaling(frame, tmp_path / "scaling.png")
    plot_staleness(frame, tmp_path / "staleness.png")
    figures.assert_readable(drawn, tmp_path / "scaling.png", tmp_path / "staleness.png")
    speed, accuracy = drawn[0].axes
    colours = {
        to_hex(line.get_color()) for line in speed.lines if line.get_label().startswith(("strong", "weak"))
    }
    assert colours == {method_colour("parallel_k1"), method_colour("parallel_k4")}
    assert BASELINE_COLOUR in {to_hex(line.get_color()) for line in accuracy.lines}
