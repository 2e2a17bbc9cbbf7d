"""The kernel cache and loading, without compiling: where the cache is, what keys a build, how a job
that cannot have built kernels says so, and that a manifest or library that is not a regular file is
named, never waited on. Builds: tests/division/test_build_recovery.py, tests/core/test_kernel_cache.py."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
from pathlib import Path

import pytest
import torch

from membench.core import extension
from membench.core.errors import InputError
from membench.core.extension import (
    CACHE_DIR_VARIABLE,
    ExtensionSpec,
    KernelSelection,
    build_key,
    cache_entry,
    load_extension,
    select_kernels,
    sources_digest,
    user_cache_dir,
)

PIPE = r"is a named pipe \(FIFO\), not a regular file"


@pytest.fixture
def spec(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "ops.cpp").write_text("// kernels\n")
    return ExtensionSpec(
        name="membench_test_ops",
        source_dir=tmp_path / "src",
        cpu_sources=("ops.cpp",),
        kernels=("op",),
        build_command="membench test build",
    )


def _manifest(tmp_path, spec):
    path = tmp_path / "build" / "manifest.json"
    path.parent.mkdir()
    sources = [spec.source_dir / name for name in spec.cpu_sources]
    path.write_text(
        json.dumps(
            {
                "status": "built",
                "extension": spec.name,
                "library": "ops.so",
                "torch_version": torch.__version__,
                "sources": list(spec.cpu_sources),
                "source_sha256": sources_digest(sources),
            }
        )
    )
    return path


@pytest.mark.timeout(10)
def test_a_pipe_as_the_manifest_or_library_is_named_without_blocking(tmp_path, spec):
    manifest = _manifest(tmp_path, spec)
    os.mkfifo(manifest.parent / "ops.so")
    with pytest.raises(
        InputError, match=rf"manifest.json, key 'library': built library .*ops.so {PIPE}; rebuild$"
    ):
        load_extension(manifest, spec)
    manifest.unlink()
    os.mkfifo(manifest)
    with pytest.raises(InputError, match=f"^{re.escape(str(manifest))}: {PIPE}$"):
        load_extension(manifest, spec)


def test_a_directory_as_the_library_is_called_a_directory(tmp_path, spec):
    manifest = _manifest(tmp_path, spec)
    (manifest.parent / "ops.so").mkdir()
    with pytest.raises(InputError, match=r"built library .*ops.so is a directory; rebuild$"):
        load_extension(manifest, spec)


def test_the_cache_directory_comes_from_the_environment_the_command_layer_passes(tmp_path):
    assert user_cache_dir({CACHE_DIR_VARIABLE: str(tmp_path), "XDG_CACHE_HOME": "/x"}) == tmp_path
    assert user_cache_dir({"XDG_CACHE_HOME": "/var/cache/me", "HOME": "/h"}) == Path("/var/cache/me/membench")
    # A relative XDG_CACHE_HOME is invalid (XDG base directory specification): ignored.
    assert user_cache_dir({"XDG_CACHE_HOME": "rel", "HOME": "/h"}) == Path("/h/.cache/membench")
    assert user_cache_dir({"HOME": "/h"}) == Path("/h/.cache/membench")


def test_the_cache_key_follows_sources_headers_torch_and_flags(tmp_path, spec, monkeypatch):
    key, fields = build_key(spec, with_cuda=False)
    assert key.startswith("cpu-") and fields["source_sha256"] == sources_digest([spec.source_dir / "ops.cpp"])
    assert build_key(spec, with_cuda=False)[0] == key  # the same build, found again
    assert cache_entry(spec, tmp_path / "cache", False) == tmp_path / "cache" / spec.name / key
    (spec.source_dir / "ops.cpp").write_text("// kernels, edited\n")
    edited = build_key(spec, with_cuda=False)[0]
    assert edited != key
    (spec.source_dir / "common.h").write_text("// a header the sources include\n")
    assert spec.source_names() == ("ops.cpp", "common.h")
    with_header = build_key(spec, with_cuda=False)[0]
    assert with_header != edited
    assert build_key(dataclasses.replace(spec, cflags=("-O2",)), with_cuda=False)[0] != with_header
    monkeypatch.setattr(torch, "__version__", "0.0.0+other")
    assert build_key(spec, with_cuda=False)[0] != with_header


def test_without_a_compiler_auto_says_why_and_extension_is_a_one_line_error(
    tmp_path, spec, monkeypatch, caplog
):
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no c++, no g++
    with caplog.at_level(logging.WARNING, logger="membench.core.extension"):
        selected = select_kernels(spec, "auto", cache_dir=tmp_path / "cache")
    assert selected.module is None and selected.value == "torch"
    assert selected.fallback_reason == "no C++ compiler found to build the kernels (set CXX or install g++)"
    (line,) = [r.getMessage() for r in caplog.records]
    assert line == f"{spec.name}: kernels torch (auto fell back to pure torch): {selected.fallback_reason}"
    with pytest.raises(InputError, match="^<input>: membench_test_ops: kernels 'extension' cannot run: no C"):
        select_kernels(spec, "extension", cache_dir=tmp_path / "cache")
    assert not (tmp_path / "cache").exists()
    with pytest.raises(InputError, match="kernels must be one of auto, torch, extension"):
        select_kernels(spec, "fast", cache_dir=tmp_path / "cache")
    assert select_kernels(spec, "torch") == KernelSelection(None, "torch")


def test_a_cuda_job_without_cuda_kernels_falls_back_or_fails(tmp_path, spec, monkeypatch):
    monkeypatch.setattr(extension, "cxx_compiler_present", lambda: True)
    monkeypatch.setattr(extension, "cuda_build_possible", lambda: False)
    selected = select_kernels(spec, "auto", cache_dir=tmp_path, device_type="cuda")
    assert selected.value == "torch" and "torch has no CUDA or nvcc is missing" in selected.fallback_reason
    with pytest.raises(InputError, match="cannot run: the job runs on CUDA"):
        select_kernels(spec, "extension", cache_dir=tmp_path, device_type="cuda")
