"""``membench report summary``: the landing summary from the tables it is given, and only those."""

import json

import pandas as pd

from membench.cli import main
from membench.report.headlines import default_headlines_dir


def _summary(tmp_path, *tables):
    provenance = tmp_path / "provenance.json"
    provenance.write_text(
        json.dumps(
            {"command": "snakemake", "commit": "", "config_differences": [], "membench_version": "0.1.0"}
        )
    )
    words = [word for table in tables for word in ("--table", str(table))]
    headlines = [
        word for path in sorted(default_headlines_dir().glob("*.yaml")) for word in ("--headline", str(path))
    ]
    return main(
        [
            "report",
            "summary",
            *words,
            *headlines,
            "--provenance",
            str(provenance),
            "--out-html",
            str(tmp_path / "summary.html"),
            "--out-fragment",
            str(tmp_path / "fragment.html"),
            "--out-csv",
            str(tmp_path / "summary.csv"),
            "--out-verdicts",
            str(tmp_path / "verdicts.csv"),
        ]
    )


def test_summary_reads_the_tables_it_is_given_and_no_other(tmp_path, write_division, write_hotconv):
    write_division(tmp_path)
    write_hotconv(tmp_path)
    assert _summary(tmp_path, tmp_path / "hotconv_bench.csv") == 0
    assert set(pd.read_csv(tmp_path / "summary.csv")["system"]) == {"hotconv"}
    assert _summary(tmp_path, tmp_path / "hotconv_bench.csv", tmp_path / "division_memory.csv") == 0
    assert set(pd.read_csv(tmp_path / "summary.csv")["system"]) == {"hotconv", "division"}
    verdicts = pd.read_csv(tmp_path / "verdicts.csv").set_index("figure")
    assert verdicts.loc["division_activation_gib", "verdict"] == "not reproduced"
    assert verdicts.loc["hotconv_eco_vs_malconv2_memory", "verdict"] == "indicative"
    page = (tmp_path / "summary.html").read_text()
    assert page.count("<h1>") == 1 and "membench 0.1.0" in page


def test_a_table_no_headline_reads_is_a_one_line_error(tmp_path, capsys, write_hotconv):
    write_hotconv(tmp_path)
    (tmp_path / "meter.csv").write_text("device\ncpu\n")
    assert _summary(tmp_path, tmp_path / "hotconv_bench.csv", tmp_path / "meter.csv") == 2
    err = capsys.readouterr().err
    assert "meter.csv: not one of the tables the summary reads (" in err
    assert len(err.splitlines()) == 1 and not (tmp_path / "summary.csv").exists()
    assert _summary(tmp_path, tmp_path / "hotconv_bench.csv", tmp_path / "hotconv_bench.csv") == 2
    assert "hotconv_bench.csv: a second hotconv_bench.csv; give each table once" in capsys.readouterr().err
