"""The membench commands' parsers, the config keys each command takes (``CONFIG_KEYS`` beside its
``build_parser``), and the option each key becomes, for the tests that check them against
config/schema.yaml and the rules (tests/core/test_option_ranges.py, tests/test_vocabulary.py).

A key is written as in ``CONFIG_KEYS``: dotted, ``*`` for any name, ``[]`` for each item of a list.
It becomes the option spelled the same way, underscores as hyphens: the longest tail of its names
that the command has (``robust.eval.attack_steps`` -> ``--eval-attack-steps``,
``division.memory.image_size`` -> ``--image-size``). A list the workflow runs one job per item of
may name its items in the singular (``batch_sizes`` -> ``--batch-size``) or by its last words (a
qualified sweep: ``sequential_threads`` -> ``--threads``). A field of a multi-field option is named
by its metavar under the option's key (``bins.start_mib`` -> ``--bins``, field ``START_MIB``).
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

from membench import cli
from membench.core.config import load_schema
from membench.core.options import Number

SCHEMA = load_schema(Path(__file__).resolve().parents[1] / "config" / "schema.yaml")


def _subcommands():
    for group, (module_name, _) in cli.GROUPS.items():
        module = importlib.import_module(module_name)
        parser = module.build_parser(f"membench {group}")
        steps = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not steps:
            yield group, parser
            continue
        for step, subparser in steps[0].choices.items():
            yield f"{group} {step}", subparser


SUBCOMMANDS: dict[str, argparse.ArgumentParser] = dict(_subcommands())


def _declared():
    for group, (module_name, _) in cli.GROUPS.items():
        for step, keys in getattr(importlib.import_module(module_name), "CONFIG_KEYS", {}).items():
            yield f"{group} {step}", keys


# membench command -> the config keys the workflow passes to it.
CONFIG_KEYS: dict[str, tuple[str, ...]] = dict(_declared())


def action(command: str, option: str) -> argparse.Action:
    return next(a for a in SUBCOMMANDS[command]._actions if option in a.option_strings)


def _options(command: str) -> set[str]:
    return {name for a in SUBCOMMANDS[command]._actions for name in a.option_strings}


def _names(key: str) -> list[tuple[str, bool]]:
    """The named parts of ``key``, each with whether it holds several values (``[]`` or ``*`` after it)."""
    names: list[tuple[str, bool]] = []
    for part in key.split("."):
        if part in ("*", "[]"):
            names[-1] = (names[-1][0], True)
        else:
            names.append((part, False))
    return names


def _spellings(names: list[tuple[str, bool]]) -> list[str]:
    """Options spelled like the named parts, longest tail first."""
    last, several = names[-1]
    lasts = [last]
    if several:
        words = last.split("_")
        lasts += [last.removesuffix("s")] + ["_".join(words[i:]) for i in range(1, len(words))]
    spellings = []
    for last in lasts:
        for start in range(len(names)):
            spellings.append("--" + "_".join([n for n, _ in names[start:-1]] + [last]).replace("_", "-"))
    return spellings


def option_of(key: str, command: str) -> list[tuple[str, int | None]]:
    """The option (and field, for a multi-field option) of ``command`` that ``key`` becomes; empty
    when the command has none spelled like it."""
    names, options = _names(key), _options(command)
    for option in _spellings(names):
        if option in options:
            found = action(command, option)
            if key.endswith("*.[]") and hasattr(found, "field_types"):  # a name -> [low, high] entry
                return [(option, i) for i, t in enumerate(found.field_types) if isinstance(t, Number)]
            return [(option, None)]
    if len(names) > 1:
        for option in _spellings(names[:-1]):
            metavar = getattr(action(command, option), "metavar", None) if option in options else None
            if isinstance(metavar, tuple) and names[-1][0].upper() in metavar:
                return [(option, metavar.index(names[-1][0].upper()))]
    return []


# Config key -> the options it feeds, as (command, option, field of a multi-field option or None).
FEEDS: dict[str, list[tuple[str, str, int | None]]] = {}
for _command, _keys in CONFIG_KEYS.items():
    for _key in _keys:
        FEEDS.setdefault(_key, []).extend(
            (_command, option, field) for option, field in option_of(_key, _command)
        )


def resolve(node: dict) -> dict:
    while "$ref" in node:
        target = SCHEMA
        for part in node["$ref"][2:].split("/"):
            target = target[part]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def schema_nodes(key: str) -> list[dict]:
    """The schema of ``key`` (one per property where ``*`` spans a fixed set of properties); a
    ``KeyError`` names a part the schema does not have."""
    nodes = [resolve(SCHEMA)]
    for part in key.split("."):
        if part == "*":
            nodes = [
                child
                for node in nodes
                for child in (
                    [node["additionalProperties"]]
                    if isinstance(node.get("additionalProperties"), dict)
                    else node["properties"].values()
                )
            ]
        elif part == "[]":
            nodes = [node["items"] for node in nodes]
        else:
            nodes = [node["properties"][part] for node in nodes]
        nodes = [resolve(node) for node in nodes]
    return nodes


def config_values(config, key: str) -> list:
    """The values ``key`` has in ``config`` (every entry for ``*``, every item for ``[]``)."""
    values = [config]
    for part in key.split("."):
        if part == "*":
            values = [v for value in values if isinstance(value, dict) for v in value.values()]
        elif part == "[]":
            values = [v for value in values if isinstance(value, list) for v in value]
        else:
            values = [value[part] for value in values if isinstance(value, dict) and part in value]
    return values
