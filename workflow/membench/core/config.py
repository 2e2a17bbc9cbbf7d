"""Checking the workflow's configuration against its schema, with one-line errors.

Snakemake's own ``validate`` prints the whole schema and config after the one useful line, and
``--config key=value`` hands nested values over as strings (``--config hotconv='{epochs: 3}'``
gives ``{"epochs": "3"}``). :func:`check_config` turns such strings into the type the schema asks
for, then reports the first violation as one line that names the key (and, for a misspelt key,
the closest valid one). Defaults are filled in afterwards by Snakemake's ``validate``; then
:func:`check_settings` checks what a schema cannot say (a key naming an entry of another section,
user data paths that must exist), with errors of the same form.
"""

from __future__ import annotations

import difflib
import math
import os
from typing import TYPE_CHECKING, Any

import yaml

from membench.core.errors import InputError
from membench.core.validate import open_regular

if TYPE_CHECKING:
    import jsonschema

__all__ = [
    "APPCLASS_REFERENCE",
    "check_config",
    "check_settings",
    "coerce_overrides",
    "dataset_paths",
    "load_schema",
    "MAX_TEXT_CHARACTERS",
    "MEMNET_FAMILIES",
]

_SCALAR_TYPES = {"integer": int, "number": (int, float), "boolean": bool}
# A value given as text is parsed as YAML, which takes seconds and hundreds of MB for a long list;
# no setting of the workflow is written in more characters than this.
MAX_TEXT_CHARACTERS = 65_536


def load_schema(path: str | os.PathLike) -> dict:
    """The schema at ``path`` (YAML), for :func:`check_config`."""
    with open_regular(path, "r", encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def coerce_overrides(value: Any, schema: dict, root: dict | None = None, source: str = "the config") -> Any:
    """``value`` with strings turned into the schema's integer, number, boolean, list or mapping.

    A string is replaced only when it parses (as YAML) into a value of the type the schema asks
    for, so ``"3"`` becomes ``3`` under ``type: integer`` while a string-typed key keeps ``"3"``.
    ``root`` is the whole schema, against which ``$ref: "#/..."`` pointers are resolved. A string of
    more than :data:`MAX_TEXT_CHARACTERS` where the schema asks for another type raises
    :class:`InputError` naming ``source`` and the key, before any parsing.
    """
    return _coerce(value, schema, schema if root is None else root, source, [])


def _coerce(value: Any, schema: dict, root: dict, source: str, path: list) -> Any:
    schema = _resolve(schema, root)
    expected = schema.get("type")
    if isinstance(value, str) and expected not in (None, "string"):
        if len(value) > MAX_TEXT_CHARACTERS:
            raise InputError(
                source,
                f"a value of {len(value)} characters given as text; at most {MAX_TEXT_CHARACTERS} are read",
                where=f"key '{_dotted(path)}'",
            )
        try:
            parsed = yaml.safe_load(value)
        except (yaml.YAMLError, RecursionError):
            return value
        if _matches(parsed, expected):
            value = parsed
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        return {
            key: _coerce(
                item,
                properties.get(key, extra if isinstance(extra, dict) else {}),
                root,
                source,
                [*path, key],
            )
            for key, item in value.items()
        }
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_coerce(item, schema["items"], root, source, [*path, i]) for i, item in enumerate(value)]
    return value


def _resolve(schema: dict, root: dict) -> dict:
    """``schema`` with a local ``$ref`` (``#/$defs/name``) followed."""
    while "$ref" in schema and schema["$ref"].startswith("#/"):
        target = root
        for part in schema["$ref"][2:].split("/"):
            target = target[part]
        schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
    return schema


def _matches(value: Any, expected: str | list) -> bool:
    for name in expected if isinstance(expected, list) else [expected]:
        if name == "array" and isinstance(value, list):
            return True
        if name == "object" and isinstance(value, dict):
            return True
        kind = _SCALAR_TYPES.get(name)
        # bool is an int in Python; the schema keeps them apart.
        if kind and isinstance(value, kind) and (name == "boolean" or not isinstance(value, bool)):
            return True
    return False


