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
                "variant": f"parallel_p{p}_k{k}",
                "train_wall_s": 100.0 / (1.0 + p / 4),
                "baseline_variant": "sequential_t1",
                "baseline_train_wall_s": 100.0,
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


def _run(mode, scaling, variant, producers, train_wall_s, reliable, baseline=None, baseline_wall_s=None):
    return {
        "mode": mode,
        "scaling": scaling,
        "variant": variant,
        "publish_every": 1,
        "producers": producers,
        "train_wall_s": train_wall_s,
        "speedup": None if baseline is None else baseline_wall_s / train_wall_s,
        "baseline_variant": baseline,
        "baseline_train_wall_s": baseline_wall_s,
        "robust_accuracy": 0.5 + producers / 10,
        "robust_accuracy_delta": -0.01,
        "time_median_s": train_wall_s / 4,
        "time_min_s": train_wall_s / 5,
        "time_max_s": train_wall_s / 3,
        "timing_reliable": reliable,
        "timing_flag": "" if reliable else "load 3.1 on 2 CPUs (limit 2.5)",
    }


def _open_markers(ax) -> set[tuple[float, float]]:
    return {
        (float(x), round(float(y), 4))
        for collection in ax.collections
        if len(collection.get_offsets()) and to_hex(collection.get_facecolor()[0]) == "#ffffff"
        for x, y in collection.get_offsets()
    }


def test_flagged_runs_have_open_markers_and_a_flagged_baseline_marks_the_speedup(tmp_path, monkeypatch):
    frame = pd.DataFrame(
        [
            _run("sequential", "sequential", "seq_fast", 1, 80.0, False),
            _run("sequential", "sequential", "seq_slow", 1, 100.0, True),
            _run("parallel", "strong", "par_p1", 1, 50.0, True, "seq_slow", 100.0),
            _run("parallel", "strong", "par_p2", 2, 40.0, False, "seq_slow", 100.0),
            _run("parallel", "weak", "par_w1", 1, 50.0, True, "seq_fast", 80.0),
            _run("parallel", "weak", "par_w2", 2, 40.0, True, "seq_slow", 100.0),
        ]
    )
    drawn = figures.capture(monkeypatch, plots)
    plot_scaling(frame, tmp_path / "scaling.png")
    figures.assert_readable(drawn, tmp_path / "scaling.png")
    speed, accuracy = drawn[0].axes
    # par_p2's own timing is flagged; par_w1's speed-up divides by seq_fast's flagged time.
    assert _open_markers(speed) == {(2.0, 2.5), (1.0, 1.6)}
    assert _open_markers(accuracy) == {(2.0, 0.7)}
    assert drawn[0].get_supxlabel().startswith("open markers: ")
    assert "machine loaded" in drawn[0].get_supxlabel()


def test_reliable_runs_have_no_open_markers_or_note(tmp_path, monkeypatch):
    frame = pd.DataFrame(
        [
            _run("sequential", "sequential", "seq", 1, 100.0, True),
            _run("parallel", "strong", "par", 2, 40.0, True, "seq", 100.0),
        ]
    )
    drawn = figures.capture(monkeypatch, plots)
    plot_scaling(frame, tmp_path / "scaling.png")
    assert not _open_markers(drawn[0].axes[0]) and not _open_markers(drawn[0].axes[1])
    assert drawn[0].get_supxlabel() == ""
