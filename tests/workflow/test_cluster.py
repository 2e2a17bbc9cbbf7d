"""The workflow as cluster users run it (`snakemake --profile slurm`): the settings they get, and
the sbatch line the Slurm executor plugin writes for every job of a dry run (CPUs as used, GPUs
where used, multi-node jobs as multi-task jobs); local GPU slots; the conda environment; the
workflow as a module of another workflow."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
import yaml
from packaging.requirements import Requirement
from workflow.dry_run import parse_dry_run

REPO = Path(__file__).resolve().parents[2]
TEST_CONFIG = Path(__file__).with_name("config.yaml")
SLURM_PROFILE = REPO / "profiles" / "slurm"
WORKFLOW_PROFILE = REPO / "profiles" / "default"

slurm_plugin = pytest.importorskip("snakemake_executor_plugin_slurm")
from snakemake_executor_plugin_slurm.submit_string import get_submit_command  # noqa: E402
from snakemake_executor_plugin_slurm.utils import set_gres_string  # noqa: E402

pytestmark = [pytest.mark.workflow, pytest.mark.slow]

# Aggregation and plotting (tables and figures from other jobs' results, not from data sets): such
# jobs run on the submit host, not one sbatch each.
REPORT_DIRS = ("results/tables/", "results/plots/", "results/report/")
DATA_DIR = "results/data/"


def _env() -> dict[str, str]:
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def snakemake(workdir: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    command = [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(REPO / "Snakefile"),
        "--directory",
        str(workdir),
        *args,
    ]
    return subprocess.run(
        command, capture_output=True, text=True, env=env or _env(), timeout=600, cwd=workdir
    )


class _Resources(dict):
    """The part of a job's resources the plugin reads (``get`` and attribute access)."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class _Job:
    def __init__(self, listed: dict):
        self.threads = listed["threads"]
        self.resources = _Resources({k: v for k, v in listed["resources"].items() if v != "<TBD>"})


def sbatch_line(listed: dict) -> str:
    """What snakemake-executor-plugin-slurm submits for a job of the dry-run listing (its submit
    command, then its GPU options, as the executor puts them together)."""
    params = {
        "run_uuid": "run",
        "slurm_logfile": "job.log",
        "comment_str": f"rule_{listed['rule']}",
        "account": "",
        "partition": "",
        "workdir": ".",
    }
    job = _Job(listed)
    return get_submit_command(job, params) + set_gres_string(job)


# The dry run lists local jobs like any other; the workflow knows which rules are local.
LOCAL_RULES_SCRIPT = """
import json, sys
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings

snakefile, configfile, workdir = map(Path, sys.argv[1:])
with SnakemakeApi(OutputSettings()) as api:
    workflow_api = api.workflow(resource_settings=ResourceSettings(cores=1), snakefile=snakefile,
                                workdir=workdir, config_settings=ConfigSettings(configfiles=[configfile]))
    print(json.dumps(sorted(workflow_api._workflow._localrules)))
"""


