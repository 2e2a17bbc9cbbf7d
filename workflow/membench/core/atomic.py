"""Atomic file writes: a temporary file in the target's directory, then ``os.replace``.

A reader (or a killed job) sees either the old file or the complete new one, never a part; a
write that fails because the device is full raises :class:`InputError` naming the target. The
hidden temporaries a killed writer leaves are removed by the next write of the same target.
Nothing membench did not create is replaced or deleted: every file written here is recorded in its
directory's ledger (:data:`LEDGER_NAME`: name, size and modification time), and an existing file is
replaced only while it is the one recorded; a directory output carries a marker file naming its kind
and listing what it holds, and is replaced only when it is a previous output of the same kind that
holds nothing else. A target that is, or holds, one of the job's inputs (given here, or protected for
a whole command with :func:`protect_inputs`) is refused. Every refusal is an :class:`InputError`,
raised before anything is touched.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import fcntl
import functools
import json
import os
import shutil
import socket
import stat
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from membench.core.errors import InputError
from membench.core.processes import process_alive

__all__ = [
    "LEDGER_NAME",
    "OUTPUT_MARKER",
    "atomic_directory",
    "atomic_path",
    "check_replaceable",
    "current_umask",
    "file_kind",
    "output_kind",
    "protect_inputs",
    "refuse_inputs",
    "write_bytes",
    "write_csv",
    "write_json",
    "write_text",
    "written_by_membench",
]

OUTPUT_MARKER = ".membench-output.json"
LEDGER_NAME = ".membench-written"
# Past this size the ledger is rewritten with one line per file that still exists.
_LEDGER_COMPACT_BYTES = 1 << 20
_PROTECTED_INPUTS: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar(
    "protected_inputs", default=()
)
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
    return InputError(
        target, f"cannot write: no space left on the device ({free_bytes} bytes free); {kept} ({exc})"
    )


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


def file_kind(mode: int) -> str:
    """What a file of ``mode`` (``os.stat().st_mode``) is, in words."""
    kinds = (
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a named pipe (FIFO)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    )
    return next((words for test, words in kinds if test(mode)), "a special file")


def _same_file(a: Path, b: Path) -> bool:
    """Whether two paths name one file: the same resolved path, or the same inode (a hard link)."""
    if a.resolve() == b.resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


@contextlib.contextmanager
def protect_inputs(inputs: Iterable[str | os.PathLike]) -> Iterator[None]:
    """Refuse, in every write of this context, a target that is or holds one of ``inputs``.

    The command line wraps each command in it with the command's input paths, so that no output a
    command derives (a Parquet twin, a file inside an output directory) can replace an input.
    """
    token = _PROTECTED_INPUTS.set(_PROTECTED_INPUTS.get() + tuple(os.fspath(p) for p in inputs))
    try:
        yield
    finally:
        _PROTECTED_INPUTS.reset(token)


def refuse_inputs(
    target: str | os.PathLike, inputs: Iterable[str | os.PathLike] = (), contains: bool = True
) -> None:
    """Raise :class:`InputError` when ``target`` is one of ``inputs`` (or of the protected inputs) or,
    with ``contains``, a directory holding one."""
    out = Path(target)
    resolved = out.resolve()
    for item in (*inputs, *_PROTECTED_INPUTS.get()):
        source = Path(item)
        if _same_file(out, source):
            raise InputError(
                target, f"the output path is the input {os.fspath(item)}; choose another output path"
            )
        if contains and resolved in source.resolve().parents:
            raise InputError(
                target, f"the output path contains the input {os.fspath(item)}; choose another output path"
            )


def _ledger_entries(directory: Path) -> dict[str, tuple[int, int]]:
    """The ledger of ``directory``: file name -> (size, mtime_ns) of the last write membench recorded."""
    entries: dict[str, tuple[int, int]] = {}
    try:
        lines = (directory / LEDGER_NAME).read_text(errors="replace").splitlines()
    except OSError:
        return entries
    for line in lines:
        try:
            entry = json.loads(line)
            entries[entry["name"]] = (int(entry["size"]), int(entry["mtime_ns"]))
        except (ValueError, KeyError, TypeError):
            continue  # a line torn by a killed writer names nothing
    return entries


def _identity(path: Path) -> tuple[int, int] | None:
    """(size, mtime_ns) of a regular file (not followed through a symbolic link), else ``None``."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return (info.st_size, info.st_mtime_ns) if stat.S_ISREG(info.st_mode) else None