def check_config(config: dict, schema: dict, source: str = "the config") -> None:
    """Coerce command-line strings in ``config`` (in place) and check it against ``schema``.

    Parameters
    ----------
    config : dict
        The merged workflow configuration (config files and ``--config`` overrides).
    schema : dict
        The JSON schema (``config/schema.yaml``).
    source : str
        What to name as the config's origin in an error (its files).

    Raises
    ------
    InputError
        For the first violation: the dotted key, what was found and what was expected; a key
        the schema does not know is named with the closest key it does know.
    """
    config.update(coerce_overrides(dict(config), schema, source=source))
    not_finite = _first_not_finite(config, [])
    if not_finite is not None:
        # JSON schema ranges let NaN through (every comparison with it is false).
        raise InputError(
            source, f"{not_finite[1]} is not a finite number", where=f"key '{_dotted(not_finite[0])}'"
        )
    # Imported here, not at the top: the command modules read this module's constants (through
    # membench.workflow_support) without it (about 0.1 s a process).
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(
        validator.iter_errors(config), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path)))
    )
    if not errors:
        return
    error = errors[0]
    path = list(error.absolute_path)
    if error.validator == "additionalProperties":
        path.append(sorted(set(error.instance) - set(error.schema.get("properties", {})))[0])
    raise InputError(source, _describe(error), where=f"key '{_dotted(path)}'")


def _first_not_finite(value: Any, path: list) -> tuple[list, float] | None:
    """The path and value of the first NaN or infinity in ``value``, a config or part of one."""
    if isinstance(value, float) and not math.isfinite(value):
        return path, value
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _first_not_finite(item, [*path, key])
        if found is not None:
            return found
    return None


def _dotted(path) -> str:
    return ".".join(str(part) for part in path)


def _describe(error: jsonschema.ValidationError) -> str:
    if error.validator == "additionalProperties":
        known = sorted(error.schema.get("properties", {}))
        unknown = sorted(set(error.instance) - set(known))
        parts = []
        for key in unknown:
            closest = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean '{closest[0]}'?)" if closest else ""
            parts.append(f"'{key}'{hint}")
        return f"unknown key {', '.join(parts)}; valid keys here: {', '.join(known)}"
    found = repr(error.instance)
    shown = found if len(found) <= 80 else found[:77] + "..."
    return error.message.replace(found, shown)


# The only way the NumPy reference runs: every torch variant is checked against its beliefs.
APPCLASS_REFERENCE = {"implementation": "reference", "device": "cpu", "threads": 1, "precision": "float64"}
MEMNET_FAMILIES = ("mlp", "cnn", "transformer")


def check_settings(config: dict, source: str = "the config") -> None:
    """Check what the schema cannot: keys that name each other, and the user data paths.

    Parameters
    ----------
    config : dict
        The configuration after :func:`check_config`, completed with the schema's defaults.
    source : str
        What to name as the config's origin in an error (its files).

    Raises
    ------
    InputError
        For the first key that names something the config does not hold (a HotConv dataset that is
        not a BODMAS dataset, ...), and then for the paths of :func:`dataset_paths` that do not
        exist, all named in one line.
    """
    for key, problem in _cross_key_problems(config):
        raise InputError(source, problem, where=f"key '{key}'")
    missing = [(key, path) for key, path in dataset_paths(config) if not os.path.exists(path)]
    if missing:
        listed = ", ".join(f"{key}: {path}" for key, path in missing)
        raise InputError(
            source,
            f"{len(missing)} dataset path(s) named in the config do not exist: {listed}; point "
            "these keys at your copies of the data (see config/README.md)",
        )


