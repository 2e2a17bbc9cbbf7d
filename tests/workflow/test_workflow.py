"""Snakemake end to end on the small test config: the DAG runs, reruns nothing, builds the report
(tests/workflow/test_plans.py: plans, config errors and small targets, without the whole run)."""

import json
import shutil

import pandas as pd
import pytest
from workflow.runs import snakemake

from membench.core.metrics import read_metrics
from membench.core.timing import TIMING_FIELDS

pytestmark = [pytest.mark.workflow, pytest.mark.slow]


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
    kinds = {
        "reproduced",
        "not reproduced",
        "indicative",
        "needs a GPU or data",
        "met",
        "not met",
        "not measured",
    }
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


def test_forcerun_with_the_target_first_runs_only_that_rule(finished_run):
    # The README's form: the target before --forcerun (after it, the target reads as a rule name).
    result = snakemake(finished_run, "-n", "results/tables/meter.csv", "--forcerun", "meter_check")
    assert result.returncode == 0, result.stderr[-2000:]
    planned = result.stdout
    assert "meter_check" in planned and "meter_table" in planned
    assert "hotconv_train" not in planned and "division_train" not in planned
