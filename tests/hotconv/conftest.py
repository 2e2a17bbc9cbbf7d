"""Tiny BODMAS-shaped folds for the hotconv tests (generated in a temporary directory)."""

from __future__ import annotations

from pathlib import Path

import pytest

from membench.data.bodmas.folds import FoldSpec, make_fold, write_classes
from membench.data.bodmas.synthetic import SyntheticSpec, generate_synthetic
from membench.hotconv.train import FoldFiles


@pytest.fixture(scope="session")
def tiny_fold(tmp_path_factory) -> FoldFiles:
    root = tmp_path_factory.mktemp("bodmas")
    generate_synthetic(
        root, SyntheticSpec(samples=48, families=2, min_bytes=256, median_bytes=1024, max_bytes=4096, seed=1)
    )
    written = make_fold(
        root / "metadata.csv",
        root / "binaries",
        "tiny",
        1,
        root / "folds",
        FoldSpec(folds=2, val_fraction=0.2),
    )
    write_classes(root / "metadata.csv", root / "folds" / "classes.csv", "binary", 10)
    train, val, test = (str(p) for p in written)
    return FoldFiles(train, val, test, str(root / "folds" / "classes.csv"), str(root / "binaries"))


@pytest.fixture
def fold_copy(tiny_fold, tmp_path) -> FoldFiles:
    """The tiny fold's CSVs copied to a per-test directory, so a test may corrupt them."""
    paths = {}
    for name in ("train", "val", "test", "classes"):
        source = Path(getattr(tiny_fold, name))
        target = tmp_path / source.name
        target.write_text(source.read_text())
        paths[name] = str(target)
    return FoldFiles(**paths, binaries=tiny_fold.binaries)
