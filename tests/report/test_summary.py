"""The headline table from small hand-made tables: exact ratios, verdicts, flagged timings."""

import pandas as pd
import pytest

from membench.core.errors import InputError
from membench.report.summary import (
    HEADLINE_COLUMNS,
    MET,
    NO_FIGURE,
    NOT_COMPARABLE,
    NOT_MET,
    headline_table,
    read_tables,
    scale_line,
)

FIGURE = {
    "id": "eco_memory",
    "system": "hotconv",
    "match": {"variant": "hotconv_eco"},
    "metric": "memory_ratio",
    "value": 0.05,
    "text": "1/20",
    "compare": "at_most",
    "tolerance": 0.01,
    "source": "the HotConv README",
    "setting": "GPU",
    "requires": {"device": "cuda", "max_len": 1024},
}


def by_method(frame):
    return frame.set_index("method")


def test_ratios_are_against_the_baseline_at_the_largest_point(tmp_path, write_hotconv):
    write_hotconv(tmp_path)
    rows = by_method(headline_table(tmp_path, [FIGURE]))
    assert list(headline_table(tmp_path, []).columns) == list(HEADLINE_COLUMNS)
    assert rows.loc["hotconv_eco", "memory_mib"] == 4.0
    assert rows.loc["hotconv_eco", "memory_ratio"] == pytest.approx(0.04)
    assert rows.loc["hotconv_eco", "memory_figure"] == "step_alloc_peak_mib"
    assert rows.loc["hotconv_eco", "time_ratio"] == pytest.approx(1.5)
    assert rows.loc["hotconv_eco", "quality_change"] == pytest.approx(-0.05)
    assert rows.loc["malconv2", "memory_ratio"] == 1.0
    assert rows.loc["hotconv_eco", "timing_flag"] == ""


def test_verdict_met_not_met_and_not_comparable(tmp_path, write_hotconv):
    write_hotconv(tmp_path)
    assert by_method(headline_table(tmp_path, [FIGURE])).loc["hotconv_eco", "verdict"] == MET
    strict = FIGURE | {"value": 0.01, "tolerance": 0.0}
    row = by_method(headline_table(tmp_path, [strict])).loc["hotconv_eco"]
    assert row["verdict"] == NOT_MET and "measured memory_ratio 0.04 vs published 0.01" in row["note"]
    cpu_dir = tmp_path / "cpu"
    cpu_dir.mkdir()
    write_hotconv(cpu_dir, device="cpu")
    row = by_method(headline_table(cpu_dir, [FIGURE])).loc["hotconv_eco"]
    assert row["verdict"] == NOT_COMPARABLE and "device cpu (paper cuda)" in row["note"]
    assert by_method(headline_table(cpu_dir, [FIGURE])).loc["malconv2", "verdict"] == NO_FIGURE


def test_unreliable_timing_is_flagged_and_never_judged(tmp_path, write_hotconv):
    write_hotconv(tmp_path, reliable=False)
    timing = FIGURE | {"id": "eco_time", "metric": "time_ratio", "value": 2.0}
    row = by_method(headline_table(tmp_path, [timing])).loc["hotconv_eco"]
    assert row["timing_flag"] == "hotconv_eco: spread 80% over 3 epochs"
    assert row["verdict"] == NOT_COMPARABLE and "timing flagged" in row["note"]


def test_timing_without_reliability_fields_falls_back_labelled_and_flagged(tmp_path, write_hotconv):
    write_hotconv(tmp_path)
    train = pd.read_csv(tmp_path / "hotconv.csv").drop(
        columns=["time_median_s", "timing_reliable", "timing_flag"]
    )
    train["time_per_epoch_s"] = [4.0, 2.0]
    train.to_csv(tmp_path / "hotconv.csv", index=False)
    row = by_method(headline_table(tmp_path, [])).loc["hotconv_eco"]
    assert row["time_ratio"] == pytest.approx(0.5)
    assert "first included" in row["time_figure"]
    assert "no steady-state median" in row["timing_flag"]


def test_division_throughput_becomes_a_time_ratio(tmp_path):
    pd.DataFrame(
        {"variant": ["vanilla", "division"], "batch_size": [8, 8], "images_per_s": [100.0, 80.0]}
    ).to_csv(tmp_path / "division_speed.csv", index=False)
    pd.DataFrame(
        {"variant": ["vanilla", "division"], "batch_size": [8, 8], "activation_mib": [50.0, 5.0]}
    ).to_csv(tmp_path / "division_memory.csv", index=False)
    rows = by_method(headline_table(tmp_path, []))
    assert rows.loc["division", "time_ratio"] == pytest.approx(1.25)
    assert rows.loc["division", "memory_ratio"] == pytest.approx(0.1)
    assert set(rows["system"]) == {"division"}


