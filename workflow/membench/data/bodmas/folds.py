"""Validate a BODMAS-shaped dataset and split it into folds (config/README.md, ``bodmas``).

Fold 0 is a time split: training samples come before a cut, test samples after it, and the
validation set is a random share of training. Folds 1..k are stratified k-fold splits. Each fold
is written as ``train|val|test_<dataset>_fold_<i>.csv`` with columns ``FileName, Label, File_Size``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from tqdm import tqdm

from membench.core import atomic
from membench.core.errors import InputError
from membench.core.validate import (
    csv_line,
    int_column,
    read_csv_columns,
    readable_nonempty_file,
    safe_join,
    unique_column,
)
from membench.data.bodmas import FOLD_COLUMNS, METADATA_COLUMNS, SPLITS, binary_name, fold_file_name
from membench.data.bodmas.binaries import content_size

__all__ = [
    "assign_labels",
    "FoldSpec",
    "LABEL_MODES",
    "make_fold",
    "read_fold",
    "read_metadata",
    "split_folds",
    "write_classes",
]

LABEL_MODES = ("binary", "family")
_SHA_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class FoldSpec:
    """How to split a dataset.

    Parameters
    ----------
    folds : int
        Number k of stratified folds (written as folds 1..k; fold 0 is the time split).
    label_mode : {"binary", "family"}
        ``binary``: benign 0, malware 1. ``family``: malware only, the ``top_families`` most
        frequent families as classes 0..N-1 and every other family as class N ("other").
    top_families : int
        Number of family classes in ``family`` mode.
    val_fraction : float
        Share of each training split held out for validation.
    time_split_quantile : float
        Fold 0: share of samples (in time order) that falls before the cut.
    time_split_date : str or None
        Fold 0: an explicit cut date; overrides ``time_split_quantile``.
    sort_by_size : bool
        Write rows largest file first (memory measurement order), else by file name.
    seed : int
        Seed of the random splits.
    """

    folds: int = 3
    label_mode: str = "binary"
    top_families: int = 10
    val_fraction: float = 0.1
    time_split_quantile: float = 0.8
    time_split_date: str | None = None
    sort_by_size: bool = False
    seed: int = 0


def read_metadata(metadata_path: str | os.PathLike, binaries_dir: str | os.PathLike) -> pd.DataFrame:
    """Read and check ``metadata.csv`` against its binaries directory.

    Returns columns ``sha, timestamp (UTC), family, FileName, File_Size``. Raises
    :class:`InputError` for missing or unknown columns, missing or duplicated hashes, hashes that
    are not plain file-name tokens, unparsable timestamps, and binaries that are missing, not
    regular files, unreadable, empty or damaged gzip (see
    :func:`~membench.data.bodmas.binaries.content_size`, which gives ``File_Size``).
    """
    path = Path(metadata_path)
    binaries_dir = Path(binaries_dir)
    if not binaries_dir.is_dir():
        raise InputError(binaries_dir, "binaries directory does not exist")
    frame = read_csv_columns(path, METADATA_COLUMNS)
    frame["sha"] = frame["sha"].str.strip()
    frame["family"] = frame["family"].str.strip()
    unique_column(frame, "sha", path)
    for i, sha in enumerate(frame["sha"]):
        if not _SHA_PATTERN.match(sha):
            raise InputError(
                path,
                f"sha {sha!r} is not a plain file-name token (letters, digits, '_', '.', '-')",
                csv_line(i),
            )
    timestamps = pd.to_datetime(frame["timestamp"], errors="coerce", utc=True, format="mixed")
    if timestamps.isna().any():
        i = int(timestamps.isna().to_numpy().argmax())
        raise InputError(path, f"timestamp {frame['timestamp'].iloc[i]!r} is not a date", csv_line(i))
    frame["timestamp"] = timestamps
    names, sizes = [], []
    for i, sha in enumerate(
        tqdm(frame["sha"], desc=f"checking binaries of {path.name}", unit="file", mininterval=10)
    ):
        name = binary_name(sha)
        file = safe_join(binaries_dir, name, path, csv_line(i))
        try:
            sizes.append(content_size(file))
        except InputError as exc:
            raise InputError(path, f"binary {file} {exc.problem}", csv_line(i)) from None
        names.append(name)
    frame["FileName"] = names
    frame["File_Size"] = sizes
    return frame


def assign_labels(
    metadata: pd.DataFrame, label_mode: str, top_families: int, path
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Add a ``Label`` column; return the labelled rows and the class table (Label, Name, Count)."""
    if label_mode == "binary":
        labelled = metadata.assign(Label=(metadata["family"] != "").astype("int64"))
        names = {0: "benign", 1: "malware"}
    elif label_mode == "family":
        labelled = metadata[metadata["family"] != ""].copy()
        counts = labelled["family"].value_counts()
        ranked = sorted(counts.index, key=lambda f: (-counts[f], f))
        kept = ranked[:top_families]
        names = dict(enumerate(kept))
        if len(ranked) > len(kept):
            names[len(kept)] = "other"
        index = {f: i for i, f in enumerate(kept)}
        labelled["Label"] = labelled["family"].map(lambda f: index.get(f, len(kept))).astype("int64")
    else:
        raise InputError(path, f"label mode {label_mode!r} is not one of {', '.join(LABEL_MODES)}")
    counts = labelled["Label"].value_counts()
    classes = pd.DataFrame(
        [(label, name, int(counts.get(label, 0))) for label, name in names.items()],
        columns=["Label", "Name", "Count"],
    )
    present = classes[classes["Count"] > 0]
    if len(present) < 2:
        raise InputError(
            path, f"label mode {label_mode!r} leaves {len(present)} class(es); at least 2 are needed"
        )
    return labelled.reset_index(drop=True), classes


