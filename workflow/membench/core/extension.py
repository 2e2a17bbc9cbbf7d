"""Build a system's C++/CUDA torch extension into a per-user cache, find it again, and load it.

A build is keyed by what its library depends on (:func:`build_key`): the SHA-256 of the sources and
the headers beside them (:func:`sources_digest`), the torch version and its CUDA version, the Python
ABI, the machine, the C++ compiler's (and for a CUDA build nvcc's and the GPUs') version, and the
flags. It lives in ``<cache>/<extension>/<cpu|cuda>-<key>/`` (``build/`` for torch's builder,
``manifest.json`` written last, atomically), so a command run from any directory, any checkout of
the same sources or any workflow finds the same library, and a changed source, torch or compiler
builds anew beside the old one. The cache directory is the caller's argument; the command layer
takes it from the environment (:func:`user_cache_dir`: ``MEMBENCH_CACHE_DIR``, else
``$XDG_CACHE_HOME/membench``, else ``~/.cache/membench``).

Builds of one key are serialised by an ``flock`` on ``build.lock`` (:func:`build_lock`) that the
kernel releases when the holder dies (SIGTERM, SIGKILL, a node crash), waited for with a timeout.
Holding it, a build that finds no manifest removes the lock file torch's builder left if a build was
killed (torch would wait on it forever) and compiles; ninja reuses the killed build's finished
objects and redoes what it left half-written. A build that finds a manifest has nothing to do. A
failed build (no compiler, no ninja, a compile error) is returned as a manifest with ``"status":
"failed"`` and the error rather than raised, and is not cached: the next build tries again.

The kernels' digest a job records is that of all the extension's sources (C++, CUDA, headers:
:meth:`ExtensionSpec.source_paths`), so the CPU and CUDA kernels of one checkout share it.

A job picks its kernels with :func:`select_kernels`: ``torch`` (none), ``extension`` (built kernels
or a one-line :class:`InputError`) or ``auto`` (built kernels, else pure torch with one log line
saying why, and the reason returned for the job's record). What ran is the metrics field
``kernels`` (:func:`membench.core.metrics.kernels_value`: ``cpp-<digest8>``, ``cuda-<digest8>``,
``torch``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.machinery
import importlib.util
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Iterator, Mapping

from membench.core import atomic
from membench.core.errors import InputError
from membench.core.validate import open_regular, read_json_object, regular_file

__all__ = [
    "build_extension",
    "build_key",
    "build_lock",
    "CACHE_DIR_VARIABLE",
    "cache_entry",
    "cuda_build_possible",
    "CUDA_CHOICES",
    "cxx_compiler_present",
    "DEFAULT_LOCK_TIMEOUT_S",
    "ExtensionSpec",
    "HEADER_SUFFIXES",
    "KERNEL_CHOICES",
    "KernelSelection",
    "load_extension",
    "LOCK_NAME",
    "MANIFEST_NAME",
    "select_kernels",
    "sources_digest",
    "user_cache_dir",
]

MANIFEST_NAME = "manifest.json"
CUDA_CHOICES = ("auto", "yes", "no")
KERNEL_CHOICES = ("auto", "torch", "extension")
LOCK_NAME = "build.lock"
# The environment variable that names the cache directory (read by the command layer).
CACHE_DIR_VARIABLE = "MEMBENCH_CACHE_DIR"
# Files beside the sources that they include: part of every build's digest.
HEADER_SUFFIXES = (".h", ".hpp", ".cuh")
# The lock file torch.utils.cpp_extension creates in the build directory while it builds.
_TORCH_BATON_NAME = "lock"
_BUILD_DIR_NAME = "build"
DEFAULT_LOCK_TIMEOUT_S = 3600.0
_LOCK_POLL_S = 0.2
_KEY_HEX = 16
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExtensionSpec:
    """What one system builds: module name, sources (C++ always, CUDA where built), flags, kernels.

    Every header in ``source_dir`` (:data:`HEADER_SUFFIXES`) counts as a source of every build.
    """

    name: str
    source_dir: Path
    cpu_sources: tuple[str, ...]
    kernels: tuple[str, ...]
    build_command: str  # the command that builds it, named in errors
    cuda_sources: tuple[str, ...] = ()
    cflags: tuple[str, ...] = ("-O3",)
    cuda_cflags: tuple[str, ...] = ("-O3",)
    ldflags: tuple[str, ...] = field(default=())

    def headers(self) -> tuple[str, ...]:
        """Names of the headers in ``source_dir``, sorted."""
        return tuple(
            sorted(p.name for p in self.source_dir.iterdir() if p.suffix in HEADER_SUFFIXES and p.is_file())
        )

    def source_names(self, with_cuda: bool = True) -> tuple[str, ...]:
        """The files in ``source_dir`` a build depends on: compiled sources (the CUDA ones with
        ``with_cuda``), then the headers."""
        compiled = self.cpu_sources + (self.cuda_sources if with_cuda else ())
        return compiled + self.headers()

    def source_paths(self, with_cuda: bool = True) -> list[Path]:
        """:meth:`source_names` as paths. Their :func:`sources_digest` with ``with_cuda`` names the
        kernels in a job's record, whichever of the sources a build compiled."""
        return [self.source_dir / name for name in self.source_names(with_cuda)]


