"""Provenance: configuration differences, commit, machine columns, load; the summary fragment."""

import json
import re
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from membench.cli import main
from membench.core.errors import InputError
from membench.report.headlines import default_headlines_dir, load_headlines
from membench.report.pages import summary_fragment
from membench.report.provenance import (
    config_differences,
    git_commit,
    machine_from_tables,
    read_provenance,
    timing_load,
)
from membench.report.summary import read_tables, summarize

REPO = Path(__file__).resolve().parents[2]


def test_config_differences_name_dotted_keys():
    default = {"device": "auto", "hotconv": {"epochs": 4, "max_len": 32768}, "seed": 0}
    config = {"device": "cpu", "hotconv": {"epochs": 2, "max_len": 32768}, "seed": 0}
    assert config_differences(default, config) == ['device: "auto" -> "cpu"', "hotconv.epochs: 4 -> 2"]
    assert config_differences(default, default) == []


def test_commit_of_a_checkout_and_outside_one(tmp_path):
    assert git_commit(tmp_path) == "not a git checkout"
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run([*git, "init", "-q"], check=True)
    (tmp_path / "a.txt").write_text("a\n")
    subprocess.run([*git, "add", "a.txt"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "a"], check=True)
    commit = git_commit(tmp_path)
    assert re.fullmatch(r"[0-9a-f]{40}", commit)
    (tmp_path / "a.txt").write_text("b\n")
    assert git_commit(tmp_path) == f"{commit} + uncommitted changes"


def test_machine_and_load_from_the_tables():
    tables = {
        "hotconv": pd.DataFrame(
            {"device": ["cpu", "cpu"], "torch_version": ["2.13.0+cpu"] * 2, "load_1m_max": [1.5, 3.25]}
        ),
        "robust": pd.DataFrame({"device": ["cuda"], "device_name": ["NVIDIA H100"]}),
    }
    assert machine_from_tables(tables) == {
        "device": "cpu, cuda",
        "device_name": "NVIDIA H100",
        "torch_version": "2.13.0+cpu",
    }
    assert timing_load(tables) == {"hotconv": 3.25}


def test_provenance_command_writes_the_default_config_differences(tmp_path):
    out = tmp_path / "provenance.json"
    config = {"device": "cpu"}
    code = main(
        [
            "report",
            "provenance",
            "--command",
            "snakemake --cores 2",
            "--config-json",
            json.dumps(config),
            "--default-config",
            str(REPO / "config" / "config.yaml"),
            "--schema",
            str(REPO / "config" / "schema.yaml"),
            "--checkout",
            str(tmp_path),
            "--out",
            str(out),
        ]
    )
    assert code == 0
    record = read_provenance(out)
    assert record["command"] == "snakemake --cores 2" and record["commit"] == "not a git checkout"
    assert 'device: "auto" -> "cpu"' in record["config_differences"] and record["cpu_cores"] >= 1


def test_bad_provenance_inputs(tmp_path, capsys):
    (tmp_path / "p.json").write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        read_provenance(tmp_path / "p.json")
    (tmp_path / "p.json").write_text("[]")
    with pytest.raises(InputError, match="expected a JSON object"):
        read_provenance(tmp_path / "p.json")
    (tmp_path / "p.json").write_text("{}")
    with pytest.raises(InputError, match="expected an object with command, commit"):
        read_provenance(tmp_path / "p.json")
    assert (
        main(
            [
                "report",
                "provenance",
                "--command",
                "x",
                "--config-json",
                "{",
                "--default-config",
                "a",
                "--schema",
                "b",
                "--checkout",
                ".",
                "--out",
                str(tmp_path / "o.json"),
            ]
        )
        == 2
    )
    assert "--config-json is not valid JSON" in capsys.readouterr().err


def test_summary_fragment_opens_on_title_date_versions_and_counts(tmp_path, write_division):
    write_division(tmp_path, reliable=False)
    headlines = load_headlines(default_headlines_dir())
    summary = summarize(read_tables(tmp_path, headlines), headlines)
    provenance = {
        "command": "snakemake <b>",
        "commit": "not a git checkout",
        "config_differences": ["seed: 0 -> 1"],
        "membench_version": "0.1.0",
        "snakemake_version": "9.27.1",
    }
    text = summary_fragment(
        summary, provenance, {"device": "cpu"}, {"division_speed": 2.5}, "2026-11-26 10:00 UTC"
    )
    head = text[text.index("<h1>") : text.index("<h2>")]
    assert "Results of 2026-11-26 10:00 UTC; membench 0.1.0, Snakemake 9.27.1." in head
    assert summary.counts_line().replace("'", "&#x27;") in head
    assert "snakemake &lt;b&gt;" in text and "the default with 1 key(s) changed" in text
    assert "<li><code>seed: 0 -&gt; 1</code></li>" in text and "division_speed 2.50" in text
    assert '<td class="not-reproduced">not reproduced</td>' in text
    assert "<td>11.4x less</td>" in text and "<td>1.9x slower (flagged)</td>" in text
    assert "Training step time, division: load 5.1 on 2 CPUs (limit 2.5)" in text
