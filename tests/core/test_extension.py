"""Loading built kernels: a manifest or library that is not a regular file is named, never waited on."""

from __future__ import annotations

import json
import os
import re

import pytest
import torch

from membench.core.errors import InputError
from membench.core.extension import ExtensionSpec, load_extension, sources_digest

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
