"""``membench report summary``: the landing summary from the tables it is given, and only those."""

import json

import pandas as pd

from membench.cli import main
from membench.report.published import default_published_path


def _summary(tmp_path, *tables):
    provenance = tmp_path / "provenance.json"
    provenance.write_text(json.dumps({"command": "snakemake", "commit": "", "config_differences": []}))
    words = [word for table in tables for word in ("--table", str(table))]
    return main(
        [
            "report",
            "summary",
            *words,
            "--published",
            str(default_published_path()),
            "--provenance",
            str(provenance),
            "--out-html",
            str(tmp_path / "summary.html"),
            "--out-fragment",
            str(tmp_path / "fragment.html"),
            "--out-csv",
            str(tmp_path / "summary.csv"),
        ]
    )


def test_summary_reads_the_tables_it_is_given_and_no_other(tmp_path, write_hotconv):
    write_hotconv(tmp_path)
    # A table of an earlier run beside them: the summary leaves it out.
    pd.DataFrame(
        {"variant": ["vanilla", "division"], "batch_size": [8, 8], "activation_mib": [50.0, 5.0]}
    ).to_csv(tmp_path / "division_memory.csv", index=False)
    assert _summary(tmp_path, tmp_path / "hotconv.csv", tmp_path / "hotconv_sweep.csv") == 0
    assert set(pd.read_csv(tmp_path / "summary.csv")["system"]) == {"hotconv"}
    assert _summary(tmp_path, tmp_path / "hotconv.csv", tmp_path / "division_memory.csv") == 0
    assert set(pd.read_csv(tmp_path / "summary.csv")["system"]) == {"hotconv", "division"}


def test_a_table_the_headline_does_not_read_is_a_one_line_error(tmp_path, capsys, write_hotconv):
    write_hotconv(tmp_path)
    (tmp_path / "meter.csv").write_text("device\ncpu\n")
    assert _summary(tmp_path, tmp_path / "hotconv.csv", tmp_path / "meter.csv") == 2
    err = capsys.readouterr().err
    assert "meter.csv: not one of the aggregated tables the headline reads (hotconv.csv, " in err
    assert len(err.splitlines()) == 1 and not (tmp_path / "summary.csv").exists()
    assert _summary(tmp_path, tmp_path / "hotconv.csv", tmp_path / "hotconv.csv") == 2
    assert "hotconv.csv: a second hotconv.csv; give each table once" in capsys.readouterr().err
