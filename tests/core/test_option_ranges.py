"""Every numeric option of every subcommand has a range, and the config schema gives each key that
feeds an option (through the rules' ``cli_options`` and friends) the same range, so a value the
schema accepts is one the command accepts, and the other way round."""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

import pytest

from membench import cli
from membench.core.config import load_schema
from membench.core.options import Number

SCHEMA = load_schema(Path(__file__).resolve().parents[2] / "config" / "schema.yaml")
FAMILIES = ("mlp", "cnn", "transformer")


def _subcommands():
    for group, (module_name, _) in cli.GROUPS.items():
        parser = importlib.import_module(module_name).build_parser(f"membench {group}")
        steps = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not steps:
            yield group, parser
            continue
        for step, subparser in steps[0].choices.items():
            yield f"{group} {step}", subparser


SUBCOMMANDS = dict(_subcommands())


def _action(command: str, option: str) -> argparse.Action:
    return next(a for a in SUBCOMMANDS[command]._actions if option in a.option_strings)


def _commands_with(option: str) -> list[str]:
    return [command for command, parser in SUBCOMMANDS.items() if any(option in a.option_strings for a in parser._actions)]


# Config key (``*``: any name, ``[]``: each item) -> the options it feeds, as (command, option,
# field of a multi-field option or None). Read from membench.workflow_support and the rules files.
FEEDS: dict[str, list[tuple[str, str, int | None]]] = {
    "seed": [(c, "--seed", None) for c in _commands_with("--seed")],
    "meter.sample_interval_s": [(c, "--sample-interval-s", None) for c in _commands_with("--sample-interval-s")],
    "meter.grid_intensity_g_per_kwh": [(c, "--grid-intensity-g-per-kwh", None)
                                       for c in _commands_with("--grid-intensity-g-per-kwh")],
    "meter_check.batch_size": [("meter check", "--batch-size", None)],
    "meter_check.train_steps": [("meter check", "--train-steps", None)],
    "meter_check.repeats": [("meter check", "--repeats", None)],
    **{f"bodmas.datasets.*.{key}": [("bodmas synthetic", f"--{key.replace('_', '-')}", None)]
       for key in ("samples", "families", "benign_fraction", "min_bytes", "median_bytes", "max_bytes", "gzip_fraction")},
    "bodmas.datasets.*.max_files": [("bodmas elf", "--max-files", None)],
    "bodmas.datasets.*.max_file_bytes": [("bodmas elf", "--max-file-bytes", None)],
    "bodmas.datasets.*.folds": [("bodmas fold", "--folds", None)],
    "bodmas.datasets.*.top_families": [("bodmas fold", "--top-families", None), ("bodmas classes", "--top-families", None)],
    "bodmas.datasets.*.val_fraction": [("bodmas fold", "--val-fraction", None)],
    "bodmas.datasets.*.time_split_quantile": [("bodmas fold", "--time-split-quantile", None)],
    "appclass.node_feature_dim": [("appclass generate-rmat", "--node-feature-dim", None)],
    "appclass.edge_feature_dim": [("appclass generate-rmat", "--edge-feature-dim", None)],
    "appclass.graphs.*.scale": [("appclass generate-rmat", "--scale", None)],
    "appclass.graphs.*.edge_factor": [("appclass generate-rmat", "--edge-factor", None)],
    "appclass.graphs.*.feature_max": [("appclass generate-rmat", "--feature-max", None)],
    "appclass.patterns.*.max_pattern_nodes": [("appclass generate-pattern", "--max-pattern-nodes", None)],
    "appclass.variants.[].threads": [("appclass bench", "--threads", None)],
    "appclass.repeats": [("appclass bench", "--repeats", None)],
    **{f"memnet.families.{family}.count": [("memnet generate", "--count", None)] for family in FAMILIES},
    **{f"memnet.families.{family}.ranges.*.[]": [("memnet generate", "--range", 1), ("memnet generate", "--range", 2)]
       for family in FAMILIES},
    **{f"{section}.bins.{key}": [(c, "--bins", i) for c in ("memnet evaluate", "memnet train")]
       for section in [*(f"memnet.families.{f}" for f in FAMILIES), "memnet.published.*"]
       for i, key in enumerate(("start_mib", "width_mib", "count"))},
    "memnet.train_steps": [("memnet measure", "--train-steps", None)],
    "memnet.timeout_s": [("memnet measure", "--timeout-s", None)],
    "memnet.threads": [("memnet measure", "--threads", None)],
    "memnet.folds": [("memnet evaluate", "--folds", None)],
    "memnet.faketensor_rows": [("memnet evaluate", "--faketensor-rows", None)],
    "memnet.timing_rows": [("memnet evaluate", "--timing-rows", None)],
    **{f"memnet.{key}": [(c, f"--{key.replace('_', '-')}", None) for c in ("memnet evaluate", "memnet train")]
       for key in ("quantile", "members", "mlp_epochs", "transformer_epochs")},
    "hotconv.folds.[]": [("hotconv train", "--fold", None)],
    **{f"hotconv.{key}": [("hotconv train", f"--{key.replace('_', '-')}", None)]
       for key in ("epochs", "max_len", "batch_size", "num_filters", "window_size", "stride", "fp_slice_size",
                   "fp2_slice_size", "learning_rate", "early_stopping_patience", "num_workers", "memory_probe_steps")},
    **{f"hotconv.{sweep}.{key}": [("hotconv bench", f"--{key.replace('_', '-')}", None)]
       for sweep in ("sweep", "bench")
       for key in ("num_filters", "window_size", "stride", "fp_slice_size", "fp2_slice_size", "train_steps")},
    **{f"hotconv.{sweep}.{key}s.[]": [("hotconv bench", f"--{key.replace('_', '-')}", None)]
       for sweep in ("sweep", "bench") for key in ("batch_size", "max_len")},
    **{f"images.datasets.*.{key}": [("images digits", f"--{key.replace('_', '-')}", None)]
       for key in ("image_size", "min_digit_size", "max_digit_size", "max_shift", "background_max", "foreground_min",
                   "noise_std", "val_fraction", "images_per_class")},
    **{f"division.{key}": [(f"division {c}", f"--{key.replace('_', '-')}", None)
                           for c in ("memory", "speed", "maxbatch", "train")]
       for key in ("block_size", "hfc_bits", "group_size")},
    **{f"division.{section}.{key}": [(f"division {command}", f"--{key.replace('_', '-')}", None)]
       for section, command in (("memory", "memory"), ("speed", "speed"), ("max_batch", "maxbatch"), ("accuracy", "train"))
       for key in ("width", "image_size")},
    **{f"division.{section}.num_classes": [(f"division {command}", "--num-classes", None)]
       for section, command in (("memory", "memory"), ("speed", "speed"), ("max_batch", "maxbatch"))},
    "division.memory.batch_sizes.[]": [("division memory", "--batch-size", None)],
    "division.speed.batch_sizes.[]": [("division speed", "--batch-size", None)],
    "division.speed.train_steps": [("division speed", "--train-steps", None)],
    "division.speed.warmup_steps": [("division speed", "--warmup-steps", None)],
    "division.max_batch.start": [("division maxbatch", "--start", None)],
    "division.max_batch.limit": [("division maxbatch", "--limit", None)],
    **{f"division.accuracy.{key}": [("division train", f"--{key.replace('_', '-')}", None)]
       for key in ("epochs", "batch_size", "learning_rate", "momentum", "weight_decay", "num_workers")},
    **{f"robust.{key}": [("robust train", f"--{key.replace('_', '-')}", None)]
       for key in ("test_fraction", "train_limit", "test_limit", "hidden_units", "eps", "epochs", "batch_size",
                   "learning_rate", "momentum", "weight_decay", "max_staleness", "queue_size", "timeout_s")},
    "robust.hard_eps.[]": [("robust train", "--eps", None)],
    "robust.attack_steps": [("robust train", "--attack-steps", None), ("robust table", "--attack-steps", None)],
    "robust.weak_base_attack_steps": [("robust table", "--weak-base-attack-steps", None)],
    "robust.sequential_threads.[]": [("robust train", "--threads", None)],
    "robust.producers.[]": [("robust train", "--producers", None)],
    "robust.publish_every.[]": [("robust train", "--publish-every", None)],
    **{f"robust.{section}.{key}": [("robust train", f"--{section}-{key.replace('_', '-')}", None)]
       for section, keys in (("eval", ("attack_steps", "restarts", "samples")), ("guard", ("attack_steps", "samples", "drop", "shrink")))
       for key in keys},
}
# Keys whose schema admits one more value below the option's range, meaning "none": the rules then
# run no command with the option.
OFF_VALUES = {f"memnet.families.{family}.count": 0 for family in FAMILIES}


