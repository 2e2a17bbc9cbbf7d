"""Snakemake on the small test config without the whole run: what a dry run plans for the test,
paper and README configs, config errors named in one line, and small targets (a killed sweep
resumes with only its missing points)."""

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from workflow.dry_run import parse_dry_run
from workflow.runs import REPO, TEST_CONFIG, snakemake

pytestmark = [pytest.mark.workflow, pytest.mark.slow]


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
    # What it leaves out runs nothing: no sweep or bench of the schema's own.
    assert not [line for line in planned.stdout.splitlines() if line.startswith("hotconv_sweep_point ")]


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
                "path",
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
