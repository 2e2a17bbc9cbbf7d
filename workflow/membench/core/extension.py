"""Build and load a system's C++/CUDA torch extension, recorded in a build manifest.

A build uses ``torch.utils.cpp_extension.load`` into a build directory and writes a manifest (what
was built, versions, whether CUDA kernels are in it). Jobs load the built module from the manifest;
each system keeps a pure-torch fallback for when there is none.

A build that fails (no compiler, no ninja, a compile error) writes a manifest with
``"status": "failed"`` and the error instead of raising, so ``kernels: auto`` jobs run the
pure-torch path and record why. Builds of one output directory are serialised by an ``flock`` on
``build.lock`` that the kernel releases when the holder dies (SIGTERM, SIGKILL, a node crash),
waited for with a timeout; holding it, the build removes the lock file torch's own builder left
behind if a previous build was killed (torch would otherwise wait for it forever).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
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
from typing import Iterator

import torch

from membench.core import atomic
from membench.core.errors import InputError
from membench.core.validate import open_regular, read_json_object, regular_file

__all__ = [
    "build_extension",
    "build_lock",
    "cuda_build_possible",
    "CUDA_CHOICES",
    "cxx_compiler_present",
    "DEFAULT_LOCK_TIMEOUT_S",
    "ExtensionSpec",
    "KERNEL_CHOICES",
    "load_extension",
    "LOCK_NAME",
    "MANIFEST_NAME",
    "sources_digest",
]

MANIFEST_NAME = "manifest.json"
CUDA_CHOICES = ("auto", "yes", "no")
KERNEL_CHOICES = ("auto", "torch", "extension")
LOCK_NAME = "build.lock"
# The lock file torch.utils.cpp_extension creates in the build directory while it builds.
_TORCH_BATON_NAME = "lock"
DEFAULT_LOCK_TIMEOUT_S = 3600.0
_LOCK_POLL_S = 0.2


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


def build_extension(
    spec: ExtensionSpec,
    outdir: str | os.PathLike,
    cuda: str = "auto",
    verbose: bool = False,
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
) -> dict:
    """Compile ``spec`` into ``outdir`` and write ``outdir/manifest.json``; return the manifest.

    ``cuda``: ``auto`` adds the CUDA sources when :func:`cuda_build_possible` (and the spec has
    any), ``yes`` requires them, ``no`` builds the C++ sources only. A build that fails is recorded
    in the manifest (``status: failed`` and ``error``) rather than raised; a bad ``cuda`` choice, or
    another build of ``outdir`` holding the lock longer than ``lock_timeout_s``, raises
    :class:`InputError`.
    """
    if cuda not in CUDA_CHOICES:
        raise InputError(
            None, f"cuda must be one of {', '.join(CUDA_CHOICES)}, got {cuda!r}", "option --cuda"
        )
    with_cuda = bool(spec.cuda_sources) and (cuda == "yes" or (cuda == "auto" and cuda_build_possible()))
    if cuda == "yes" and not (spec.cuda_sources and cuda_build_possible()):
        raise InputError(
            None,
            "CUDA kernels were asked for but torch has no CUDA, nvcc is missing, or there are none",
            "option --cuda",
        )
    outdir = Path(outdir)
    build_dir = outdir / ("cuda" if with_cuda else "cpu")
    sources = [spec.source_dir / s for s in spec.cpu_sources]
    if with_cuda:
        sources += [spec.source_dir / s for s in spec.cuda_sources]
    manifest = {
        "extension": spec.name,
        "status": "built",
        "error": None,
        "sources": [s.name for s in sources],
        "source_sha256": sources_digest(sources),
        "kernels": list(spec.kernels),
        "torch_version": torch.__version__,
        "torch_cuda_version": torch.version.cuda,
        "python_version": platform.python_version(),
        "compiler": _compiler_version(),
        "nvcc": _nvcc_version() if with_cuda else None,
        "cflags": list(spec.cflags),
    }
    start = time.perf_counter()
    with build_lock(outdir, lock_timeout_s):
        build_dir.mkdir(parents=True, exist_ok=True)
        # Holding build.lock, no other membench build uses build_dir: torch's lock file is stale.
        (build_dir / _TORCH_BATON_NAME).unlink(missing_ok=True)
        try:
            manifest.update(_compile(spec, outdir, build_dir, sources, with_cuda, verbose))
        except (RuntimeError, OSError, ImportError, subprocess.SubprocessError) as exc:
            manifest.update(status="failed", error=_last_lines(str(exc)))
        manifest["build_s"] = round(time.perf_counter() - start, 3)
        manifest["built_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        atomic.write_json(outdir / MANIFEST_NAME, manifest)
    return manifest


def sources_digest(paths: list[Path]) -> str:
    """SHA-256 of the source files, names and contents in order: what a build was compiled from."""
    digest = hashlib.sha256()
    for path in paths:
        with open_regular(path) as handle:
            digest.update(path.name.encode() + b"\0" + handle.read() + b"\0")
    return digest.hexdigest()


def _compile(
    spec: ExtensionSpec, outdir: Path, build_dir: Path, sources: list[Path], with_cuda: bool, verbose: bool
) -> dict:
    """Run torch's builder; the manifest fields of a successful build."""
    from torch.utils import cpp_extension

    if not cxx_compiler_present():
        raise RuntimeError("no C++ compiler found (set CXX or install g++)")
    with _ninja_on_path():
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
    return {
        # torch renames a rebuild in one process (``_v1``, ...); the library exports that name.
        "extension": module.__name__,
        "library": os.path.relpath(Path(module.__file__).resolve(), outdir.resolve()),
        "cuda": bool(module.has_cuda_kernels()),
    }


