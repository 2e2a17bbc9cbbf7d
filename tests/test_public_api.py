"""Every membench module that defines public functions, classes or constants names them in
``__all__``, and every name there exists."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "workflow" / "membench"
MODULES = sorted(p for p in PACKAGE.rglob("*.py"))


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _public_definitions(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        if isinstance(
            node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
        ) and not node.name.startswith("_"):
            names.add(node.name)
    return names


@pytest.mark.parametrize("path", MODULES, ids=[_module_name(p) for p in MODULES])
def test_public_names_are_declared_in_all(path):
    tree = ast.parse(path.read_text())
    public = _public_definitions(tree)
    if not public:
        return
    module = importlib.import_module(_module_name(path))
    declared = getattr(module, "__all__", None)
    assert declared is not None, f"{_module_name(path)} defines {sorted(public)} but has no __all__"
    assert public <= set(declared), f"missing from __all__: {sorted(public - set(declared))}"
    assert all(hasattr(module, name) for name in declared)
