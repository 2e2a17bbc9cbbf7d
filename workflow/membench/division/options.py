"""The choices and settings the command line shares with the methods, models and precision, without
importing torch (a plot job builds the parser too)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["AMP_CHOICES", "METHODS", "MethodSpec", "MODELS", "STEMS"]

# The compared methods (membench.division.methods).
METHODS = ("vanilla", "division", "actnn2bit", "checkpoint")
# The models (membench.division.models) and their stems.
MODELS = ("resnet18", "resnet164", "densenet121", "resnet50")
STEMS = ("cifar", "imagenet")
# Mixed precision of a job (membench.division.precision).
AMP_CHOICES = ("none", "bf16", "fp16")


@dataclass(frozen=True)
class MethodSpec:
    """Settings of the methods: DIVISION's LFC block and HFC bits, ActNN's group size and bits."""

    block_size: int = 8
    hfc_bits: int = 2
    group_size: int = 256
    actnn_bits: int = 2