def _resolve(node: dict) -> dict:
    while "$ref" in node:
        target = SCHEMA
        for part in node["$ref"][2:].split("/"):
            target = target[part]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def _schema_node(key: str) -> dict:
    node = _resolve(SCHEMA)
    for part in key.split("."):
        if part == "*":
            node = node["additionalProperties"]
        elif part == "[]":
            node = node["items"]
        else:
            node = node["properties"][part]
        node = _resolve(node)
    return node


def _number_of(action: argparse.Action, field: int | None):
    return action.field_types[field] if field is not None else action.type


def _value_actions(parser):
    return [a for a in parser._actions if not isinstance(a, argparse._HelpAction) and a.nargs != 0]


def _types(action) -> tuple:
    return getattr(action, "field_types", (action.type,))


def _unbounded(action) -> bool:
    """A number without a range: a plain int or float type, or a numeric default read as text."""
    if any(t in (int, float) for t in _types(action)):
        return True
    return action.type is None and isinstance(action.default, (int, float)) and not isinstance(action.default, bool)


def test_every_numeric_option_has_a_bounded_type():
    unbounded = [
        f"membench {command} {action.option_strings[0] if action.option_strings else action.dest}"
        for command, parser in SUBCOMMANDS.items() for action in _value_actions(parser) if _unbounded(action)
    ]
    assert unbounded == [], "give these options a range: membench.core.options.integer(...) or real(...)"
    bounded = [a for parser in SUBCOMMANDS.values() for a in _value_actions(parser)
               if any(isinstance(t, Number) for t in _types(a))]
    assert len(bounded) > 150


