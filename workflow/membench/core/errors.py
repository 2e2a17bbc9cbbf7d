"""The one exception type for bad input."""

from __future__ import annotations

import os


class InputError(ValueError):
    """Bad input: names the file, where in it (line, column or key), and what was expected.

    Parameters
    ----------
    path : str or os.PathLike or None
        The file (or directory) that holds the bad input.
    problem : str
        What was wrong and what was expected, in one sentence.
    where : str, optional
        The line, column or key, e.g. ``"line 3"`` or ``"key 'bodmas.folds'"``.
    """

    def __init__(self, path: str | os.PathLike | None, problem: str, where: str | None = None):
        self.path = None if path is None else os.fspath(path)
        self.where = where
        self.problem = problem
        super().__init__(self._format())

    def __reduce__(self):
        # Pickled from one process to another (a DataLoader worker, a spawned checker) by its fields:
        # the default would call the class with the formatted message alone.
        return type(self), (self.path, self.problem, self.where)

    def _format(self) -> str:
        location = self.path or "<input>"
        if self.where:
            location = f"{location}, {self.where}"
        return f"{location}: {self.problem}"
