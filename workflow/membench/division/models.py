"""The models of the DIVISION experiments, written here (no torchvision).

ResNet-18 and ResNet-164 (pre-activation bottlenecks) in their CIFAR form, DenseNet-121 and
ResNet-50 with an ImageNet stem (7x7 stride 2 + max pool) or a CIFAR stem (3x3 stride 1).
Every nonlinearity is a module (``nn.ReLU``, ``nn.MaxPool2d``), so that a method can replace it.
Inputs are float32 (N, 3, H, W); outputs are logits (N, num_classes).
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from membench.division.options import MODELS, STEMS

__all__ = [
    "BasicBlock",
    "Block",
    "Bottleneck",
    "build_model",
    "DenseBlock",
    "DenseLayer",
    "DenseNet",
    "PreActBottleneck",
    "PreActResNet",
    "Transition",
]


class Block(nn.Module):
    """A unit that gradient checkpointing recomputes as a whole (a residual block, a dense layer).

    With ``recompute_in_backward`` set, training keeps only the block's input (saved by the
    reentrant checkpoint through ``save_for_backward``) and recomputes the rest in backward. The
    recomputation normalises with the batch statistics as the forward pass did but leaves the
    batch-norm running statistics alone: updating them a second time would apply the momentum
    twice per step and give other evaluation results than the vanilla model.
    """

    recompute_in_backward = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.recompute_in_backward and self.training and torch.is_grad_enabled() and x.requires_grad:
            calls = 0

            def run(inputs: torch.Tensor) -> torch.Tensor:
                nonlocal calls
                calls += 1
                if calls == 1:
                    return self.block_forward(inputs)
                with _running_statistics_frozen(self):
                    return self.block_forward(inputs)

            return checkpoint(run, x, use_reentrant=True)
        return self.block_forward(x)

    def block_forward(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


@contextlib.contextmanager
def _running_statistics_frozen(module: nn.Module) -> Iterator[None]:
    """Batch norms under ``module`` normalise with batch statistics without updating their running
    statistics or batch counter (``track_running_stats`` off in training mode does exactly that)."""
    norms = [
        m
        for m in module.modules()
        if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats
    ]
    for norm in norms:
        norm.track_running_stats = False
    try:
        yield
    finally:
        for norm in norms:
            norm.track_running_stats = True


def _conv_bn(in_channels: int, out_channels: int, kernel: int, stride: int = 1) -> list[nn.Module]:
    return [
        nn.Conv2d(in_channels, out_channels, kernel, stride, kernel // 2, bias=False),
        nn.BatchNorm2d(out_channels),
    ]


class BasicBlock(Block):
    """Two 3x3 conv-bn layers with a residual connection (ResNet-18/34)."""

    expansion = 1

    def __init__(self, in_channels: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1, self.bn1 = _conv_bn(in_channels, planes, 3, stride)
        self.relu1 = nn.ReLU()
        self.conv2, self.bn2 = _conv_bn(planes, planes, 3)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_channels != planes:
            self.shortcut = nn.Sequential(*_conv_bn(in_channels, planes, 1, stride))
        self.relu2 = nn.ReLU()

    def block_forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu1(self.bn1(self.conv1(x)))
        return self.relu2(self.bn2(self.conv2(out)) + self.shortcut(x))


class Bottleneck(Block):
    """1x1, 3x3 (stride here, as in ResNet v1.5), 1x1 conv-bn layers, expansion 4 (ResNet-50)."""

    expansion = 4

    def __init__(self, in_channels: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        out_channels = planes * self.expansion
        self.conv1, self.bn1 = _conv_bn(in_channels, planes, 1)
        self.relu1 = nn.ReLU()
        self.conv2, self.bn2 = _conv_bn(planes, planes, 3, stride)
        self.relu2 = nn.ReLU()
        self.conv3, self.bn3 = _conv_bn(planes, out_channels, 1)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Sequential(*_conv_bn(in_channels, out_channels, 1, stride))
        self.relu3 = nn.ReLU()

    def block_forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu1(self.bn1(self.conv1(x)))
        out = self.relu2(self.bn2(self.conv2(out)))
        return self.relu3(self.bn3(self.conv3(out)) + self.shortcut(x))


class PreActBottleneck(Block):
    """Pre-activation bottleneck (bn-relu-conv x3, expansion 4) of ResNet-164 (He et al. 2016)."""

    expansion = 4

    def __init__(self, in_channels: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        out_channels = planes * self.expansion
        self.bn1, self.relu1 = nn.BatchNorm2d(in_channels), nn.ReLU()
        self.conv1 = nn.Conv2d(in_channels, planes, 1, bias=False)
        self.bn2, self.relu2 = nn.BatchNorm2d(planes), nn.ReLU()
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn3, self.relu3 = nn.BatchNorm2d(planes), nn.ReLU()
        self.conv3 = nn.Conv2d(planes, out_channels, 1, bias=False)
        self.shortcut = None
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Conv2d(in_channels, out_channels, 1, stride, bias=False)

    def block_forward(self, x: torch.Tensor) -> torch.Tensor:
        pre = self.relu1(self.bn1(x))
        shortcut = x if self.shortcut is None else self.shortcut(pre)
        out = self.conv1(pre)
        out = self.conv2(self.relu2(self.bn2(out)))
        out = self.conv3(self.relu3(self.bn3(out)))
        return out + shortcut


class _ResNet(nn.Module):
    def __init__(self, block, stage_blocks, base_width: int, num_classes: int, stem: str) -> None:
        super().__init__()
        if stem == "cifar":
            self.stem = nn.Sequential(*_conv_bn(3, base_width, 3), nn.ReLU())
        else:
            self.stem = nn.Sequential(*_conv_bn(3, base_width, 7, 2), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        in_channels = base_width
        stages = []
        for i, count in enumerate(stage_blocks):
            planes = base_width * 2**i
            blocks = []
            for j in range(count):
                blocks.append(block(in_channels, planes, 2 if (i > 0 and j == 0) else 1))
                in_channels = planes * block.expansion
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.stages(self.stem(x))), 1))


class PreActResNet(nn.Module):
    """CIFAR pre-activation ResNet of depth 9n+2 with bottlenecks (ResNet-164: n = 18)."""

    def __init__(self, depth: int = 164, base_width: int = 16, num_classes: int = 10) -> None:
        super().__init__()
        if (depth - 2) % 9:
            raise ValueError(f"pre-activation bottleneck ResNet depth must be 9n+2, got {depth}")
        count = (depth - 2) // 9
        self.stem = nn.Conv2d(3, base_width, 3, 1, 1, bias=False)
        in_channels = base_width
        stages = []
        for i in range(3):
            planes = base_width * 2**i
            blocks = []
            for j in range(count):
                blocks.append(PreActBottleneck(in_channels, planes, 2 if (i > 0 and j == 0) else 1))
                in_channels = planes * PreActBottleneck.expansion
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.head = nn.Sequential(
            nn.BatchNorm2d(in_channels), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten()
        )
        self.fc = nn.Linear(in_channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.head(self.stages(self.stem(x))))


class DenseLayer(Block):
    """bn-relu-conv1x1 (bn_size * growth) - bn-relu-conv3x3 (growth); returns the new features."""

    def __init__(self, in_channels: int, growth: int, bn_size: int = 4) -> None:
        super().__init__()
        self.bn1, self.relu1 = nn.BatchNorm2d(in_channels), nn.ReLU()
        self.conv1 = nn.Conv2d(in_channels, bn_size * growth, 1, bias=False)
        self.bn2, self.relu2 = nn.BatchNorm2d(bn_size * growth), nn.ReLU()
        self.conv2 = nn.Conv2d(bn_size * growth, growth, 3, 1, 1, bias=False)

    def block_forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv2(self.relu2(self.bn2(self.conv1(self.relu1(self.bn1(x))))))


class DenseBlock(nn.Module):
    """Dense layers, each fed the concatenation of the block input and all earlier outputs."""

    def __init__(self, count: int, in_channels: int, growth: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(DenseLayer(in_channels + i * growth, growth) for i in range(count))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.cat([x, layer(x)], 1)
        return x


class Transition(Block):
    """bn-relu-conv1x1 (compression 0.5) - 2x2 average pool between dense blocks."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.bn, self.relu = nn.BatchNorm2d(in_channels), nn.ReLU()
        self.conv = nn.Conv2d(in_channels, out_channels, 1, bias=False)
        self.pool = nn.AvgPool2d(2, 2)

    def block_forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.conv(self.relu(self.bn(x))))


