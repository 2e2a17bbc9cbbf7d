"""Shared fixtures: the C++ kernels built once per test session into a temporary directory."""

from __future__ import annotations

import pytest

from membench.division.extension import build_extension, cxx_compiler_present
from membench.division.kernels import select_kernels


@pytest.fixture(scope="session")
def built_manifest(tmp_path_factory):
    """Path of the manifest of a CPU build (about 30-60 s, once per session)."""
    if not cxx_compiler_present():
        pytest.skip("no C++ compiler on this machine")
    outdir = tmp_path_factory.mktemp("division_build")
    build_extension(outdir, cuda="no")
    return outdir / "manifest.json"


@pytest.fixture(scope="session")
def extension_kernels(built_manifest):
    return select_kernels("extension", built_manifest, "cpu")