def written_by_membench(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a regular file that membench wrote and nobody has changed since."""
    path = Path(path)
    found = _identity(path)
    return found is not None and _ledger_entries(path.parent).get(path.name) == found


def _record_written(tmp: Path, target: Path) -> None:
    """Add the finished temporary ``tmp``'s (size, mtime_ns) to the ledger under ``target``'s name,
    before the rename (which keeps both): a ledger that cannot be written (a full disk) then fails
    the write with the previous file still in place, never leaves a written file unrecorded."""
    found = _identity(tmp)
    line = json.dumps({"name": target.name, "size": found[0], "mtime_ns": found[1]}) + "\n"
    fd = os.open(target.parent / LEDGER_NAME, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o666 & ~current_umask())
    with os.fdopen(fd, "r+") as ledger:
        fcntl.flock(ledger, fcntl.LOCK_EX)
        ledger.write(line)
        ledger.flush()
        if os.fstat(ledger.fileno()).st_size > _LEDGER_COMPACT_BYTES:
            entries = _ledger_entries(target.parent)
            kept = {
                name: entry
                for name, entry in entries.items()
                if name == target.name or _identity(target.parent / name) == entry
            }
            ledger.seek(0)
            ledger.truncate()
            ledger.writelines(
                json.dumps({"name": n, "size": e[0], "mtime_ns": e[1]}) + "\n" for n, e in kept.items()
            )


def check_replaceable(path: str | os.PathLike) -> None:
    """Raise :class:`InputError` unless writing ``path`` replaces nothing but membench's own file."""
    target = Path(path)
    try:
        mode = os.lstat(target).st_mode
    except OSError:
        return
    if stat.S_ISDIR(mode):
        raise InputError(target, "the output path is an existing directory; expected a file path")
    if not written_by_membench(target):
        why = "not written by membench" if stat.S_ISREG(mode) else f"{file_kind(mode)}"
        raise InputError(
            target,
            f"exists and is {why} (or was changed since); refusing to replace it"
            " (remove it yourself or choose another output path)",
        )


def _make_parent(target: Path) -> None:
    """Create ``target``'s directory; a failure (a file in the way, no permission) names the target."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        where = exc.filename or target.parent
        raise InputError(target, f"cannot create its directory {where} ({exc.strerror or exc})") from None


def _temporary(target: Path, make: Callable[..., str]) -> Path:
    """A hidden temporary file or directory beside ``target`` (``make``: tempfile.mkstemp or mkdtemp)."""
    _make_parent(target)
    _remove_stale_temporaries(target)
    try:
        made = make(prefix=_temporary_prefix(target), dir=target.parent)
    except OSError as exc:
        raise InputError(target, f"cannot write in {target.parent} ({exc.strerror or exc})") from None
    if isinstance(made, tuple):  # mkstemp: (descriptor, name)
        os.close(made[0])
        made = made[1]
    return Path(made)


@contextlib.contextmanager
def atomic_path(
    path: str | os.PathLike, suffix: str = "", inputs: Iterable[str | os.PathLike] = ()
) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success rename it onto ``path``.

    On an exception the temporary file is removed and ``path`` is left as it was.
    ``suffix`` keeps writers that pick a format from the extension (pyarrow, matplotlib) happy.
    A ``path`` that is one of ``inputs`` (or of the protected inputs), a directory, or a file
    membench did not write is refused (:class:`InputError`); the written file is recorded in the
    directory's ledger.
    """
    target = Path(path)
    refuse_inputs(target, inputs, contains=False)
    check_replaceable(target)
    tmp = _temporary(target, functools.partial(tempfile.mkstemp, suffix=suffix or ".tmp"))
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~current_umask())
        _record_written(tmp, target)
        os.replace(tmp, target)
    except BaseException as exc:
        full = _device_full_error(target, exc)  # before the unlink frees the space
        tmp.unlink(missing_ok=True)
        if full is not None:
            raise full from exc
        raise


def _read_marker(path: Path) -> dict:
    try:
        marker = json.loads((path / OUTPUT_MARKER).read_text())
    except (OSError, ValueError):
        return {}
    return marker if isinstance(marker, dict) else {}


def output_kind(path: str | os.PathLike) -> str | None:
    """The kind recorded in a membench output directory's marker, ``None`` if it has none."""
    kind = _read_marker(Path(path)).get("kind")
    return kind if isinstance(kind, str) else None


def _directory_entries(root: Path) -> dict[str, int]:
    """Every path under ``root`` but its marker: relative path -> size in bytes (-1 for a directory)."""
    entries = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            relative = path.relative_to(root).as_posix()
            if relative != OUTPUT_MARKER:
                info = os.lstat(path)
                entries[relative] = -1 if stat.S_ISDIR(info.st_mode) else info.st_size
    return entries


def _foreign_entry(target: Path) -> str | None:
    """The first path in a previous output directory that membench did not write there, if any."""
    recorded = _read_marker(target).get("entries")
    if not isinstance(recorded, dict):
        return "(its marker lists no contents: written by an older membench)"
    for relative, size in sorted(_directory_entries(target).items()):
        if recorded.get(relative) != size:
            return relative
    return None


@contextlib.contextmanager
def atomic_directory(
    path: str | os.PathLike, kind: str, inputs: Iterable[str | os.PathLike] = ()
) -> Iterator[Path]:
    """Yield an empty temporary directory beside ``path``; on success it replaces ``path``.

    The finished directory carries a marker (:data:`OUTPUT_MARKER`) recording ``kind`` and every
    path it holds with its size. An existing ``path`` is replaced only when it is a directory with
    the marker of the same ``kind`` (a previous output), holds exactly what its marker lists (no file
    added or changed since) and holds none of ``inputs``; anything else is refused with
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
        foreign = _foreign_entry(target)
        if foreign is not None:
            raise InputError(
                target,
                f"is a previous {kind!r} output, but holds {foreign}, which membench did not write there;"
                " refusing to replace it (move that away or choose another output path)",
            )
    tmp = _temporary(target, tempfile.mkdtemp)
    try:
        os.chmod(tmp, 0o777 & ~current_umask())
        yield tmp
        marker = {"kind": kind, "entries": _directory_entries(tmp)}
        (tmp / OUTPUT_MARKER).write_text(json.dumps(marker, indent=1) + "\n")
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
