"""Shared fixtures: digits as tensors, and a small model trained on them (once per session)."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from membench.robust.data import load_dataset
from membench.robust.models import build_model


@pytest.fixture(scope="session")
def digits():
    return load_dataset("digits", seed=0)


@pytest.fixture(scope="session")
def trained_mlp(digits):
    """An MLP trained on clean digits to about 95% test accuracy (a few seconds)."""
    torch.manual_seed(0)
    model = build_model("mlp", digits.input_shape, 10, 64, seed=0)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    generator = torch.Generator().manual_seed(0)
    for _ in range(15):
        for idx in torch.randperm(len(digits.x_train), generator=generator).split(64):
            loss = F.cross_entropy(model(digits.x_train[idx]), digits.y_train[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model.eval()
