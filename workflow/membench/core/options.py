"""Command-line option types: paths by role (read or written) and checked before a command runs.

Every path option of every ``membench`` command is declared with one of the path types
(``type=InputFile``, ``type=OutputDir`` ...). They are plain ``str`` subclasses, so commands use the
values as before, and :func:`command_paths` finds them in the parsed arguments: the command line
(:mod:`membench.cli`) refuses, before the command starts, an output that is or contains one of the
command's inputs, an existing output file membench did not write, and an input of the wrong kind (a
directory where a file is read, a named pipe that would block). The inputs then stay protected
while the command runs (:func:`membench.core.atomic.protect_inputs`), whichever function writes.

Every numeric option has a range: ``type=integer(low, high)`` or ``type=real(low, high)`` (or one
of the named ranges below, shared by the commands). A value outside it, or not finite, ends in
argparse's usage error naming the option and the range, before anything runs; the config schema
gives each key that feeds an option the same range (``tests/core/test_option_ranges.py``).
"""

from __future__ import annotations

import argparse
import math
import os
from typing import Any, Iterator, Mapping

from membench.core import atomic, validate
from membench.core.errors import InputError, shorten

__all__ = [
    "add_allocator_option",
    "add_meter_options",
    "BATCH_SIZE",
    "DEFAULT_GRID_INTENSITY_G_PER_KWH",
    "DEVICE_CHOICES",
    "EPOCHS",
    "IMAGE_SIZE",
    "InputDir",
    "InputFile",
    "LEARNING_RATE",
    "MOMENTUM",
    "Number",
    "OutputDir",
    "OutputFile",
    "PathRole",
    "SEED",
    "STEPS",
    "THREADS",
    "TIMEOUT_S",
    "WEIGHT_DECAY",
    "WORKERS",
    "check_command_paths",
    "command_line",
    "command_paths",
    "fields_action",
    "integer",
    "real",
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


class Number:
    """An argparse type: a finite integer or real number within ``[low, high]`` (either end open).

    Called with the option's text it returns the number, or raises ``ArgumentTypeError`` saying
    the range (argparse then names the option). ``value in number`` checks a value already parsed.
    Build one with :func:`integer` or :func:`real`.
    """

    # Longer texts are no number in any range here; int() of a huge text would take long.
    _MAX_TEXT = 64

    def __init__(
        self,
        integral: bool,
        low: int | float,
        high: int | float,
        exclusive_low: bool = False,
        exclusive_high: bool = False,
    ) -> None:
        if not (math.isfinite(low) and math.isfinite(high) and low <= high):
            raise ValueError(f"a range needs finite low <= high, got {low}, {high}")
        self.integral, self.low, self.high = integral, low, high
        self.exclusive_low, self.exclusive_high = exclusive_low, exclusive_high
        self.__name__ = "integer" if integral else "number"

    def __contains__(self, value) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return False
        if self.integral and not isinstance(value, int):
            return False
        above = value > self.low if self.exclusive_low else value >= self.low
        below = value < self.high if self.exclusive_high else value <= self.high
        return above and below

    def describe(self) -> str:
        """The range in words, e.g. ``an integer from 1 to 4096``."""
        low, high = (f"{v}" if isinstance(v, int) else f"{v:g}" for v in (self.low, self.high))
        kind = "an integer" if self.integral else "a number"
        if not (self.exclusive_low or self.exclusive_high):
            return f"{kind} from {low} to {high}"
        low = f"above {low}" if self.exclusive_low else f"at least {low}"
        high = f"below {high}" if self.exclusive_high else f"at most {high}"
        return f"{kind} {low} and {high}"

    def __call__(self, text: str) -> int | float:
        value = None
        if len(text) <= self._MAX_TEXT:
            try:
                value = int(text) if self.integral else float(text)
            except ValueError:
                pass
        if value is None or value not in self:
            raise argparse.ArgumentTypeError(f"expected {self.describe()}, got {shorten(repr(text), 80)}")
        return value

    def __repr__(self) -> str:
        return f"{'integer' if self.integral else 'real'}({self.low}, {self.high})"


def integer(low: int, high: int) -> Number:
    """An argparse type for an integer in ``[low, high]``."""
    return Number(True, low, high)


def real(low: float, high: float, *, exclusive_low: bool = False, exclusive_high: bool = False) -> Number:
    """An argparse type for a finite real number in ``[low, high]``, either end excluded on request."""
    return Number(False, low, high, exclusive_low, exclusive_high)


# Ranges shared by the commands (the config schema repeats them for the keys that feed them).
# Seeds: scikit-learn and NumPy's legacy seeding take 0 .. 2**32 - 1; runs add a fold or an epoch
# to the seed, so half of that leaves room.
SEED = integer(0, 2**31 - 1)
THREADS = integer(1, 4096)
WORKERS = integer(0, 256)
# Batch sizes times an image, a sequence or a file stay far below int64 (2**20 x 2**30 bytes).
BATCH_SIZE = integer(1, 2**20)
EPOCHS = integer(1, 100_000)
STEPS = integer(1, 1_000_000)
IMAGE_SIZE = integer(8, 4096)
LEARNING_RATE = real(0, 100, exclusive_low=True)
MOMENTUM = real(0, 1)
WEIGHT_DECAY = real(0, 1)
# Ten million seconds (four months): longer than any job, short enough for every timer.
TIMEOUT_S = real(0, 1e7, exclusive_low=True)

# The device a measuring job asks for (membench.core.device.resolve_device), here beside the
# meter's options so that every command's parser is built without importing torch.
DEVICE_CHOICES = ("auto", "cpu", "cuda")
DEFAULT_GRID_INTENSITY_G_PER_KWH = 475.0


def add_meter_options(parser, sample_interval_s: float = 0.05) -> None:
    """The meter's (:class:`membench.core.meter.Meter`) command-line options, named as its config
    keys: ``--sample-interval-s`` and ``--grid-intensity-g-per-kwh``."""
    parser.add_argument(
        "--sample-interval-s",
        type=real(0, 3600),
        default=sample_interval_s,
        help="period of the background memory sampler; 0 turns it off",
    )
    parser.add_argument(
        "--grid-intensity-g-per-kwh",
        type=real(0, 10_000, exclusive_low=True),
        default=DEFAULT_GRID_INTENSITY_G_PER_KWH,
        help="grid carbon intensity for co2e_g",
    )


def add_allocator_option(parser, default: bool = True) -> None:
    """``--trace-allocator/--no-trace-allocator``: the config key ``meter.trace_allocator``."""
    parser.add_argument(
        "--trace-allocator",
        action=argparse.BooleanOptionalAction,
        default=default,
        help="on a CPU, follow the allocator through the PyTorch profiler for alloc_peak_mib",
    )


def fields_action(*types, append: bool = True) -> type[argparse.Action]:
    """An action for ``nargs=len(types)`` that converts each field with its own type (a name
    followed by files, say, or a range's bounds), so that only the paths are taken for paths and
    each number has its range. It appends each use (``append=False``: keeps the last)."""
    base = argparse._AppendAction if append else argparse._StoreAction

    class FieldsAction(base):
        field_types = types

        def __call__(self, parser, namespace, values, option_string=None):
            try:
                fields = [kind(value) for kind, value in zip(types, values, strict=True)]
            except argparse.ArgumentTypeError as exc:
                raise argparse.ArgumentError(self, str(exc)) from None
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
    """An input that exists must be of its kind; a missing one is left to its reader to report."""
    if not os.path.lexists(path):
        return
    if not path.directory:
        validate.regular_file(path)
    elif not os.path.isdir(path):
        raise InputError(path, "is not a directory; expected a directory of input files")


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
    output is or (for a directory output) contains an input, two outputs are one path (the second
    would replace the first), a file output exists and was not written by membench, or a directory
    output exists and is not a directory.
    """
    inputs, outputs = command_paths(args)
    for path in inputs:
        _check_input(path)
    for index, path in enumerate(outputs):
        _check_output(path, inputs)
        if any(os.path.realpath(path) == os.path.realpath(other) for other in outputs[:index]):
            raise InputError(path, "is given for two outputs of this command; give each output its own path")
    return inputs


def command_line(parser: argparse.ArgumentParser, values: Mapping[str, Any]) -> list[str]:
    """The options that make ``parser`` parse back to ``values`` (``vars`` of a namespace parsed by
    it, or by another command with the same options): for each optional argument of ``parser``
    whose ``dest`` is in ``values``, its option string and the value. So a command that starts
    another (a probe, a point) passes its own parsed options on without a hand-kept list of them.

    Options not in ``values`` are left out (the parser's default applies, or the caller appends
    them), and so is a ``None`` where the option's default is ``None``. A value the option cannot
    say (``None`` over another default, a flag's value other than its two) raises ``ValueError``.
    """
    argv: list[str] = []
    for action in parser._actions:  # argparse keeps its arguments only here
        if not action.option_strings or action.dest not in values:
            continue
        value, name = values[action.dest], action.option_strings[0]
        if value is None and action.default is None:
            continue
        if isinstance(action, argparse.BooleanOptionalAction) and isinstance(value, bool):
            argv.append(name if value else action.option_strings[1])
        elif isinstance(action, argparse._StoreConstAction) and value in (action.const, action.default):
            if value != action.default:
                argv.append(name)
        elif isinstance(action, argparse._StoreAction) and value is not None:
            argv += [name, str(value)] if action.nargs in (None, "?") else [name, *map(str, value)]
        else:
            raise ValueError(f"{name} cannot say {value!r} on a command line")
    return argv
