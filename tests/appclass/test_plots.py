"""appclass figures: one panel per graph pair (runtimes of different graphs never joined)."""

import figures
import pandas as pd

from membench.appclass import plots
from membench.appclass.plots import plot_runtime, plot_speedup


def _table():
    rows = []
    for dataset, edges, base_s in (("small/p5", 1000, 0.2), ("large/p5", 100000, 2.0)):
        for variant, implementation, factor in (
            ("reference-cpu-t1-float64", "reference", 1.0),
            ("torch-cpu-t2-float64", "torch", 0.1),
        ):
            rows.append(
                {
                    "dataset": dataset,
                    "variant": variant,
                    "implementation": implementation,
                    "data_edges": edges,
                    "pattern_edges": 4,
                    "time_median_s": base_s * factor,
                    "time_min_s": base_s * factor * 0.9,
                    "time_max_s": base_s * factor * 1.1,
                    "timing_reliable": implementation == "torch",
                    "timing_flag": "" if implementation == "torch" else "1 sample",
                }
            )
    return pd.DataFrame(rows)


def test_runtime_and_speedup_have_one_panel_per_graph_pair(tmp_path, monkeypatch):
    drawn = figures.capture(monkeypatch, plots)
    plot_runtime(_table(), tmp_path / "runtime.png")
    plot_speedup(_table(), tmp_path / "speedup.png")
    figures.assert_readable(drawn, tmp_path / "runtime.png", tmp_path / "speedup.png")
    runtime, speedup = drawn
    assert len(runtime.axes) == 2
    assert all(line.get_linestyle() == "None" for ax in runtime.axes for line in ax.lines)  # nothing joined
    assert runtime.axes[0].get_title().startswith("small/p5")
    assert [t.get_text() for t in runtime.axes[0].texts] == ["x1", "x0.1"]
    assert [round(p.get_height(), 6) for p in speedup.axes[1].patches] == [10.0]
    assert speedup.axes[1].patches[0].get_hatch() == "//"  # the reference's timing is flagged
