"""Shared fixtures: deterministic torch, and the location of the shared test data."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


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
