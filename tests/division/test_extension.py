"""The build of the C++ kernels and their selection (built once per session, see conftest); the
kernels themselves are checked against the pure-torch reference in test_kernels.py."""

from __future__ import annotations

import json

import pytest
import torch

from membench.core.errors import InputError
from membench.division.kernels import select_kernels


def test_manifest_records_the_build(built_manifest):
    manifest = json.loads(built_manifest.read_text())
    assert manifest["cuda"] is False and manifest["torch_version"] == torch.__version__
    assert (built_manifest.parent / manifest["library"]).is_file()
    assert "division_ops.cpp" in manifest["sources"] and "division_compress" in manifest["kernels"]


def test_kernel_selection(built_manifest, tmp_path):
    assert select_kernels("torch", built_manifest).name == "torch"
    assert select_kernels("auto", built_manifest).name == "extension"
    assert select_kernels("auto", None).name == "torch"
    missing = tmp_path / "nothing.json"
    assert select_kernels("auto", missing).name == "torch"  # falls back, logs why
    with pytest.raises(InputError, match="manifest not found"):
        select_kernels("extension", missing)
    stale = tmp_path / "manifest.json"
    stale.write_text(json.dumps({"extension": "x", "library": "x.so", "torch_version": "0.0"}))
    with pytest.raises(InputError, match="rebuild"):
        select_kernels("extension", stale)
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(InputError, match="not valid JSON"):
        select_kernels("extension", broken)
    with pytest.raises(InputError, match="kernels must be"):
        select_kernels("fast", built_manifest)
