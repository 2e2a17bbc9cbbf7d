"""Fold properties and the bad inputs the fold maker and fold reader reject."""

import dataclasses

import pandas as pd
import pytest

from membench.core.errors import InputError
from membench.data.bodmas import SPLITS, fold_file_name
from membench.data.bodmas.folds import FoldSpec, make_fold, read_fold, read_metadata, write_classes


def _write_all(metadata, binaries, outdir, spec):
    for fold in range(spec.folds + 1):
        make_fold(metadata, binaries, "tiny", fold, outdir, spec)
    return {
        (fold, split): pd.read_csv(outdir / fold_file_name(split, "tiny", fold))
        for fold in range(spec.folds + 1)
        for split in SPLITS
    }


def test_no_sample_in_two_splits_and_every_sample_used(tiny_dataset, tmp_path):
    metadata, binaries = tiny_dataset
    spec = FoldSpec(folds=3)
    folds = _write_all(metadata, binaries, tmp_path / "folds", spec)
    everyone = set(pd.read_csv(metadata)["sha"] + ".exe")
    for fold in range(spec.folds + 1):
        names = [set(folds[fold, split]["FileName"]) for split in SPLITS]
        assert (
            names[0].isdisjoint(names[1]) and names[0].isdisjoint(names[2]) and names[1].isdisjoint(names[2])
        )
        assert set().union(*names) == everyone
        assert list(folds[fold, "train"].columns) == ["FileName", "Label", "File_Size"]
    tests = [set(folds[f, "test"]["FileName"]) for f in range(1, spec.folds + 1)]
    assert set().union(*tests) == everyone and sum(map(len, tests)) == len(everyone)


def test_time_split_trains_on_the_past(tiny_dataset, tmp_path):
    metadata_path, binaries = tiny_dataset
    folds = _write_all(
        metadata_path, binaries, tmp_path / "folds", FoldSpec(folds=2, time_split_quantile=0.75)
    )
    metadata = read_metadata(metadata_path, binaries).set_index("FileName")
    before = pd.concat([folds[0, "train"], folds[0, "val"]])["FileName"]
    after = folds[0, "test"]["FileName"]
    assert metadata.loc[before, "timestamp"].max() <= metadata.loc[after, "timestamp"].min()
    assert len(after) == 15


def test_time_split_by_date(tiny_dataset, tmp_path):
    metadata_path, binaries = tiny_dataset
    spec = FoldSpec(folds=2, time_split_date="2020-03-01")
    folds = _write_all(metadata_path, binaries, tmp_path / "folds", spec)
    metadata = read_metadata(metadata_path, binaries).set_index("FileName")
    cut = pd.Timestamp("2020-03-01", tz="UTC")
    assert (metadata.loc[folds[0, "test"]["FileName"], "timestamp"] >= cut).all()
    assert (metadata.loc[folds[0, "train"]["FileName"], "timestamp"] < cut).all()


def test_stratified_folds_keep_class_balance(tiny_dataset, tmp_path):
    metadata, binaries = tiny_dataset
    spec = FoldSpec(folds=3)
    folds = _write_all(metadata, binaries, tmp_path / "folds", spec)
    overall = pd.concat([folds[1, s] for s in SPLITS])["Label"].value_counts()
    for fold in range(1, spec.folds + 1):
        test_counts = folds[fold, "test"]["Label"].value_counts()
        for label, count in overall.items():
            assert abs(test_counts.get(label, 0) - count / spec.folds) <= 1


def test_family_labels_and_size_order(tiny_dataset, tmp_path):
    metadata, binaries = tiny_dataset
    spec = FoldSpec(folds=2, label_mode="family", top_families=2, sort_by_size=True)
    folds = _write_all(metadata, binaries, tmp_path / "folds", spec)
    classes = write_classes(metadata, tmp_path / "classes.csv", "family", 2)
    assert list(classes["Name"]) == ["family_01", "family_02", "other"]
    labels = pd.concat([folds[1, s] for s in SPLITS])["Label"]
    assert set(labels) == {0, 1, 2}
    assert (
        len(labels)
        == classes["Count"].sum()
        == (pd.read_csv(metadata, keep_default_na=False)["family"] != "").sum()
    )
    sizes = folds[1, "train"]["File_Size"]
    assert sizes.is_monotonic_decreasing


def test_folds_are_deterministic(tiny_dataset, tmp_path):
    metadata, binaries = tiny_dataset
    spec = FoldSpec(folds=2, seed=5)
    first = make_fold(metadata, binaries, "tiny", 1, tmp_path / "a", spec)
    second = make_fold(metadata, binaries, "tiny", 1, tmp_path / "b", spec)
    assert [p.read_bytes() for p in first] == [p.read_bytes() for p in second]
    other = make_fold(metadata, binaries, "tiny", 1, tmp_path / "c", dataclasses.replace(spec, seed=6))
    assert [p.read_bytes() for p in first] != [p.read_bytes() for p in other]


