"""The GPUMemNet-format reader: the published CSVs load, bad rows name file, line and column."""

import gzip
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from membench.core.errors import InputError
from membench.memnet.dataset import (
    DEFAULT_BINS,
    activations_per_batch,
    filename_tokens,
    load_jobs,
    memory_target,
)

HEADER = (
    "Filename,Depth,Activations-Params,Activation Function,Total Activations,Total Parameters,"
    "Batch Size,Max GPU Memory (MiB)\n"
)
GOOD_ROW = (
    "input:4_output:2_arch:uniform.out,2,"
    "\"[('linear', 3, 15), ('ReLU', 3, 0), ('linear', 2, 8)]\",ReLU,8,23,16,1500\n"
)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "jobs.csv"
    path.write_text(text)
    return path


@pytest.mark.parametrize("name", ["mlp_data_step1.csv", "mlp_data_step2.csv"])
def test_published_mlp_data_loads_with_published_class_counts(shared_data, name):
    jobs = load_jobs(shared_data / "gpumemnet" / name, "mlp")
    assert len(jobs) == 3000
    assert (jobs.frame["memory_mib"] > 1000).all() and jobs.frame["layers"].map(len).min() >= 2
    assert {"uniform", "pyramid", "bottleneck"} <= set(jobs.frame["group"])


def test_published_class_counts(shared_data):
    jobs = load_jobs(shared_data / "gpumemnet" / "mlp_data_step2.csv", "mlp")
    labels = DEFAULT_BINS["mlp"].label(jobs.frame["memory_mib"])
    # PROVENANCE.txt: 2552 / 347 / 72 / 29 jobs in the 1,000 MiB classes from 1,000 MiB
    assert np.bincount(labels).tolist()[:4] == [2552, 347, 72, 29]
    first = jobs.frame.iloc[0]
    assert first["layers"][0] == ("linear", 1173, 2753031) and first["input_elements"] == 2346
    assert first["batchnorm_layers"] == 2 and first["group"] == "pyramid"


def test_good_row_and_filename_tokens(tmp_path):
    jobs = load_jobs(_write(tmp_path, HEADER + GOOD_ROW), "mlp")
    row = jobs.frame.iloc[0]
    assert row["batch_size"] == 16 and row["memory_mib"] == 1500 and row["input_elements"] == 4
    assert row["group"] == "uniform" and not row["oom"]
    assert filename_tokens("a:1_arch:inverted_pyramid_b:x.out") == {
        "a": "1",
        "arch": "inverted_pyramid",
        "b": "x",
    }


def test_what_the_memory_counts_says_whether_the_cuda_context_is_in_it(tmp_path):
    # GPUMemNet's files name no Memory Source: nvidia-smi's figure, the CUDA context in it.
    assert memory_target(load_jobs(_write(tmp_path, HEADER + GOOD_ROW), "mlp")).endswith(
        "(CUDA context included)"
    )
    measured = HEADER.replace("\n", ",Memory Source\n") + GOOD_ROW.replace("\n", ",nvml_peak_mib\n")
    target = memory_target(load_jobs(_write(tmp_path, measured), "mlp"))
    assert target.startswith("NVML's peak of the GPU above a baseline")
    assert target.endswith("(context excluded)")


def test_missing_column_is_named(tmp_path):
    path = _write(tmp_path, HEADER.replace(",Batch Size", "") + GOOD_ROW.replace(",16,", ","))
    with pytest.raises(InputError, match=r"jobs.csv, line 1: missing column\(s\) Batch Size"):
        load_jobs(path, "mlp")


def test_non_literal_layer_list_names_line_and_column(tmp_path):
    bad = GOOD_ROW.replace("[('linear', 3, 15)", "[__import__('os').getcwd()")
    with pytest.raises(
        InputError, match=r"jobs.csv, line 3, column Activations-Params: not a Python literal"
    ):
        load_jobs(_write(tmp_path, HEADER + GOOD_ROW + bad), "mlp")


def test_layer_list_of_wrong_shape_is_refused(tmp_path):
    bad = GOOD_ROW.replace("('linear', 2, 8)", "('linear', -2, 8)")
    with pytest.raises(InputError, match=r"line 2, column Activations-Params: expected a list of"):
        load_jobs(_write(tmp_path, HEADER + bad), "mlp")


