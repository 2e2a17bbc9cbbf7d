"""The one exception type for bad input."""

from __future__ import annotations

import os
import re

__all__ = ["ECHO_CHARACTERS", "PROBLEM_CHARACTERS", "InputError", "one_line", "shorten"]

# A message names a path, a place and a problem that may quote the bad value itself: a 20 MB line
# quoted in full would bury the message, so each piece is cut to about this many characters.
ECHO_CHARACTERS = 200
# The problem is a sentence around the quoted value, and may list what was expected.
PROBLEM_CHARACTERS = 500
# Characters that end or break a line on a terminal or in a log (C0, DEL, C1, Unicode separators).
_LINE_BREAKING = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def shorten(text: str, limit: int = ECHO_CHARACTERS) -> str:
    """``text`` if at most ``limit`` characters, else its head and tail around an ellipsis that
    gives the original length (the tail often says what was expected, or names the file)."""
    if len(text) <= limit:
        return text
    tail = limit // 4
    return f"{text[: limit - tail]} ... ({len(text)} characters) ... {text[-tail:]}"


def one_line(text: str) -> str:
    """``text`` with every character that would break the line written as its escape (``\\n``)."""
    return _LINE_BREAKING.sub(lambda match: repr(match.group())[1:-1], text)


class InputError(ValueError):
    """Bad input: names the file, where in it (line, column or key), and what was expected.

    The message is one line, each piece shortened (:func:`shorten`, :func:`one_line`); the
    attributes keep what was given.

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
        location = shorten(self.path) if self.path else "<input>"
        if self.where:
            location = f"{location}, {shorten(self.where)}"
        return one_line(f"{location}: {shorten(self.problem, PROBLEM_CHARACTERS)}")