def split_folds(metadata: pd.DataFrame, spec: FoldSpec, path) -> list[dict[str, pd.DataFrame]]:
    """All folds of the labelled ``metadata``: fold 0 the time split, folds 1..k stratified.

    Deterministic for a given ``spec.seed``, so every fold job computes the same partition.
    """
    # scikit-learn is imported where a fold is split, not at the top: the other bodmas steps read
    # this module's names and tables without it (about 1.2 s a process).
    from sklearn.model_selection import StratifiedKFold

    smallest = int(metadata["Label"].value_counts().min())
    if smallest < spec.folds:
        raise InputError(
            path,
            f"the smallest class has {smallest} sample(s), fewer than the {spec.folds} stratified "
            "folds asked for",
        )
    splits = [_time_split(metadata, spec, path)]
    stratified = StratifiedKFold(n_splits=spec.folds, shuffle=True, random_state=spec.seed)
    for fold, (train_index, test_index) in enumerate(stratified.split(metadata, metadata["Label"]), start=1):
        train, val = _hold_out(metadata.iloc[train_index], spec.val_fraction, spec.seed + fold)
        splits.append({"train": train, "val": val, "test": metadata.iloc[test_index]})
    return splits


def make_fold(
    metadata_path: str | os.PathLike,
    binaries_dir: str | os.PathLike,
    dataset: str,
    fold: int,
    outdir: str | os.PathLike,
    spec: FoldSpec,
) -> list[Path]:
    """Validate the dataset and write fold ``fold``'s three split files atomically; return their paths."""
    if not 0 <= fold <= spec.folds:
        raise InputError(metadata_path, f"fold {fold} does not exist; folds are 0..{spec.folds}", "--fold")
    metadata = read_metadata(metadata_path, binaries_dir)
    labelled, _ = assign_labels(metadata, spec.label_mode, spec.top_families, metadata_path)
    split = split_folds(labelled, spec, metadata_path)[fold]
    written = []
    for name in SPLITS:
        path = Path(outdir) / fold_file_name(name, dataset, fold)
        atomic.write_csv(path, _ordered(split[name], spec.sort_by_size)[list(FOLD_COLUMNS)])
        written.append(path)
    return written


def write_classes(
    metadata_path: str | os.PathLike, out_path: str | os.PathLike, label_mode: str, top_families: int
) -> pd.DataFrame:
    """Write the class table (Label, Name, Count) of a dataset under ``label_mode``."""
    frame = read_csv_columns(metadata_path, METADATA_COLUMNS)
    frame["family"] = frame["family"].str.strip()
    _, classes = assign_labels(frame, label_mode, top_families, metadata_path)
    atomic.write_csv(out_path, classes)
    return classes


def _time_split(labelled: pd.DataFrame, spec: FoldSpec, path) -> dict[str, pd.DataFrame]:
    ordered = labelled.sort_values(["timestamp", "sha"], kind="stable")
    if spec.time_split_date:
        cut = pd.Timestamp(spec.time_split_date, tz="UTC")
        before = ordered[ordered["timestamp"] < cut]
        after = ordered[ordered["timestamp"] >= cut]
    else:
        # Rank-based: ties in time (e.g. files from one package install) still split at the quantile.
        n_train = int(round(len(ordered) * spec.time_split_quantile))
        before, after = ordered.iloc[:n_train], ordered.iloc[n_train:]
    if len(before) < 2 or len(after) < 1:
        raise InputError(path, f"the time split leaves {len(before)} training and {len(after)} test samples")
    train, val = _hold_out(before, spec.val_fraction, spec.seed)
    return {"train": train, "val": val, "test": after}


def _hold_out(train: pd.DataFrame, val_fraction: float, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    from sklearn.model_selection import train_test_split  # see split_folds

    if val_fraction <= 0:
        return train, train.iloc[:0]
    counts = train["Label"].value_counts()
    n_val = max(1, int(round(len(train) * val_fraction)))
    stratify = train["Label"] if counts.min() >= 2 and n_val >= len(counts) else None
    kept, held = train_test_split(train, test_size=n_val, random_state=seed, stratify=stratify)
    return kept, held


def _ordered(frame: pd.DataFrame, sort_by_size: bool) -> pd.DataFrame:
    if sort_by_size:
        return frame.sort_values(["File_Size", "FileName"], ascending=[False, True], kind="stable")
    return frame.sort_values("FileName", kind="stable")


def read_fold(
    csv_path: str | os.PathLike, binaries_dir: str | os.PathLike, num_classes: int | None = None
) -> pd.DataFrame:
    """Read a fold CSV and check it: columns, integer labels in range, sizes, files inside ``binaries_dir``.

    Returns columns ``FileName, Label, File_Size, path`` (``path``: the resolved binary).
    """
    path = Path(csv_path)
    frame = read_csv_columns(path, FOLD_COLUMNS)
    frame["Label"] = int_column(frame, "Label", path, 0, None if num_classes is None else num_classes - 1)
    frame["File_Size"] = int_column(frame, "File_Size", path, 1)
    resolved = []
    for i, name in enumerate(frame["FileName"].str.strip()):
        file = safe_join(binaries_dir, name, path, csv_line(i))
        readable_nonempty_file(file, path, csv_line(i))
        resolved.append(str(file))
    frame["path"] = resolved
    return frame