def test_negative_memory_names_line_and_column(tmp_path):
    bad = GOOD_ROW.replace(",1500", ",-3")
    with pytest.raises(InputError, match=r"line 3, column Max GPU Memory \(MiB\): -3(\.0)? MiB is negative"):
        load_jobs(_write(tmp_path, HEADER + GOOD_ROW + bad), "mlp")


def test_non_integer_batch_and_unknown_status_are_named(tmp_path):
    with pytest.raises(InputError, match=r"jobs.csv, line 2: column Batch Size: 'x' is not an integer"):
        load_jobs(_write(tmp_path, HEADER + GOOD_ROW.replace(",16,", ",x,")), "mlp")
    header = HEADER.replace("\n", ",Status\n")
    with pytest.raises(
        InputError, match=r"line 2, column Status: 'CRASHED' is not SUCCESSFUL, OOM_CRASH or a"
    ):
        load_jobs(_write(tmp_path, header + GOOD_ROW.replace("\n", ",CRASHED\n")), "mlp")


def test_failed_runs_and_rows_without_a_measurement_are_dropped(tmp_path):
    header = HEADER.replace("\n", ",Status\n")
    rows = [
        GOOD_ROW.replace("\n", ",SUCCESSFUL\n"),
        GOOD_ROW.replace("\n", ",UNKNOWN_ERROR\n"),  # GPUMemNet's cleaner: the run failed
        GOOD_ROW.replace(",1500", ",").replace("\n", ",SUCCESSFUL\n"),  # no nvidia-smi log found
        GOOD_ROW.replace(",1500", ",").replace("\n", ",OOM_CRASH\n"),
    ]
    jobs = load_jobs(_write(tmp_path, header + "".join(rows)), "mlp")
    assert len(jobs) == 2 and jobs.dropped_failed == 2 and jobs.frame["oom"].tolist() == [False, True]


def test_gzip_compressed_csvs_are_read_and_a_damaged_one_is_named(tmp_path):
    path = tmp_path / "jobs.csv.gz"
    path.write_bytes(gzip.compress((HEADER + GOOD_ROW).encode()))
    assert load_jobs(path, "mlp").frame["memory_mib"].tolist() == [1500]
    path.write_bytes(gzip.compress((HEADER + GOOD_ROW).encode())[:40])
    with pytest.raises(InputError, match=r"jobs.csv.gz: not a readable gzip-compressed CSV file"):
        load_jobs(path, "mlp")


def test_gpumemnet_cnn_and_transformer_file_names_parse_with_their_multiword_keys():
    cnn = (
        "input_channels:3_num_classes:453_depth:22_arch:inverted_pyramid_base_filters:98_batch:62"
        "_input_size:174_act:gelu_dropout:0.34_dropout:True_batchnorm:False.out"
    )
    assert filename_tokens(cnn) == {
        "input_channels": "3",
        "num_classes": "453",
        "depth": "22",
        "arch": "inverted_pyramid",
        "base_filters": "98",
        "batch": "62",
        "input_size": "174",
        "act": "gelu",
        "dropout": "0.34",
        "dropout#2": "True",
        "batchnorm": "False",
    }
    transformer = "num_classes:2_embedding_size:128_seq_length:512_batch_size:64.out"
    assert filename_tokens(transformer) == {
        "num_classes": "2",
        "embedding_size": "128",
        "seq_length": "512",
        "batch_size": "64",
    }


def test_activations_counted_per_batch_are_read_per_sample():
    # Linear(16 -> 5) at batch 4: per sample 5 outputs and 85 parameters (a multiple of 5); a file
    # that counted the batch writes 20 outputs, and 85 is no multiple of 20.
    per_batch = [[("conv2d", 4 * 64, 10), ("linear", 20, 85)], [("linear", 8 * 3, 3 * 17)]]
    assert activations_per_batch(per_batch, [4, 8])
    assert not activations_per_batch([[("conv2d", 64, 10), ("linear", 5, 85)]], [4])
    # the linear layer cannot tell: per sample, as every membench file is
    assert not activations_per_batch([[("linear", 20, 100)]], [4])
    # a layer whose count does not divide by the batch: not counted per batch
    assert not activations_per_batch([[("conv2d", 6, 10), ("linear", 20, 85)]], [4])


