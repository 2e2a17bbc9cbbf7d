"""Every method trains under autocast (CPU bfloat16 here; CUDA float16/bfloat16 in test_gpu.py)."""

from __future__ import annotations

import pytest
import torch

from membench.division.bench import make_optimizer, prepare_model, random_batch, training_step
from membench.division.kernels import TORCH_KERNELS
from membench.division.options import AMP_CHOICES, METHODS, MethodSpec
from membench.division.precision import Precision

CPU = torch.device("cpu")


def _model(method: str, model: str = "resnet18"):
    built, _ = prepare_model(model, method, 10, CPU, MethodSpec(), TORCH_KERNELS, seed=0, width=4)
    return built


@pytest.mark.parametrize("method", METHODS)
def test_every_method_trains_under_cpu_bfloat16_autocast(method):
    model = _model(method)
    optimizer = make_optimizer(model, lr=0.05)
    inputs, targets = random_batch(4, 16, 10, CPU, seed=0)
    precision = Precision("bf16", CPU)
    losses = [training_step(model, optimizer, inputs, targets, precision=precision) for _ in range(4)]
    assert all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < losses[0]
    assert all(p.dtype == torch.float32 and torch.isfinite(p).all() for p in model.parameters())
    assert all(p.grad is None or p.grad.dtype == torch.float32 for p in model.parameters())


def test_resnet50_bottlenecks_train_under_cpu_bfloat16_autocast():
    model = _model("division", "resnet50")
    optimizer = make_optimizer(model)
    inputs, targets = random_batch(2, 32, 10, CPU, seed=0)
    assert torch.isfinite(
        torch.tensor(training_step(model, optimizer, inputs, targets, precision=Precision("bf16", CPU)))
    )


def test_unknown_precision_is_refused():
    assert AMP_CHOICES == ("none", "bf16", "fp16")
    with pytest.raises(ValueError, match="amp must be one of"):
        Precision("fp8", CPU)
