"""Models of the robust system, written in the project (no torchvision).

``mlp``: flatten, two hidden ReLU layers, linear head (digits, MNIST).
``preact_resnet18``: PreActResNet-18 (He et al. 2016, the model of Wong et al. 2020) for 32x32
RGB inputs (CIFAR-10). Inputs are images in [0, 1], ``(B, C, H, W)`` float32; outputs are logits
``(B, num_classes)``.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from membench.core.seeding import seeded
from membench.robust.options import MODELS

__all__ = ["build_model", "MLP", "PreActBlock", "PreActResNet18"]


class MLP(nn.Module):
    def __init__(self, input_features: int, hidden_units: int, num_classes: int) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            nn.Flatten(),
            nn.Linear(input_features, hidden_units),
            nn.ReLU(),
            nn.Linear(hidden_units, hidden_units),
            nn.ReLU(),
            nn.Linear(hidden_units, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class PreActBlock(nn.Module):
    def __init__(self, in_channels: int, channels: int, stride: int) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_channels)
        self.conv1 = nn.Conv2d(in_channels, channels, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, stride=1, padding=1, bias=False)
        self.shortcut = None
        if stride != 1 or in_channels != channels:
            self.shortcut = nn.Conv2d(in_channels, channels, 1, stride=stride, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(x))
        # The projection shortcut takes the pre-activated input, as in the pre-activation design.
        shortcut = x if self.shortcut is None else self.shortcut(out)
        out = self.conv1(out)
        out = self.conv2(F.relu(self.bn2(out)))
        return out + shortcut


class PreActResNet18(nn.Module):
    def __init__(self, in_channels: int = 3, num_classes: int = 10, width: int = 64) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, width, 3, stride=1, padding=1, bias=False)
        blocks, channels = [], width
        for stage, stride in enumerate((1, 2, 2, 2)):
            out_channels = width * 2**stage
            for block_stride in (stride, 1):
                blocks.append(PreActBlock(channels, out_channels, block_stride))
                channels = out_channels
        self.blocks = nn.Sequential(*blocks)
        self.bn = nn.BatchNorm2d(channels)
        self.linear = nn.Linear(channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.blocks(self.conv1(x))
        out = F.relu(self.bn(out))
        return self.linear(F.adaptive_avg_pool2d(out, 1).flatten(1))


def build_model(
    name: str, input_shape: tuple[int, ...], num_classes: int, hidden_units: int, seed: int
) -> nn.Module:
    """A freshly initialised model ``name`` for inputs of shape ``(C, H, W)``, seeded by ``seed``."""
    with seeded(seed):
        if name == "mlp":
            return MLP(math.prod(input_shape), hidden_units, num_classes)
        if name == "preact_resnet18":
            return PreActResNet18(input_shape[0], num_classes)
    raise ValueError(f"unknown model {name!r}; expected one of {', '.join(MODELS)}")
