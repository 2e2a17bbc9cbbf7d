"""core.options.command_line: a parsed command's options written back as a command line that the
same parser reads to the same values, so that a probe is started with its driver's options."""

from __future__ import annotations

import argparse

import pytest

from membench.core.options import BATCH_SIZE, InputFile, OutputDir, command_line, fields_action, integer, real


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    parser.add_argument("--outdir", type=OutputDir, required=True)
    parser.add_argument("--manifest", type=InputFile, default=None)
    parser.add_argument("--batch-size", type=BATCH_SIZE, default=8)
    parser.add_argument("--interval-s", type=real(0, 10), default=0.05)
    parser.add_argument("--method", choices=("a", "b"), default="a")
    parser.add_argument("--bits", type=integer(1, 8), choices=(2, 4), default=2)
    parser.add_argument("--trace", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--range", nargs=2, action=fields_action(integer(0, 9), integer(0, 9), append=False))
    return parser


@pytest.mark.parametrize(
    "argv",
    [
        ["--outdir", "out"],
        [
            "--outdir",
            "o u t",
            "--manifest",
            "m.json",
            "--batch-size",
            "1024",
            "--interval-s",
            "0.1",
            "--method",
            "b",
            "--bits",
            "4",
            "--no-trace",
            "--verbose",
            "--range",
            "3",
            "7",
        ],
        ["--outdir", "out", "--interval-s", "0.30000000000000004", "--trace"],
    ],
)
def test_a_parsed_command_line_is_written_back_to_the_same_values(argv):
    parser = _parser()
    parsed = vars(parser.parse_args(argv))
    assert vars(parser.parse_args(command_line(parser, parsed))) == parsed


def test_values_of_another_command_pass_on_only_this_parsers_options():
    driver = vars(
        argparse.Namespace(outdir="search", batch_size=64, method="b", start=2, limit=9, step="maxbatch")
    )
    probe = {k: v for k, v in driver.items() if k != "outdir"}
    argv = command_line(_parser(), probe)
    assert argv == ["--batch-size", "64", "--method", "b"]
    assert vars(_parser().parse_args(["--outdir", "p", *argv]))["method"] == "b"


def test_a_value_the_option_cannot_say_is_refused():
    with pytest.raises(ValueError, match="--batch-size cannot say None"):
        command_line(_parser(), {"batch_size": None})
    with pytest.raises(ValueError, match="--verbose cannot say 'yes'"):
        command_line(_parser(), {"verbose": "yes"})


def test_the_division_probe_reads_the_search_options_back():
    from membench.division.commands import build_parser, memory_parser

    search = vars(
        build_parser("membench division").parse_args(
            [
                "maxbatch",
                "--outdir",
                "s",
                "--variant",
                "division",
                "--width",
                "4",
                "--image-size",
                "16",
                "--num-classes",
                "10",
                "--device",
                "cpu",
                "--hfc-bits",
                "4",
                "--amp",
                "bf16",
                "--sample-interval-s",
                "0",
            ]
        )
    )
    probe = vars(
        memory_parser().parse_args(
            [
                *command_line(memory_parser(), {k: v for k, v in search.items() if k != "outdir"}),
                "--outdir",
                "p",
                "--batch-size",
                "3",
            ]
        )
    )
    assert {k: probe[k] for k in probe if k in search and k != "outdir"} == {
        k: search[k] for k in probe if k in search and k != "outdir"
    }
    assert probe["image_size"] == 16 and probe["num_classes"] == 10  # the search's, not the probe's defaults
