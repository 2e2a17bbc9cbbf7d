"""The ``membench division`` and ``membench images`` command lines, end to end on tiny inputs."""

from __future__ import annotations

import json
import platform

import pytest

from membench.cli import main
from membench.core.timing import TIMING_FIELDS


def test_memory_job_writes_the_metrics_contract(tmp_path, capsys):
    outdir = tmp_path / "job"
    code = main(
        [
            "division",
            "memory",
            "--outdir",
            str(outdir),
            "--variant",
            "division",
            "--width",
            "4",
            "--batch-size",
            "4",
            "--image-size",
            "16",
            "--kernels",
            "torch",
            "--device",
            "cpu",
            "--sample-interval-s",
            "0",
        ]
    )
    assert code == 0
    record = json.loads((outdir / "metrics.json").read_text())
    assert record["system"] == "division" and record["variant"] == "division" and record["batch_size"] == 4
    assert record["activation_mib"] > 0 and record["total_memory_mib"] > 0 and record["kernels"] == "torch"
    assert record["malloc_keeps_freed"] is False  # memory is measured with the C library's defaults
    assert (outdir / "memlog.csv").is_file()


def test_speed_job(tmp_path):
    outdir = tmp_path / "speed"
    assert (
        main(
            [
                "division",
                "speed",
                "--outdir",
                str(outdir),
                "--variant",
                "checkpoint",
                "--width",
                "4",
                "--batch-size",
                "4",
                "--image-size",
                "16",
                "--train-steps",
                "2",
                "--warmup-steps",
                "1",
                "--device",
                "cpu",
                "--sample-interval-s",
                "0",
            ]
        )
        == 0
    )
    record = json.loads((outdir / "metrics.json").read_text())
    assert record["images_per_s"] > 0 and record["train_steps"] == 2
    assert set(TIMING_FIELDS) <= set(record) and record["time_unit"] == "step" and record["time_samples"] == 1
    assert record["paired_vanilla"] is False and "vs_paired_vanilla" not in record
    # A timed job runs on reused memory, where the C library is glibc.
    assert record["malloc_keeps_freed"] is (platform.libc_ver()[0] == "glibc")


@pytest.mark.parametrize("variant,paired", [("division", True), ("vanilla", False)])
def test_speed_job_paired_with_vanilla(tmp_path, variant, paired):
    outdir = tmp_path / "speed"
    argv = ["division", "speed", "--outdir", str(outdir), "--variant", variant, "--width", "4"]
    argv += ["--batch-size", "4", "--image-size", "16", "--train-steps", "3", "--warmup-steps", "0"]
    assert main([*argv, "--kernels", "torch", "--paired-vanilla", "--sample-interval-s", "0"]) == 0
    record = json.loads((outdir / "metrics.json").read_text())
    assert record["paired_vanilla"] is paired  # vanilla is not paired with itself
    if paired:
        assert record["vs_paired_vanilla"] > 0 and record["paired_vanilla_images_per_s"] > 0
    else:
        assert "vs_paired_vanilla" not in record


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--batch-size", "0"], "argument --batch-size: expected an integer from 1 to 1048576, got '0'"),
        (
            # (a method that compresses: vanilla and checkpointing run no compressor kernels)
            ["--variant", "division", "--batch-size", "4", "--kernels", "extension"]
            + ["--build-manifest", "/nonexistent/manifest.json"],
            "kernels 'extension' cannot run: build manifest not found",
        ),
    ],
)
def test_bad_options_give_one_line_errors(tmp_path, capsys, argv, message):
    try:
        code = main(
            [
                "division",
                "memory",
                "--outdir",
                str(tmp_path / "x"),
                "--variant",
                "vanilla",
                "--device",
                "cpu",
                *argv,
            ]
        )
    except SystemExit as exit_:  # a value out of its range: argparse's usage error
        code = exit_.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err.splitlines()[-1] and "Traceback" not in err
    assert not (tmp_path / "x" / "metrics.json").exists()


def test_plot_needs_a_table(tmp_path, capsys):
    code = main(
        ["division", "plot-memory", "--table", str(tmp_path / "none.csv"), "--out", str(tmp_path / "p.png")]
    )
    assert code == 2 and "none.csv" in capsys.readouterr().err


def test_images_lmdb_command_reports_bad_folder(tmp_path, capsys):
    code = main(["images", "lmdb", "--root", str(tmp_path), "--split", "train", "--out", str(tmp_path / "o")])
    assert code == 2 and "split directory not found" in capsys.readouterr().err


def test_compressors_job_times_both_compressors_against_a_clone(tmp_path):
    outdir = tmp_path / "compressors"
    arguments = ["--batch-size", "2", "--channels", "3", "--image-size", "12", "--repeats", "2"]
    command = ["division", "compressors", "--outdir", str(outdir), *arguments, "--kernels", "torch"]
    assert main(command) == 0
    record = json.loads((outdir / "metrics.json").read_text())
    assert (
        record["job"] == "compressors" and record["kernels"] == "torch" and record["map_shape"] == "2x3x12x12"
    )
    assert record["division_ms"] > 0 and record["actnn2bit_vs_clone"] > 0
    assert set(TIMING_FIELDS) <= set(record)
    assert record["malloc_keeps_freed"] is (platform.libc_ver()[0] == "glibc")