def test_oom_rows_are_kept_and_zero_mib_successes_dropped(tmp_path):
    header = HEADER.replace("\n", ",Status\n")
    rows = [
        GOOD_ROW.replace("\n", ",SUCCESSFUL\n"),
        GOOD_ROW.replace(",1500", ",0").replace("\n", ",OOM_CRASH\n"),
        GOOD_ROW.replace(",1500", ",0").replace("\n", ",SUCCESSFUL\n"),
    ]
    jobs = load_jobs(_write(tmp_path, header + "".join(rows)), "mlp")
    assert len(jobs) == 2 and jobs.dropped_failed == 1
    assert jobs.frame["oom"].tolist() == [False, True]


def test_transformer_file_without_its_columns_fails_clearly(tmp_path):
    frame = pd.DataFrame(
        {
            "Batch Size": [4],
            "Depth": [2],
            "Total Activations": [10],
            "Total Parameters": [5],
            "Max GPU Memory (MiB)": [100],
            "Status": ["SUCCESSFUL"],
        }
    )
    frame.to_csv(tmp_path / "t.csv", index=False)
    with pytest.raises(InputError, match="missing column.*Seq Length"):
        load_jobs(tmp_path / "t.csv", "transformer")


@pytest.mark.timeout(10)
def test_a_pipe_or_directory_given_as_the_csv_is_named_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "pipe.csv")
    (tmp_path / "dir.csv").mkdir()
    for name, problem in (
        ("pipe.csv", r"is a named pipe \(FIFO\), not a regular file"),
        ("dir.csv", "is a directory"),
    ):
        with pytest.raises(InputError, match=f"^{re.escape(str(tmp_path / name))}: {problem}$"):
            load_jobs(tmp_path / name, "mlp")


def test_extra_columns_are_kept_out_of_the_way(tmp_path):
    path = _write(tmp_path, HEADER.replace("\n", ",Note\n") + GOOD_ROW.replace("\n", ",x\n"))
    assert len(load_jobs(path, "mlp")) == 1


@pytest.mark.parametrize(
    "column,value,problem",
    [
        ("Batch Size", "inf", r"column Batch Size: 'inf' is not an integer"),
        ("Batch Size", str(2**63), rf"column Batch Size: {2**63} is out of range \(expected 1 to {2**20}\)"),
        ("Batch Size", "2000000", rf"column Batch Size: 2000000 is above the maximum {2**20}"),
        (
            "Total Parameters",
            "1e30",
            rf"column Total Parameters: 1e30 is out of range \(expected 0 to {2**40}\)",
        ),
        ("Max GPU Memory (MiB)", "inf", r", column Max GPU Memory \(MiB\): 'inf' is not a number of MiB"),
        ("Max GPU Memory (MiB)", "1e300", r", column Max GPU Memory \(MiB\): 1e300 MiB is out of range"),
    ],
)
def test_numbers_must_be_finite_and_in_range_naming_line_and_column(tmp_path, column, value, problem):
    frame = pd.read_csv(_write(tmp_path, HEADER + GOOD_ROW), dtype=str)
    frame.loc[len(frame)] = frame.loc[0]
    frame.loc[1, column] = value
    frame.to_csv(tmp_path / "jobs.csv", index=False)
    with pytest.raises(
        InputError,
        match=f"jobs.csv, line 3{problem}" if problem.startswith(",") else f"jobs.csv, line 3: {problem}",
    ):
        load_jobs(tmp_path / "jobs.csv", "mlp")


def test_layer_counts_beyond_their_bound_are_refused(tmp_path):
    bad = GOOD_ROW.replace("('linear', 2, 8)", f"('linear', {10**30}, 8)")
    with pytest.raises(
        InputError, match=r"line 2, column Activations-Params: .*integer counts from 0 to 2\*\*40"
    ):
        load_jobs(_write(tmp_path, HEADER + bad), "mlp")


@pytest.mark.timeout(10)
def test_a_long_layer_list_is_refused_before_it_is_parsed(tmp_path):
    # Parsing takes about 150 bytes of syntax tree per character: 15 MB of list took 4.4 GB.
    layers = "[" + ", ".join(["('ReLU', 3, 0)"] * 2_000_000) + "]"
    bad = GOOD_ROW.replace("[('linear', 3, 15), ('ReLU', 3, 0), ('linear', 2, 8)]", layers)
    with pytest.raises(
        InputError,
        match=rf"line 2, column Activations-Params: a layer list of {len(layers)} "
        "characters; at most 100000 are read$",
    ):
        load_jobs(_write(tmp_path, HEADER + bad), "mlp")