def test_missing_system_tables_give_no_rows_and_the_scale_line_says_so(tmp_path, write_hotconv):
    write_hotconv(tmp_path, device="cpu")
    tables = read_tables(tmp_path)
    assert set(headline_table(tmp_path, [FIGURE])["system"]) == {"hotconv"}
    line = scale_line(tables, [FIGURE])
    assert line.startswith("Measured on CPU") and "not the paper setting" in line


def test_memnet_rows_compare_with_the_published_data_set_only(tmp_path):
    pd.DataFrame(
        {
            "dataset": ["measured_mlp", "measured_mlp", "gpumemnet_mlp"],
            "family": ["mlp"] * 3,
            "jobs": [10, 10, 3000],
            "folds": [3, 3, 3],
            "estimator": ["gpumemnet_mlp", "horus", "gpumemnet_mlp"],
            "accuracy": [0.5, 0.25, 0.97],
            "under_rate": [0.1, 0.0, 0.02],
        }
    ).to_csv(tmp_path / "memnet.csv", index=False)
    figure = {
        **FIGURE,
        "id": "mlp_acc",
        "system": "memnet",
        "metric": "accuracy",
        "value": 0.976,
        "compare": "at_least",
        "tolerance": 0.02,
        "match": {"estimator": "gpumemnet_mlp", "family": "mlp"},
        "requires": {"published_data": True, "jobs": 3000},
    }
    frame = headline_table(tmp_path, [figure])
    measured = frame[(frame["dataset"] == "measured_mlp") & (frame["method"] == "gpumemnet_mlp")].iloc[0]
    published = frame[frame["dataset"] == "gpumemnet_mlp"].iloc[0]
    assert measured["verdict"] == NOT_COMPARABLE and measured["quality_change"] == pytest.approx(0.25)
    assert published["verdict"] == MET


def test_bad_tables_are_input_errors_naming_the_file(tmp_path):
    with pytest.raises(InputError, match="no such tables directory"):
        read_tables(tmp_path / "absent")
    with pytest.raises(InputError, match="holds none of the aggregated tables"):
        read_tables(tmp_path)
    (tmp_path / "hotconv.csv").write_text("dataset,accuracy\ntiny,0.5\n")
    with pytest.raises(InputError, match=r"hotconv\.csv: missing column\(s\) variant"):
        read_tables(tmp_path)
    (tmp_path / "hotconv.csv").write_bytes(b"variant\n\xff\xfe\x00bad")
    with pytest.raises(InputError, match=r"hotconv\.csv: not a readable CSV table"):
        read_tables(tmp_path)


def test_the_paper_model_sweep_is_preferred_where_it_ran(tmp_path, write_hotconv):
    write_hotconv(tmp_path)
    pd.DataFrame(
        {
            "variant": ["malconv2", "hotconv_eco"],
            "max_len": [2097152] * 2,
            "batch_size": [1, 1],
            "step_alloc_peak_mib": [400.0, 20.0],
        }
    ).to_csv(tmp_path / "hotconv_bench.csv", index=False)
    assert by_method(headline_table(tmp_path, [])).loc["hotconv_eco", "memory_ratio"] == pytest.approx(0.05)


def test_appclass_memory_is_a_figure_the_reference_has_too(tmp_path):
    pd.DataFrame(
        {
            "variant": ["reference-cpu-t1-float64", "torch-cpu-t1-float64"],
            "dataset": ["g/p", "g/p"],
            "implementation": ["reference", "torch"],
            "alloc_peak_mib": [None, 3.0],
            "algorithm_rss_mib": [40.0, 10.0],
            "iterations_ms": [200.0, 20.0],
            "agrees_with_reference": [None, True],
        }
    ).to_csv(tmp_path / "appclass.csv", index=False)
    row = by_method(headline_table(tmp_path, [])).loc["torch-cpu-t1-float64"]
    assert row["memory_figure"] == "algorithm_rss_mib" and row["memory_ratio"] == pytest.approx(0.25)
    assert row["time_ratio"] == pytest.approx(0.1) and row["quality_value"] == 1.0
