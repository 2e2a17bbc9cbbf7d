"""The command line: groups listed, bad input as one line and exit code 2."""

import json
import subprocess
import sys

import pytest

from membench.cli import GROUPS, main
from membench.core.timing import TIMING_FIELDS


def test_help_lists_every_group(capsys):
    try:
        main(["--help"])
    except SystemExit as exit_:
        assert exit_.code == 0
    out = capsys.readouterr().out
    for group in GROUPS:
        assert group in out


def test_input_error_is_one_line_and_exit_2(tmp_path, capsys):
    code = main(
        ["bodmas", "classes", "--metadata", str(tmp_path / "none.csv"), "--out", str(tmp_path / "c.csv")]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err == f"membench bodmas: error: {tmp_path / 'none.csv'}: file not found (expected a CSV file)"
    assert not (tmp_path / "c.csv").exists()


def test_console_script_runs_meter_check(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "membench.cli",
            "meter",
            "check",
            "--outdir",
            str(tmp_path),
            "--device",
            "cpu",
            "--train-steps",
            "2",
            "--repeats",
            "1",
            "--batch-size",
            "4",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout == ""
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["system"] == "meter" and metrics["device"] == "cpu"
    assert metrics["nvml_available"] is False and metrics["activation_mib"] > 0
    assert metrics["alloc_peak_mib"] > 0 and metrics["trace_allocator"] is True
    assert metrics["allocator_trace_overhead_pct"] is not None
    assert (
        set(TIMING_FIELDS) <= set(metrics)
        and metrics["time_unit"] == "repeat"
        and metrics["time_samples"] == 1
    )
    assert (tmp_path / "memlog.csv").exists()


def test_group_help_is_plain_text(capsys):
    for group in GROUPS:
        try:
            main([group, "--help"])
        except SystemExit as exit_:
            assert exit_.code == 0
        out = capsys.readouterr().out
        assert f"membench {group}" in out and "``" not in out, out


def test_an_error_is_one_bounded_line_whatever_the_input_holds(tmp_path, capsys):
    data = tmp_path / "jobs.csv"
    data.write_text(
        "Filename,Depth,Activations-Params,Activation Function,Total Activations,Total Parameters,"
        "Batch Size,Max GPU Memory (MiB)\na.out,1,\"[('linear', 3, "
        f'15)]",ReLU,3,15,"{"x" * 20_000_000}\ny",9\n'
    )
    out = tmp_path / "t.csv"
    assert main(["memnet", "evaluate", "--data", str(data), "--family", "mlp", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and len(err) < 1000
    assert err.startswith(f"membench memnet: error: {data}, line 2: column Batch Size: 'xxx")
    assert " characters) ... " in err and err.endswith("xx\\ny' is not an integer\n")
    odd = tmp_path / "new\nline.csv"
    assert main(["bodmas", "classes", "--metadata", str(odd), "--out", str(out)]) == 2
    assert (
        capsys.readouterr().err
        == f"membench bodmas: error: {tmp_path}/new\\nline.csv: file not found (expected a CSV file)\n"
    )


def test_a_usage_error_ends_in_one_bounded_line(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["memnet", "generate", "--family", "x" * 100_000 + "\n", "--count", "1", "--out", "c.csv"])
    assert exit_.value.code == 2
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.startswith("membench memnet generate: error: argument --family: invalid choice: 'xxx")
    assert (
        len(last) < 700
        and "characters) ..." in last
        and last.endswith("(choose from 'mlp', 'cnn', 'transformer')")
    )
