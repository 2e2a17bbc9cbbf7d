"""Shared fixtures: deterministic torch, the session's kernel cache, the location of the shared
test data, and a Slurm client that answers at once."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from membench.core.extension import CACHE_DIR_VARIABLE

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"
NO_SLURM_CONTROLLER = Path(__file__).with_name("no_slurm_controller.conf")


def pytest_configure(config):
    """Before collection (tests/workflow/test_cluster.py imports the Slurm plugin): this run's Slurm
    client, and so every Snakemake command a test starts, is told at once that there is no
    controller, instead of retrying for 9 s a controller the machine's configuration names
    (see tests/no_slurm_controller.conf)."""
    os.environ["SLURM_CONF"] = str(NO_SLURM_CONTROLLER)


@pytest.fixture(autouse=True)
def _deterministic_torch():
    """Every test starts from seed 0 and torch's thread count; a command run in-process
    (``membench.cli.main``) sets threads as its process's command layer, which must not leak."""
    threads = torch.get_num_threads()
    torch.manual_seed(0)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def shared_data() -> Path:
    """``../shared/data`` beside the checkout; tests that need it skip where it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is not present beside the checkout")
    return SHARED_DATA


@pytest.fixture(scope="session", autouse=True)
def kernel_cache_dir(tmp_path_factory) -> Path:
    """The per-user kernel cache of this test run (``MEMBENCH_CACHE_DIR`` for commands run in-process
    and the processes tests start): kernels built on first use are built once per run, shared by the
    xdist workers (their build lock serialises them), and never in the user's own cache."""
    base = tmp_path_factory.getbasetemp()
    path = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "membench_cache"
    path.mkdir(exist_ok=True)
    previous = os.environ.get(CACHE_DIR_VARIABLE)
    os.environ[CACHE_DIR_VARIABLE] = str(path)
    yield path
    if previous is None:
        os.environ.pop(CACHE_DIR_VARIABLE, None)
    else:
        os.environ[CACHE_DIR_VARIABLE] = previous
