"""Data-parallel training under torchrun: gradients equal one process's on the whole batch."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from torch import nn

from membench.core.distributed import SINGLE_PROCESS, Ranks, launched_ranks, per_process_batch, process_group
from membench.core.errors import InputError

# Run by torchrun in two processes: each takes half of a fixed batch, gradients are averaged by
# DistributedDataParallel, and rank 0 saves them.
_WORKER = """
import sys, torch
from torch import nn
from membench.core.distributed import data_parallel, per_process_batch, process_group

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3))
inputs, targets = torch.randn(8, 6, generator=torch.Generator().manual_seed(1)), torch.arange(8) % 3
with process_group(torch.device("cpu")) as (ranks, device):
    share = per_process_batch(8, ranks)
    part = slice(ranks.rank * share, (ranks.rank + 1) * share)
    parallel = data_parallel(model, ranks, device)
    nn.functional.cross_entropy(parallel(inputs[part]), targets[part]).backward()
    if ranks.is_main:
        torch.save([p.grad for p in model.parameters()], sys.argv[1])
"""


def _single_process_gradients():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3))
    inputs, targets = torch.randn(8, 6, generator=torch.Generator().manual_seed(1)), torch.arange(8) % 3
    nn.functional.cross_entropy(model(inputs), targets).backward()
    return [p.grad for p in model.parameters()]


@pytest.mark.slow
def test_two_processes_average_to_the_whole_batch_gradient(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(_WORKER)
    out = tmp_path / "grads.pt"
    env = {k: v for k, v in os.environ.items() if k not in {"RANK", "WORLD_SIZE", "LOCAL_RANK"}}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            str(script),
            str(out),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    for parallel, single in zip(torch.load(out, weights_only=True), _single_process_gradients()):
        torch.testing.assert_close(parallel, single, rtol=1e-6, atol=1e-7)


def test_without_a_launcher_there_is_one_process(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert launched_ranks() == SINGLE_PROCESS
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert launched_ranks() == Ranks(rank=1, world_size=4, local_rank=1)
    monkeypatch.setenv("WORLD_SIZE", "four")
    with pytest.raises(InputError, match="not integers"):
        launched_ranks()


def test_global_batch_must_divide_among_processes():
    assert per_process_batch(64, Ranks(0, 4, 0)) == 16
    with pytest.raises(InputError, match="batch size 30 is not divisible by the 4 processes"):
        per_process_batch(30, Ranks(0, 4, 0))


@pytest.mark.slow
def test_a_missing_rendezvous_is_one_clear_error(monkeypatch):
    # Rank 1 of 2 with nobody listening at the master's address: no torch traceback, no hang.
    for name, value in {
        "RANK": "1",
        "WORLD_SIZE": "2",
        "LOCAL_RANK": "1",
        "MASTER_ADDR": "127.0.0.1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MASTER_PORT", "29731")
    with pytest.raises(InputError, match=r"rank 1 of 2 found no process group at 127\.0\.0\.1:29731"):
        with process_group(torch.device("cpu"), timeout_s=2):
            pass
