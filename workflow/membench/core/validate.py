"""The data-validation layer: every file a job reads is checked here, at the boundary.

Each check raises :class:`~membench.core.errors.InputError` naming the file, the line or column,
and what was expected. Line numbers count the header as line 1, as an editor shows them.

Every file a user can name or place is opened with :func:`open_regular` (or checked with
:func:`regular_file`): only regular files are read, so a named pipe or device put where a file
belongs is refused instead of blocking the job, and a directory is reported as one.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
from pathlib import Path
from typing import IO, TYPE_CHECKING, Iterable

from membench.core import atomic
from membench.core.errors import InputError

if TYPE_CHECKING:  # pandas takes half a second to import; runs that read no CSV table skip it
    import pandas as pd

__all__ = [
    "csv_line",
    "int_column",
    "open_regular",
    "read_csv_columns",
    "read_json_object",
    "read_yaml",
    "readable_nonempty_file",
    "regular_file",
    "safe_join",
    "unique_column",
]


def _not_regular(mode: int) -> str | None:
    """What a file of ``mode`` is when it is not a regular file, in words; None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    return "is a directory" if stat.S_ISDIR(mode) else f"is {atomic.file_kind(mode)}, not a regular file"


def _os_problem(path: Path, exc: OSError, missing: str) -> str:
    """The words for an ``OSError`` raised by stat or open of ``path``."""
    if exc.errno == errno.ENOENT:
        return "is a broken symbolic link (its target does not exist)" if path.is_symlink() else missing
    if exc.errno == errno.EACCES:
        return "is not readable (permission denied)"
    if exc.errno == errno.ENOTDIR:
        return f"{missing} (a parent is not a directory)"
    if exc.errno == errno.ELOOP:
        return "is a loop of symbolic links"
    return f"cannot be read ({exc.strerror or exc})"


def regular_file(path: str | os.PathLike, missing: str = "does not exist") -> Path:
    """Return ``path`` when it names a regular file (symbolic links followed); raise otherwise.

    The :class:`InputError` names ``path`` and says what it is instead: ``missing`` when it does not
    exist, a directory, a named pipe (reading one blocks until a writer comes), a socket or device,
    a broken symbolic link, or not readable.
    """
    path = Path(path)
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise InputError(path, _os_problem(path, exc, missing)) from None
    problem = _not_regular(mode)
    if problem:
        raise InputError(path, problem)
    return path


def open_regular(path: str | os.PathLike, mode: str = "rb", missing: str = "does not exist", **options) -> IO:
    """Open the regular file ``path`` for reading (``mode`` ``"rb"`` or ``"r"``; ``options`` go to
    :func:`open`); raise :class:`InputError` as :func:`regular_file` does.

    Never blocks, even when the file is replaced by a named pipe or device after the check: the
    descriptor is opened non-blocking (opening a FIFO otherwise waits for a writer), checked with
    ``fstat``, and made blocking again only once it is known to be a regular file.
    """
    if mode not in ("rb", "r"):
        raise ValueError(f"open_regular opens for reading only, not mode {mode!r}")
    path = regular_file(path, missing)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise InputError(path, _os_problem(path, exc, missing)) from None
    try:
        problem = _not_regular(os.fstat(fd).st_mode)
        if problem:
            raise InputError(path, problem)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return open(fd, mode, **options)


def csv_line(row_index: int) -> str:
    """Editor line number of data row ``row_index`` (0-based) in a CSV with one header line."""
    return f"line {row_index + 2}"


def read_csv_columns(
    path: str | os.PathLike,
    required: Iterable[str],
    optional: Iterable[str] = (),
    dtype: dict | None = None,
    other_columns: bool = False,
) -> pd.DataFrame:
    """Read a CSV whose header must hold the ``required`` columns and nothing beyond ``optional``
    (anything beyond, with ``other_columns``); a name ending in ``.gz`` is gzip-compressed.

    Values are read as strings (unless ``dtype`` says otherwise) so that later checks can name the
    line of a malformed value instead of pandas guessing a type.
    """
    import zlib

    import pandas as pd

    path = Path(path)
    required = list(required)
    allowed = set(required) | set(optional)
    compressed = path.name.endswith(".gz")
    with open_regular(path, missing="file not found (expected a CSV file)") as handle:
        try:
            frame = pd.read_csv(
                handle,
                dtype=dtype or str,
                keep_default_na=False,
                skipinitialspace=True,
                compression="gzip" if compressed else None,
            )
        except pd.errors.EmptyDataError:
            raise InputError(
                path, f"file is empty (expected a header with columns {', '.join(required)})"
            ) from None
        except (pd.errors.ParserError, UnicodeDecodeError) as exc:
            raise InputError(path, f"not a readable CSV file ({exc})") from None
        except (OSError, EOFError, zlib.error) as exc:
            if not compressed:
                raise
            raise InputError(path, f"not a readable gzip-compressed CSV file ({exc})") from None
    columns = [str(c).strip() for c in frame.columns]
    frame.columns = columns
    missing = [c for c in required if c not in columns]
    if missing:
        raise InputError(
            path, f"missing column(s) {', '.join(missing)}; found {', '.join(columns)}", "line 1"
        )
    unknown = [c for c in columns if c not in allowed]
    if unknown and not other_columns:
        raise InputError(
            path,
            f"unknown column(s) {', '.join(unknown)}; expected only {', '.join(sorted(allowed))}",
            "line 1",
        )
    duplicated = [c for c in set(columns) if columns.count(c) > 1]
    if duplicated:
        raise InputError(path, f"duplicated column(s) {', '.join(duplicated)}", "line 1")
    return frame