@pytest.mark.parametrize("key", sorted(FEEDS))
def test_the_schema_gives_each_key_the_range_of_the_options_it_feeds(key):
    node = _schema_node(key)
    types = node["type"] if isinstance(node.get("type"), list) else [node.get("type")]
    for command, option, field in FEEDS[key]:
        action = _action(command, option)
        if "enum" in node:
            assert set(node["enum"]) == set(action.choices), (command, option)
            continue
        number = _number_of(action, field)
        where = f"{key} feeds membench {command} {option}"
        assert ("integer" in types) == number.integral and ("number" in types) != number.integral, where
        if number.exclusive_low:
            assert node.get("exclusiveMinimum") == number.low and "minimum" not in node, where
        else:
            assert node.get("minimum") in (number.low, OFF_VALUES.get(key)) and "exclusiveMinimum" not in node, where
        if number.exclusive_high:
            assert node.get("exclusiveMaximum") == number.high and "maximum" not in node, where
        else:
            assert node.get("maximum") == number.high and "exclusiveMaximum" not in node, where


def test_every_numeric_config_key_has_a_range():
    missing = []

    def walk(node, key):
        node = _resolve(node)
        types = node.get("type") if isinstance(node.get("type"), list) else [node.get("type")]
        if {"integer", "number"} & set(types):
            if not ({"minimum", "exclusiveMinimum"} & set(node) and {"maximum", "exclusiveMaximum"} & set(node)):
                missing.append(key)
        for name, child in node.get("properties", {}).items():
            walk(child, f"{key}.{name}".lstrip("."))
        for part, child in (("*", node.get("additionalProperties")), ("[]", node.get("items"))):
            if isinstance(child, dict):
                walk(child, f"{key}.{part}")

    walk(SCHEMA, "")
    assert missing == []


def test_a_value_out_of_range_is_one_usage_line_naming_the_option_and_the_range(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["appclass", "run", "a", "b", "c", "d", "--threads", "-3"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == ("membench appclass run: error: argument --threads: expected an integer from 1 to "
                                    "4096, got '-3'")
    with pytest.raises(SystemExit):
        cli.main(["memnet", "generate", "--family", "mlp", "--count", "3", "--seed", "1e29", "--out", "x.csv"])
    assert "argument --seed: expected an integer from 0 to 2147483647, got '1e29'" in capsys.readouterr().err


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "1e400", "9" * 5000 + "\n" + "9" * 5000])
def test_no_text_passes_a_real_range_that_is_not_a_finite_number_in_it(text, capsys):
    with pytest.raises(SystemExit):
        cli.main(["robust", "train", "--outdir", "x", f"--timeout-s={text}"])
    lines = capsys.readouterr().err.splitlines()
    assert lines[-1].startswith("membench robust train: error: argument --timeout-s: expected a number above 0 and at "
                                "most 1e+07, got ")
    assert len(lines[-1]) < 700


def test_multi_field_options_check_each_field(capsys):
    with pytest.raises(SystemExit):
        cli.main(["memnet", "evaluate", "--data", "d.csv", "--family", "mlp", "--out", "o.csv", "--bins", "0", "1000", "1.5"])
    assert "argument --bins: expected an integer from 2 to 1000, got '1.5'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["memnet", "generate", "--family", "mlp", "--count", "3", "--out", "x.csv", "--range", "batch", "1",
                  str(2**70)])
    assert "argument --range: expected an integer from 1 to 1048576" in capsys.readouterr().err
