"""One vocabulary (docs/DEVELOPING.md, "Vocabulary"): each config key the workflow turns into an
option of a ``membench`` command is that option spelled the same way, the rules pass the key's value
there, and an option name means the same kind of value in every command that has it."""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from command_options import CONFIG_KEYS, SUBCOMMANDS, action, config_values, option_of, schema_nodes
from workflow.dry_run import parse_dry_run

from membench.core import options
from membench.core.options import Number

# The GPU acceptance machine runs the test suite without Snakemake (.ci/gpu-acceptance).
validate = pytest.importorskip("snakemake.utils").validate

pytestmark = [pytest.mark.workflow, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
# Shell words that end a command's arguments.
_SHELL_ENDS = {">", ">>", "2>&1", "&&", "||", "|", ";"}


# The ranges membench.core.options shares between commands (SEED, STEPS, ...): each names a quantity.
_SHARED_RANGES = {id(value): name for name, value in vars(options).items() if isinstance(value, Number)}


def _kind(option: argparse.Action) -> str:
    """What an option takes: a flag, or per field a number (its shared range, if it has one), text
    or a path of a role."""
    if option.nargs == 0 or isinstance(option, argparse.BooleanOptionalAction):
        return "flag"
    kinds = []
    for value_type in getattr(option, "field_types", (option.type,)):
        if isinstance(value_type, Number):
            kinds.append(_SHARED_RANGES.get(id(value_type), "integer" if value_type.integral else "real"))
        else:
            kinds.append("text" if value_type in (None, str) else value_type.__name__)
    return " ".join(kinds)


def _config(tmp_path: Path) -> dict:
    """The default config, with the values it leaves unset (or to the defaults, which pass nothing)
    set, so that the rules pass every declared key to its command; user data as empty stand-ins."""
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    data = tmp_path / "data"
    for name in ("cifar", "folder", "mnist"):
        (data / name).mkdir(parents=True)
    (data / "published.csv").write_text("")
    config["bodmas"]["datasets"]["synthetic"]["time_split_date"] = "2020-01-01"
    config["images"]["datasets"] |= {
        "cifar": {"source": "cifar10", "root": str(data / "cifar")},
        "mine": {"source": "folder", "root": str(data / "folder")},
    }
    config["division"]["max_batch"] |= {"enabled": True}
    # Off by default (the paper model's bench points measure the step; eps 0.2 is one run more).
    config["hotconv"]["sweep"] |= {"variants": ["malconv2", "hotconv_eco"]}
    config["robust"] |= {"hard_eps": [0.2]}
    for section in ("memory", "speed", "max_batch", "accuracy"):
        config["division"][section] |= {"width": 8, "stem": "cifar"}
    config["robust"] |= {
        "dataset": "mnist",
        "root": str(data / "mnist"),
        "train_limit": 512,
        "test_limit": 128,
        "queue_size": 3,
        "eval": {**config["robust"]["eval"], "samples": 100, "alpha": 0.02},
    }
    config["memnet"]["published"] = {
        "pub": {
            "path": str(data / "published.csv"),
            "family": "mlp",
            "bins": {"start_mib": 0, "width_mib": 2, "count": 4},
            "device_name": "NVIDIA H100",
        }
    }
    return config


def _invocations(shell: str):
    """(command, arguments) of each ``membench`` command in a job's shell line."""
    words = [word.lstrip("(").rstrip(")") for word in shlex.split(shell)]
    for i, word in enumerate(words):
        if word not in ("membench", "membench.cli"):
            continue
        command = " ".join(words[i + 1 : i + 3])
        command = command if command in SUBCOMMANDS else words[i + 1]
        rest = words[i + 1 + len(command.split()) :]
        yield command, list(itertools.takewhile(lambda w: w not in _SHELL_ENDS, rest))


Parsed = dict[str, list[tuple[list[str], argparse.Namespace]]]


def _parsed(tmp_path: Path, config: dict) -> tuple[Parsed, list[str]]:
    """The dry run's membench commands, each parsed by its own parser: command -> [(arguments,
    namespace)], and a problem for each command line its parser refuses."""
    configfile = tmp_path / "config.yaml"
    configfile.write_text(yaml.safe_dump(config))
    targets = [
        "all",
        "results/tables/hotconv_bench.csv",
        "results/data/images/cifar/lmdb/train",
        "results/data/images/mine/lmdb/train",
    ]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    snakemake = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile")]
    result = subprocess.run(
        [
            *snakemake,
            "--directory",
            str(tmp_path),
            "-n",
            "--cores",
            "2",
            f"--configfile={configfile}",
            *targets,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    commands: Parsed = {}
    problems = []
    for job in parse_dry_run(result.stdout):
        for command, arguments in _invocations(job["shell"]):
            error = io.StringIO()
            try:
                with contextlib.redirect_stderr(error):
                    namespace = SUBCOMMANDS[command].parse_args(arguments)
            except SystemExit:
                problems.append(f"rule {job['rule']}: {error.getvalue().strip().splitlines()[-1]}")
                continue
            commands.setdefault(command, []).append((arguments, namespace))
    return commands, problems


def _carried(option: argparse.Action, field: int | None, namespace: argparse.Namespace) -> list:
    value = getattr(namespace, option.dest)
    if field is None:
        return value if isinstance(value, list) else [value]
    return [entry[field] for entry in value] if value and isinstance(value[0], list) else [value[field]]


def _same(passed, value) -> bool:
    """Whether a parsed option value is the config's value (475 and 475.0 are)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return isinstance(passed, (int, float)) and not isinstance(passed, bool) and passed == value
    return str(passed) == str(value)


def test_config_keys_options_and_rules_speak_one_vocabulary(tmp_path):
    problems = []
    config = _config(tmp_path)
    validate(config, str(REPO / "config" / "schema.yaml"))  # the schema's defaults, as the workflow has them
    commands, refused = _parsed(tmp_path, config)
    problems += refused
    for command, keys in CONFIG_KEYS.items():
        for key in keys:
            try:
                schema_nodes(key)
            except KeyError:
                problems.append(f"{key} (membench {command}): not a key of config/schema.yaml")
                continue
            options = option_of(key, command)
            if not options:
                problems.append(f"{key}: membench {command} has no option spelled like it")
                continue
            values = [value for value in config_values(config, key) if value is not None]
            for name, field in options:
                option = action(command, name)
                spellings = set(option.option_strings)
                carried = [
                    value
                    for arguments, namespace in commands.get(command, [])
                    if spellings & set(arguments)
                    for value in _carried(option, field, namespace)
                ]
                if not values:
                    problems.append(f"{key}: the test's config sets no value, so the rules' use is unchecked")
                elif not any(_same(passed, value) for passed in carried for value in values):
                    problems.append(f"{key}: no membench {command} job of the dry run passes it as {name}")
    kinds: dict[str, dict[str, list[str]]] = {}
    for command, parser in SUBCOMMANDS.items():
        for option in parser._actions:
            for name in option.option_strings:
                kinds.setdefault(name, {}).setdefault(_kind(option), []).append(command)
    for name, by_kind in kinds.items():
        if len(by_kind) > 1:
            uses = "; ".join(f"{kind} in {', '.join(users)}" for kind, users in by_kind.items())
            problems.append(f"{name} takes different kinds of value: {uses}")
    assert not problems, "\n".join(problems)
