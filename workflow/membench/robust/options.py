"""The choices the command line shares with the data, models, attacks and training loop, without
importing torch (the table and plot jobs build the parser too)."""

from __future__ import annotations

__all__ = ["ATTACKS", "GUARD_ACTIONS", "LEARNING_RATE_SCHEDULES", "MODELS", "OPTIMIZERS", "SOURCES"]

# Data sets (membench.robust.data), models (membench.robust.models), attacks
# (membench.robust.attacks; fgsm is FGSM-RS).
SOURCES = ("digits", "mnist", "cifar10")
MODELS = ("mlp", "preact_resnet18")
ATTACKS = ("pgd", "fgsm")
# The training loop's settings (membench.robust.train.TrainSettings).
OPTIMIZERS = ("adam", "sgd")
LEARNING_RATE_SCHEDULES = ("constant", "cyclic")
GUARD_ACTIONS = ("shrink", "stop")
