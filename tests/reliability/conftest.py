"""Tiny inputs for the fault-injection tests, and the fault report (``MEMBENCH_FAULT_REPORT``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import faults
import pytest

from membench.cli import main
from membench.data.bodmas.folds import FoldSpec, make_fold, write_classes
from membench.data.bodmas.synthetic import SyntheticSpec, generate_synthetic
from membench.data.images.folder import folder_to_lmdb
from membench.data.images.generate import DigitsSpec, generate_digits_folder


@pytest.fixture(scope="session")
def bodmas_fold(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bodmas")
    generate_synthetic(
        root, SyntheticSpec(samples=48, families=2, min_bytes=256, median_bytes=1024, max_bytes=4096, seed=1)
    )
    train, val, test = make_fold(
        root / "metadata.csv",
        root / "binaries",
        "tiny",
        1,
        root / "folds",
        FoldSpec(folds=2, val_fraction=0.2),
    )
    write_classes(root / "metadata.csv", root / "folds" / "classes.csv", "binary", 10)
    return {
        "train": train,
        "val": val,
        "test": test,
        "classes": root / "folds" / "classes.csv",
        "binaries": root / "binaries",
    }


@pytest.fixture(scope="session")
def digits(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("digits")
    spec = DigitsSpec(image_size=16, min_digit_size=10, max_digit_size=14, images_per_class=12)
    generate_digits_folder(root / "folder", spec)
    lmdbs = {
        split: folder_to_lmdb(root / "folder", split, root / f"{split}.lmdb") for split in ("train", "val")
    }
    return {"folder": root / "folder", **lmdbs}


@pytest.fixture(scope="session")
def all_digits_folder(tmp_path_factory) -> Path:
    """Every scikit-learn digit (about 1800 images): an LMDB build long enough to be killed mid-write."""
    root = tmp_path_factory.mktemp("all_digits")
    generate_digits_folder(root / "folder", DigitsSpec(image_size=16, min_digit_size=10, max_digit_size=14))
    return root / "folder"


@pytest.fixture(scope="session")
def graphs(tmp_path_factory) -> list[Path]:
    root = tmp_path_factory.mktemp("graphs")
    data = [root / "data.v", root / "data.e"]
    pattern = [root / "pattern.v", root / "pattern.e"]
    assert (
        main(
            [
                "appclass",
                "generate-rmat",
                "--scale",
                "7",
                "--edge-factor",
                "4",
                "--seed",
                "0",
                "--vertices",
                str(data[0]),
                "--edges",
                str(data[1]),
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "appclass",
                "generate-pattern",
                *map(str, data),
                "--max-pattern-nodes",
                "5",
                "--seed",
                "0",
                "--vertices",
                str(pattern[0]),
                "--edges",
                str(pattern[1]),
            ]
        )
        == 0
    )
    return data + pattern


@pytest.fixture(scope="session", autouse=True)
def fault_report():
    """Write every injected fault to ``$MEMBENCH_FAULT_REPORT`` (JSON) when it is set."""
    yield
    target = os.environ.get("MEMBENCH_FAULT_REPORT")
    if target and faults.FAULT_LOG:
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        Path(target).write_text(json.dumps(faults.FAULT_LOG, indent=2) + "\n")
