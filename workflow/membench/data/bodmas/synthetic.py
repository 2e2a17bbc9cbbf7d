"""A BODMAS-shaped synthetic dataset: metadata plus byte files with class-dependent motifs."""

from __future__ import annotations

import gzip
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from membench.core import atomic
from membench.data.bodmas import binary_name

__all__ = ["generate_synthetic", "SyntheticSpec"]

_START = pd.Timestamp("2019-08-29", tz="UTC")
_END = pd.Timestamp("2020-09-30", tz="UTC")
_PE_HEADER = b"MZ\x90\x00\x03\x00\x00\x00\x04\x00\x00\x00\xff\xff\x00\x00"


@dataclass(frozen=True)
class SyntheticSpec:
    """Shape of a synthetic BODMAS set.

    Sizes follow a log-normal distribution with the given median, clipped to
    ``[min_bytes, max_bytes]``: a long tail of large files as in real malware corpora.
    """

    samples: int = 300
    families: int = 4
    benign_fraction: float = 0.5
    min_bytes: int = 2048
    median_bytes: int = 16384
    max_bytes: int = 262144
    size_sigma: float = 1.0
    motifs_per_class: int = 3
    motif_bytes: int = 32
    motif_copies: int = 4
    gzip_fraction: float = 0.1
    seed: int = 0


def generate_synthetic(outdir: str | os.PathLike, spec: SyntheticSpec) -> pd.DataFrame:
    """Write ``outdir/metadata.csv`` and ``outdir/binaries/<sha>.exe``; return the metadata.

    Each class (benign, and each malware family) owns a few random byte motifs; every file of the
    class carries copies of them at random offsets over a noise background, so a byte-level
    classifier can learn the classes. The output depends only on ``spec`` (seeded).
    """
    rng = np.random.default_rng(spec.seed)
    outdir = Path(outdir)
    binaries = outdir / "binaries"
    binaries.mkdir(parents=True, exist_ok=True)
    classes = [""] + [f"family_{i:02d}" for i in range(1, spec.families + 1)]
    motifs = {c: [rng.bytes(spec.motif_bytes) for _ in range(spec.motifs_per_class)] for c in classes}
    family_weights = 1.0 / np.arange(1, spec.families + 1)  # long-tailed family sizes
    family_weights /= family_weights.sum()
    span_s = (_END - _START).total_seconds()
    rows = []
    for _ in tqdm(range(spec.samples), desc="generating binaries", unit="file", mininterval=10):
        if spec.families == 0 or rng.random() < spec.benign_fraction:
            family = ""
        else:
            family = classes[1 + int(rng.choice(spec.families, p=family_weights))]
        size = int(
            np.clip(rng.lognormal(np.log(spec.median_bytes), spec.size_sigma), spec.min_bytes, spec.max_bytes)
        )
        content = _file_content(rng, size, motifs[family], spec.motif_copies)
        sha = hashlib.sha256(content).hexdigest()
        data = gzip.compress(content, mtime=0) if rng.random() < spec.gzip_fraction else content
        atomic.write_bytes(binaries / binary_name(sha), data)
        timestamp = _START + pd.Timedelta(seconds=float(rng.uniform(0, span_s)))
        rows.append((sha, timestamp.strftime("%Y-%m-%d %H:%M:%S+00:00"), family))
    metadata = pd.DataFrame(rows, columns=["sha", "timestamp", "family"])
    atomic.write_csv(outdir / "metadata.csv", metadata)
    return metadata


def _file_content(rng: np.random.Generator, size: int, motifs: list[bytes], copies: int) -> bytes:
    # Low-entropy background (a few byte values) like code and padding, not uniform noise.
    content = bytearray(rng.choice(np.arange(0, 64, dtype=np.uint8), size=size).tobytes())
    content[: len(_PE_HEADER)] = _PE_HEADER
    for motif in motifs:
        for _ in range(copies):
            offset = int(rng.integers(len(_PE_HEADER), max(len(_PE_HEADER) + 1, size - len(motif))))
            content[offset : offset + len(motif)] = motif
    return bytes(content[:size])
