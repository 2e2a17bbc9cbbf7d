"""The CUDA kernels compile with this machine's nvcc against torch's headers, GPU or not.

CI has the CUDA toolkit (/usr/local/cuda) but no GPU and a CPU build of torch, so the extension
build never compiles ``division_cuda.cu`` there; this test does, so a header or syntax error fails
CI instead of the first GPU job. Skipped where no nvcc is installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest
from torch.utils import cpp_extension

from membench.division.extension import CSRC_DIR, SPEC

pytestmark = pytest.mark.slow


def _nvcc() -> str | None:
    for home in (os.environ.get("CUDA_HOME"), cpp_extension.CUDA_HOME, "/usr/local/cuda"):
        if home and (Path(home) / "bin" / "nvcc").is_file():
            return str(Path(home) / "bin" / "nvcc")
    return shutil.which("nvcc")


@pytest.mark.skipif(_nvcc() is None, reason="no nvcc on this machine")
@pytest.mark.parametrize("source", SPEC.cuda_sources)
def test_cuda_source_compiles_with_nvcc(tmp_path, source):
    includes = [*cpp_extension.include_paths(), sysconfig.get_paths()["include"]]
    generated = Path("c10/cuda/impl/cuda_cmake_macros.h")
    if not any((Path(path) / generated).is_file() for path in includes):
        (tmp_path / generated).parent.mkdir(parents=True)
        (tmp_path / generated).write_text("#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
        includes.append(str(tmp_path))
    command = [
        _nvcc(),
        "-c",
        str(CSRC_DIR / source),
        "-o",
        str(tmp_path / "kernels.o"),
        "-std=c++17",
        *SPEC.cuda_cflags,
        "-DWITH_CUDA",
        f"-DTORCH_EXTENSION_NAME={SPEC.name}",
        *(f"-I{path}" for path in includes),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{' '.join(command)}\n{result.stderr[-4000:]}"
    assert (tmp_path / "kernels.o").stat().st_size > 0
