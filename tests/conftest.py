"""Shared fixtures: deterministic torch, the session's kernel cache, the location of the shared
test data, and a Slurm client that answers at once."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

# Before torch (and its OpenMP) is loaded here, so for every process of the run: the xdist workers
# and the commands and Snakemake jobs they start wait passively in OpenMP. They share two cores, and
# a spinning OpenMP thread holds a core that a descheduled partner, or another process, needs
# (membench.cli sets the same for its appclass and memnet commands).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest  # noqa: E402
import torch  # noqa: E402

from membench.core.extension import CACHE_DIR_VARIABLE  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"
NO_SLURM_CONTROLLER = Path(__file__).with_name("no_slurm_controller.conf")
TESTS = Path(__file__).resolve().parent
# The longest test files, longest first (seconds in full runs on the 2-core CI VM, 2026-11-26, which
# vary 2x with what else runs there).
# The two workers take one file at a time (--dist loadfile), so these start first: a long file
# started last would leave the other worker idle at the end. A file missing here only starts later.
LONGEST_FILES = (
    "workflow/test_workflow.py",  # 210-520: the whole DAG, and the kernel builds when it runs first
    "reliability/test_kill_resume.py",  # 150-280: kill chains of seven job types
    "workflow/test_plans.py",  # 85-135
    "reliability/test_workflow_kill.py",  # 80-110
    "division/test_maxbatch.py",  # 65-110: a process per probe
    "division/test_kernels.py",  # 60: the DIVISION CPU kernels' build, unless already built
    "workflow/test_quoting.py",  # 60
    "reliability/test_adversarial.py",  # 55-100
    "appclass/test_native.py",  # 40: the appclass kernels' build, unless already built
    "division/test_cuda_source.py",  # 37-56: nvcc
    "division/test_cuda_emulated.py",  # 25-40: g++ builds the CUDA kernels for their CPU emulation
    "workflow/test_cluster.py",  # 37-98
    "division/test_train.py",  # 35-200
    "robust/test_distributed.py",  # 30
)


def pytest_configure(config):
    """Before collection (tests/workflow/test_cluster.py imports the Slurm plugin): this run's Slurm
    client, and so every Snakemake command a test starts, is told at once that there is no
    controller, instead of retrying for 9 s a controller the machine's configuration names
    (see tests/no_slurm_controller.conf). An xdist worker computes on one torch thread. The files
    run in the order of :func:`pytest_collection_modifyitems`, not pytest-xdist's (most tests
    first)."""
    os.environ["SLURM_CONF"] = str(NO_SLURM_CONTROLLER)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # Two workers on two cores: one torch thread each for the tests they run in-process (a test of
        # thread counts sets its own; the processes tests start keep torch's default).
        torch.set_num_threads(1)
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    """:data:`LONGEST_FILES` first, in their order; then the other files, most tests first (the order
    pytest-xdist gives them); each file's tests in their own order."""
    tests_in_file = Counter(item.path for item in items)

    def order(item):
        relative = item.path.relative_to(TESTS).as_posix() if item.path.is_relative_to(TESTS) else ""
        rank = LONGEST_FILES.index(relative) if relative in LONGEST_FILES else len(LONGEST_FILES)
        return rank, -tests_in_file[item.path]

    items.sort(key=order)


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
