"""Shared inputs of the memnet tests: toy jobs whose memory follows a known law."""

import numpy as np
import pandas as pd
import pytest

from membench.memnet.dataset import Jobs


def _make_toy_jobs(n=30, seed=0):
    rng = np.random.default_rng(seed)
    acts, params, batch = rng.integers(100, 5000, n), rng.integers(1000, 10**6, n), rng.integers(4, 512, n)
    memory = 1400 + 4 * (params * 4 + acts * batch) / 2**20
    frame = pd.DataFrame(
        {
            "filename": [f"j{i}" for i in range(n)],
            "group": rng.choice(["a", "b", "c"], n),
            "depth": rng.integers(1, 5, n),
            "batch_size": batch,
            "total_activations": acts,
            "total_parameters": params,
            "input_elements": 10,
            "activation": "ReLU",
            "layers": [[("linear", int(a), int(p))] for a, p in zip(acts, params)],
            "oom": False,
            "memory_mib": memory,
        }
    )
    for column in ("batchnorm_layers", "dropout_layers"):
        frame[column] = 0
    return Jobs("mlp", frame, "toy")


@pytest.fixture
def toy_jobs():
    """``toy_jobs(n, seed)``: MLP jobs with memory 1400 MiB + 4 (4 P + A B) bytes, three architectures."""
    return _make_toy_jobs
