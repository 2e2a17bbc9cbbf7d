"""Dataset statistics per split and the size plot."""

import pytest

from membench.core.errors import InputError
from membench.data.bodmas import SPLITS
from membench.data.bodmas.folds import FoldSpec, make_fold, write_classes
from membench.data.bodmas.stats import dataset_statistics, parse_fold_path, plot_size_distribution


def test_parse_fold_path_keeps_underscores_in_dataset_names():
    assert parse_fold_path("x/val_bodmas_f94_fold_3.csv") == ("val", "bodmas_f94", 3)


def test_statistics_rows_match_the_fold_files(tiny_dataset, tmp_path):
    metadata, binaries = tiny_dataset
    files = make_fold(metadata, binaries, "tiny", 1, tmp_path, FoldSpec(folds=2))
    write_classes(metadata, tmp_path / "classes.csv", "binary", 10)
    stats = dataset_statistics(files)
    assert list(stats["split"]) == list(SPLITS)
    assert stats["samples"].sum() == 60
    train = stats.iloc[0]
    assert train["min_bytes"] <= train["median_bytes"] <= train["max_bytes"]
    assert set(w.split(":")[0] for w in train["class_counts"].split()) == {"benign", "malware"}
    png = tmp_path / "sizes.png"
    plot_size_distribution(files, png)
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_statistics_reject_a_malformed_fold_file(tmp_path):
    bad = tmp_path / "train_x_fold_1.csv"
    bad.write_text("FileName,Label,File_Size\na.exe,0,-5\n")
    with pytest.raises(
        Exception, match=r"train_x_fold_1.csv, line 2: column File_Size: -5 is below the minimum 1"
    ):
        dataset_statistics([bad])


@pytest.mark.parametrize(
    "name", ["fold.csv", "train_fold_1.csv", "holdout_d_fold_1.csv", "train_d_fold_x.csv"]
)
def test_a_fold_file_of_another_name_is_a_one_line_error(name):
    with pytest.raises(InputError, match="name must be <train|val|test>_<dataset>_fold_<i>.csv"):
        parse_fold_path(f"x/{name}")