def local_rules(workdir: Path) -> set[str]:
    result = subprocess.run(
        [sys.executable, "-c", LOCAL_RULES_SCRIPT, str(REPO / "Snakefile"), str(TEST_CONFIG), str(workdir)],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return set(json.loads(result.stdout.splitlines()[-1]))


def uses_gpu(listed: dict) -> bool:
    """A job that runs on a GPU when there is one: its command names a GPU device or a CUDA build."""
    return bool(re.search(r"--device (auto|cuda)|--cuda (auto|yes)", listed["shell"]))


def cluster_dry_run(workdir: Path, device: str = "auto", **changes: dict) -> list[dict]:
    """Jobs of `snakemake -n --profile slurm` on the test config with ``device`` and ``changes``
    (top-level config sections updated key by key)."""
    config = yaml.safe_load(TEST_CONFIG.read_text())
    config["device"] = device
    for section, values in changes.items():
        for key, value in values.items():
            config[section][key] = (
                {**config[section].get(key, {}), **value} if isinstance(value, dict) else value
            )
    configfile = workdir / "cluster.yaml"
    configfile.write_text(yaml.safe_dump(config))
    # A dry run caps threads at --cores (1 unless given); a cluster run caps them at nothing.
    result = snakemake(
        workdir, "-n", "--cores", "1024", "--profile", str(SLURM_PROFILE), "--configfile", str(configfile)
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    jobs = parse_dry_run(result.stdout)
    assert jobs, result.stdout[-3000:]
    local = local_rules(workdir)
    for job in jobs:
        job["local"] = job["rule"] in local
    return jobs


@pytest.fixture(scope="module")
def cluster_jobs(tmp_path_factory):
    return cluster_dry_run(tmp_path_factory.mktemp("cluster"))


# -- profiles -------------------------------------------------------------------------------------


def effective_args(*argv: str):
    from snakemake.cli import parse_args

    _, args = parse_args(["--snakefile", str(REPO / "Snakefile"), *argv])
    return args


def test_cluster_run_gets_the_cluster_profiles_settings():
    args = effective_args("--profile", str(SLURM_PROFILE))
    profile = yaml.safe_load((SLURM_PROFILE / "config.yaml").read_text())
    for key, value in profile.items():
        effective = getattr(args, key.replace("-", "_"))
        if key == "default-resources":
            assert {k: effective[k].raw for k in value} == value
        elif key == "max-jobs-per-timespan":
            assert f"{effective.max_jobs}/{effective.timespan:g}s" == value
        else:
            assert str(effective) == str(value), f"{key}: profile says {value!r}, the run gets {effective!r}"
    assert args.cores is None, "the workflow profile must not give a cluster run the login node's cores"


def test_workflow_profile_sets_nothing_the_cluster_profile_does_not_share():
    shared = yaml.safe_load((WORKFLOW_PROFILE / "config.yaml").read_text())
    cluster = yaml.safe_load((SLURM_PROFILE / "config.yaml").read_text())
    for key, value in shared.items():
        assert cluster.get(key) == value, (
            f"profiles/default sets {key}: {value!r}, which would override the cluster's"
        )


def readme_profile_install_line() -> str:
    readme = (REPO / "README.md").read_text()
    lines = [
        line for line in readme.splitlines() if "~/.config/snakemake" in line and line.startswith("mkdir")
    ]
    assert len(lines) == 1, "README gives one command that installs the profile"
    return lines[0]


def test_readme_install_makes_profile_slurm_resolve(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    subprocess.run(
        ["bash", "-euo", "pipefail", "-c", readme_profile_install_line()], cwd=REPO, check=True, timeout=60
    )
    assert (home / ".config" / "snakemake" / "slurm" / "config.yaml").read_text() == (
        SLURM_PROFILE / "config.yaml"
    ).read_text()
    monkeypatch.chdir(tmp_path)
    args = effective_args("--profile", "slurm")
    assert args.executor == "slurm" and str(args.latency_wait) == "60"
    # Installing again keeps the user's edited copy.
    edited = home / ".config" / "snakemake" / "slurm" / "config.yaml"
    edited.write_text(edited.read_text() + "# site settings\n")
    subprocess.run(
        ["bash", "-euo", "pipefail", "-c", readme_profile_install_line()], cwd=REPO, check=True, timeout=60
    )
    assert edited.read_text().endswith("# site settings\n")


def test_profile_never_pins_a_gpu_model_for_every_job():
    profile = yaml.safe_load((SLURM_PROFILE / "config.yaml").read_text())
    assert "gpu_model" not in profile.get("default-resources", {})
    assert "cpus_per_task" not in profile.get("default-resources", {})


def test_plugin_version_is_one_that_works():
    from importlib.metadata import version

    from packaging.version import Version

    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    (pin,) = [Requirement(r) for r in pyproject["project"]["optional-dependencies"]["slurm"]]
    assert pin.name == "snakemake-executor-plugin-slurm"
    assert not pin.specifier.contains("2.7.0") and pin.specifier.contains("2.7.1")
    assert pin.specifier.contains(Version(version("snakemake-executor-plugin-slurm")))


# -- what each job asks Slurm for -------------------------------------------------------------------


def test_every_submitted_job_requests_the_cpus_it_uses(cluster_jobs):
    submitted = [job for job in cluster_jobs if not job["local"]]
    assert len(submitted) >= 10
    for job in submitted:
        line = sbatch_line(job)
        assert f"--cpus-per-task={job['threads']}" in line.split(), f"{job['rule']}: {line}"
        assert "--ntasks-per-gpu" not in line, f"{job['rule']}: {line}"


def test_gpu_jobs_request_gpus_and_others_none(cluster_jobs):
    gpu_rules = set()
    for job in cluster_jobs:
        line = sbatch_line(job)
        asks = "--gpus=" in line or "--gres=gpu" in line
        assert asks == uses_gpu(job), f"{job['rule']} (command {job['shell'][:80]}...): {line}"
        if asks:
            assert not job["local"], f"{job['rule']} runs on a GPU but on the submit host"
            gpu_rules.add(job["rule"])
    assert {"meter_check", "division_build", "division_train", "hotconv_train"} <= gpu_rules


def test_cpu_config_requests_no_gpu(tmp_path):
    for job in cluster_dry_run(tmp_path, device="cpu"):
        assert "gpu" not in sbatch_line(job), job["rule"]


def test_tables_and_figures_run_on_the_submit_host(cluster_jobs):
    report_jobs = [
        job
        for job in cluster_jobs
        if job["shell"] not in ("", "None")
        and job["input"]
        and all(path.startswith("results/") and not path.startswith(DATA_DIR) for path in job["input"])
        and all(path.startswith(REPORT_DIRS) for path in job["output"])
    ]
    assert len(report_jobs) >= 5
    for job in report_jobs:
        assert job["local"], f"{job['rule']} only aggregates or plots: make it a localrule"


def test_timing_jobs_claim_their_threads_on_a_cluster(cluster_jobs):
    # The test config's variants run one thread; a local run would claim every core for them.
    bench = [job for job in cluster_jobs if job["rule"] in ("appclass_reference", "appclass_bench")]
    assert bench and all(job["threads"] == 1 for job in bench)
    assert any(job["threads"] > 1 for job in cluster_jobs), "threads are not capped in the dry run"


def _division_train(jobs: list[dict]) -> list[dict]:
    found = [job for job in jobs if job["rule"] == "division_train"]
    assert found
    return found


def test_multi_node_training_is_a_multi_task_job(tmp_path):
    jobs = cluster_dry_run(tmp_path, division={"accuracy": {"gpus": 2, "nodes": 3}})
    for job in _division_train(jobs):
        line = sbatch_line(job).split()
        assert {"--nodes=3", "--ntasks=3", "--gres=gpu:2", f"--cpus-per-task={job['threads']}"} <= set(line)
        assert not any(word.startswith(("--gpus", "--ntasks-per-gpu")) for word in line)
        # With `mpi` set the executor runs the command in the batch step: its own srun starts one
        # torchrun per node, each with the job's CPUs.
        assert job["resources"]["mpi"] == "srun"
        words = shlex.split(job["shell"])
        assert words[: words.index("torchrun")] == [
            "srun",
            "--nodes",
            "3",
            "--ntasks",
            "3",
            "--ntasks-per-node",
            "1",
            "--cpus-per-task",
            str(job["threads"]),
        ]
        assert words[words.index("--nnodes") + 1] == "3" and words[words.index("--nproc-per-node") + 1] == "2"


def test_one_node_multi_gpu_training_asks_for_its_gpus(tmp_path):
    jobs = cluster_dry_run(tmp_path, division={"accuracy": {"gpus": 2}})
    for job in _division_train(jobs):
        line = sbatch_line(job).split()
        assert "--gpus=2" in line
        assert "mpi" not in job["resources"]
        assert job["shell"].startswith(
            "torchrun --standalone --nproc-per-node 2 -m membench.cli division train"
        )


# -- local runs ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("visible", "extra", "slots"), [("", [], 1), ("0,1", [], 2), ("0,1", ["--resources", "gpu=5"], 5)]
)
def test_local_run_gives_gpu_jobs_one_slot_per_gpu(tmp_path, visible, extra, slots):
    result = snakemake(
        tmp_path,
        "results/data/bodmas/tiny/metadata.csv",
        "--cores",
        "1",
        *extra,
        "--configfile",
        str(TEST_CONFIG),
        env={**_env(), "CUDA_VISIBLE_DEVICES": visible},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    provided = re.search(r"Provided resources: (.*)", result.stdout + result.stderr)
    assert provided and re.search(rf"\bgpu\D*{slots}\b", provided.group(1)), provided


# -- conda environment -----------------------------------------------------------------------------------


def test_conda_env_matches_pyproject_and_installs_from_the_checkout():
    env = yaml.safe_load((REPO / "envs" / "membench.yaml").read_text())
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    (pip_section,) = [d["pip"] for d in env["dependencies"] if isinstance(d, dict)]
    assert {"pip", "ninja", "cxx-compiler"} <= {re.split(r"[=<>]", d)[0] for d in conda}
    pinned = {Requirement(line).name.lower(): Requirement(line) for line in pip_section}
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    wanted = {
        Requirement(line).name.lower(): Requirement(line) for line in pyproject["project"]["dependencies"]
    }
    assert pinned.keys() == wanted.keys()
    for name, requirement in wanted.items():
        if name == "torch":
            # the version CI tests with (README's install command), within pyproject's range
            (version,) = [s.version for s in pinned[name].specifier if s.operator == "=="]
            assert (
                requirement.specifier.contains(version)
                and f"torch=={version}" in (REPO / "README.md").read_text()
            )
        else:
            assert pinned[name].specifier == requirement.specifier, name
    # No path in the pip section: Snakemake builds the environment from a copy under .snakemake/.
    deploy = REPO / "envs" / "membench.post-deploy.sh"
    assert os.access(deploy, os.X_OK)
    assert re.search(
        r'pip install --no-deps -e "\$\(cd "\$\(dirname "\$0"\)/\.\." && pwd\)"', deploy.read_text()
    )
    assert (deploy.parent.parent / "pyproject.toml").is_file()


# -- module of another workflow ----------------------------------------------------------------------------


def test_workflow_runs_as_a_module_of_another(tmp_path):
    outer = tmp_path / "outer"
    outer.mkdir()
    (outer / "membench.yaml").write_text(TEST_CONFIG.read_text())
    readme = (REPO / "README.md").read_text()
    snippet = re.search(r"```python\n(# Snakefile of your workflow.*?)```", readme, re.S).group(1)
    (outer / "Snakefile").write_text(snippet.replace("path/to/membench", str(REPO)))
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--cores", "2"],
        cwd=outer,
        capture_output=True,
        text=True,
        env=_env(),
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    jobs = parse_dry_run(result.stdout)
    rules = {job["rule"] for job in jobs}
    assert {"membench_meter_check", "membench_division_build", "membench_hotconv_table"} <= rules
    (build,) = [job for job in jobs if job["rule"] == "membench_division_build"]
    assert all(
        Path(outer, path.removesuffix(" (cached)")).resolve().is_relative_to(REPO) for path in build["input"]
    )


# -- formatting ---------------------------------------------------------------------------------------------


def test_rules_are_snakefmt_clean():
    result = subprocess.run(
        [sys.executable, "-m", "snakefmt", "--check", "rules", "Snakefile"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_robust_runs_across_nodes_are_multi_task_jobs_of_one_srun_task_per_rank(tmp_path):
    jobs = cluster_dry_run(tmp_path, robust={"transport": "distributed", "nodes": 2, "producers": [1, 2]})
    spread = [job for job in jobs if job["rule"] == "robust_train_nodes"]
    assert {re.search(r"--producers (\d+)", job["shell"]).group(1) for job in spread} == {"1", "2"}
    for job in spread:
        ranks = 1 + int(re.search(r"--producers (\d+)", job["shell"]).group(1))
        line = sbatch_line(job).split()
        # One CPU and, on GPUs, one GPU per rank; Slurm puts up to ceil(ranks / 2) ranks on a node.
        assert {"--nodes=2", f"--ntasks={ranks}", "--cpus-per-task=1", f"--gres=gpu:{-(-ranks // 2)}"} <= set(
            line
        )
        assert not any(word.startswith(("--gpus", "--ntasks-per-gpu")) for word in line)
        assert job["resources"]["mpi"] == "srun"
        words = shlex.split(job["shell"])
        assert words[:9] == [
            "MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n 1)",
            "MASTER_PORT=29500",
            "srun",
            "--nodes",
            "2",
            "--ntasks",
            str(ranks),
            "--cpus-per-task",
            "1",
        ]
        assert words[9:12] == ["membench", "robust", "train"]
        assert words[words.index("--transport") + 1] == "distributed"
    for job in jobs:
        if job["rule"] == "robust_train":
            assert "--mode sequential" in job["shell"] and "--nodes" not in sbatch_line(job)