@dataclass(frozen=True)
class KernelSelection:
    """The kernels a job runs: ``module`` (the built extension, or None for pure torch), ``value``
    (the metrics field ``kernels``: ``cpp-<digest8>``, ``cuda-<digest8>`` or ``torch``) and, when
    ``auto`` fell back to pure torch, ``fallback_reason``."""

    module: ModuleType | None
    value: str
    fallback_reason: str | None = None


def user_cache_dir(environ: Mapping[str, str]) -> Path:
    """The cache directory ``environ`` names: ``MEMBENCH_CACHE_DIR``, else ``$XDG_CACHE_HOME/membench``
    (an absolute ``XDG_CACHE_HOME`` only, as the XDG base directory specification says), else
    ``$HOME/.cache/membench``. The command layer passes ``os.environ``."""
    explicit = environ.get(CACHE_DIR_VARIABLE)
    if explicit:
        return Path(explicit).expanduser()
    xdg = environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "membench"
    home = environ.get("HOME")
    return (Path(home) if home else Path.home()) / ".cache" / "membench"


def cuda_build_possible() -> bool:
    """True when torch was built with CUDA and an nvcc compiler is present."""
    import torch
    from torch.utils import cpp_extension

    return torch.version.cuda is not None and cpp_extension.CUDA_HOME is not None


def cxx_compiler_present() -> bool:
    """True when a C++ compiler (``$CXX`` or ``c++``/``g++``) is on the PATH."""
    candidates = [os.environ.get("CXX"), "c++", "g++"]
    return any(c and shutil.which(c) for c in candidates)


def _with_cuda(spec: ExtensionSpec, cuda: str) -> bool:
    """Whether a build of ``spec`` under the ``cuda`` choice compiles the CUDA sources."""
    if cuda not in CUDA_CHOICES:
        raise InputError(
            None, f"cuda must be one of {', '.join(CUDA_CHOICES)}, got {cuda!r}", "option --cuda"
        )
    if cuda == "yes" and not (spec.cuda_sources and cuda_build_possible()):
        raise InputError(
            None,
            "CUDA kernels were asked for but torch has no CUDA, nvcc is missing, or there are none",
            "option --cuda",
        )
    return bool(spec.cuda_sources) and (cuda == "yes" or (cuda == "auto" and cuda_build_possible()))


def build_key(spec: ExtensionSpec, with_cuda: bool) -> tuple[str, dict]:
    """``(key, fields)``: the name of ``spec``'s build in the cache (``cpu-<hex>`` or ``cuda-<hex>``)
    and what it digests, everything the library depends on: source names and SHA-256, torch and
    its CUDA version, the Python ABI tag, the machine, the compiler's version, the flags, and for a
    CUDA build nvcc's version and the GPUs' compute capabilities."""
    import torch

    names = spec.source_names(with_cuda)
    fields = {
        "extension": spec.name,
        "sources": list(names),
        "source_sha256": sources_digest(spec.source_paths(with_cuda)),
        "torch_version": torch.__version__,
        "torch_cuda_version": torch.version.cuda,
        "python_abi": sys.implementation.cache_tag,
        "machine": platform.machine(),
        "compiler": _compiler_version(),
        "cflags": list(spec.cflags),
        "ldflags": list(spec.ldflags),
        "cuda": with_cuda,
        "nvcc": _nvcc_version() if with_cuda else None,
        "cuda_cflags": list(spec.cuda_cflags) if with_cuda else None,
        "cuda_capabilities": _cuda_capabilities() if with_cuda else None,
    }
    digest = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()
    return f"{'cuda' if with_cuda else 'cpu'}-{digest[:_KEY_HEX]}", fields


