"""Every numeric option of every subcommand has a range, and the config schema gives each key that
feeds an option (the ``CONFIG_KEYS`` each command module declares, which tests/test_vocabulary.py
checks against the rules) the same range, so a value the schema accepts is one the command accepts,
and the other way round."""

from __future__ import annotations

import argparse

import pytest
from command_options import FEEDS, SCHEMA, SUBCOMMANDS, action, resolve, schema_nodes

from membench import cli
from membench.core.options import Number

# Keys whose schema admits one more value below the option's range, meaning "none": the rules then
# run no command with the option.
OFF_VALUES = {"memnet.families.*.count": 0}


def _types_of(node: dict) -> list:
    return node["type"] if isinstance(node.get("type"), list) else [node.get("type")]


def _numeric(node: dict) -> bool:
    """A number, or a choice among numbers."""
    if "enum" in node:
        return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in node["enum"])
    return bool({"integer", "number"} & set(_types_of(node)))


NUMERIC_KEYS = sorted(key for key in FEEDS if all(_numeric(node) for node in schema_nodes(key)))


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
    return (
        action.type is None
        and isinstance(action.default, (int, float))
        and not isinstance(action.default, bool)
    )


def test_every_numeric_option_has_a_bounded_type():
    unbounded = [
        f"membench {command} {action.option_strings[0] if action.option_strings else action.dest}"
        for command, parser in SUBCOMMANDS.items()
        for action in _value_actions(parser)
        if _unbounded(action)
    ]
    assert unbounded == [], "give these options a range: membench.core.options.integer(...) or real(...)"
    bounded = [
        a
        for parser in SUBCOMMANDS.values()
        for a in _value_actions(parser)
        if any(isinstance(t, Number) for t in _types(a))
    ]
    assert len(bounded) > 150


@pytest.mark.parametrize("key", NUMERIC_KEYS)
def test_the_schema_gives_each_key_the_range_of_the_options_it_feeds(key):
    for node, (command, option, field) in ((n, f) for n in schema_nodes(key) for f in FEEDS[key]):
        types = _types_of(node)
        fed = action(command, option)
        if "enum" in node:
            assert set(node["enum"]) == set(fed.choices), (command, option)
            continue
        number = _number_of(fed, field)
        where = f"{key} feeds membench {command} {option}"
        assert ("integer" in types) == number.integral and ("number" in types) != number.integral, where
        if number.exclusive_low:
            assert node.get("exclusiveMinimum") == number.low and "minimum" not in node, where
        else:
            assert (
                node.get("minimum") in (number.low, OFF_VALUES.get(key)) and "exclusiveMinimum" not in node
            ), where
        if number.exclusive_high:
            assert node.get("exclusiveMaximum") == number.high and "maximum" not in node, where
        else:
            assert node.get("maximum") == number.high and "exclusiveMaximum" not in node, where


def test_every_numeric_config_key_has_a_range():
    missing = []

    def walk(node, key):
        node = resolve(node)
        types = node.get("type") if isinstance(node.get("type"), list) else [node.get("type")]
        if {"integer", "number"} & set(types):
            if not (
                {"minimum", "exclusiveMinimum"} & set(node) and {"maximum", "exclusiveMaximum"} & set(node)
            ):
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
    assert err.splitlines()[-1] == (
        "membench appclass run: error: argument --threads: expected an integer from 1 to 4096, got '-3'"
    )
    with pytest.raises(SystemExit):
        cli.main(
            ["memnet", "generate", "--family", "mlp", "--count", "3", "--seed", "1e29", "--out", "x.csv"]
        )
    assert "argument --seed: expected an integer from 0 to 2147483647, got '1e29'" in capsys.readouterr().err


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "1e400", "9" * 5000 + "\n" + "9" * 5000])
def test_no_text_passes_a_real_range_that_is_not_a_finite_number_in_it(text, capsys):
    with pytest.raises(SystemExit):
        cli.main(["robust", "train", "--outdir", "x", f"--timeout-s={text}"])
    lines = capsys.readouterr().err.splitlines()
    assert lines[-1].startswith(
        "membench robust train: error: argument --timeout-s: expected a number above 0 and at "
        "most 1e+07, got "
    )
    assert len(lines[-1]) < 700


def test_multi_field_options_check_each_field(capsys):
    with pytest.raises(SystemExit):
        cli.main(
            [
                "memnet",
                "evaluate",
                "--data",
                "d.csv",
                "--family",
                "mlp",
                "--out",
                "o.csv",
                "--bins",
                "0",
                "1000",
                "1.5",
            ]
        )
    assert "argument --bins: expected an integer from 2 to 1000, got '1.5'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(
            [
                "memnet",
                "generate",
                "--family",
                "mlp",
                "--count",
                "3",
                "--out",
                "x.csv",
                "--range",
                "batch",
                "1",
                str(2**70),
            ]
        )
    assert "argument --range: expected an integer from 1 to 1048576" in capsys.readouterr().err
