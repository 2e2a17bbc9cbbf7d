"""Build and load a system's C++/CUDA torch extension, recorded in a build manifest.

A build uses ``torch.utils.cpp_extension.load`` into a build directory and writes a manifest (what
was built, versions, whether CUDA kernels are in it). Jobs load the built module from the manifest;
each system keeps a pure-torch fallback for when there is none.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import torch

from membench.core import atomic
from membench.core.errors import InputError
from membench.core.validate import read_json_object

MANIFEST_NAME = "manifest.json"
CUDA_CHOICES = ("auto", "yes", "no")
KERNEL_CHOICES = ("auto", "torch", "extension")


@dataclass(frozen=True)
class ExtensionSpec:
    """What one system builds: module name, sources (C++ always, CUDA where built), flags, kernels."""

    name: str
    source_dir: Path
    cpu_sources: tuple[str, ...]
    kernels: tuple[str, ...]
    build_command: str  # the command that builds it, named in errors
    cuda_sources: tuple[str, ...] = ()
    cflags: tuple[str, ...] = ("-O3",)
    cuda_cflags: tuple[str, ...] = ("-O3",)
    ldflags: tuple[str, ...] = field(default=())


def cuda_build_possible() -> bool:
    """True when torch was built with CUDA and an nvcc compiler is present."""
    from torch.utils import cpp_extension

    return torch.version.cuda is not None and cpp_extension.CUDA_HOME is not None


def cxx_compiler_present() -> bool:
    """True when a C++ compiler (``$CXX`` or ``c++``/``g++``) is on the PATH."""
    candidates = [os.environ.get("CXX"), "c++", "g++"]
    return any(c and shutil.which(c) for c in candidates)


def build_extension(spec: ExtensionSpec, outdir: str | os.PathLike, cuda: str = "auto", verbose: bool = False) -> dict:
    """Compile ``spec`` into ``outdir`` and write ``outdir/manifest.json``; return the manifest.

    ``cuda``: ``auto`` adds the CUDA sources when :func:`cuda_build_possible` (and the spec has
    any), ``yes`` requires them, ``no`` builds the C++ sources only.
    """
    from torch.utils import cpp_extension

    if cuda not in CUDA_CHOICES:
        raise InputError(None, f"cuda must be one of {', '.join(CUDA_CHOICES)}, got {cuda!r}", "option --cuda")
    with_cuda = bool(spec.cuda_sources) and (cuda == "yes" or (cuda == "auto" and cuda_build_possible()))
    if cuda == "yes" and not (spec.cuda_sources and cuda_build_possible()):
        raise InputError(None, "CUDA kernels were asked for but torch has no CUDA, nvcc is missing, or there are none", "option --cuda")
    if not cxx_compiler_present():
        raise InputError(None, "no C++ compiler found (set CXX or install g++)", "build")
    outdir = Path(outdir)
    build_dir = outdir / ("cuda" if with_cuda else "cpu")
    build_dir.mkdir(parents=True, exist_ok=True)
    sources = [spec.source_dir / s for s in spec.cpu_sources]
    if with_cuda:
        sources += [spec.source_dir / s for s in spec.cuda_sources]
    start = time.perf_counter()
    module = cpp_extension.load(
        name=spec.name,
        sources=[str(s) for s in sources],
        build_directory=str(build_dir),
        extra_cflags=[*spec.cflags, *(["-DWITH_CUDA"] if with_cuda else [])],
        extra_cuda_cflags=[*spec.cuda_cflags, "-DWITH_CUDA"],
        extra_ldflags=list(spec.ldflags),
        with_cuda=with_cuda,
        verbose=verbose,
    )
    library = Path(module.__file__).resolve()
    manifest = {
        "extension": spec.name,
        "library": os.path.relpath(library, outdir.resolve()),
        "sources": [s.name for s in sources],
        "kernels": list(spec.kernels),
        "cuda": bool(module.has_cuda_kernels()),
        "torch_version": torch.__version__,
        "torch_cuda_version": torch.version.cuda,
        "python_version": platform.python_version(),
        "compiler": _compiler_version(),
        "nvcc": _nvcc_version() if with_cuda else None,
        "cflags": list(spec.cflags),
        "build_s": round(time.perf_counter() - start, 3),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    atomic.write_json(outdir / MANIFEST_NAME, manifest)
    return manifest


def load_extension(manifest_path: str | os.PathLike, build_command: str = "the system's build step") -> ModuleType:
    """Import the built kernels named by a build manifest.

    Raises :class:`InputError` when the manifest is unreadable, the library is missing, or it was
    built for another torch version (its ABI would not match); ``build_command`` is named as the fix.
    """
    manifest_path = Path(manifest_path)
    manifest = read_json_object(manifest_path, f"build manifest not found (run `{build_command}`)")
    for key in ("extension", "library", "torch_version"):
        if key not in manifest:
            raise InputError(manifest_path, f"manifest lacks key {key!r}")
    if manifest["torch_version"] != torch.__version__:
        raise InputError(
            manifest_path,
            f"kernels were built for torch {manifest['torch_version']}, this is torch {torch.__version__}; rebuild",
            "key 'torch_version'",
        )
    library = manifest_path.parent / manifest["library"]
    if not library.is_file():
        raise InputError(manifest_path, f"built library {library} does not exist; rebuild", "key 'library'")
    name = manifest["extension"]
    if name in sys.modules:
        return sys.modules[name]
    loader = importlib.machinery.ExtensionFileLoader(name, str(library))
    spec = importlib.util.spec_from_file_location(name, str(library), loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    sys.modules[name] = module
    return module


def _compiler_version() -> str | None:
    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    return _first_line([compiler, "--version"]) if compiler else None


def _nvcc_version() -> str | None:
    from torch.utils import cpp_extension

    nvcc = Path(cpp_extension.CUDA_HOME or "") / "bin" / "nvcc"
    return _first_line([str(nvcc), "--version"], last=True) if nvcc.exists() else None


def _first_line(command: list[str], last: bool = False) -> str | None:
    try:
        lines = subprocess.run(command, capture_output=True, text=True, check=True, timeout=30).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        return None
    return (lines[-1] if last else lines[0]) if lines else None
