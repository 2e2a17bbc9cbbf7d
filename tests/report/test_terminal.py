"""``membench summary`` in a terminal: the same verdicts as the report, at 100 columns; clear errors."""

import pandas as pd

from membench.cli import main
from membench.report.headlines import default_headlines_dir, load_headlines
from membench.report.summary import read_tables, summarize
from membench.report.terminal import format_summary


def test_summary_prints_the_counts_and_the_verdicts_within_100_columns(
    tmp_path, capsys, write_division, write_hotconv
):
    write_division(tmp_path, reliable=False)
    write_hotconv(tmp_path)
    assert main(["summary", "--tables", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    headlines = load_headlines(default_headlines_dir())
    summary = summarize(read_tables(tmp_path, headlines), headlines)
    assert out.startswith(summary.counts_line()[:90])
    assert all(len(line) <= 100 for line in out.splitlines())
    for _, row in summary.verdict_frame().iterrows():
        if row["verdict"] in ("reproduced", "not reproduced", "indicative"):
            assert f"{row['verdict']}: {row['system']}: {row['published'][:30]}" in " ".join(out.split())
    assert "  $ snakemake --cores all --configfile config/paper/division.yaml" in out
    assert "[2] Wang, Liu, Jiang, Liu, Zou and Hu" in out
    division = next(line for line in out.splitlines() if line.startswith("  division "))
    assert "11.4x less" in division
    assert "1.9x slower?" in out and "! division: load 5.1 on 2 CPUs (limit 2.5)" in out


def test_missing_or_malformed_tables_are_one_line_errors(tmp_path, capsys):
    assert main(["summary", "--tables", str(tmp_path / "absent")]) == 2
    assert "membench summary: error:" in capsys.readouterr().err
    pd.DataFrame({"family": ["mlp"]}).to_csv(tmp_path / "memnet.csv", index=False)
    assert main(["summary", "--tables", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "memnet.csv: missing column(s) estimator" in err and len(err.splitlines()) == 1


def test_a_method_that_did_not_run_shows_its_status_even_as_the_baseline(tmp_path):
    common = {"model": "resnet18", "image_size": 32, "num_classes": 10, "amp": "none", "device": "cpu"}
    common |= {"batch_size": 16, "time_unit": "step", "time_samples": 5, "timing_reliable": True}
    pd.DataFrame(
        [common | {"variant": "vanilla", "status": "oom"}]
        + [common | {"variant": "division", "status": "ok", "time_median_s": 1.9}]
    ).to_csv(tmp_path / "division_speed.csv", index=False)
    headlines = load_headlines(default_headlines_dir())
    lines = format_summary(summarize(read_tables(tmp_path, headlines), headlines)).splitlines()
    assert next(line for line in lines if line.startswith("  vanilla ")).split() == [
        "vanilla",
        "-",
        "-",
        "oom",
        "-",
        "-",
    ]
    assert "    ! division: baseline vanilla: oom" in lines