@contextlib.contextmanager
def _ninja_on_path() -> Iterator[None]:
    """torch's builder runs ``ninja`` from PATH: within the block, add the ``ninja`` package's binary
    when PATH lacks one (an environment used without activating it); PATH is restored after."""
    if shutil.which("ninja"):
        yield
        return
    try:
        import ninja
    except ImportError:
        raise RuntimeError("ninja not found: install the ninja package (a membench dependency)") from None
    path = os.environ.get("PATH")
    os.environ["PATH"] = f"{ninja.BIN_DIR}{os.pathsep}{path or ''}"
    try:
        yield
    finally:
        if path is None:
            del os.environ["PATH"]
        else:
            os.environ["PATH"] = path


@contextlib.contextmanager
def build_lock(outdir: str | os.PathLike, timeout_s: float = DEFAULT_LOCK_TIMEOUT_S) -> Iterator[Path]:
    """Hold an exclusive ``flock`` on ``outdir/build.lock`` (which records the holder's pid).

    The kernel drops the lock when its holder exits or is killed, so a killed build never blocks
    the next one; a live holder is waited for at most ``timeout_s`` seconds, then
    :class:`InputError` names the lock and the holder's pid.
    """
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    path = outdir / LOCK_NAME
    deadline = time.monotonic() + timeout_s
    with open(path, "a+") as handle:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    handle.seek(0)
                    holder = handle.read().strip() or "unknown"
                    raise InputError(
                        path,
                        f"another build (pid {holder}) held the lock for {timeout_s:g} s; "
                        "wait for it or raise --lock-timeout-s",
                    ) from None
                time.sleep(_LOCK_POLL_S)
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        try:
            yield path
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _last_lines(text: str, count: int = 20) -> str:
    return "\n".join(text.strip().splitlines()[-count:])


def load_extension(manifest_path: str | os.PathLike, spec: ExtensionSpec) -> ModuleType:
    """Import the kernels of ``spec`` built as a build manifest records.

    Raises :class:`InputError` when the manifest is unreadable, records a failed build, the library
    is missing, it was built for another torch version (its ABI would not match), or from other
    sources than ``spec``'s files now hold (an older build would run other kernels, or fail on their
    arguments); ``spec.build_command`` is named as the fix.
    """
    manifest_path = Path(manifest_path)
    build_command = spec.build_command
    manifest = read_json_object(manifest_path, f"build manifest not found (run `{build_command}`)")
    if manifest.get("status", "built") != "built":
        raise InputError(manifest_path, f"the build failed: {manifest.get('error')}", "key 'status'")
    for key in ("extension", "library", "torch_version"):
        if key not in manifest:
            raise InputError(manifest_path, f"manifest lacks key {key!r}")
    if manifest["torch_version"] != torch.__version__:
        raise InputError(
            manifest_path,
            f"kernels were built for torch {manifest['torch_version']}, this is torch "
            f"{torch.__version__}; rebuild",
            "key 'torch_version'",
        )
    if "source_sha256" not in manifest or "sources" not in manifest:
        raise InputError(
            manifest_path,
            "the build records no source digest (an older membench built it); rebuild with "
            f"`{build_command}`",
        )
    sources = [spec.source_dir / str(name) for name in manifest["sources"]]
    missing = [path for path in sources if not path.is_file()]
    if missing:
        raise InputError(
            manifest_path,
            f"source {missing[0]} of this build no longer exists; rebuild with `{build_command}`",
            "key 'sources'",
        )
    if sources_digest(sources) != manifest["source_sha256"]:
        raise InputError(
            manifest_path,
            f"the kernels were built from other sources than {spec.source_dir} holds now; rebuild "
            f"with `{build_command}`",
            "key 'source_sha256'",
        )
    library = manifest_path.parent / manifest["library"]
    try:
        regular_file(library)  # importing it would wait forever on a named pipe
    except InputError as exc:
        raise InputError(
            manifest_path, f"built library {library} {exc.problem}; rebuild", "key 'library'"
        ) from None
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
        lines = (
            subprocess.run(command, capture_output=True, text=True, check=True, timeout=30)
            .stdout.strip()
            .splitlines()
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return (lines[-1] if last else lines[0]) if lines else None
