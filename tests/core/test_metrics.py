"""The metrics contract and the table aggregator."""

import json

import pandas as pd
import pytest
import torch

from membench.core.errors import InputError
from membench.core.metrics import (
    KERNELS_FIELD,
    MEASURED_FIELDS,
    REQUIRED_FIELDS,
    job_record,
    kernels_value,
    read_metrics,
    write_job_outputs,
)
from membench.core.tables import aggregate_metrics, metrics_table


def _record(variant, seed=0, **extra):
    record = job_record("demo", variant, "tiny", torch.device("cpu"), seed, 4)
    record["wall_s"] = 1.5
    record.update(extra)
    return record


def test_job_outputs_are_written_and_read_back(tmp_path):
    memlog = pd.DataFrame({"t_s": [0.0, 0.1], "phase": ["a", "a"]})
    path = write_job_outputs(tmp_path / "job", _record("v1", accuracy=0.9), memlog)
    record = read_metrics(path)
    assert record["accuracy"] == 0.9
    assert record["device"] == "cpu"
    assert all(field in record for field in REQUIRED_FIELDS + MEASURED_FIELDS)
    assert (tmp_path / "job" / "memlog.csv").exists()


def test_record_missing_required_field_is_rejected(tmp_path):
    record = _record("v1")
    del record["seed"]
    with pytest.raises(InputError, match="seed"):
        write_job_outputs(tmp_path, record)
    assert not (tmp_path / "metrics.json").exists()


def test_nested_record_is_rejected(tmp_path):
    with pytest.raises(InputError, match="flat.*losses"):
        write_job_outputs(tmp_path, _record("v1", losses=[1.0, 0.5]))


def test_malformed_metrics_file_names_the_line(tmp_path):
    path = tmp_path / "metrics.json"
    path.write_text('{"system": "demo",\n oops}')
    with pytest.raises(InputError, match=r"metrics.json, line 2: not valid JSON"):
        read_metrics(path)


def test_aggregated_table_has_stable_columns_and_order(tmp_path):
    paths = [
        write_job_outputs(tmp_path / "b", _record("b", zeta=1, alpha=2)),
        write_job_outputs(tmp_path / "a", _record("a", alpha=3)),
    ]
    csv = tmp_path / "tables" / "demo.csv"
    frame = aggregate_metrics(paths, csv, tmp_path / "tables" / "demo.parquet")
    assert list(frame.columns[: len(REQUIRED_FIELDS)]) == list(REQUIRED_FIELDS)
    extra = list(frame.columns[len(REQUIRED_FIELDS) + len(MEASURED_FIELDS) :])
    assert extra == sorted(extra) and "alpha" in extra and "zeta" in extra
    assert list(frame["variant"]) == ["a", "b"]
    again = metrics_table(reversed(paths))
    pd.testing.assert_frame_equal(frame, again)
    parquet = pd.read_parquet(tmp_path / "tables" / "demo.parquet")
    assert list(parquet.columns) == list(frame.columns)
    assert json.loads(paths[0].read_text())["zeta"] == 1


def test_kernels_are_recorded_under_one_name_and_lead_the_tables_extra_columns(tmp_path):
    digest = "0123abcd" + "e" * 56
    assert kernels_value("cpp", digest) == "cpp-0123abcd" and kernels_value("cuda", digest) == "cuda-0123abcd"
    assert kernels_value("torch") == "torch" and kernels_value("numpy") == "numpy"
    with pytest.raises(ValueError, match="SHA-256"):
        kernels_value("cpp")
    with pytest.raises(ValueError, match="kernel kind"):
        kernels_value("extension")
    with pytest.raises(InputError, match=r"key 'kernels': kernels must be torch, numpy, cpp-<8 hex"):
        write_job_outputs(tmp_path / "bad", _record("v1", **{KERNELS_FIELD: "extension"}))
    paths = [
        write_job_outputs(tmp_path / "a", _record("a", alpha=1, **{KERNELS_FIELD: "cpp-0123abcd"})),
        write_job_outputs(tmp_path / "b", _record("b", alpha=2, **{KERNELS_FIELD: "torch"})),
    ]
    frame = aggregate_metrics(paths, tmp_path / "t.csv", tmp_path / "t.parquet")
    assert frame.columns[len(REQUIRED_FIELDS) + len(MEASURED_FIELDS)] == KERNELS_FIELD
    assert frame[KERNELS_FIELD].tolist() == ["cpp-0123abcd", "torch"]
    assert pd.read_csv(tmp_path / "t.csv")[KERNELS_FIELD].tolist() == ["cpp-0123abcd", "torch"]
