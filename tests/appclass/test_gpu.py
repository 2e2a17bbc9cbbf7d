"""appclass on a CUDA device (``pytest -m gpu``): the fast version's output equals the reference's."""

from __future__ import annotations

import pytest
import torch

from membench.appclass.api import classify
from membench.appclass.bench import agreement

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_cuda_output_equals_the_reference_on_a_small_graph(small_rmat):
    data, pattern = small_rmat
    reference = classify(data, pattern)
    beliefs = classify(data, pattern, implementation="torch", device="cuda")
    result = agreement(beliefs, reference, "float64")
    assert result["agrees_with_reference"], result
    assert beliefs.shape == (data.num_nodes, pattern.num_nodes)
