"""Attacks on inputs in [0, 1] inside an L-infinity ball of radius ``eps``, batched.

Every function takes images ``x`` (float, any shape ``(B, ...)``, values in [0, 1]) and integer
labels ``y`` (``(B,)``, int64) and returns adversarial images of the same shape with
``|x_adv - x| <= eps`` and ``0 <= x_adv <= 1`` elementwise. Only the input gradient is taken
(``torch.autograd.grad``), so the model's parameter ``.grad`` is left untouched. Random starts draw
from ``generator`` (a ``torch.Generator`` on the CPU) so that runs repeat under a fixed seed.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from membench.robust.options import ATTACKS

__all__ = ["attack", "evaluate", "fgsm_rs", "pgd", "pgd_alpha"]


def _random_start(x: torch.Tensor, eps: float, generator: torch.Generator | None) -> torch.Tensor:
    noise = torch.rand(x.shape, generator=generator, dtype=x.dtype).to(x.device)
    delta = (2 * noise - 1) * eps
    return (x + delta).clamp(0, 1) - x


def _input_gradient_sign(
    model: nn.Module, x: torch.Tensor, delta: torch.Tensor, y: torch.Tensor
) -> torch.Tensor:
    delta = delta.detach().requires_grad_(True)
    loss = F.cross_entropy(model(x + delta), y, reduction="sum")
    (grad,) = torch.autograd.grad(loss, delta)
    return grad.sign()


def _project(x: torch.Tensor, delta: torch.Tensor, eps: float) -> torch.Tensor:
    """Nearest point of the eps-ball around ``x`` that stays in [0, 1]."""
    delta = delta.clamp(-eps, eps)
    return (x + delta).clamp(0, 1) - x


def pgd_alpha(eps: float, steps: int) -> float:
    """The PGD step size when none is given: 2.5 eps / ``steps`` (Madry et al.)."""
    return 2.5 * eps / steps


def pgd(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    eps: float,
    alpha: float,
    steps: int,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """PGD (Madry et al.): a uniform random start in the eps-ball, then ``steps`` signed-gradient
    steps of size ``alpha``, each projected back onto the eps-ball and [0, 1]."""
    delta = _random_start(x, eps, generator)
    for _ in range(steps):
        delta = _project(x, delta + alpha * _input_gradient_sign(model, x, delta, y), eps)
    return (x + delta).detach()


def fgsm_rs(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    eps: float,
    alpha: float,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """FGSM with a random start (Wong et al. 2020, alpha = 1.25 eps): one signed-gradient step of
    ``alpha`` from a uniform start in the eps-ball, projected onto the eps-ball and [0, 1]."""
    return pgd(model, x, y, eps, alpha, 1, generator)


def attack(
    name: str,
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    eps: float,
    alpha: float,
    steps: int,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """The training attack ``name`` (``"pgd"`` with ``steps`` steps, or ``"fgsm"``: FGSM-RS)."""
    if name == "fgsm":
        return fgsm_rs(model, x, y, eps, alpha, generator)
    if name == "pgd":
        return pgd(model, x, y, eps, alpha, steps, generator)
    raise ValueError(f"unknown attack {name!r}; expected one of {', '.join(ATTACKS)}")


@torch.no_grad()
def _correct(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return model(x).argmax(dim=1) == y


def evaluate(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    eps: float,
    steps: int,
    restarts: int,
    alpha: float | None = None,
    batch_size: int = 512,
    seed: int = 0,
) -> tuple[float, float]:
    """Clean and robust accuracy (fractions in [0, 1]) of ``model`` on ``(x, y)``.

    Robust accuracy is under a fresh PGD-``steps`` attack with ``restarts`` random starts on the
    current weights: a sample counts as robust only if every restart fails to flip it. ``alpha``
    defaults to :func:`pgd_alpha` (Wong et al.'s evaluation takes 2/255 at eps 8/255). The model is
    put in eval mode and restored.
    """
    alpha = pgd_alpha(eps, steps) if alpha is None else alpha
    generator = torch.Generator().manual_seed(seed)
    was_training = model.training
    model.eval()
    clean = robust = 0
    device = next(model.parameters()).device
    try:
        for start in range(0, len(x), batch_size):
            xb, yb = x[start : start + batch_size].to(device), y[start : start + batch_size].to(device)
            still_correct = _correct(model, xb, yb)
            clean += int(still_correct.sum())
            for _ in range(restarts):
                x_adv = pgd(model, xb, yb, eps, alpha, steps, generator)
                still_correct &= _correct(model, x_adv, yb)
            robust += int(still_correct.sum())
    finally:
        model.train(was_training)
    return clean / len(x), robust / len(x)
