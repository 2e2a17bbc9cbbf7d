"""Tiny BODMAS-shaped datasets built in a temporary directory."""

import pytest

from membench.data.bodmas.synthetic import SyntheticSpec, generate_synthetic


@pytest.fixture
def tiny_spec():
    return SyntheticSpec(samples=60, families=3, min_bytes=256, median_bytes=1024, max_bytes=8192, seed=3)


@pytest.fixture
def tiny_dataset(tmp_path, tiny_spec):
    """(metadata path, binaries dir) of a 60-file synthetic set."""
    generate_synthetic(tmp_path / "syn", tiny_spec)
    return tmp_path / "syn" / "metadata.csv", tmp_path / "syn" / "binaries"
