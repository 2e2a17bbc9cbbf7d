"""The data-validation layer: every file a job reads is checked here, at the boundary.

Each check raises :class:`~membench.core.errors.InputError` naming the file, the line or column,
and what was expected. Line numbers count the header as line 1, as an editor shows them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from membench.core.errors import InputError

if TYPE_CHECKING:  # pandas takes half a second to import; runs that read no CSV table skip it
    import pandas as pd


def csv_line(row_index: int) -> str:
    """Editor line number of data row ``row_index`` (0-based) in a CSV with one header line."""
    return f"line {row_index + 2}"


def read_csv_columns(
    path: str | os.PathLike,
    required: Iterable[str],
    optional: Iterable[str] = (),
    dtype: dict | None = None,
) -> pd.DataFrame:
    """Read a CSV whose header must hold the ``required`` columns and nothing beyond ``optional``.

    Values are read as strings (unless ``dtype`` says otherwise) so that later checks can name the
    line of a malformed value instead of pandas guessing a type.
    """
    import pandas as pd

    path = Path(path)
    required = list(required)
    allowed = set(required) | set(optional)
    if not path.is_file():
        raise InputError(path, "file not found (expected a CSV file)")
    try:
        frame = pd.read_csv(path, dtype=dtype or str, keep_default_na=False, skipinitialspace=True)
    except pd.errors.EmptyDataError:
        raise InputError(path, f"file is empty (expected a header with columns {', '.join(required)})") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise InputError(path, f"not a readable CSV file ({exc})") from None
    columns = [str(c).strip() for c in frame.columns]
    frame.columns = columns
    missing = [c for c in required if c not in columns]
    if missing:
        raise InputError(path, f"missing column(s) {', '.join(missing)}; found {', '.join(columns)}", "line 1")
    unknown = [c for c in columns if c not in allowed]
    if unknown:
        raise InputError(
            path, f"unknown column(s) {', '.join(unknown)}; expected only {', '.join(sorted(allowed))}", "line 1"
        )
    duplicated = [c for c in set(columns) if columns.count(c) > 1]
    if duplicated:
        raise InputError(path, f"duplicated column(s) {', '.join(duplicated)}", "line 1")
    return frame


def int_column(frame: pd.DataFrame, column: str, path, minimum: int | None = None, maximum: int | None = None) -> pd.Series:
    """Parse ``frame[column]`` as integers within ``[minimum, maximum]``; name the first bad line."""
    import pandas as pd

    values = pd.to_numeric(frame[column], errors="coerce")
    bad = values.isna() | (values != values.round())
    if bad.any():
        i = int(bad.to_numpy().argmax())
        raise InputError(path, f"column {column}: {frame[column].iloc[i]!r} is not an integer", csv_line(i))
    values = values.astype("int64")
    if minimum is not None and (values < minimum).any():
        i = int((values < minimum).to_numpy().argmax())
        raise InputError(path, f"column {column}: {values.iloc[i]} is below the minimum {minimum}", csv_line(i))
    if maximum is not None and (values > maximum).any():
        i = int((values > maximum).to_numpy().argmax())
        raise InputError(path, f"column {column}: {values.iloc[i]} is above the maximum {maximum}", csv_line(i))
    return values


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
    try:
        value = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(path, missing) from None
    except json.JSONDecodeError as exc:
        raise InputError(path, f"not valid JSON ({exc.msg})", f"line {exc.lineno}") from None
    if not isinstance(value, dict):
        raise InputError(path, "expected a JSON object")
    return value


def readable_nonempty_file(file: Path, path, where: str) -> int:
    """Return the size in bytes of ``file``; raise if it is missing, unreadable or empty."""
    try:
        size = file.stat().st_size
        with open(file, "rb") as handle:
            handle.read(1)
    except FileNotFoundError:
        raise InputError(path, f"binary {file} does not exist", where) from None
    except (PermissionError, IsADirectoryError, OSError) as exc:
        raise InputError(path, f"binary {file} is not readable ({exc.strerror or exc})", where) from None
    if size == 0:
        raise InputError(path, f"binary {file} is empty", where)
    return size
