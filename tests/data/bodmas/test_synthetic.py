"""The synthetic BODMAS generator: deterministic, BODMAS-shaped, learnable."""

import dataclasses

import pandas as pd

from membench.core.atomic import LEDGER_NAME
from membench.data.bodmas.binaries import content_size, is_gzip, read_prefix
from membench.data.bodmas.synthetic import generate_synthetic


def _snapshot(root):
    # The write ledger records modification times, which differ between two runs by design.
    return {p.name: p.read_bytes() for p in sorted((root / "binaries").iterdir()) if p.name != LEDGER_NAME}


def test_same_seed_gives_identical_dataset(tmp_path, tiny_spec):
    first = generate_synthetic(tmp_path / "a", tiny_spec)
    second = generate_synthetic(tmp_path / "b", tiny_spec)
    pd.testing.assert_frame_equal(first, second)
    assert _snapshot(tmp_path / "a") == _snapshot(tmp_path / "b")
    assert (tmp_path / "a" / "metadata.csv").read_bytes() == (tmp_path / "b" / "metadata.csv").read_bytes()


def test_other_seed_gives_other_dataset(tmp_path, tiny_spec):
    first = generate_synthetic(tmp_path / "a", tiny_spec)
    other = generate_synthetic(tmp_path / "b", dataclasses.replace(tiny_spec, seed=4))
    assert set(first["sha"]).isdisjoint(other["sha"])


def test_shape_sizes_classes_and_gzip(tmp_path, tiny_spec):
    metadata = generate_synthetic(tmp_path, dataclasses.replace(tiny_spec, gzip_fraction=0.5))
    assert list(metadata.columns) == ["sha", "timestamp", "family"]
    assert len(metadata) == tiny_spec.samples
    assert metadata["sha"].is_unique
    assert "" in set(metadata["family"])
    assert {f for f in metadata["family"] if f} <= {"family_01", "family_02", "family_03"}
    files = [tmp_path / "binaries" / f"{sha}.exe" for sha in metadata["sha"]]
    sizes = [content_size(f) for f in files]
    assert min(sizes) >= tiny_spec.min_bytes and max(sizes) <= tiny_spec.max_bytes
    gzipped = [f for f in files if is_gzip(f)]
    assert 0 < len(gzipped) < len(files)
    assert read_prefix(gzipped[0], 2) == b"MZ"
    assert all(oct(f.stat().st_mode & 0o111) == oct(0) for f in files)  # never executable


def test_classes_carry_their_motifs(tmp_path, tiny_spec):
    metadata = generate_synthetic(tmp_path, dataclasses.replace(tiny_spec, gzip_fraction=0.0))
    contents = {
        row.sha: (tmp_path / "binaries" / f"{row.sha}.exe").read_bytes() for row in metadata.itertuples()
    }
    benign = [contents[s] for s, f in zip(metadata["sha"], metadata["family"]) if f == ""]
    malware = [contents[s] for s, f in zip(metadata["sha"], metadata["family"]) if f == "family_01"]
    # A 16-byte window common to every benign file but absent from every family_01 file.
    probe = benign[0]
    shared = [
        probe[i : i + 16]
        for i in range(16, len(probe) - 16, 4)
        if all(probe[i : i + 16] in other for other in benign[1:])
        and not any(probe[i : i + 16] in m for m in malware)
    ]
    assert shared
