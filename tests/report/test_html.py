"""The HTML table writer and the table pages: escaping, units, one row per record, downloads."""

import base64
import os
import re
from pathlib import Path

import pandas as pd
import pytest

from membench.core.errors import InputError
from membench.core.tables import write_table
from membench.report.html import format_cell, header, table_html
from membench.report.pages import table_page
from membench.report.views import TABLE_VIEWS


def test_units_come_from_the_column_names():
    assert header("step_alloc_peak_mib") == "step_alloc_peak_mib (MiB)"
    assert header("time_median_s") == "time_median_s (s)"
    assert header("images_per_s") == "images_per_s (1/s)"
    assert header("time_spread_pct") == "time_spread_pct (%)"
    assert header("variant") == "variant"


def test_cells_are_formatted_and_escaped():
    assert format_cell(1234.56789) == "1235" and format_cell(0.000123456) == "0.0001235"
    assert format_cell(float("nan")) == "" and format_cell(True) == "yes"
    frame = pd.DataFrame({"variant": ["<script>alert(1)</script>", "a&b"], "wall_s": [1.5, 2.0]})
    text = table_html(frame)
    assert "<script>" not in text and "&lt;script&gt;" in text and "a&amp;b" in text
    assert len(re.findall(r"<tr>", text)) == 3  # the header and one row per record
    assert '<td class="num" data-value="1.5">1.5</td>' in text


def test_only_existing_curated_columns_are_shown():
    frame = pd.DataFrame({"variant": ["x"], "secret": [1]})
    text = table_html(frame, ["variant", "absent"])
    assert "secret" not in text and "absent" not in text and "<th>variant</th>" in text


def test_table_page_shows_curated_columns_and_embeds_the_full_tables(tmp_path):
    frame = pd.DataFrame(
        {
            "variant": ["hotconv", "malconv"],
            "test_accuracy": [0.9, 0.8],
            "train_alloc_peak_mib": [1.0, 50.0],
            "hidden_column": [1, 2],
        }
    )
    csv = tmp_path / "hotconv.csv"
    write_table(frame, csv, tmp_path / "hotconv.parquet")
    text = table_page("hotconv", csv, tmp_path / "hotconv.parquet")
    assert text.startswith("<!DOCTYPE html>") and TABLE_VIEWS["hotconv"].title in text
    assert "train_alloc_peak_mib (MiB)" in text and "<th>hidden_column</th>" not in text
    assert text.count("<tr>") == 3
    encoded = re.search(r'href="data:text/csv;base64,([^"]+)" download="hotconv.csv"', text).group(1)
    assert "hidden_column" in base64.b64decode(encoded).decode()
    assert 'download="hotconv.parquet"' in text


def test_the_memnet_page_shows_how_many_jobs_each_estimator_answered_and_was_calibrated_on(tmp_path):
    frame = pd.DataFrame(
        {"dataset": ["gpumemnet_mlp"], "estimator": ["faketensor"], "jobs": [3000], "rows": [9]}
        | {"calibration_jobs": [5], "min_calibration_jobs": [49], "members": [3]}
    )
    write_table(frame, tmp_path / "memnet.csv")
    text = table_page("memnet", tmp_path / "memnet.csv")
    for column in ("rows", "calibration_jobs", "min_calibration_jobs", "members"):
        assert f"<th>{column}</th>" in text, column


def test_table_page_bad_inputs(tmp_path):
    with pytest.raises(InputError, match="no page is defined for table 'nope'"):
        table_page("nope", tmp_path / "nope.csv")
    with pytest.raises(InputError, match="table not found"):
        table_page("hotconv", tmp_path / "hotconv.csv")
    (tmp_path / "hotconv.csv").mkdir()
    with pytest.raises(InputError, match="hotconv.csv: is a directory$"):
        table_page("hotconv", tmp_path / "hotconv.csv")


@pytest.mark.timeout(10)
def test_a_pipe_as_a_table_is_named_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "hotconv.csv")
    with pytest.raises(InputError, match=r"hotconv.csv: is a named pipe \(FIFO\), not a regular file$"):
        table_page("hotconv", tmp_path / "hotconv.csv")


def test_every_aggregated_table_of_the_rules_has_a_page():
    rules = Path(__file__).resolve().parents[2] / "rules"
    tables = {
        name
        for path in rules.glob("*.smk")
        for name in re.findall(r"results/tables/(\w+)\.csv", path.read_text())
    }
    assert tables and tables <= set(TABLE_VIEWS), sorted(tables - set(TABLE_VIEWS))
