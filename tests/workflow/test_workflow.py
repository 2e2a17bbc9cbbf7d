"""Snakemake end to end on the small test config: the DAG runs, reruns nothing, builds the report."""

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from workflow.dry_run import parse_dry_run

from membench.core.metrics import read_metrics
from membench.core.timing import TIMING_FIELDS

REPO = Path(__file__).resolve().parents[2]
TEST_CONFIG = Path(__file__).with_name("config.yaml")

pytestmark = [pytest.mark.workflow, pytest.mark.slow]


def snakemake(workdir: Path, *args: str, configfile: Path = TEST_CONFIG) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    command = [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(REPO / "Snakefile"),
        "--directory",
        str(workdir),
        "--configfile",
        str(configfile),
        "--cores",
        "2",
        *args,
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
    assert sorted(pd.read_csv(tables / "hotconv_bench.csv")["variant"]) == ["hotconv_eco", "malconv2"]
    appclass = pd.read_csv(tables / "appclass.csv")
    assert set(appclass["variant"]) == {"reference-cpu-t1-float64", "torch-cpu-t1-float64"}
    memory = pd.read_csv(tables / "division_memory.csv")
    assert sorted(memory["variant"]) == ["division", "vanilla"]
    assert len(pd.read_csv(tables / "division_accuracy.csv")) == 2
    robust = pd.read_csv(tables / "robust.csv")
    assert set(robust["variant"]) == {"seq-pgd2-t1", "par-pgd2-p2-k2"}
    assert set(robust["scaling"]) == {"sequential", "strong", "weak"}
    assert robust["robust_accuracy"].between(0, 1).all() and robust["speedup"].notna().all()
    memnet = pd.read_csv(tables / "memnet.csv")
    assert set(memnet["dataset"]) == {"measured_mlp"}
    assert set(memnet["estimator"]) == {
        "gpumemnet_mlp",
        "gpumemnet_transformer",
        "horus",
        "faketensor",
        "memtracker",
        "membench",
    }
    assert memnet["too_small_to_judge"].str.startswith("6 jobs, fewer than 30").all()
    assert (finished_run / "results" / "memnet" / "estimators" / "measured_mlp" / "estimators.json").exists()
    for table in (
        "hotconv",
        "hotconv_sweep",
        "appclass",
        "division_speed",
        "division_accuracy",
        "robust",
        "memnet",
        "meter",
    ):
        columns = set(pd.read_csv(tables / f"{table}.csv", nrows=0).columns)
        assert set(TIMING_FIELDS) <= columns, f"{table}: {set(TIMING_FIELDS) - columns}"
    figures = (
        "bodmas_sizes.png",
        "meter_memlog.png",
        "hotconv_variants.png",
        "hotconv_sweep.png",
        "appclass_runtime.png",
        "appclass_speedup.png",
        "division_memory.png",
        "division_speed.png",
        "robust_scaling.png",
        "robust_staleness.png",
        "memnet_confusion.png",
        "memnet_comparison.png",
        "memnet_tradeoff.png",
    )
    for figure in figures:
        assert (finished_run / "results" / "plots" / figure).read_bytes()[:4] == b"\x89PNG"
    assert (finished_run / "results" / "logs" / "meter_check" / "all.log").exists()
    assert (finished_run / "results" / "benchmarks" / "bodmas_fold" / "tiny" / "1.tsv").exists()


AGGREGATED_TABLES = (
    "hotconv",
    "hotconv_sweep",
    "hotconv_bench",
    "division_memory",
    "division_speed",
    "division_accuracy",
    "appclass",
    "appclass_graphs",
    "memnet",
    "robust",
    "meter",
    "datasets",
)


def test_summary_provenance_and_table_pages_are_written(finished_run):
    report_dir = finished_run / "results" / "report"
    summary = pd.read_csv(report_dir / "summary.csv")
    assert set(summary["system"]) == {"hotconv", "division", "appclass", "memnet", "robust"}
    verdicts = pd.read_csv(report_dir / "verdicts.csv").set_index("figure")
    kinds = {"reproduced", "not reproduced", "indicative", "needs a GPU or data", "met", "not met"}
    assert set(verdicts["verdict"]) <= kinds
    # The tiny configuration's HotConv model is not the paper's: a GPU run of the paper config judges it.
    eco = verdicts.loc["hotconv_eco_vs_malconv2_memory"]
    assert eco["verdict"] == "needs a GPU or data" and "device cpu (paper: cuda)" in eco["note"]
    assert eco["command"].startswith("snakemake --cores all --configfile config/paper/hotconv.yaml")
    # The fast torch implementation prints the reference's bytes: judged on any graph.
    assert verdicts.loc["appclass_exact_output", "verdict"] == "reproduced"
    fragment = (report_dir / "summary_fragment.html").read_text()
    assert "Measured on CPU" in fragment and "published figures:" in fragment
    assert fragment.count("<tr>") > len(summary)
    provenance = json.loads((report_dir / "provenance.json").read_text())
    assert provenance["command"].startswith("snakemake ") and "--configfile" in provenance["command"]
    assert any(line.startswith("hotconv.epochs: ") for line in provenance["config_differences"])
    tables = finished_run / "results" / "tables"
    for table in AGGREGATED_TABLES:
        page = (report_dir / "tables" / f"{table}.html").read_text()
        assert page.count("<tr>") == len(pd.read_csv(tables / f"{table}.csv")) + 1, table
        assert f'download="{table}.parquet"' in page


def test_a_copied_run_is_up_to_date(finished_run, tmp_path_factory):
    # Finished first, whatever the other tests left; then copied with its times (as cp -a and
    # shutil.copytree keep them) beside the original.
    assert snakemake(finished_run).returncode == 0
    copy = tmp_path_factory.mktemp("copied")
    shutil.copytree(finished_run, copy, symlinks=True, dirs_exist_ok=True)
    dry = snakemake(copy, "-n")
    assert dry.returncode == 0 and "Nothing to be done" in dry.stdout + dry.stderr, dry.stdout[-3000:]


def test_jobs_name_the_run_and_the_checkout_by_relative_paths(tmp_path):
    # A job whose inputs or parameters held an absolute path would run again in a copied or moved
    # run (Snakemake compares them with the recorded ones).
    result = snakemake(tmp_path, "-n", "-p")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    roots = (str(tmp_path), str(REPO))
    for job in parse_dry_run(result.stdout):
        words = shlex.split(job["shell"]) if job["shell"] not in ("", "None") else []
        if "--command" in words:  # Snakemake's own command line, recorded as given; not a rerun trigger
            del words[words.index("--command") + 1]
        for path in [*job["input"], *job["output"], *words]:
            assert not path.startswith(roots), f"{job['rule']}: {path}"


def test_rerun_has_nothing_to_do_and_one_target_reruns_alone(finished_run):
    dry = snakemake(finished_run, "-n")
    assert dry.returncode == 0 and "Nothing to be done" in dry.stdout + dry.stderr
    (finished_run / "results" / "tables" / "datasets.csv").unlink()
    one = snakemake(finished_run, "-n", "results/tables/datasets.csv")
    assert one.returncode == 0
    assert "bodmas_table" in one.stdout and "bodmas_fold " not in one.stdout
    assert snakemake(finished_run, "results/tables/datasets.csv").returncode == 0


def test_report_is_built(finished_run):
    result = snakemake(finished_run, "--report", "results/report.html")
    assert result.returncode == 0, result.stderr[-4000:]
    html = (finished_run / "results" / "report.html").read_text(errors="replace")
    assert "datasets.csv" in html and "meter_memlog.png" in html
    # The landing text opens on the summary; every table has a page of its own.
    description = html[html.index("var workflow_desc") :]
    assert description.index("membench-summary") < description.index("membench measures what")
    assert all(f"{table}.html" in html for table in AGGREGATED_TABLES)


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


def test_misspelt_top_level_key_is_one_line_naming_the_closest_key(tmp_path):
    result = snakemake(tmp_path, "-n", "--config", "devcie=cpu")
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "key 'devcie': unknown key 'devcie' (did you mean 'device'?)" in output
    assert len(output.splitlines()) < 10, output


def test_nested_values_can_be_set_on_the_command_line(tmp_path):
    result = snakemake(tmp_path, "-n", "--config", "hotconv={epochs: 3, batch_size: 2}", "seed=7")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    bad = snakemake(tmp_path, "-n", "--config", "hotconv={epochs: three}")
    assert bad.returncode != 0
    assert "key 'hotconv.epochs': 'three' is not of type 'integer'" in bad.stdout + bad.stderr


def test_division_accuracy_variants_choose_the_training_runs(tmp_path):
    plan = snakemake(tmp_path, "-n", "--config", "division={accuracy: {variants: [division]}}")
    assert plan.returncode == 0, plan.stdout[-2000:] + plan.stderr[-2000:]
    trainings = [line for line in plan.stdout.splitlines() if line.startswith("division_train ")]
    assert trainings and trainings[0].split()[-1] == "1", trainings
    bad = snakemake(tmp_path, "-n", "--config", "division={accuracy: {variants: [checkpoint]}}")
    assert bad.returncode != 0
    assert (
        "key 'division.accuracy.variants': checkpoint not in division.variants (vanilla, division)"
        in bad.stdout + bad.stderr
    )


def test_forcerun_with_the_target_first_runs_only_that_rule(finished_run):
    # The README's form: the target before --forcerun (after it, the target reads as a rule name).
    result = snakemake(finished_run, "-n", "results/tables/meter.csv", "--forcerun", "meter_check")
    assert result.returncode == 0, result.stderr[-2000:]
    planned = result.stdout
    assert "meter_check" in planned and "meter_table" in planned
    assert "hotconv_train" not in planned and "division_train" not in planned


def test_lint_is_clean():
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "--lint"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
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


def test_readme_own_data_config_trains_on_the_user_dataset(tmp_path):
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## Using your own data") :]
    config = yaml.safe_load(
        section[
            section.index("```yaml") + len("```yaml") : section.index("```", section.index("```yaml") + 7)
        ]
    )
    planned = snakemake(tmp_path, "-n", configfile=_with_data_in(tmp_path, config))
    assert planned.returncode == 0, planned.stdout[-3000:] + planned.stderr[-3000:]
    trainings = [line for line in planned.stdout.splitlines() if line.startswith("hotconv_train ")]
    assert trainings and int(trainings[0].split()[-1]) == 4


PAPER_CONFIGS = sorted((REPO / "config" / "paper").glob("*.yaml"))


def _dataset_paths(node, found):
    """Every string value under a key that names user data (metadata, binaries, vertices, ...)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in {
                "metadata",
                "binaries",
                "vertices",
                "edges",
                "root",
                "lmdb_root",
                "image_root",
            } and isinstance(value, str):
                found.append((node, key))
            else:
                _dataset_paths(value, found)
    elif isinstance(node, list):
        for item in node:
            _dataset_paths(item, found)
    return found


def _with_data_in(tmp_path: Path, config: dict) -> Path:
    """``config`` written to a file, every user data path it names replaced by an empty file in
    ``tmp_path``."""
    for holder, key in _dataset_paths(config, []):
        placed = tmp_path / "data" / Path(holder[key]).name
        placed.parent.mkdir(parents=True, exist_ok=True)
        placed.touch()
        holder[key] = str(placed)
    present = tmp_path / "present.yaml"
    present.write_text(yaml.safe_dump(config))
    return present


@pytest.mark.parametrize("paper_config", PAPER_CONFIGS, ids=lambda p: p.stem)
def test_paper_config_lists_missing_data_then_plans_with_it(paper_config, tmp_path):
    result = snakemake(tmp_path, "-n", configfile=paper_config)
    assert result.returncode != 0
    assert "dataset path(s) named in the config do not exist" in result.stdout + result.stderr
    planned = snakemake(
        tmp_path, "-n", configfile=_with_data_in(tmp_path, yaml.safe_load(paper_config.read_text()))
    )
    assert planned.returncode == 0, planned.stdout[-3000:] + planned.stderr[-3000:]


def _planned_sweep_points(result: subprocess.CompletedProcess) -> set[str]:
    """Variants whose sweep point a dry run would measure."""
    return {
        line.split("/sweeps/sweep/")[1].split("/")[0]
        for line in result.stdout.splitlines()
        if line.strip().startswith("output:") and "/sweeps/sweep/" in line
    }


def test_sweep_killed_half_way_resumes_with_only_the_missing_points(tmp_path):
    points = [
        f"results/hotconv/sweeps/sweep/{variant}/b2_l2048/metrics.json" for variant in ("malconv", "hotconv")
    ]
    first = snakemake(tmp_path, *points)  # the run stopped after these two points
    assert first.returncode == 0, first.stderr[-4000:]
    written = {p: (tmp_path / p).stat().st_mtime_ns for p in points}
    rest = snakemake(tmp_path, "-n", "results/tables/hotconv_sweep.csv")
    assert rest.returncode == 0, rest.stderr[-4000:]
    assert _planned_sweep_points(rest) == {"malconv2", "hotconv_eco"}
    assert written == {p: (tmp_path / p).stat().st_mtime_ns for p in points}


def test_missing_published_memnet_csv_is_listed_before_any_job(tmp_path):
    config = yaml.safe_load(TEST_CONFIG.read_text())
    config["memnet"]["published"] = {
        "gpumemnet_mlp": {"path": str(tmp_path / "nowhere.csv"), "family": "mlp"}
    }
    missing = tmp_path / "missing.yaml"
    missing.write_text(yaml.safe_dump(config))
    result = snakemake(tmp_path, "-n", configfile=missing)
    assert result.returncode != 0
    assert f"memnet.published.gpumemnet_mlp.path: {tmp_path / 'nowhere.csv'}" in result.stdout + result.stderr