def cache_entry(spec: ExtensionSpec, cache_dir: str | os.PathLike, with_cuda: bool) -> Path:
    """The directory of ``spec``'s build in ``cache_dir``: ``<cache_dir>/<name>/<key>``."""
    return Path(cache_dir) / spec.name / build_key(spec, with_cuda)[0]


def build_extension(
    spec: ExtensionSpec,
    cache_dir: str | os.PathLike,
    cuda: str = "auto",
    verbose: bool = False,
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
    outdir: str | os.PathLike | None = None,
) -> dict:
    """Find ``spec``'s build in ``cache_dir`` or compile it there; return its manifest.

    ``cuda``: ``auto`` adds the CUDA sources when :func:`cuda_build_possible` (and the spec has
    any), ``yes`` requires them, ``no`` builds the C++ sources only. The manifest records the key's
    fields, ``status`` (``built`` or ``failed`` with ``error``: a failed build is returned, not
    raised, and not cached), ``library`` (relative to the manifest), ``cuda`` (whether the library
    holds CUDA kernels) and ``cache_entry``. With ``outdir`` it is also written to
    ``outdir/manifest.json``, its ``library`` then the cached library's absolute path (the workflow's
    build rules leave this file for Snakemake and the jobs). A bad ``cuda`` choice, or another build
    of the same key holding the lock longer than ``lock_timeout_s``, raises :class:`InputError`.
    """
    with_cuda = _with_cuda(spec, cuda)
    key, fields = build_key(spec, with_cuda)
    entry = Path(cache_dir) / spec.name / key
    manifest = _cached_manifest(entry)
    if manifest is None:
        with build_lock(entry, lock_timeout_s):
            # Another process may have built it while this one waited for the lock.
            manifest = _cached_manifest(entry) or _build(spec, entry, fields, with_cuda, verbose)
    if outdir is not None:
        pointer = dict(manifest)
        if "library" in pointer:
            pointer["library"] = str((entry / manifest["library"]).resolve())
        atomic.write_json(Path(outdir) / MANIFEST_NAME, pointer)
    return manifest


def _cached_manifest(entry: Path) -> dict | None:
    """The manifest of a finished build in ``entry`` whose library is there, else None."""
    path = entry / MANIFEST_NAME
    if not path.is_file():
        return None
    try:
        manifest = read_json_object(path, "build manifest not found")
    except InputError:
        return None
    library = entry / str(manifest.get("library", ""))
    if manifest.get("status") != "built" or not library.is_file():
        return None
    return manifest