_INT64 = (-(2**63), 2**63 - 1)
_DECIMAL = re.compile(r"[+-]?[0-9]+")
# More digits than any int64 has (19): out of range whatever they are, and not worth converting.
_MAX_DIGITS = 40


def _integer(text: str) -> int | float | None:
    """The integer ``text`` writes, exactly (``3``, ``3.0``, ``1e3``); +-inf for a longer decimal
    than any range admits; ``None`` when it is no integer (``x``, ``2.5``, ``inf``, ``nan``)."""
    if _DECIMAL.fullmatch(text):
        if len(text.lstrip("+-")) > _MAX_DIGITS:
            return -math.inf if text.startswith("-") else math.inf
        return int(text)
    try:
        value = float(text)
    except ValueError:
        return None
    return int(value) if math.isfinite(value) and value.is_integer() else None


def int_column(
    frame: pd.DataFrame, column: str, path, minimum: int | None = None, maximum: int | None = None
) -> pd.Series:
    """Parse ``frame[column]`` as integers within ``[minimum, maximum]`` and int64; name the first bad line.

    Values are compared exactly (as Python integers), so one beyond int64 is reported as written,
    "out of range", never as the number a 64-bit conversion would wrap it to.
    """
    import pandas as pd

    texts = [str(value).strip() for value in frame[column]]
    numbers = [_integer(text) for text in texts]
    low = _INT64[0] if minimum is None else max(minimum, _INT64[0])
    high = _INT64[1] if maximum is None else min(maximum, _INT64[1])
    for i, number in enumerate(numbers):
        if number is None:
            raise InputError(
                path, f"column {column}: {frame[column].iloc[i]!r} is not an integer", csv_line(i)
            )
        if low <= number <= high:
            continue
        if not _INT64[0] <= number <= _INT64[1]:
            raise InputError(
                path, f"column {column}: {texts[i]} is out of range (expected {low} to {high})", csv_line(i)
            )
        if number < low:
            raise InputError(path, f"column {column}: {number} is below the minimum {minimum}", csv_line(i))
        raise InputError(path, f"column {column}: {number} is above the maximum {maximum}", csv_line(i))
    return pd.Series(numbers, index=frame.index, dtype="int64")


def unique_column(frame: pd.DataFrame, column: str, path) -> None:
    """Require non-empty, unique values in ``frame[column]``."""
    values = frame[column].astype(str).str.strip()
    empty = values == ""
    if empty.any():
        raise InputError(path, f"column {column} is empty", csv_line(int(empty.to_numpy().argmax())))
    duplicated = values.duplicated()
    if duplicated.any():
        i = int(duplicated.to_numpy().argmax())
        first = int((values == values.iloc[i]).to_numpy().argmax())
        raise InputError(path, f"column {column}: {values.iloc[i]!r} repeats {csv_line(first)}", csv_line(i))


def safe_join(base: str | os.PathLike, name: str, path, where: str) -> Path:
    """Join ``name`` under directory ``base``, refusing names that escape it.

    Absolute paths, ``..`` components and symbolic links that resolve outside ``base`` are rejected:
    a data list must not make a job read arbitrary files.
    """
    if not name or os.path.isabs(name) or name.startswith("~"):
        raise InputError(path, f"file name {name!r} must be a relative name inside {base}", where)
    parts = Path(name).parts
    if ".." in parts:
        raise InputError(path, f"file name {name!r} escapes the binaries directory {base} ('..')", where)
    base_resolved = Path(base).resolve()
    candidate = (base_resolved / name).resolve()
    if base_resolved != candidate and base_resolved not in candidate.parents:
        raise InputError(path, f"file name {name!r} resolves outside {base}", where)
    return candidate


def read_json_object(path: str | os.PathLike, missing: str) -> dict:
    """Read a JSON file that must hold one object; ``missing`` says what to do when it is absent."""
    path = Path(path)
    with open_regular(path, "r", missing=missing, encoding="utf-8") as handle:
        try:
            value = json.load(handle)
        except json.JSONDecodeError as exc:
            raise InputError(path, f"not valid JSON ({exc.msg})", f"line {exc.lineno}") from None
        except UnicodeDecodeError:
            raise InputError(path, "not valid JSON (not UTF-8 text)") from None
    if not isinstance(value, dict):
        raise InputError(path, "expected a JSON object")
    return value


def read_yaml(path: str | os.PathLike, missing: str):
    """Read a YAML file (any document); ``missing`` says what to do when it is absent. A syntax
    error or text that is not UTF-8 is one line naming the file."""
    import yaml  # here: most readers of this module read no YAML

    with open_regular(path, "r", missing=missing, encoding="utf-8") as handle:
        try:
            return yaml.safe_load(handle)
        except yaml.YAMLError as exc:
            raise InputError(path, f"not valid YAML ({' '.join(str(exc).split())})") from None
        except UnicodeDecodeError:
            raise InputError(path, "not valid YAML (not UTF-8 text)") from None


def readable_nonempty_file(file: Path, path, where: str) -> int:
    """Return the size in bytes of the binary ``file`` that ``path`` names at ``where``; raise,
    naming both, if it is missing, not a regular file, unreadable or empty."""
    try:
        with open_regular(file) as handle:
            size = os.fstat(handle.fileno()).st_size
    except InputError as exc:
        raise InputError(path, f"binary {file} {exc.problem}", where) from None
    if size == 0:
        raise InputError(path, f"binary {file} is empty", where)
    return size