class DenseNet(nn.Module):
    """DenseNet-BC (Huang et al. 2017); DenseNet-121: growth 32, blocks (6, 12, 24, 16)."""

    def __init__(
        self, growth: int = 32, block_layers=(6, 12, 24, 16), num_classes: int = 10, stem: str = "imagenet"
    ) -> None:
        super().__init__()
        channels = 2 * growth
        if stem == "cifar":
            self.stem = nn.Conv2d(3, channels, 3, 1, 1, bias=False)
        else:
            self.stem = nn.Sequential(*_conv_bn(3, channels, 7, 2), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        parts = []
        for i, count in enumerate(block_layers):
            parts.append(DenseBlock(count, channels, growth))
            channels += count * growth
            if i < len(block_layers) - 1:
                parts.append(Transition(channels, channels // 2))
                channels //= 2
        self.features = nn.Sequential(*parts)
        self.head = nn.Sequential(nn.BatchNorm2d(channels), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.fc = nn.Linear(channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.head(self.features(self.stem(x))))


def build_model(name: str, num_classes: int, width: int | None = None, stem: str | None = None) -> nn.Module:
    """Build model ``name`` (one of :data:`MODELS`).

    ``width``: channels of the first stage (ResNets: 64, ResNet-164: 16) or the growth rate
    (DenseNet-121: 32) when None; smaller widths give cheap models of the same depth.
    ``stem``: ``cifar`` or ``imagenet`` for DenseNet-121 and ResNet-50 (default ``imagenet``);
    ResNet-18 and ResNet-164 are CIFAR models.
    """
    if name not in MODELS:
        raise ValueError(f"model must be one of {', '.join(MODELS)}, got {name!r}")
    if stem is not None and stem not in STEMS:
        raise ValueError(f"stem must be one of {', '.join(STEMS)}, got {stem!r}")
    if name == "resnet18":
        return _ResNet(BasicBlock, (2, 2, 2, 2), width or 64, num_classes, stem or "cifar")
    if name == "resnet164":
        return PreActResNet(164, width or 16, num_classes)
    if name == "densenet121":
        return DenseNet(width or 32, (6, 12, 24, 16), num_classes, stem or "imagenet")
    return _ResNet(Bottleneck, (3, 4, 6, 3), width or 64, num_classes, stem or "imagenet")
