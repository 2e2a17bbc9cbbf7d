"""Atomic file writes: a temporary file in the target's directory, then ``os.replace``.

A reader (or a killed job) sees either the old file or the complete new one, never a part; a
write that fails because the device is full raises :class:`InputError` naming the target. The
hidden temporaries a killed writer leaves are removed by the next write of the same target.
Nothing membench did not create is replaced: a directory output carries a marker file naming its
kind, and an existing target without the marker of the same kind, or a target that is or holds one
of the job's inputs, is refused with :class:`InputError` before anything is touched.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import socket
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator

from membench.core.errors import InputError
from membench.core.processes import process_alive

OUTPUT_MARKER = ".membench-output.json"
_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
# Below this many free bytes a failed write is reported as a full device: writers such as
# torch.save and liblmdb report ENOSPC as their own error types without the errno.
_FULL_DEVICE_BYTES = 2**20


def _temporary_prefix(target: Path) -> str:
    """Temporaries beside ``target`` are named after it, this host and this process, so that the
    next writer can tell those of a killed writer from those of a running one."""
    return f".{target.name}.{socket.gethostname()}.{os.getpid()}."


def _remove_stale_temporaries(target: Path) -> None:
    """Remove temporaries of ``target`` left by writers on this host that were killed."""
    prefix = f".{target.name}.{socket.gethostname()}."
    try:
        siblings = [p for p in target.parent.iterdir() if p.name.startswith(prefix)]
    except OSError:
        return
    for sibling in siblings:
        pid = sibling.name[len(prefix) :].split(".", 1)[0]
        if pid.isdigit() and not process_alive(int(pid)):
            if sibling.is_dir() and not sibling.is_symlink():
                shutil.rmtree(sibling, ignore_errors=True)
            else:
                sibling.unlink(missing_ok=True)


def _device_full_error(target: Path, exc: BaseException) -> InputError | None:
    """An :class:`InputError` naming ``target`` when ``exc`` happened because its device is full."""
    if not isinstance(exc, Exception) or isinstance(exc, InputError):
        return None
    try:
        stats = os.statvfs(target.parent)
        free_bytes = stats.f_bavail * stats.f_frsize
    except OSError:
        free_bytes = None
    full = (isinstance(exc, OSError) and exc.errno in _FULL_ERRNOS) or (
        free_bytes is not None and free_bytes < _FULL_DEVICE_BYTES
    )
    if not full:
        return None
    kept = "the previous version is unchanged" if target.exists() else "nothing was written"
    return InputError(target, f"cannot write: no space left on the device ({free_bytes} bytes free); {kept} ({exc})")


def current_umask() -> int:
    """The process umask, read without changing it where Linux exposes it (``/proc/self/status``)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def refuse_inputs(target: str | os.PathLike, inputs: Iterable[str | os.PathLike]) -> None:
    """Raise :class:`InputError` when ``target`` is one of ``inputs`` or a directory holding one."""
    out = Path(target).resolve()
    for item in inputs:
        source = Path(item).resolve()
        if source == out or out in source.parents:
            relation = "is" if source == out else "contains"
            raise InputError(target, f"the output path {relation} the input {os.fspath(item)}; choose another output path")


@contextlib.contextmanager
def atomic_path(
    path: str | os.PathLike, suffix: str = "", inputs: Iterable[str | os.PathLike] = ()
) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success rename it onto ``path``.

    On an exception the temporary file is removed and ``path`` is left as it was.
    ``suffix`` keeps writers that pick a format from the extension (pyarrow, matplotlib) happy.
    A ``path`` that is a directory, or one of ``inputs``, is refused (:class:`InputError`).
    """
    target = Path(path)
    refuse_inputs(target, inputs)
    if target.is_dir():
        raise InputError(target, "the output path is an existing directory; expected a file path")
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temporaries(target)
    fd, tmp_name = tempfile.mkstemp(prefix=_temporary_prefix(target), suffix=suffix or ".tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~current_umask())
        os.replace(tmp, target)
    except BaseException as exc:
        full = _device_full_error(target, exc)  # before the unlink frees the space
        tmp.unlink(missing_ok=True)
        if full is not None:
            raise full from exc
        raise


def output_kind(path: str | os.PathLike) -> str | None:
    """The kind recorded in a membench output directory's marker, ``None`` if it has none."""
    marker = Path(path) / OUTPUT_MARKER
    try:
        kind = json.loads(marker.read_text()).get("kind")
    except (OSError, ValueError, AttributeError):
        return None
    return kind if isinstance(kind, str) else None


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike, kind: str, inputs: Iterable[str | os.PathLike] = ()) -> Iterator[Path]:
    """Yield an empty temporary directory beside ``path``; on success it replaces ``path``.

    The finished directory carries a marker (:data:`OUTPUT_MARKER`) recording ``kind``. An
    existing ``path`` is replaced only when it is a directory with the marker of the same ``kind``
    (a previous output) and holds none of ``inputs``; anything else is refused with
    :class:`InputError` and left untouched. The old directory is removed only after the new one is
    in place, so a failed or killed build leaves the old one (or nothing), never a half-written
    one. New directories get the user's umask permissions.
    """
    target = Path(path)
    refuse_inputs(target, inputs)
    if target.exists() or target.is_symlink():
        found = output_kind(target) if target.is_dir() and not target.is_symlink() else None
        if found != kind:
            what = f"a membench {found!r} output" if found else "not a membench output"
            raise InputError(
                target,
                f"exists and is {what}, not a previous {kind!r} output; refusing to replace it"
                " (remove it yourself or choose another output path)",
            )
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temporaries(target)
    tmp = Path(tempfile.mkdtemp(prefix=_temporary_prefix(target), dir=target.parent))
    try:
        os.chmod(tmp, 0o777 & ~current_umask())
        yield tmp
        write_json(tmp / OUTPUT_MARKER, {"kind": kind})
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=_temporary_prefix(target) + "old.", dir=target.parent))
            os.replace(target, old / target.name)
            os.replace(tmp, target)
            shutil.rmtree(old)
        else:
            os.replace(tmp, target)
    except BaseException as exc:
        full = _device_full_error(target, exc)
        shutil.rmtree(tmp, ignore_errors=True)
        if full is not None:
            raise full from exc
        raise


def write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write ``obj`` as indented JSON to ``path`` atomically (NaN is written as null)."""
    write_text(path, json.dumps(_nan_to_none(obj), indent=2, sort_keys=False) + "\n")


def write_csv(path: str | os.PathLike, frame) -> None:
    """Write a pandas DataFrame as CSV (no index) atomically."""
    with atomic_path(path, suffix=".csv") as tmp:
        frame.to_csv(tmp, index=False)


def _nan_to_none(obj: Any) -> Any:
    if isinstance(obj, float) and obj != obj:
        return None
    if isinstance(obj, dict):
        return {k: _nan_to_none(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_nan_to_none(v) for v in obj]
    return obj
