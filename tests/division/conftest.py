"""Shared fixtures: the C++ kernels built once per test session into the session's kernel cache."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from membench.division.extension import MANIFEST_NAME, build_extension, cxx_compiler_present
from membench.division.kernels import select_kernels

# Names the build a test run started by another (test_kernels, for each instruction set) reuses.
PARENT_BUILD_VARIABLE = "MEMBENCH_TEST_KERNEL_MANIFEST"


@pytest.fixture(scope="session")
def built_manifest(kernel_cache_dir) -> Path:
    """Path of the manifest of a CPU build in the session's cache (about 30-60 s, once per run), or
    of the parent run's build (:data:`PARENT_BUILD_VARIABLE`)."""
    if os.environ.get(PARENT_BUILD_VARIABLE):
        return Path(os.environ[PARENT_BUILD_VARIABLE])
    if not cxx_compiler_present():
        pytest.skip("no C++ compiler on this machine")
    manifest = build_extension(kernel_cache_dir, cuda="no")
    assert manifest["status"] == "built", manifest["error"]
    return Path(manifest["cache_entry"]) / MANIFEST_NAME


@pytest.fixture(scope="session")
def extension_kernels(built_manifest):
    return select_kernels("extension", built_manifest, "cpu")
