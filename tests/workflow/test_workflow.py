"""Snakemake end to end on the small test config: the DAG runs, reruns nothing, builds the report."""

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from membench.core.metrics import read_metrics

REPO = Path(__file__).resolve().parents[2]
TEST_CONFIG = Path(__file__).with_name("config.yaml")

pytestmark = pytest.mark.workflow


def snakemake(workdir: Path, *args: str, configfile: Path = TEST_CONFIG) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    command = [
        sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
        "--configfile", str(configfile), "--cores", "2", *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("workflow")
    result = snakemake(workdir)
    assert result.returncode == 0, result.stderr[-4000:]
    return workdir


def test_default_target_writes_tables_and_figures(finished_run):
    tables = finished_run / "results" / "tables"
    datasets = pd.read_csv(tables / "datasets.csv")
    assert set(datasets["dataset"]) == {"tiny"}
    assert set(datasets["fold"]) == {0, 1, 2}
    assert datasets.groupby("fold")["samples"].sum().eq(40).all()
    meter = pd.read_parquet(tables / "meter.parquet")
    assert meter.loc[0, "device"] == "cpu" and meter.loc[0, "activation_mib"] > 0
    assert read_metrics(finished_run / "results" / "meter" / "check" / "metrics.json")["batch_size"] == 4
    hotconv = pd.read_parquet(tables / "hotconv.parquet")
    assert sorted(hotconv["variant"]) == ["hotconv", "hotconv_eco", "malconv", "malconv2"]
    assert set(pd.read_csv(tables / "hotconv_sweep.csv")["status"]) == {"ok"}
    appclass = pd.read_csv(tables / "appclass.csv")
    assert set(appclass["variant"]) == {"reference-cpu-t1-float64", "torch-cpu-t1-float64"}
    memory = pd.read_csv(tables / "division_memory.csv")
    assert sorted(memory["variant"]) == ["division", "vanilla"]
    assert len(pd.read_csv(tables / "division_accuracy.csv")) == 2
    memnet = pd.read_csv(tables / "memnet.csv")
    assert set(memnet["dataset"]) == {"measured_mlp"}
    assert set(memnet["estimator"]) == {"gpumemnet_mlp", "gpumemnet_transformer", "horus", "faketensor", "membench"}
    assert (finished_run / "results" / "memnet" / "estimators" / "measured_mlp" / "estimators.json").exists()
    figures = ("bodmas_sizes.png", "meter_memlog.png", "hotconv_variants.png", "hotconv_sweep.png",
               "appclass_runtime.png", "appclass_speedup.png", "division_memory.png", "division_speed.png",
               "memnet_confusion.png", "memnet_comparison.png")
    for figure in figures:
        assert (finished_run / "results" / "plots" / figure).read_bytes()[:4] == b"\x89PNG"
    assert (finished_run / "results" / "logs" / "meter_check" / "all.log").exists()
    assert (finished_run / "results" / "benchmarks" / "bodmas_fold" / "tiny" / "1.tsv").exists()


def test_rerun_has_nothing_to_do_and_one_target_reruns_alone(finished_run):
    dry = snakemake(finished_run, "-n")
    assert dry.returncode == 0 and "Nothing to be done" in dry.stdout + dry.stderr
    (finished_run / "results" / "tables" / "datasets.csv").unlink()
    one = snakemake(finished_run, "-n", "results/tables/datasets.csv")
    assert one.returncode == 0
    assert "dataset_table" in one.stdout and "bodmas_fold " not in one.stdout
    assert snakemake(finished_run, "results/tables/datasets.csv").returncode == 0


def test_report_is_built(finished_run):
    result = snakemake(finished_run, "--report", "results/report.html")
    assert result.returncode == 0, result.stderr[-4000:]
    html = (finished_run / "results" / "report.html").read_text(errors="replace")
    assert "datasets.csv" in html and "meter_memlog.png" in html


def test_bad_config_key_fails_naming_it(tmp_path):
    config = yaml.safe_load(TEST_CONFIG.read_text())
    config["bodmas"]["datasets"]["tiny"]["folds_count"] = 3
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(config))
    result = snakemake(tmp_path, "-n", configfile=bad)
    assert result.returncode != 0
    assert "folds_count" in result.stderr + result.stdout


def test_bad_config_value_fails_naming_it(tmp_path):
    config = yaml.safe_load(TEST_CONFIG.read_text())
    config["device"] = "tpu"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(config))
    result = snakemake(tmp_path, "-n", configfile=bad)
    assert result.returncode != 0
    assert "tpu" in result.stderr + result.stdout


def test_lint_is_clean():
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "--lint"], cwd=REPO, capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_missing_user_dataset_is_listed_before_any_job(tmp_path):
    config = yaml.safe_load(TEST_CONFIG.read_text())
    config["bodmas"]["datasets"]["real"] = {
        "source": "directory",
        "metadata": str(tmp_path / "nowhere" / "bodmas_metadata.csv"),
        "binaries": str(tmp_path / "nowhere" / "binaries"),
    }
    missing = tmp_path / "missing.yaml"
    missing.write_text(yaml.safe_dump(config))
    result = snakemake(tmp_path, "-n", configfile=missing)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "2 dataset path(s) named in the config do not exist" in output
    assert f"bodmas.datasets.real.metadata: {tmp_path / 'nowhere' / 'bodmas_metadata.csv'}" in output


PAPER_CONFIGS = sorted((REPO / "config" / "paper").glob("*.yaml"))


def _dataset_paths(node, found):
    """Every string value under a key that names user data (metadata, binaries, vertices, ...)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in {"metadata", "binaries", "vertices", "edges", "root", "lmdb_root", "image_root"} and isinstance(value, str):
                found.append((node, key))
            else:
                _dataset_paths(value, found)
    elif isinstance(node, list):
        for item in node:
            _dataset_paths(item, found)
    return found


@pytest.mark.parametrize("paper_config", PAPER_CONFIGS, ids=lambda p: p.stem)
def test_paper_config_lists_missing_data_then_plans_with_it(paper_config, tmp_path):
    result = snakemake(tmp_path, "-n", configfile=paper_config)
    assert result.returncode != 0
    assert "dataset path(s) named in the config do not exist" in result.stdout + result.stderr
    config = yaml.safe_load(paper_config.read_text())
    for holder, key in _dataset_paths(config, []):
        placed = tmp_path / "data" / Path(holder[key]).name
        placed.parent.mkdir(parents=True, exist_ok=True)
        placed.touch()
        holder[key] = str(placed)
    present = tmp_path / "present.yaml"
    present.write_text(yaml.safe_dump(config))
    planned = snakemake(tmp_path, "-n", configfile=present)
    assert planned.returncode == 0, planned.stdout[-3000:] + planned.stderr[-3000:]


def test_missing_published_memnet_csv_is_listed_before_any_job(tmp_path):
    config = yaml.safe_load(TEST_CONFIG.read_text())
    config["memnet"]["published"] = {"gpumemnet_mlp": {"path": str(tmp_path / "nowhere.csv"), "family": "mlp"}}
    missing = tmp_path / "missing.yaml"
    missing.write_text(yaml.safe_dump(config))
    result = snakemake(tmp_path, "-n", configfile=missing)
    assert result.returncode != 0
    assert f"memnet.published.gpumemnet_mlp.path: {tmp_path / 'nowhere.csv'}" in result.stdout + result.stderr
