"""BODMAS-shaped malware datasets: generators, metadata validation, folds and statistics.

A dataset is ``metadata.csv`` (columns ``sha, timestamp, family``; an empty family means benign)
plus a directory of raw binaries named ``<sha>.exe`` (possibly gzip-compressed).
"""

__all__ = ["binary_name", "FOLD_COLUMNS", "fold_file_name", "METADATA_COLUMNS", "SPLITS"]

METADATA_COLUMNS = ("sha", "timestamp", "family")
FOLD_COLUMNS = ("FileName", "Label", "File_Size")
SPLITS = ("train", "val", "test")


def binary_name(sha: str) -> str:
    """File name of the binary with hash ``sha`` inside the binaries directory."""
    return f"{sha}.exe"


def fold_file_name(split: str, dataset: str, fold: int) -> str:
    """``train|val|test_<dataset>_fold_<i>.csv``, as HotConv names them."""
    return f"{split}_{dataset}_fold_{fold}.csv"
