"""Config values reach the rules' shell commands quoted: user data paths (and the checkout's path)
holding a space, quotes, `$`, `;`, backticks and command substitutions are passed to membench as
one argument each, and nothing in them runs."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import lmdb
import pandas as pd
import pytest
import yaml
from workflow.dry_run import parse_dry_run

REPO = Path(__file__).resolve().parents[2]
TEST_CONFIG = Path(__file__).with_name("config.yaml")
DEFAULT_CONFIG = REPO / "config" / "config.yaml"
CONFIGS = [DEFAULT_CONFIG, *sorted((REPO / "config" / "paper").glob("*.yaml"))]
# The start of every hostile name: an argument holding it holds (part of) one.
MARKER = "my data"

pytestmark = [pytest.mark.workflow, pytest.mark.slow]


def hostile_name(sentinel: Path) -> str:
    """A name the shell would split, expand and run (creating ``sentinel``) if it were unquoted."""
    return f"{MARKER} 'single' \"double\" $HOME; `touch {sentinel}` $(touch {sentinel}) end"


def _env() -> dict[str, str]:
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def snakemake(checkout: Path, workdir: Path, configfile: Path, *args: str) -> subprocess.CompletedProcess:
    command = [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(checkout / "Snakefile"),
        "--directory",
        str(workdir),
        "--configfile",
        str(configfile),
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, env=_env(), timeout=600, cwd=workdir)


def hostile_checkout(data: Path) -> Path:
    """This checkout under ``data``: the paths of its files (config, schema, kernels) are hostile too."""
    checkout = data / "membench"
    checkout.symlink_to(REPO, target_is_directory=True)
    return checkout


# -- a run on data at such paths ----------------------------------------------------------------------


def test_workflow_runs_on_data_at_paths_the_shell_would_break(tmp_path):
    sentinel = tmp_path / "sentinel"
    data = tmp_path / hostile_name(sentinel)
    data.mkdir(parents=True)
    membench = [sys.executable, "-m", "membench.cli"]
    makers = [
        [
            *membench,
            "bodmas",
            "synthetic",
            "--outdir",
            str(data / "bodmas"),
            "--samples",
            "20",
            "--families",
            "2",
            "--max-bytes",
            "4096",
            "--seed",
            "0",
        ],
        [
            *membench,
            "images",
            "digits",
            "--outdir",
            str(data / "images"),
            "--image-size",
            "16",
            "--min-digit-size",
            "10",
            "--max-digit-size",
            "14",
            "--images-per-class",
            "4",
            "--seed",
            "0",
        ],
        [
            *membench,
            "appclass",
            "generate-rmat",
            "--vertices",
            str(data / "g.Vertex.csv"),
            "--edges",
            str(data / "g.Edges.csv"),
            "--scale",
            "5",
            "--edge-factor",
            "4",
            "--seed",
            "0",
        ],
    ]
    for maker in [
        subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for argv in makers
    ]:
        _, errors = maker.communicate(timeout=120)
        assert maker.returncode == 0, errors
    config = yaml.safe_load(TEST_CONFIG.read_text())
    config["bodmas"]["datasets"] = {
        "own": {
            "source": "directory",
            "metadata": str(data / "bodmas" / "metadata.csv"),
            "binaries": str(data / "bodmas" / "binaries"),
            "folds": 2,
        }
    }
    config["hotconv"]["datasets"] = []
    config["images"]["datasets"]["own"] = {"source": "folder", "root": str(data / "images")}
    config["appclass"]["graphs"] = {
        "own": {"source": "files", "vertices": str(data / "g.Vertex.csv"), "edges": str(data / "g.Edges.csv")}
    }
    config["appclass"]["benchmark_pairs"] = ["own/induced4"]
    configfile = data / "config.yaml"
    configfile.write_text(yaml.safe_dump(config))
    workdir = data / "work"
    workdir.mkdir()
    checkout = hostile_checkout(data)

    result = snakemake(
        checkout,
        workdir,
        configfile,
        "--cores",
        "2",
        "results/tables/datasets.csv",
        "results/data/images/own/lmdb/train",
        "results/tables/appclass_graphs.csv",
        "results/report/provenance.json",
    )

    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert not sentinel.exists(), "a path in the config ran a command"
    datasets = pd.read_csv(workdir / "results" / "tables" / "datasets.csv")
    assert set(datasets["dataset"]) == {"own"} and set(datasets["fold"]) == {0, 1, 2}
    assert datasets.groupby("fold")["samples"].sum().eq(20).all()
    with (
        lmdb.open(
            str(workdir / "results" / "data" / "images" / "own" / "lmdb" / "train"), readonly=True, lock=False
        ) as images,
        images.begin() as records,
    ):
        stored = json.loads(records.get(b"__len__"))
    assert stored == sum(path.is_file() for path in (data / "images" / "train").rglob("*")) > 0
    graphs = pd.read_csv(workdir / "results" / "tables" / "appclass_graphs.csv").set_index("role")
    assert set(graphs["graph"]) == {"own/induced4"} and graphs.loc["data", "num_nodes"] == 33
    provenance = json.loads((workdir / "results" / "report" / "provenance.json").read_text())
    assert re.match(r"[0-9a-f]{40}\b", provenance["commit"]), "the checkout's path did not reach git"
    assert str(configfile) in shlex.split(provenance["command"])


# -- every command of the default and paper configs, run by bash with stand-ins for the programs ---------

# Stand-ins for the programs the commands start: each records its name and arguments, NUL-separated.
RECORDER = '#!/bin/sh\nprintf \'%s\\0\' "${0##*/}" "$@" >> "$ARGV_LOG"\n'
LAUNCHED = ("membench", "torchrun", "srun")
# Config keys of user data (config/schema.yaml): files, and directories.
FILE_KEYS = {"metadata", "vertices", "edges", "path"}
DIRECTORY_KEYS = {"binaries", "root"}


def _place(data: Path, key: str, value: str) -> str:
    """An empty file or directory under ``data`` in place of the config's ``value``."""
    placed = data / f"{len(list(data.iterdir()))}-{Path(value).name}"
    if key in FILE_KEYS:
        placed.touch()
    else:
        placed.mkdir()
    return str(placed)