def _cross_key_problems(config: dict):
    """(dotted key, problem) of each key that contradicts another, in the order of the config."""
    first_of: dict[tuple, int] = {}
    for i, variant in enumerate(config["appclass"]["variants"]):
        reference_part = {key: value for key, value in variant.items() if key != "kernels"}
        if variant["implementation"] == "reference" and reference_part != APPCLASS_REFERENCE:
            yield f"appclass.variants.{i}", f"the reference runs as {APPCLASS_REFERENCE} only, not {variant}"
        # Equal settings are one job: a second entry would silently replace the first.
        settings = tuple(sorted({"kernels": "auto", **variant}.items()))
        if settings in first_of:
            yield f"appclass.variants.{i}", f"repeats appclass.variants.{first_of[settings]} ({variant})"
        first_of.setdefault(settings, i)
    bodmas = config["bodmas"]["datasets"]
    unknown = [name for name in config["hotconv"]["datasets"] if name not in bodmas]
    if unknown:
        yield "hotconv.datasets", f"{', '.join(unknown)} not among bodmas.datasets ({', '.join(bodmas)})"
    division, images = config["division"], config["images"]["datasets"]
    # The accuracy runs exist only when division measures some variant.
    if division["variants"]:
        dataset = division["accuracy"]["dataset"]
        if dataset not in images:
            yield (
                "division.accuracy.dataset",
                f"{dataset!r} is not one of images.datasets ({', '.join(images)})",
            )
        variants = division["accuracy"].get("variants")
        unknown = [variant for variant in variants or [] if variant not in division["variants"]]
        if unknown:
            yield (
                "division.accuracy.variants",
                f"{', '.join(unknown)} not in division.variants ({', '.join(division['variants'])})",
            )
    robust = config["robust"]
    if robust["nodes"] > 1:
        if robust["transport"] != "distributed":
            yield "robust.nodes", "runs span several nodes only with robust.transport: distributed"
        fewest = min(robust["producers"], default=None)
        if fewest is not None and robust["nodes"] > fewest + 1:
            yield (
                "robust.nodes",
                f"{robust['nodes']} nodes need at least as many ranks, but a run with P = {fewest} "
                f"producers has {fewest + 1}",
            )
    if robust["dataset"] != "digits" and robust["root"] is None:
        yield "robust.root", f"dataset {robust['dataset']} needs the directory of its files"
    clash = [
        name for name in config["memnet"]["published"] if name in {f"measured_{f}" for f in MEMNET_FAMILIES}
    ]
    if clash:
        yield "memnet.published", f"{', '.join(clash)} is the name of a measured dataset; rename it"
    shipped = [name for name in config["memnet"]["published"] if name in config["memnet"]["shipped"]]
    if shipped:
        yield (
            "memnet.published",
            f"{', '.join(shipped)} is the name of a shipped dataset (memnet.shipped); rename it",
        )


def dataset_paths(config: dict) -> list[tuple[str, str]]:
    """(dotted key, path) of every user data file or directory the config names, whether or not
    its system runs: a run reports each missing one before any job starts."""
    paths = []
    for name, spec in config["bodmas"]["datasets"].items():
        if spec["source"] == "directory":
            paths += [(f"bodmas.datasets.{name}.{key}", spec[key]) for key in ("metadata", "binaries")]
    for kind in ("graphs", "patterns"):
        for name, spec in config["appclass"][kind].items():
            if spec["source"] == "files":
                paths += [(f"appclass.{kind}.{name}.{key}", spec[key]) for key in ("vertices", "edges")]
    for name, spec in config["images"]["datasets"].items():
        if spec["source"] != "digits":
            paths.append((f"images.datasets.{name}.root", spec["root"]))
    robust = config["robust"]
    if robust["dataset"] != "digits" and robust["root"] is not None:
        paths.append(("robust.root", robust["root"]))
    for name, spec in config["memnet"]["published"].items():
        paths.append((f"memnet.published.{name}.path", spec["path"]))
    return paths
