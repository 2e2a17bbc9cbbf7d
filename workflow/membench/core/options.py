"""Command-line option types: paths by role (read or written) and checked before a command runs.

Every path option of every ``membench`` command is declared with one of the path types
(``type=InputFile``, ``type=OutputDir`` ...). They are plain ``str`` subclasses, so commands use the
values as before, and :func:`command_paths` finds them in the parsed arguments: the command line
(:mod:`membench.cli`) refuses, before the command starts, an output that is or contains one of the
command's inputs, an existing output file membench did not write, and an input of the wrong kind (a
directory where a file is read, a named pipe that would block). The inputs then stay protected
while the command runs (:func:`membench.core.atomic.protect_inputs`), whichever function writes.
"""

from __future__ import annotations

import argparse
import os
import stat
from typing import Iterator

from membench.core import atomic
from membench.core.errors import InputError

__all__ = [
    "InputDir",
    "InputFile",
    "OutputDir",
    "OutputFile",
    "PathRole",
    "check_command_paths",
    "command_paths",
    "fields_action",
]


class PathRole(str):
    """A path given on the command line; subclasses say whether it is read or written, file or directory."""

    reads = True
    directory = False


class InputFile(PathRole):
    """A file the command reads."""


class InputDir(PathRole):
    """A directory whose files the command reads."""

    directory = True


class OutputFile(PathRole):
    """A file the command writes (atomically; an existing one only if membench wrote it)."""

    reads = False


class OutputDir(PathRole):
    """A directory the command writes into (its files as :class:`OutputFile`) or replaces as a whole."""

    reads = False
    directory = True


def fields_action(*types) -> type[argparse.Action]:
    """An ``append`` action for ``nargs=len(types)`` that converts each field with its own type
    (a name followed by files, say), so that only the paths are taken for paths."""

    class FieldsAction(argparse._AppendAction):
        def __call__(self, parser, namespace, values, option_string=None):
            fields = [kind(value) for kind, value in zip(types, values, strict=True)]
            super().__call__(parser, namespace, fields, option_string)

    return FieldsAction


def _values(value) -> Iterator[PathRole]:
    if isinstance(value, PathRole):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _values(item)


def command_paths(args: argparse.Namespace) -> tuple[list[PathRole], list[PathRole]]:
    """The input and output paths of a parsed command line, in option order."""
    paths = [path for value in vars(args).values() for path in _values(value)]
    return [p for p in paths if p.reads], [p for p in paths if not p.reads]


def _check_input(path: PathRole) -> None:
    """An input that exists must be of its kind; one that does not is left to its reader to report."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if path.directory:
        if not stat.S_ISDIR(mode):
            raise InputError(path, "is not a directory; expected a directory of input files")
    elif stat.S_ISDIR(mode):
        raise InputError(path, "is a directory; expected a file")
    elif not stat.S_ISREG(mode):
        raise InputError(path, f"is {atomic.file_kind(mode)}, not a regular file; membench reads only regular files")


def _check_output(path: PathRole, inputs: list[PathRole]) -> None:
    atomic.refuse_inputs(path, inputs, contains=path.directory)
    if path.directory:
        if os.path.lexists(path) and not os.path.isdir(path):
            raise InputError(path, "exists and is not a directory; the output must be a directory")
    else:
        atomic.check_replaceable(path)


def check_command_paths(args: argparse.Namespace) -> list[PathRole]:
    """Check a parsed command's paths before it runs; return its inputs (to protect while it runs).

    Raises :class:`InputError` naming the path when an input exists but is of the wrong kind, an
    output is or (for a directory output) contains an input, a file output exists and was not
    written by membench, or a directory output exists and is not a directory.
    """
    inputs, outputs = command_paths(args)
    for path in inputs:
        _check_input(path)
    for path in outputs:
        _check_output(path, inputs)
    return inputs
