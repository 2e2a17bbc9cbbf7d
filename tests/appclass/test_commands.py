"""``membench appclass``: exact stdout, .npy, bad input, benchmark job, generators, table and plots."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from membench.cli import main
from membench.core.timing import TIMING_FIELDS


def test_run_prints_exactly_the_reference_output(georgiy_paths, capsys, tmp_path):
    npy = tmp_path / "beliefs.npy"
    assert (
        main(
            [
                "appclass",
                "run",
                *map(str, georgiy_paths[:4]),
                "--implementation",
                "reference",
                "--out-npy",
                str(npy),
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    assert captured.out == georgiy_paths[4].read_text()
    beliefs = np.load(npy, allow_pickle=False)
    assert beliefs.shape == (1000, 10) and beliefs.dtype == np.float64


def test_run_with_torch_prints_close_values(quirk_paths, capsys):
    assert main(["appclass", "run", *map(str, quirk_paths[:4]), "--kernels", "torch", "--threads", "1"]) == 0
    printed = capsys.readouterr().out.splitlines()
    expected = quirk_paths[4].read_text().splitlines()
    assert len(printed) == len(expected)
    assert all(("nan" in a) == ("nan" in b) for a, b in zip(printed, expected))


def test_bad_input_is_one_line_and_exit_2(quirk_paths, tmp_path, capsys):
    bad = tmp_path / "edges.txt"
    bad.write_text("2 6\n0 1 1 2 3 4\n0 31 1 2 3 4\n")
    assert main(["appclass", "run", str(quirk_paths[0]), str(bad), *map(str, quirk_paths[2:4])]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip().count("\n") == 0
    assert str(bad) in captured.err and "line 3" in captured.err and "dst 31" in captured.err


PLOT_HEADER = (
    "dataset,variant,implementation,data_edges,pattern_edges,"
    "time_median_s,time_min_s,time_max_s,timing_reliable,timing_flag"
)


@pytest.mark.parametrize(
    "text, problem",
    [
        (None, "file not found"),
        ("", "file is empty"),
        (PLOT_HEADER.replace(",time_median_s", "") + "\nr,v,reference,69,4,0.9,1.1,True,\n", "time_median_s"),
        (PLOT_HEADER + "\nr,v,reference,many,4,1.0,0.9,1.1,True,\n", "line 2: column data_edges"),
    ],
    ids=["missing", "empty", "lacking-column", "bad-edges"],
)
def test_plot_bad_table_is_one_line_naming_it_and_exit_2(tmp_path, capsys, text, problem):
    table = tmp_path / "appclass.csv"
    if text is not None:
        table.write_text(text)
    argv = ["appclass", "plot", "--table", str(table)]
    argv += ["--runtime-png", str(tmp_path / "r.png"), "--speedup-png", str(tmp_path / "s.png")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0
    assert err.startswith(f"membench appclass: error: {table}") and problem in err
    assert not (tmp_path / "r.png").exists()


def test_generators_stats_bench_and_plots(tmp_path, capsys):
    g = tmp_path / "graphs"
    assert (
        main(
            [
                "appclass",
                "generate-rmat",
                "--scale",
                "7",
                "--seed",
                "1",
                "--vertices",
                str(g / "rmat7.Vertex.csv"),
                "--edges",
                str(g / "rmat7.Edges.csv"),
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "appclass",
                "generate-pattern",
                str(g / "rmat7.Vertex.csv"),
                str(g / "rmat7.Edges.csv"),
                "--max-pattern-nodes",
                "5",
                "--seed",
                "2",
                "--vertices",
                str(g / "p5.Vertex.csv"),
                "--edges",
                str(g / "p5.Edges.csv"),
            ]
        )
        == 0
    )
    paths = [str(g / n) for n in ("rmat7.Vertex.csv", "rmat7.Edges.csv", "p5.Vertex.csv", "p5.Edges.csv")]
    assert (
        main(["appclass", "graph-stats", "--out", str(tmp_path / "graphs.csv"), "--pair", "rmat7_p5", *paths])
        == 0
    )
    stats = pd.read_csv(tmp_path / "graphs.csv")
    assert stats["role"].tolist() == ["data", "pattern"] and stats["num_nodes"].tolist() == [129, 5]

    reference_npy = tmp_path / "reference.npy"
    metrics = []
    for implementation, extra in (
        ("reference", ["--out-npy", str(reference_npy)]),
        ("torch", ["--reference-npy", str(reference_npy), "--trace-live-tensors"]),
    ):
        outdir = tmp_path / implementation
        assert (
            main(
                [
                    "appclass",
                    "bench",
                    *paths,
                    "--dataset",
                    "rmat7_p5",
                    "--outdir",
                    str(outdir),
                    "--implementation",
                    implementation,
                    "--threads",
                    "1",
                    "--repeats",
                    "2",
                    *extra,
                ]
            )
            == 0
        )
        metrics.append(outdir / "metrics.json")
        record = json.loads((outdir / "metrics.json").read_text())
        assert record["system"] == "appclass" and record["data_nodes"] == 129 and record["pattern_nodes"] == 5
        assert record["total_ms"] > 0 and record["read_ms"] > 0 and record["formula_mib"] > 0
        assert (
            set(TIMING_FIELDS) <= set(record)
            and record["time_unit"] == "repeat"
            and record["time_samples"] == 1
        )
        assert (outdir / "memlog.csv").is_file()
    assert record["agrees_with_reference"] is True and record["reference_max_rel_diff"] < 1e-9
    assert record["peak_tensor_mib"] > 0 and record["trace_live_tensors"] is True

    table = tmp_path / "appclass.csv"
    assert main(["table", "metrics", "--out", str(table), *map(str, metrics)]) == 0
    assert (
        main(
            [
                "appclass",
                "plot",
                "--table",
                str(table),
                "--runtime-png",
                str(tmp_path / "runtime.png"),
                "--speedup-png",
                str(tmp_path / "speedup.png"),
            ]
        )
        == 0
    )
    assert (tmp_path / "runtime.png").stat().st_size > 0 and (tmp_path / "speedup.png").stat().st_size > 0


def test_agreement_flags_differences():
    from membench.appclass.bench import agreement

    reference = np.array([[-1.0, -2.0], [np.nan, -np.inf]])
    assert agreement(reference.copy(), reference, "float64")["agrees_with_reference"]
    nudged = reference * (1 + 1e-11)
    assert agreement(nudged, reference, "float64")["agrees_with_reference"]
    assert not agreement(reference * (1 + 1e-7), reference, "float64")["agrees_with_reference"]
    assert agreement(reference * (1 + 1e-7), reference, "float32")["agrees_with_reference"]
    moved_nan = np.array([[-1.0, np.nan], [-3.0, -np.inf]])
    assert not agreement(moved_nan, reference, "float64")["agrees_with_reference"]
    assert not agreement(reference[:1], reference, "float64")["agrees_with_reference"]


@pytest.mark.slow
def test_compare_runs_each_variant_and_checks_its_printed_bytes(tmp_path, quirk_paths):
    outdir = tmp_path / "cmp"
    assert (
        main(
            [
                "appclass",
                "compare",
                *map(str, quirk_paths[:4]),
                "--dataset",
                "quirk",
                "--outdir",
                str(outdir),
                "--variant",
                "reference:cpu:1:float64",
                "--variant",
                "torch:cpu:1:float64:torch",
                "--rounds",
                "1",
                "--build-manifest",
                str(tmp_path / "absent.json"),
            ]
        )
        == 0
    )
    summary = pd.read_csv(outdir / "summary.csv")
    assert summary["variant"].tolist() == ["reference-cpu-t1-float64", "torch-cpu-t1-float64-kernels_torch"]
    assert (summary["run_s"] > 0).all() and (summary["edge_copy_ms"] > 0).all()
    assert summary["all_print_first_variant_bytes"].tolist() == [True, True]
    assert (outdir / "first_variant_output.txt").read_text() == quirk_paths[4].read_text()
    assert pd.read_csv(outdir / "compare.csv")["kernels"].tolist() == ["numpy", "torch"]
