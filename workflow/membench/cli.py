"""The ``membench`` command line: ``membench <group> <step> [options]``.

Every workflow rule calls one of these commands, so each step also runs (and is tested) without
Snakemake. Bad input ends in a one-line message naming the file and the problem, and exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

__all__ = ["ENVIRONMENT", "GROUPS", "main"]

# group -> (module defining ``build_parser(prog)`` and ``run(args)``, one-line description)
GROUPS: dict[str, tuple[str, str]] = {
    "meter": ("membench.core.commands.meter", "what this machine lets the meter read, and its overhead"),
    "table": ("membench.core.commands.table", "aggregate job metrics into results tables"),
    "bodmas": ("membench.data.bodmas.commands", "BODMAS-shaped datasets: generate, collect, fold, describe"),
    "appclass": (
        "membench.appclass.commands",
        "graph matching by belief propagation: graphs, run, benchmark",
    ),
    "hotconv": (
        "membench.hotconv.commands",
        "MalConv, MalConv2, HotConv, HotConv-Eco: train, memory sweep, plots",
    ),
    "images": (
        "membench.data.images.commands",
        "image datasets: generated digits, ImageFolder and CIFAR to LMDB",
    ),
    "division": (
        "membench.division.commands",
        "DIVISION vs vanilla, ActNN 2-bit, checkpointing: build, memory, speed, accuracy",
    ),
    "robust": (
        "membench.robust.commands",
        "adversarial training with parallel adversary generation: train, table, plots",
    ),
    "memnet": (
        "membench.memnet.commands",
        "GPUMemNet: generate jobs, measure, clean, evaluate and train estimators, predict",
    ),
    "report": (
        "membench.report.commands",
        "the report's pages: landing summary, provenance, one page per table",
    ),
    "summary": (
        "membench.report.terminal",
        "the headline table (memory, time, quality vs published) in a terminal",
    ),
}

# group -> environment its command needs, set (where the environment does not already set it) before
# the group's module, and so torch, OpenMP and Arrow, is imported; child processes inherit it.
# GNU OpenMP threads spin while they wait; on a small machine shared with other work a spinning
# thread holds a core its descheduled partner needs, and every parallel region stalls (measured
# 4x slower than one thread). Waiting passively costs nothing measurable when the cores are free.
_PASSIVE_OPENMP = {"OMP_WAIT_POLICY": "PASSIVE"}
ENVIRONMENT: dict[str, dict[str, str]] = {
    # Arrow's default allocator (mimalloc) kept the CSV reader's freed file and parse buffers, about a
    # table's size, resident in some runs: an RMAT-18 run peaked at 1.7 GB instead of 1.36 GB. The C
    # library's allocator hands them back (the reader's release_unused is then malloc_trim); no slower.
    "appclass": {**_PASSIVE_OPENMP, "ARROW_DEFAULT_MEMORY_POOL": "system"},
    # The small networks trained here stall the same way.
    "memnet": _PASSIVE_OPENMP,
}


def _top_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="membench",
        description="Reproduce, measure and compare memory-efficient GPU training methods.",
    )
    parser.add_argument("--version", action="version", version=f"membench {_version()}")
    groups = parser.add_subparsers(dest="group", metavar="<group>", title="command groups")
    for name, (_, description) in GROUPS.items():
        groups.add_parser(name, help=description, add_help=False)
    return parser


def _version() -> str:
    from membench import __version__

    return __version__


def _plain_text(docstring: str | None) -> str | None:
    """A module docstring as help text: reST literals (````membench x````) shown as plain words."""
    return None if docstring is None else docstring.replace("``", "")


def _one_line_errors(parser: argparse.ArgumentParser) -> None:
    """Make ``parser`` and its subcommands' parsers end a usage error in one line of bounded
    length: argparse quotes the bad value (a choice, a number) in full."""
    from membench.core.errors import PROBLEM_CHARACTERS, one_line, shorten

    def error(message: str):
        parser.print_usage(sys.stderr)
        parser.exit(2, f"{parser.prog}: error: {one_line(shorten(message, PROBLEM_CHARACTERS))}\n")

    parser.error = error
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for subparser in action.choices.values():
                _one_line_errors(subparser)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``membench`` script; returns the process exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    top = _top_parser()
    if not argv or argv[0] not in GROUPS:
        top.parse_args(argv or ["--help"])
        return 2
    for name, value in ENVIRONMENT.get(argv[0], {}).items():
        os.environ.setdefault(name, value)
    module = importlib.import_module(GROUPS[argv[0]][0])
    parser = module.build_parser(f"membench {argv[0]}")
    parser.description = _plain_text(parser.description)
    _one_line_errors(parser)
    args = parser.parse_args(argv[1:])
    from membench.core.atomic import protect_inputs
    from membench.core.errors import InputError
    from membench.core.options import check_command_paths

    try:
        inputs = check_command_paths(args)
        with protect_inputs(inputs):
            module.run(args)
    except InputError as exc:
        print(f"membench {argv[0]}: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
