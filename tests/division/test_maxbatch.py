"""The largest-batch search on a CPU: one subprocess per probe, each probe's result written as it
is measured, a killed search resumed with only the missing probes, bad probe files refused.

Out of memory is injected by ``inject_oom/sitecustomize.py`` (above ``MEMBENCH_TEST_OOM_ABOVE_BATCH``),
which every probe process loads from PYTHONPATH."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import faults
import pandas as pd
import pytest

from membench.cli import main

pytestmark = pytest.mark.slow

CAPACITY = 3
INJECT_DIR = Path(__file__).parent / "inject_oom"
SEARCH = (
    "--variant",
    "vanilla",
    "--width",
    "4",
    "--image-size",
    "16",
    "--num-classes",
    "10",
    "--kernels",
    "torch",
    "--device",
    "cpu",
    "--start",
    "2",
    "--limit",
    "4",
    "--sample-interval-s",
    "0",
)


@pytest.fixture
def inject_oom(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(INJECT_DIR), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("MEMBENCH_TEST_OOM_ABOVE_BATCH", str(CAPACITY))


def _search(outdir):
    return faults.membench("division", "maxbatch", "--outdir", outdir, *SEARCH)


def _probe(outdir, batch):
    return json.loads((outdir / "probes" / f"b{batch}" / "metrics.json").read_text())


def test_each_probe_is_its_own_process_and_the_search_finds_the_capacity(inject_oom, tmp_path):
    outdir = tmp_path / "search"
    faults.run(_search(outdir))
    record = json.loads((outdir / "metrics.json").read_text())
    assert record["largest_batch"] == CAPACITY
    assert record["probes"] == "2:ok 4:oom 3:ok"
    assert record["probe_count"] == record["probes_measured"] == 3
    assert record["device"] == "cpu" and record["variant"] == "vanilla" and record["batch_size"] is None
    oom = _probe(outdir, 4)
    assert oom["status"] == "oom" and "CUBLAS_STATUS_ALLOC_FAILED" in oom["status_message"]
    table = pd.read_csv(outdir / "probes.csv")
    assert table["batch_size"].tolist() == [2, 4, 3] and table["measured_now"].all()
    pids = table["pid"].tolist()
    assert len(set(pids)) == 3 and record["pid"] not in pids


def test_a_killed_search_resumes_measuring_only_the_missing_probes(inject_oom, tmp_path):
    outdir = tmp_path / "search"
    first = outdir / "probes" / "b2" / "metrics.json"
    killed = faults.kill_during(_search(outdir), 0.0, signal.SIGKILL, started=first.exists)
    assert killed and not (outdir / "metrics.json").exists()
    kept = {path: path.read_bytes() for path in (outdir / "probes").glob("b*/metrics.json")}
    assert first in kept
    faults.run(_search(outdir))
    record = json.loads((outdir / "metrics.json").read_text())
    assert record["largest_batch"] == CAPACITY and record["probe_count"] == 3
    assert record["probes_measured"] == 3 - len(kept)
    assert all(path.read_bytes() == data for path, data in kept.items())
    table = pd.read_csv(outdir / "probes.csv").set_index("batch_size")
    assert not table.loc[2, "measured_now"]


def _write_probe(outdir, batch, text):
    path = outdir / "probes" / f"b{batch}" / "metrics.json"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    return path


def test_a_probe_file_membench_did_not_write_is_refused_untouched(tmp_path, capsys):
    outdir = tmp_path / "search"
    path = _write_probe(outdir, 2, '{"status": "ok", ')
    assert main(["division", "maxbatch", "--outdir", str(outdir), *SEARCH]) == 2
    err = capsys.readouterr().err
    assert f"{path}: exists and is not written by membench" in err and "Traceback" not in err
    assert path.read_text() == '{"status": "ok", ' and not (outdir / "metrics.json").exists()


def test_a_probe_of_other_options_is_measured_again_not_reused(inject_oom, tmp_path, caplog):
    outdir = tmp_path / "other"
    faults.run(
        faults.membench(
            "division",
            "memory",
            "--outdir",
            outdir / "probes" / "b2",
            "--variant",
            "checkpoint",
            "--width",
            "4",
            "--image-size",
            "16",
            "--kernels",
            "torch",
            "--device",
            "cpu",
            "--batch-size",
            "2",
            "--no-trace-live-tensors",
            "--sample-interval-s",
            "0",
        )
    )
    assert main(["division", "maxbatch", "--outdir", str(outdir), *SEARCH]) == 0
    assert "b2/metrics.json: not resumed, the run starts over" in caplog.text
    record = json.loads((outdir / "metrics.json").read_text())
    assert record["largest_batch"] == CAPACITY and record["probes_measured"] == 3
    assert _probe(outdir, 2)["variant"] == "vanilla"
    assert (
        main(["division", "maxbatch", "--outdir", str(outdir), *SEARCH]) == 0
    )  # the same search: all reused
    assert json.loads((outdir / "metrics.json").read_text())["probes_measured"] == 0


def test_start_above_limit_is_refused(tmp_path, capsys):
    code = main(
        [
            "division",
            "maxbatch",
            "--outdir",
            str(tmp_path / "m"),
            "--variant",
            "vanilla",
            "--device",
            "cpu",
            "--start",
            "8",
            "--limit",
            "4",
        ]
    )
    assert code == 2 and "--start 8 is above --limit 4" in capsys.readouterr().err


def test_auto_device_without_a_gpu_is_refused(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    code = main(
        ["division", "maxbatch", "--outdir", str(tmp_path / "m"), "--variant", "vanilla", "--device", "auto"]
    )
    assert code == 2 and "needs a CUDA device" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()
