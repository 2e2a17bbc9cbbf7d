"""``membench summary`` in a terminal: the headline at 100 columns, clear errors for bad tables."""

import pandas as pd

from membench.cli import main


def test_summary_prints_the_headline_within_100_columns(tmp_path, capsys, write_hotconv):
    write_hotconv(tmp_path, device="cpu", reliable=False)
    assert main(["summary", "--tables", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Measured on CPU (Test GPU)")
    assert all(len(line) <= 100 for line in out.splitlines())
    eco = next(line for line in out.splitlines() if line.strip().startswith("hotconv_eco "))
    assert "0.04" in eco and "1.5?" in eco and "not comparable" in eco
    assert "? hotconv_eco: spread 80% over 3 epochs" in out
    assert "[hotconv_eco_memory]" in out  # the shipped published figures sit beside it


def test_missing_or_malformed_tables_are_one_line_errors(tmp_path, capsys):
    assert main(["summary", "--tables", str(tmp_path / "absent")]) == 2
    assert "membench summary: error:" in capsys.readouterr().err
    pd.DataFrame({"estimator": ["horus"]}).to_csv(tmp_path / "memnet.csv", index=False)
    assert main(["summary", "--tables", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "memnet.csv: missing column(s) dataset, family" in err and len(err.splitlines()) == 1