def place_user_data(node, data: Path, placed: list[str]) -> None:
    """Every user data path under ``node`` replaced by an empty file or directory under ``data``."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
    for key, value in list(items):
        if key in FILE_KEYS | DIRECTORY_KEYS and isinstance(value, str):
            node[key] = _place(data, key, value)
            placed.append(node[key])
        elif key == "search_dirs":
            node[key] = [_place(data, key, item) for item in value]
            placed.extend(node[key])
        else:
            place_user_data(value, data, placed)


def with_every_kind_of_user_data(config: dict) -> tuple[dict, list[str]]:
    """The default config with data of each user source besides its own, multi-node training, the
    largest-batch search and the HotConv sweep; and the targets that add the jobs the default target
    leaves out."""
    config["bodmas"]["datasets"]["own"] = {
        "source": "directory",
        "metadata": "bodmas_metadata.csv",
        "binaries": "binaries",
    }
    config["hotconv"]["datasets"].append("own")
    config["appclass"]["graphs"]["own"] = {
        "source": "files",
        "vertices": "g.Vertex.csv",
        "edges": "g.Edges.csv",
    }
    config["appclass"]["patterns"]["own"] = {
        "source": "files",
        "vertices": "p.Vertex.csv",
        "edges": "p.Edges.csv",
    }
    config["appclass"]["benchmark_pairs"].append("own/own")
    config["images"]["datasets"]["own"] = {"source": "folder", "root": "images"}
    config["images"]["datasets"]["cifar"] = {"source": "cifar10", "root": "cifar-10-batches-py"}
    config["memnet"]["published"] = {"own": {"path": "gpumemnet.csv", "family": "mlp"}}
    config["robust"] |= {"dataset": "mnist", "root": "mnist", "transport": "distributed", "nodes": 2}
    config["division"]["accuracy"] |= {"gpus": 2, "nodes": 3}
    config["division"]["max_batch"]["enabled"] = True
    config["hotconv"]["sweep"]["variants"] = ["malconv", "hotconv"]  # off in the default config
    return config, [
        "all",
        "hotconv_bench",
        "results/data/images/own/lmdb/train",
        "results/data/images/cifar/lmdb/train",
    ]


def workflow_rules() -> set[str]:
    return {
        name
        for path in [REPO / "Snakefile", *(REPO / "rules").glob("*.smk")]
        for name in re.findall(r"^rule (\w+):", path.read_text(), re.M)
    }


def run_with_stand_ins(job: dict, scratch: Path, stand_ins: Path) -> list[str]:
    """The arguments the programs of ``job``'s shell command get when bash runs it as Snakemake does
    (``set -euo pipefail`` first)."""
    for log in job["log"]:
        (scratch / log).parent.mkdir(parents=True, exist_ok=True)
    argv_log = scratch / "argv"
    argv_log.unlink(missing_ok=True)
    env = {
        **os.environ,
        "PATH": f"{stand_ins}{os.pathsep}{os.environ['PATH']}",
        "ARGV_LOG": str(argv_log),
        "SLURM_JOB_ID": "1",
        "SLURM_JOB_NODELIST": "node[1-3]",
    }
    result = subprocess.run(
        ["bash", "-c", f"set -euo pipefail; {job['shell']}"],
        cwd=scratch,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, f"{job['rule']}: {job['shell']}\n{result.stderr}"
    return argv_log.read_text().split("\0")[:-1]


@pytest.mark.parametrize("base_config", CONFIGS, ids=lambda path: path.stem)
def test_every_command_passes_paths_as_whole_arguments(base_config, tmp_path):
    sentinel = tmp_path / "sentinel"
    name = hostile_name(sentinel)
    data = tmp_path / name
    data.mkdir(parents=True)
    config, targets = yaml.safe_load(base_config.read_text()), []
    if base_config == DEFAULT_CONFIG:
        config, targets = with_every_kind_of_user_data(config)
    placed: list[str] = []
    place_user_data(config, data, placed)
    configfile = tmp_path / "config.yaml"
    configfile.write_text(yaml.safe_dump(config))
    workdir = tmp_path / "work"
    workdir.mkdir()
    result = snakemake(hostile_checkout(data), workdir, configfile, "-n", "--cores", "1024", *targets)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    jobs = [job for job in parse_dry_run(result.stdout) if job["shell"] not in ("", "None")]
    assert jobs and placed
    if targets:
        assert {job["rule"] for job in jobs} == workflow_rules() - {"all"}

    stand_ins = tmp_path / "bin"
    stand_ins.mkdir()
    for program in LAUNCHED:
        (stand_ins / program).write_text(RECORDER)
    (stand_ins / "scontrol").write_text("#!/bin/sh\necho node1\n")
    for program in stand_ins.iterdir():
        program.chmod(0o755)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    arguments = set()
    # The provenance record's arguments hold the name escaped: in JSON (the config) and quoted for
    # the shell (Snakemake's command line).
    whole = (name, json.dumps(name)[1:-1], shlex.quote(name)[1:-1])
    for job in jobs:
        for argument in run_with_stand_ins(job, scratch, stand_ins):
            if MARKER in argument:
                assert any(form in argument for form in whole), (
                    f"{job['rule']} split or expanded {argument!r}"
                )
            arguments.add(argument)
    assert not sentinel.exists(), "a path in the config ran a command"
    assert set(placed) <= arguments
