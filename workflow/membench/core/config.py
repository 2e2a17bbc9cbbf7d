"""Checking the workflow's configuration against its schema, with one-line errors.

Snakemake's own ``validate`` prints the whole schema and config after the one useful line, and
``--config key=value`` hands nested values over as strings (``--config hotconv='{epochs: 3}'``
gives ``{"epochs": "3"}``). :func:`check_config` turns such strings into the type the schema asks
for, then reports the first violation as one line that names the key (and, for a misspelt key,
the closest valid one). Defaults are filled in afterwards by Snakemake's ``validate``.
"""

from __future__ import annotations

import difflib
import math
import os
from typing import Any

import jsonschema
import yaml

from membench.core.errors import InputError
from membench.core.validate import open_regular

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
            raise InputError(source, f"a value of {len(value)} characters given as text; at most "
                                     f"{MAX_TEXT_CHARACTERS} are read", where=f"key '{_dotted(path)}'")
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
            key: _coerce(item, properties.get(key, extra if isinstance(extra, dict) else {}), root, source, [*path, key])
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
        raise InputError(source, f"{not_finite[1]} is not a finite number", where=f"key '{_dotted(not_finite[0])}'")
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
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
