"""The distributed transport: three local processes (trainer and two producers, gloo) train every
batch once within the staleness bound and write the metrics a shared-memory run writes; a killed
producer rank ends the run with a clear error within the timeout; ranks come from torchrun or srun."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pandas as pd
import pytest

from membench.cli import main
from membench.core.distributed import Ranks, launched_ranks

pytestmark = pytest.mark.slow

OPTIONS = [
    "--mode",
    "parallel",
    "--producers",
    "2",
    "--train-limit",
    "192",
    "--test-limit",
    "64",
    "--hidden-units",
    "32",
    "--attack-steps",
    "2",
    "--batch-size",
    "32",
    "--eval-attack-steps",
    "3",
    "--eval-restarts",
    "1",
    "--guard-attack-steps",
    "2",
    "--guard-samples",
    "32",
    "--sample-interval-s",
    "0",
    "--device",
    "cpu",
    "--max-staleness",
    "3",
    "--timeout-s",
    "60",
]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _ranks(outdir, *extra: str, producers: int = 2) -> list[subprocess.Popen]:
    """Trainer and producers as ``torchrun --nproc-per-node P+1`` would start them (its env:// variables)."""
    port = _free_port()
    processes = []
    for rank in range(producers + 1):
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(sys.path),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "RANK": str(rank),
            "WORLD_SIZE": str(producers + 1),
            "LOCAL_RANK": str(rank),
        }
        processes.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "membench.cli",
                    "robust",
                    "train",
                    "--outdir",
                    str(outdir),
                    *OPTIONS,
                    "--transport",
                    "distributed",
                    "--producers",
                    str(producers),
                    *extra,
                ],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    return processes


def _shared_memory_run(outdir) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "membench.cli",
            "robust",
            "train",
            "--outdir",
            str(outdir),
            *OPTIONS,
            "--epochs",
            "1",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_distributed_run_trains_every_batch_once_like_a_shared_memory_run(tmp_path):
    ranks = _ranks(tmp_path / "distributed", "--epochs", "1")
    shared = _shared_memory_run(tmp_path / "shared")
    for process in [*ranks, shared]:
        _, err = process.communicate(timeout=300)
        assert process.returncode == 0, err[-3000:]
    distributed = json.loads((tmp_path / "distributed" / "metrics.json").read_text())
    reference = json.loads((tmp_path / "shared" / "metrics.json").read_text())
    # train() raises unless every batch arrives exactly once; 192 samples in batches of 32 make 6.
    staleness = pd.read_csv(tmp_path / "distributed" / "staleness.csv")
    assert len(staleness) == 6 and staleness["staleness"].max() <= 3
    assert distributed["epochs_done"] == 1 and distributed["staleness_max"] <= 3
    assert distributed["transport"] == "distributed" and reference["transport"] == "shared_memory"
    assert set(distributed) == set(reference)
    assert distributed["train_samples"] == reference["train_samples"] == 192
    assert abs(distributed["clean_accuracy"] - reference["clean_accuracy"]) <= 0.25
    assert not (tmp_path / "distributed" / "metrics.json.tmp").exists()


def test_a_killed_producer_rank_ends_the_run_with_a_clear_error(tmp_path):
    ranks = _ranks(tmp_path, "--epochs", "500", "--timeout-s", "20", producers=1)
    deadline = time.monotonic() + 120
    while not (tmp_path / "checkpoint.pt").exists():
        assert ranks[0].poll() is None, ranks[0].communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the run never finished an epoch"
        time.sleep(0.05)
    ranks[1].send_signal(signal.SIGKILL)
    killed = time.monotonic()
    _, err = ranks[0].communicate(timeout=60)
    assert time.monotonic() - killed < 20
    assert ranks[0].returncode == 1
    assert "membench robust: error: producer rank 1 lost (its process died or its node is unreachable)" in err
    ranks[1].communicate()


def test_distributed_transport_needs_one_process_per_rank(tmp_path, capsys):
    code = main(["robust", "train", "--outdir", str(tmp_path), *OPTIONS, "--transport", "distributed"])
    assert code == 2
    assert (
        "option --transport: the distributed transport runs one process per rank, trainer and 2 producers: "
        "start 3 (torchrun --nproc-per-node or srun --ntasks), got 1" in capsys.readouterr().err
    )


def test_srun_tasks_give_their_ranks_and_torchrun_wins(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SLURM_PROCID", "2")
    monkeypatch.setenv("SLURM_NTASKS", "3")
    monkeypatch.setenv("SLURM_LOCALID", "0")
    assert launched_ranks(from_slurm=True) == Ranks(rank=2, world_size=3, local_rank=0)
    assert launched_ranks() == Ranks()
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert launched_ranks(from_slurm=True) == Ranks(rank=1, world_size=2, local_rank=0)


def test_launchers_start_one_process_per_rank():
    from membench.workflow_support import robust_train_launcher

    run = {"mode": "parallel", "transport": "distributed", "producers": 2, "threads": 1}
    assert robust_train_launcher(run, 1) == "torchrun --standalone --nproc-per-node 3 -m membench.cli"
    assert robust_train_launcher({**run, "transport": "shared_memory"}, 1) == "membench"
    assert robust_train_launcher({**run, "mode": "sequential"}, 2) == "membench"
    assert robust_train_launcher(run, 2).endswith("srun --nodes 2 --ntasks 3 --cpus-per-task 1 membench")
