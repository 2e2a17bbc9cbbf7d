"""The papers' published figures (``resources/published_figures.yaml``), read and checked."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from membench.core.errors import InputError
from membench.core.validate import open_regular

__all__ = ["COMPARISONS", "default_published_path", "load_published", "METRICS", "SYSTEMS"]

SYSTEMS = ("hotconv", "division", "appclass", "memnet", "robust")
METRICS = (
    "memory_ratio",
    "time_ratio",
    "speedup",
    "accuracy_delta",
    "accuracy",
    "under_rate",
    "clean_accuracy",
    "robust_accuracy",
)
COMPARISONS = ("at_most", "at_least")
_TEXT_FIELDS = ("id", "text", "source", "setting")
_MAPPING_FIELDS = ("match", "requires")


def default_published_path() -> Path:
    """``resources/published_figures.yaml`` of the checkout this package runs from."""
    return Path(__file__).resolve().parents[3] / "resources" / "published_figures.yaml"


def load_published(path: str | os.PathLike) -> list[dict]:
    """The figures of a published-figures YAML file, each checked (see the file's header).

    Raises InputError naming the file, the figure and the field when one is missing or malformed.
    """
    with open_regular(path, "r", missing="published figures file not found", encoding="utf-8") as handle:
        try:
            document = yaml.safe_load(handle)
        except yaml.YAMLError as exc:
            raise InputError(path, f"not valid YAML ({exc})") from None
    if not isinstance(document, dict) or not isinstance(document.get("figures"), list):
        raise InputError(path, "expected a mapping with a list under 'figures'")
    figures = document["figures"]
    seen: set[str] = set()
    for index, figure in enumerate(figures):
        _check_figure(path, index, figure)
        if figure["id"] in seen:
            raise InputError(path, f"id {figure['id']!r} appears twice", where=f"figures[{index}]")
        seen.add(figure["id"])
    return figures


def _check_figure(path, index: int, figure) -> None:
    where = f"figures[{index}]"
    if not isinstance(figure, dict):
        raise InputError(path, "each figure must be a mapping", where=where)
    for field in _TEXT_FIELDS:
        if not isinstance(figure.get(field), str) or not figure[field].strip():
            raise InputError(path, f"'{field}' must be a non-empty text", where=where)
    where = f"figure {figure['id']!r}"
    for field, allowed in (("system", SYSTEMS), ("metric", METRICS), ("compare", COMPARISONS)):
        if figure.get(field) not in allowed:
            raise InputError(
                path, f"'{field}' is {figure.get(field)!r}, expected one of {', '.join(allowed)}", where=where
            )
    for field in ("value", "tolerance"):
        value = figure.get(field)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InputError(path, f"'{field}' must be a number, not {value!r}", where=where)
    if figure["tolerance"] < 0:
        raise InputError(path, "'tolerance' must not be negative", where=where)
    for field in _MAPPING_FIELDS:
        if not isinstance(figure.get(field), dict) or not figure[field]:
            raise InputError(path, f"'{field}' must be a non-empty mapping of column: value", where=where)
