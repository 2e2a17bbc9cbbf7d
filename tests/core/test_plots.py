"""The figure helpers: one colour per method, ratios on bars, grids without empty panels."""

import json

import matplotlib.pyplot as plt
import pandas as pd

from membench.cli import main
from membench.core.commands.meter import _memlog_title
from membench.core.plots import (
    BASELINE_COLOUR,
    BASELINE_METHODS,
    METHOD_COLOURS,
    flagged_note,
    method_bars,
    method_colour,
    panel_grid,
    ratio_label,
    timing_by_method,
)


def test_every_method_has_its_own_colour_and_baselines_are_grey():
    others = {m: c for m, c in METHOD_COLOURS.items() if m not in BASELINE_METHODS}
    assert len(set(others.values())) == len(others) and BASELINE_COLOUR not in others.values()
    assert all(method_colour(m) == BASELINE_COLOUR for m in BASELINE_METHODS)
    assert method_colour("a-configured-variant") == method_colour("a-configured-variant")


def test_grid_has_no_empty_axes():
    fig, axes = panel_grid(3, ncols=2)
    assert len(axes) == 3 and len(fig.axes) == 3
    plt.close(fig)


def test_bars_carry_their_ratio_to_the_baseline_and_flagged_ones_are_hatched():
    fig, (ax,) = panel_grid(1)
    method_bars(
        ax,
        ["malconv2", "hotconv_eco"],
        [400.0, 2.0],
        ylabel="MiB",
        baseline="malconv2",
        flagged=[False, True],
    )
    assert [t.get_text() for t in ax.texts] == ["x1", "x0.005"]
    assert ax.get_yscale() == "log" and ax.get_ylabel() == "MiB, log scale"
    assert [p.get_hatch() for p in ax.patches] == [None, "//"]
    plt.close(fig)
    assert ratio_label(390.4, 1.0) == "x390" and ratio_label(2.54, 1.0) == "x2.5"


def test_timing_by_method_takes_the_median_and_any_flag():
    frame = pd.DataFrame(
        {
            "variant": ["a", "a", "b"],
            "time_median_s": [1.0, 3.0, 2.0],
            "time_min_s": [0.9, 2.5, 1.9],
            "time_max_s": [1.2, 3.5, 2.1],
            "timing_reliable": [True, False, True],
            "timing_flag": ["", "1 sample", ""],
        }
    )
    timing = timing_by_method(frame)
    assert (
        timing.loc["a", "median_s"] == 2.0
        and timing.loc["a", "min_s"] == 0.9
        and timing.loc["a", "max_s"] == 3.5
    )
    assert timing.loc["a", "flagged"] and not timing.loc["b", "flagged"]


def test_flagged_note_names_every_kind_of_timing_flag():
    def note(*flags):
        frame = pd.DataFrame(
            {"variant": [f"m{i}" for i in range(len(flags))], "time_median_s": 1.0, "time_min_s": 1.0}
            | {"time_max_s": 1.0, "timing_reliable": [not flag for flag in flags], "timing_flag": list(flags)}
        )
        return flagged_note(timing_by_method(frame), "epoch time")

    assert note("") == ""
    assert note("each epoch the first of its process", "2 epochs timed in another setting left out") == (
        "hatched: epoch time flagged as unreliable (each sample the first of its process, samples timed "
        "in another setting left out); see timing_flag in the table"
    )
    assert note("1 sample; load 5.1 on 2 CPUs (limit 2.5)").endswith(
        "(no or one sample, machine loaded); see timing_flag in the table"
    )
    # A flag of no known kind names none, never "()".
    assert note("something new") == "hatched: epoch time flagged as unreliable; see timing_flag in the table"


def test_memlog_figure_is_titled_by_its_job_not_its_path(tmp_path):
    memlog = tmp_path / "job" / "memlog.csv"
    memlog.parent.mkdir()
    pd.DataFrame(
        {
            "t_s": [0.0, 0.5, 1.0],
            "phase": ["setup", "train", "train"],
            "rss_mib": [10.0, 12.0, 11.0],
            "nvml_used_mib": [None] * 3,
            "nvml_process_used_mib": [None] * 3,
            "cuda_allocated_mib": [None] * 3,
        }
    ).to_csv(memlog, index=False)
    (memlog.parent / "metrics.json").write_text(
        json.dumps({"system": "meter", "variant": "reference_cnn", "device": "cpu"})
    )
    assert main(["meter", "plot", "--memlog", str(memlog), "--out", str(tmp_path / "memlog.png")]) == 0
    assert (tmp_path / "memlog.png").stat().st_size > 0
    assert _memlog_title(memlog) == "meter reference_cnn on cpu: memory over time"
    assert _memlog_title(tmp_path / "elsewhere" / "memlog.csv") == "memory over time"