def _build(spec: ExtensionSpec, entry: Path, fields: dict, with_cuda: bool, verbose: bool) -> dict:
    """Compile into ``entry`` (its lock held, no finished build there); the manifest."""
    build_dir = entry / _BUILD_DIR_NAME
    build_dir.mkdir(parents=True, exist_ok=True)
    # Holding the lock with no manifest written, whatever is here is a killed or failed build's.
    # torch's lock file would make its builder wait forever; ninja reuses the finished objects and
    # redoes every output its log lacks (those a killed compiler or linker left half-written).
    (build_dir / _TORCH_BATON_NAME).unlink(missing_ok=True)
    manifest = {
        **fields,
        "kernels": list(spec.kernels),
        "status": "built",
        "error": None,
        "python_version": platform.python_version(),
        "cache_entry": str(entry.resolve()),
    }
    start = time.perf_counter()
    sources = [spec.source_dir / name for name in spec.cpu_sources + (spec.cuda_sources if with_cuda else ())]
    try:
        manifest.update(_compile(spec, entry, build_dir, sources, with_cuda, verbose))
    except (RuntimeError, OSError, ImportError, subprocess.SubprocessError) as exc:
        manifest.update(status="failed", error=_last_lines(str(exc)))
    manifest["build_s"] = round(time.perf_counter() - start, 3)
    manifest["built_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    if manifest["status"] == "built":
        atomic.write_json(entry / MANIFEST_NAME, manifest)
    return manifest


def sources_digest(paths: list[Path]) -> str:
    """SHA-256 of the source files, names and contents in order: what a build was compiled from."""
    digest = hashlib.sha256()
    for path in paths:
        with open_regular(path) as handle:
            digest.update(path.name.encode() + b"\0" + handle.read() + b"\0")
    return digest.hexdigest()


def _compile(
    spec: ExtensionSpec, entry: Path, build_dir: Path, sources: list[Path], with_cuda: bool, verbose: bool
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
        "library": os.path.relpath(Path(module.__file__).resolve(), entry.resolve()),
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
    import torch

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
    module_spec = importlib.util.spec_from_file_location(name, str(library), loader=loader)
    module = importlib.util.module_from_spec(module_spec)
    loader.exec_module(module)
    sys.modules[name] = module
    return module


def select_kernels(
    spec: ExtensionSpec,
    choice: str,
    *,
    manifest_path: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    device_type: str = "cpu",
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
) -> KernelSelection:
    """The kernels a job runs for ``choice`` (``auto`` | ``torch`` | ``extension``) on ``device_type``.

    The build is the one ``manifest_path`` names, else ``spec``'s in ``cache_dir``, built there on
    first use (with the CUDA sources for a CUDA job). ``extension`` raises a one-line
    :class:`InputError` when there are no such kernels (no compiler, a failed build, a stale or
    unloadable library, no CUDA kernels for a CUDA job); ``auto`` then runs pure torch, logs one
    line saying why and returns the reason.
    """
    if choice not in KERNEL_CHOICES:
        raise InputError(
            None, f"kernels must be one of {', '.join(KERNEL_CHOICES)}, got {choice!r}", "option --kernels"
        )
    from membench.core.metrics import kernels_value

    if choice == "torch":
        _log.info("%s: kernels torch (asked for)", spec.name)
        return KernelSelection(None, kernels_value("torch"))
    on_cuda = device_type == "cuda"
    try:
        module, manifest = _built_kernels(spec, manifest_path, cache_dir, on_cuda, lock_timeout_s)
    except (InputError, ImportError, OSError) as exc:
        problem = exc.problem if isinstance(exc, InputError) else str(exc)
        where = (exc.path if isinstance(exc, InputError) else None) or manifest_path
        if choice == "extension":
            raise InputError(where, f"{spec.name}: kernels 'extension' cannot run: {problem}") from None
        reason = f"{os.fspath(where)}: {problem}" if where else problem
        _log.warning("%s: kernels torch (auto fell back to pure torch): %s", spec.name, reason)
        return KernelSelection(None, kernels_value("torch"), reason)
    value = kernels_value("cuda" if on_cuda else "cpp", sources_digest(spec.source_paths()))
    _log.info("%s: kernels %s (%s)", spec.name, value, manifest.get("cache_entry") or manifest_path)
    return KernelSelection(module, value)


def _built_kernels(
    spec: ExtensionSpec,
    manifest_path: str | os.PathLike | None,
    cache_dir: str | os.PathLike | None,
    on_cuda: bool,
    lock_timeout_s: float,
) -> tuple[ModuleType, dict]:
    """The loaded module and manifest of the build :func:`select_kernels` uses, or the error."""
    if manifest_path is None:
        if cache_dir is None:
            raise InputError(None, "no build manifest and no cache directory to build into")
        if not cxx_compiler_present():
            raise InputError(None, "no C++ compiler found to build the kernels (set CXX or install g++)")
        if on_cuda and not (spec.cuda_sources and cuda_build_possible()):
            raise InputError(None, "the job runs on CUDA but torch has no CUDA or nvcc is missing")
        manifest = build_extension(spec, cache_dir, "yes" if on_cuda else "no", lock_timeout_s=lock_timeout_s)
        if manifest["status"] != "built":
            raise InputError(None, f"the build failed: {manifest['error']}")
        manifest_path = Path(manifest["cache_entry"]) / MANIFEST_NAME
    module = load_extension(manifest_path, spec)
    manifest = read_json_object(manifest_path, "build manifest not found")
    if on_cuda and not module.has_cuda_kernels():
        raise InputError(
            manifest_path, "the build has no CUDA kernels but the job runs on CUDA", "key 'cuda'"
        )
    return module, manifest


def _compiler_version() -> str | None:
    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    return _first_line([compiler, "--version"]) if compiler else None


def _nvcc_version() -> str | None:
    from torch.utils import cpp_extension

    nvcc = Path(cpp_extension.CUDA_HOME or "") / "bin" / "nvcc"
    return _first_line([str(nvcc), "--version"], last=True) if nvcc.exists() else None


def _cuda_capabilities() -> list[str]:
    """The compute capabilities among the visible GPUs, sorted (torch compiles for them unless told
    otherwise); how many GPUs a job sees does not change its build."""
    import torch

    if not torch.cuda.is_available():
        return []
    capabilities = {torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())}
    return [".".join(map(str, capability)) for capability in sorted(capabilities)]


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
