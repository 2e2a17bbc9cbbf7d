"""Seeded configuration generator for MLP, CNN and Transformer training jobs (GPUMemNet's ranges).

Integer settings are drawn uniformly from inclusive ``[low, high]`` ranges; patterns and activations
uniformly from their lists; dropout and batch norm by coin flips. ``ranges`` overrides the defaults
(a CPU run narrows them).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from membench.core.errors import InputError
from membench.memnet.configs import ACTIVATIONS, CNN_PATTERNS, MLP_PATTERNS, config_filename

__all__ = ["DEFAULT_RANGES", "DROPOUT_RANGE", "generate", "resolve_ranges"]

DEFAULT_RANGES: dict[str, dict[str, tuple[int, int]]] = {
    "mlp": {"input": (4, 4096), "output": (2, 1000), "depth": (1, 10), "batch": (4, 1023)},
    "cnn": {
        "input": (32, 224),
        "classes": (10, 1000),
        "depth": (1, 30),
        "filters": (32, 512),
        "batch": (4, 62),
    },
    "transformer": {
        "embed": (128, 2048),
        "layers": (2, 40),
        "heads": (2, 16),
        "seq": (128, 1024),
        "batch": (1, 128),
        "classes": (2, 100),
    },
}
DROPOUT_RANGE = (0.05, 0.5)


def resolve_ranges(family: str, ranges: dict | None) -> dict[str, tuple[int, int]]:
    """The family's default ranges with ``ranges`` applied; each must be ``low <= high``, low >= 1."""
    merged = dict(DEFAULT_RANGES[family])
    for key, value in (ranges or {}).items():
        if key not in merged:
            raise InputError(
                None,
                f"unknown {family} range {key!r}; expected one of {', '.join(merged)}",
                f"key 'memnet.families.{family}.ranges'",
            )
        low, high = (int(v) for v in value)
        if not 1 <= low <= high:
            raise InputError(
                None,
                f"range {key} [{low}, {high}] must have 1 <= low <= high",
                f"key 'memnet.families.{family}.ranges'",
            )
        merged[key] = (low, high)
    return merged


def generate(family: str, count: int, seed: int, ranges: dict | None = None) -> pd.DataFrame:
    """``count`` configurations of ``family``: columns ``config_id, filename`` and the family's keys
    (see ``configs.CONFIG_KEYS``). The same seed gives the same table."""
    bounds = resolve_ranges(family, ranges)
    rng = np.random.default_rng(seed)

    def draw(key: str) -> int:
        low, high = bounds[key]
        return int(rng.integers(low, high + 1))

    def dropout() -> float:
        return round(float(rng.uniform(*DROPOUT_RANGE)), 3) if rng.random() < 0.5 else 0.0

    rows = []
    for _ in range(count):
        if family == "mlp":
            config = {
                "input": draw("input"),
                "output": draw("output"),
                "depth": draw("depth"),
                "arch": str(rng.choice(MLP_PATTERNS)),
                "batch": draw("batch"),
                "act": str(rng.choice(list(ACTIVATIONS))),
                "dropout": dropout(),
                "batchnorm": bool(rng.random() < 0.5),
            }
        elif family == "cnn":
            config = {
                "channels": 3,
                "classes": draw("classes"),
                "depth": draw("depth"),
                "arch": str(rng.choice(CNN_PATTERNS)),
                "filters": draw("filters"),
                "batch": draw("batch"),
                "input": draw("input"),
                "act": str(rng.choice([a for a in ACTIVATIONS if a != "identity"])),
                "dropout": dropout(),
                "batchnorm": bool(rng.random() < 0.5),
            }
        else:
            heads = draw("heads")
            low, high = bounds["embed"]
            embed = heads * int(rng.integers(max(1, -(-low // heads)), max(1, high // heads) + 1))
            config = {
                "embed": embed,
                "layers": draw("layers"),
                "heads": heads,
                "seq": draw("seq"),
                "batch": draw("batch"),
                "classes": draw("classes"),
                "dropout": 0.1,
            }
        rows.append({"filename": config_filename(family, config), **config})
    frame = pd.DataFrame(rows).drop_duplicates("filename").reset_index(drop=True)
    frame.insert(0, "config_id", [f"{family}{i:05d}" for i in range(len(frame))])
    return frame
