"""Every command's paths through the one write guard: a table of every subcommand's inputs and
outputs, built from the parsers themselves, so that a new command or option cannot be left out."""

from __future__ import annotations

import argparse
import importlib
import os

import pytest

from membench import cli
from membench.core import atomic
from membench.core.options import Number, PathRole

# Options that take a string which is not a path (names, device strings, expressions). Options of
# several fields (``fields_action``) type each field themselves.
NOT_PATHS = {
    "--command",
    "--dataset",
    "--device",
    "--device-name",
    "--input-shape",
    "--kwargs",
    "--model",
    "--name",
    "--split",
    "--time-split-date",
    "--timm-models",
    "--variant",
}


def _subcommands():
    for group, (module_name, _) in cli.GROUPS.items():
        parser = importlib.import_module(module_name).build_parser(f"membench {group}")
        steps = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not steps:
            yield (group,), parser
            continue
        for step, subparser in steps[0].choices.items():
            yield (group, step), subparser


SUBCOMMANDS = dict(_subcommands())


def _value_actions(parser):
    return [a for a in parser._actions if not isinstance(a, argparse._HelpAction) and a.nargs != 0]


def _role(action) -> type[PathRole] | None:
    return action.type if isinstance(action.type, type) and issubclass(action.type, PathRole) else None


def _path_table():
    """(command, option, role) for every path option of every subcommand."""
    rows = []
    for words, parser in SUBCOMMANDS.items():
        for action in _value_actions(parser):
            if _role(action) is not None:
                rows.append(
                    (
                        " ".join(words),
                        action.option_strings[0] if action.option_strings else action.dest,
                        _role(action).__name__,
                    )
                )
    return rows


def test_every_string_option_is_a_path_with_a_role_or_declared_not_a_path():
    untyped = []
    for words, parser in SUBCOMMANDS.items():
        for action in _value_actions(parser):
            if action.type in (None, str) and not action.choices and not hasattr(action, "field_types"):
                name = action.option_strings[0] if action.option_strings else action.dest
                if name not in NOT_PATHS:
                    untyped.append(f"membench {' '.join(words)} {name}")
    assert untyped == [], "declare these as InputFile/InputDir/OutputFile/OutputDir, or add them to NOT_PATHS"


def test_the_path_table_covers_every_command_with_files():
    table = _path_table()
    commands = {row[0] for row in table}
    assert len(table) > 80
    assert commands == {" ".join(words) for words in SUBCOMMANDS}, (
        "every subcommand reads or writes a named file"
    )


def _argv(words, parser, paths: dict[str, str], tmp_path):
    """A complete command line: required options filled with harmless values, paths from ``paths``."""
    argv = list(words)
    for action in _value_actions(parser):
        name = action.option_strings[0] if action.option_strings else action.dest
        if not action.required and action.option_strings and name not in paths:
            continue
        count = action.nargs if isinstance(action.nargs, int) else 1
        role = _role(action)
        if name in paths:
            values = [paths[name]] * count
        elif name == "--pair":
            values = ["g", *[str(tmp_path / "in.csv")] * 4]
        elif role is not None:
            values = [str(tmp_path / ("in_dir" if role.directory else "in.csv"))] * count
            if not role.reads:
                values = [
                    str(tmp_path / "fresh" / f"{name.strip('-')}{'' if role.directory else '.out'}")
                ] * count
        elif action.choices:
            values = [str(list(action.choices)[0])] * count
        elif isinstance(action.type, Number):
            inside = (
                action.type.low
                if action.type.low in action.type
                else (action.type.low + action.type.high) / 2
            )
            values = [str(inside)] * count
        else:
            values = ["x"] * count
        argv += ([action.option_strings[0]] if action.option_strings else []) + values
    return argv


def _outputs(parser):
    return [a for a in _value_actions(parser) if _role(a) is not None and not _role(a).reads]


def _inputs(parser):
    return [a for a in _value_actions(parser) if _role(a) is not None and _role(a).reads]


OUTPUT_CASES = [
    (words, action.option_strings[0] if action.option_strings else action.dest)
    for words, parser in SUBCOMMANDS.items()
    for action in _outputs(parser)
]


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in_dir").mkdir()
    (tmp_path / "in_dir" / "data.csv").write_text("a\n1\n")
    (tmp_path / "in.csv").write_text("a\n1\n")
    return tmp_path


def _run(argv, capsys):
    code = cli.main(argv)
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("words", "option"), OUTPUT_CASES, ids=[f"{' '.join(w)} {o}" for w, o in OUTPUT_CASES]
)
def test_every_output_option_refuses_a_foreign_file_and_an_input(words, option, sandbox, capsys):
    parser = SUBCOMMANDS[words]
    action = next(a for a in _outputs(parser) if (a.option_strings or [a.dest])[0] == option)
    if action.type.directory:
        foreign = sandbox / "a_file"
        foreign.write_text("mine\n")
        code, err = _run(_argv(words, parser, {option: str(foreign)}, sandbox), capsys)
        assert code == 2 and "exists and is not a directory" in err, err
        assert foreign.read_text() == "mine\n"
    else:
        foreign = sandbox / "mine.csv"
        foreign.write_text("mine\n")
        code, err = _run(_argv(words, parser, {option: str(foreign)}, sandbox), capsys)
        assert code == 2 and "not written by membench" in err, err
        assert foreign.read_text() == "mine\n"
    assert err.count("\n") == 1
    for source in _inputs(parser):
        name = (source.option_strings or [source.dest])[0]
        given = sandbox / ("in_dir" if source.type.directory else "in.csv")
        # A file output onto the input itself; a directory output onto the input or a directory holding it.
        target = sandbox if action.type.directory and not source.type.directory else given
        code, err = _run(_argv(words, parser, {option: str(target), name: str(given)}, sandbox), capsys)
        assert code == 2 and ("is the input" in err or "contains the input" in err), (name, err)
        assert err.count("\n") == 1
        assert (sandbox / "in.csv").read_text() == "a\n1\n"
        assert (sandbox / "in_dir" / "data.csv").read_text() == "a\n1\n"


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_an_input_file_of_the_wrong_kind_is_refused_before_anything_is_opened(kind, sandbox, capsys):
    odd = sandbox / "odd.csv"
    os.mkfifo(odd) if kind == "fifo" else odd.mkdir()
    code, err = _run(["bodmas", "classes", "--metadata", str(odd), "--out", str(sandbox / "c.csv")], capsys)
    assert code == 2
    assert ("named pipe" if kind == "fifo" else "is a directory") in err
    assert not (sandbox / "c.csv").exists()


def test_a_file_membench_wrote_may_be_written_again(sandbox, capsys):
    out = sandbox / "tables" / "classes.csv"
    metadata = sandbox / "metadata.csv"
    metadata.write_text(
        "sha,timestamp,family\n"
        + "".join(f"{i:064x},2020-01-0{i + 1},{'fam' if i % 2 else ''}\n" for i in range(4))
    )
    argv = ["bodmas", "classes", "--metadata", str(metadata), "--out", str(out)]
    assert _run(argv, capsys)[0] == 0
    first = out.read_text()
    assert _run(argv, capsys)[0] == 0
    assert out.read_text() == first
    assert atomic.written_by_membench(out)