# -- bad input -----------------------------------------------------------------------------------
def _edit_metadata(metadata, edit):
    frame = pd.read_csv(metadata, dtype=str, keep_default_na=False)
    edit(frame)
    frame.to_csv(metadata, index=False)


def test_missing_sha_is_named(tiny_dataset):
    metadata, binaries = tiny_dataset
    _edit_metadata(metadata, lambda f: f.__setitem__("sha", [""] + list(f["sha"][1:])))
    with pytest.raises(InputError, match=r"metadata.csv, line 2: column sha is empty"):
        read_metadata(metadata, binaries)


def test_duplicated_sha_is_named(tiny_dataset):
    metadata, binaries = tiny_dataset
    _edit_metadata(metadata, lambda f: f.__setitem__("sha", [f["sha"][0]] * 2 + list(f["sha"][2:])))
    with pytest.raises(InputError, match=r"line 3: column sha: '[0-9a-f]+' repeats line 2"):
        read_metadata(metadata, binaries)


def test_sha_escaping_the_directory_is_rejected(tiny_dataset):
    metadata, binaries = tiny_dataset
    _edit_metadata(metadata, lambda f: f.__setitem__("sha", ["../../etc/passwd"] + list(f["sha"][1:])))
    with pytest.raises(InputError, match=r"line 2: sha '../../etc/passwd' is not a plain file-name token"):
        read_metadata(metadata, binaries)


def test_missing_empty_and_unreadable_binaries_are_named(tiny_dataset):
    metadata, binaries = tiny_dataset
    shas = list(pd.read_csv(metadata)["sha"])
    (binaries / f"{shas[0]}.exe").unlink()
    with pytest.raises(InputError, match=r"line 2: binary .* does not exist"):
        read_metadata(metadata, binaries)
    (binaries / f"{shas[0]}.exe").write_bytes(b"")
    with pytest.raises(InputError, match=r"line 2: binary .* is empty"):
        read_metadata(metadata, binaries)
    (binaries / f"{shas[0]}.exe").unlink()
    (binaries / f"{shas[0]}.exe").mkdir()
    with pytest.raises(InputError, match=r"line 2: binary .* is a directory$"):
        read_metadata(metadata, binaries)


def test_unknown_and_missing_columns_are_named(tiny_dataset):
    metadata, binaries = tiny_dataset
    _edit_metadata(metadata, lambda f: f.__setitem__("extra", "x"))
    with pytest.raises(InputError, match=r"line 1: unknown column\(s\) extra"):
        read_metadata(metadata, binaries)

    def drop_timestamp(frame):
        del frame["extra"], frame["timestamp"]

    _edit_metadata(metadata, drop_timestamp)
    with pytest.raises(InputError, match=r"line 1: missing column\(s\) timestamp"):
        read_metadata(metadata, binaries)


def test_bad_timestamp_is_named(tiny_dataset):
    metadata, binaries = tiny_dataset
    _edit_metadata(metadata, lambda f: f.__setitem__("timestamp", ["yesterday"] + list(f["timestamp"][1:])))
    with pytest.raises(InputError, match=r"line 2: timestamp 'yesterday' is not a date"):
        read_metadata(metadata, binaries)


def test_too_few_samples_per_class_for_k_folds(tiny_dataset, tmp_path):
    metadata, binaries = tiny_dataset
    with pytest.raises(InputError, match="fewer than the 50 stratified folds"):
        make_fold(metadata, binaries, "tiny", 1, tmp_path, FoldSpec(folds=50))


def test_fold_reader_rejects_escaping_names_and_bad_labels(tiny_dataset, tmp_path):
    metadata, binaries = tiny_dataset
    (train, _, _) = make_fold(metadata, binaries, "tiny", 1, tmp_path, FoldSpec(folds=2))
    assert len(read_fold(train, binaries, num_classes=2)) > 0
    frame = pd.read_csv(train)
    for bad_name in ("../metadata.csv", "/etc/passwd"):
        frame.loc[1, "FileName"] = bad_name
        frame.to_csv(train, index=False)
        with pytest.raises(InputError, match=r"line 3: file name"):
            read_fold(train, binaries)
    frame = pd.read_csv(tmp_path / fold_file_name("test", "tiny", 1))
    frame.loc[0, "Label"] = 7
    frame.to_csv(train, index=False)
    with pytest.raises(InputError, match=r"line 2: column Label: 7 is above the maximum 1"):
        read_fold(train, binaries, num_classes=2)
