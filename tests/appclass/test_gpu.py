"""On CUDA the fast implementation prints the reference's bytes (skipped without a GPU)."""

from __future__ import annotations

import pytest
import torch

from membench.appclass.api import classify
from membench.appclass.output import format_beliefs

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def test_cuda_prints_the_reference_bytes(small_rmat, quirk_graphs):
    for graphs in (small_rmat, quirk_graphs):
        assert format_beliefs(classify(*graphs, implementation="torch", device="cuda")) == format_beliefs(
            classify(*graphs)
        )
