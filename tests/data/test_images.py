"""Image LMDBs: folder and CIFAR conversion, the reader, and every bad input."""

from __future__ import annotations

import io
import os
import pickle

import lmdb
import numpy as np
import pytest
import torch
from PIL import Image

from membench.core.errors import InputError
from membench.data.images.cifar import cifar_to_lmdb, load_cifar_batch
from membench.data.images.folder import folder_to_lmdb
from membench.data.images.generate import DigitsSpec, draw_digit
from membench.data.images.lmdb_store import ImageLMDB, read_metadata, record_key
from membench.data.images.mnist import mnist_arrays
from membench.data.images.transforms import EvalTransform, TrainTransform, to_tensor


def _png(colour, size=8) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (size, size), colour).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.fixture
def image_folder(tmp_path):
    root = tmp_path / "folder"
    for split, count in (("train", 3), ("val", 1)):
        for label, name in enumerate(("cat", "dog")):
            for i in range(count):
                path = root / split / name / f"{i}.png"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(_png((10 * i, 100 * label, 50)))
    return root


def test_folder_round_trip_keeps_bytes_labels_and_order(image_folder, tmp_path):
    out = folder_to_lmdb(image_folder, "train", tmp_path / "train.lmdb")
    length, classes = read_metadata(out)
    assert (length, classes) == (6, ["cat", "dog"])
    dataset = ImageLMDB(out)
    files = sorted((image_folder / "train" / "cat").iterdir()) + sorted(
        (image_folder / "train" / "dog").iterdir()
    )
    for index, file in enumerate(files):
        label, data = dataset.read_record(index)
        assert data == file.read_bytes() and label == (0 if "cat" in str(file) else 1)
    image, label = dataset[4]
    assert image.size == (8, 8) and label == 1 and image.getpixel((0, 0)) == (10, 100, 50)
    assert list(dataset.labels()) == [0, 0, 0, 1, 1, 1]
    with pytest.raises(IndexError):
        dataset.read_record(6)


def test_values_use_the_fixed_binary_layout_not_pickle(image_folder, tmp_path):
    out = folder_to_lmdb(image_folder, "val", tmp_path / "val.lmdb")
    with lmdb.open(str(out), readonly=True, lock=False) as env, env.begin() as txn:
        keys = [k for k, _ in txn.cursor()]
        value = txn.get(record_key(1))
    assert record_key(0) == b"0000000000" and b"__len__" in keys and b"__classes__" in keys
    assert int.from_bytes(value[:8], "little", signed=True) == 1
    assert value[8:12] == b"\x89PNG"


def test_rebuild_replaces_atomically_and_leaves_no_temporary(image_folder, tmp_path):
    out = tmp_path / "train.lmdb"
    folder_to_lmdb(image_folder, "train", out)
    (image_folder / "train" / "dog" / "9.png").write_bytes(_png((1, 2, 3)))
    folder_to_lmdb(image_folder, "train", out)
    assert read_metadata(out)[0] == 7
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder", "train.lmdb"]


def test_a_failed_build_leaves_the_previous_lmdb(image_folder, tmp_path):
    out = tmp_path / "train.lmdb"
    folder_to_lmdb(image_folder, "train", out)
    (image_folder / "train" / "dog" / "broken.png").write_bytes(b"not an image")
    with pytest.raises(InputError, match="broken.png"):
        folder_to_lmdb(image_folder, "train", out)
    assert read_metadata(out)[0] == 6
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder", "train.lmdb"]


def _corrupt(path, key: bytes, value: bytes) -> None:
    with lmdb.open(str(path), map_size=2**24) as env, env.begin(write=True) as txn:
        txn.put(key, value)


@pytest.mark.parametrize(
    "value,message",
    [
        (b"\x01\x00", "8-byte label"),
        ((7).to_bytes(8, "little") + b"png", "label 7 outside"),
        ((1).to_bytes(8, "little") + b"garbage", "do not decode"),
    ],
)
def test_corrupt_record_names_the_lmdb_and_key(image_folder, tmp_path, value, message):
    out = folder_to_lmdb(image_folder, "train", tmp_path / "train.lmdb")
    _corrupt(out, record_key(2), value)
    dataset = ImageLMDB(out)
    with pytest.raises(InputError, match=message) as error:
        dataset[2]
    assert str(out) in str(error.value) and "key '0000000002'" in str(error.value)
    assert dataset[1][1] == 0


def test_missing_record_and_metadata_are_reported(image_folder, tmp_path):
    out = folder_to_lmdb(image_folder, "train", tmp_path / "train.lmdb")
    with lmdb.open(str(out), map_size=2**24) as env, env.begin(write=True) as txn:
        txn.delete(record_key(4))
        txn.put(b"other", b"")  # as many entries as before
    with pytest.raises(InputError, match="record missing"):
        ImageLMDB(out)[4]
    _corrupt(out, b"__classes__", b"[not json")
    with pytest.raises(InputError, match="__classes__"):
        read_metadata(out)
    with pytest.raises(InputError, match="not an LMDB"):
        read_metadata(tmp_path)


def test_reader_opens_lazily_and_works_in_worker_processes(image_folder, tmp_path):
    out = folder_to_lmdb(image_folder, "train", tmp_path / "train.lmdb")
    dataset = ImageLMDB(out, EvalTransform(8, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)))
    assert dataset._env is None
    loader = torch.utils.data.DataLoader(dataset, batch_size=3, num_workers=2)
    batches = list(loader)
    assert dataset._env is None  # only the workers opened it
    labels = torch.cat([b[1] for b in batches])
    assert labels.tolist() == [0, 0, 0, 1, 1, 1] and batches[0][0].shape == (3, 3, 8, 8)


@pytest.mark.parametrize(
    "layout,message",
    [
        ("missing", "split directory not found"),
        ("no_classes", "no class directories"),
        ("empty_class", "holds no images"),
        ("empty_file", "is empty"),
    ],
)
def test_bad_folders(tmp_path, layout, message):
    root = tmp_path / "root"
    if layout != "missing":
        (root / "train").mkdir(parents=True)
    if layout == "empty_class":
        (root / "train" / "cat").mkdir()
    if layout == "empty_file":
        (root / "train" / "cat").mkdir()
        (root / "train" / "cat" / "a.png").write_bytes(b"")
    with pytest.raises(InputError, match=message):
        folder_to_lmdb(root, "train", tmp_path / "out")


def _make_pipe(path):
    """Replace ``path`` (a file or an LMDB's data file) with a named pipe that no one writes."""
    path.unlink()
    os.mkfifo(path)
    return path


PIPE = r"is a named pipe \(FIFO\), not a regular file$"


@pytest.mark.timeout(20)
def test_pipes_in_an_image_folder_lmdb_cifar_or_mnist_are_named_without_blocking(image_folder, tmp_path):
    pipe = _make_pipe(image_folder / "train" / "cat" / "1.png")
    with pytest.raises(InputError, match=f"{pipe}: {PIPE}"):
        folder_to_lmdb(image_folder, "train", tmp_path / "train.lmdb")
    pipe = _make_pipe(folder_to_lmdb(image_folder, "val", tmp_path / "val.lmdb") / "data.mdb")
    with pytest.raises(InputError, match=f"{pipe}: {PIPE}"):
        ImageLMDB(tmp_path / "val.lmdb")
    _write_cifar10(tmp_path / "cifar")
    pipe = _make_pipe(tmp_path / "cifar" / "batches.meta")
    with pytest.raises(InputError, match=f"{pipe}: {PIPE}"):
        cifar_to_lmdb(tmp_path / "cifar", "cifar10", "test", tmp_path / "test.lmdb")
    (tmp_path / "mnist").mkdir()
    (tmp_path / "mnist" / "t10k-labels-idx1-ubyte").write_bytes(b"")
    pipe = tmp_path / "mnist" / "t10k-images-idx3-ubyte.gz"
    os.mkfifo(pipe)
    with pytest.raises(InputError, match=f"{pipe}: {PIPE}"):
        mnist_arrays(tmp_path / "mnist", "test")


def test_a_directory_named_like_a_cifar_batch_is_called_a_directory(tmp_path):
    _write_cifar10(tmp_path / "cifar")
    (tmp_path / "cifar" / "test_batch").unlink()
    (tmp_path / "cifar" / "test_batch").mkdir()
    with pytest.raises(InputError, match=r"test_batch: is a directory$"):
        cifar_to_lmdb(tmp_path / "cifar", "cifar10", "test", tmp_path / "test.lmdb")


def _write_cifar10(directory, batches=None):
    directory.mkdir()
    rng = np.random.default_rng(0)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for name in names:
        data = rng.integers(0, 256, size=(2, 3072), dtype=np.uint8)
        batch = {b"data": data, b"labels": [1, 9], b"batch_label": b"x"}
        (directory / name).write_bytes(pickle.dumps((batches or {}).get(name, batch), protocol=2))
    meta = {b"label_names": [f"class{i}".encode() for i in range(10)], b"num_vis": 3072}
    (directory / "batches.meta").write_bytes(pickle.dumps(meta, protocol=2))


def test_cifar_conversion_round_trip(tmp_path):
    _write_cifar10(tmp_path / "cifar")
    out = cifar_to_lmdb(tmp_path / "cifar", "cifar10", "train", tmp_path / "train.lmdb")
    dataset = ImageLMDB(out)
    assert len(dataset) == 10 and dataset.classes[9] == "class9"
    raw = load_cifar_batch(tmp_path / "cifar" / "data_batch_1")["data"][1]
    image, label = dataset[1]
    assert label == 9
    assert np.array_equal(np.asarray(image), raw.reshape(3, 32, 32).transpose(1, 2, 0))


class _Payload:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_cifar_refuses_pickles_that_would_run_code(tmp_path):
    _write_cifar10(tmp_path / "cifar", {"data_batch_2": {b"data": _Payload(), b"labels": []}})
    with pytest.raises(InputError, match="not allowed"):
        cifar_to_lmdb(tmp_path / "cifar", "cifar10", "train", tmp_path / "train.lmdb")
    assert not (tmp_path / "train.lmdb").exists()


def test_a_cifar_batch_naming_an_unknown_codec_is_a_one_line_error(tmp_path):
    # Python 2 pickles carry byte strings as _codecs.encode(text, "latin1"); a damaged one can name
    # any encoding, which Python answers with LookupError.
    batch = tmp_path / "data_batch_1"
    batch.write_bytes(b"\x80\x02c_codecs\nencode\nq\x00X\x01\x00\x00\x00xX\x06\x00\x00\x00matin1\x86R.")
    with pytest.raises(InputError, match="not a plain CIFAR python batch .*unknown encoding: matin1"):
        load_cifar_batch(batch)


@pytest.mark.timeout(20)
def test_a_cifar_batch_declaring_a_huge_array_is_refused_before_numpy_allocates_it(tmp_path):
    # 69 bytes: numpy's _reconstruct(ndarray, (2**43,), int8), which allocates 8 TiB at once.
    declared = b"\x80\x02cnumpy._core.multiarray\n_reconstruct\ncnumpy\nndarray\n\x8a\x06" + (2**43).to_bytes(
        6, "little"
    )
    _write_cifar10(tmp_path / "cifar")
    (tmp_path / "cifar" / "test_batch").write_bytes(declared + b"\x85C\x01b\x87R.")
    with pytest.raises(
        InputError, match=r"test_batch: .*an array of 8796093022208 bytes declared in a file of 69 bytes"
    ):
        cifar_to_lmdb(tmp_path / "cifar", "cifar10", "test", tmp_path / "test.lmdb")


@pytest.mark.parametrize(
    "batch,message",
    [
        ({b"data": np.zeros((2, 10), np.uint8), b"labels": [0, 1]}, "3072"),
        ({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, 12]}, "outside"),
    ],
)
def test_cifar_bad_arrays(tmp_path, batch, message):
    _write_cifar10(tmp_path / "cifar", {"test_batch": batch})
    with pytest.raises(InputError, match=message):
        cifar_to_lmdb(tmp_path / "cifar", "cifar10", "test", tmp_path / "test.lmdb")


def test_generated_digits_are_deterministic_and_split(tmp_path):
    spec = DigitsSpec(val_fraction=0.25)
    a = draw_digit(np.eye(8) * 16, spec, np.random.default_rng(3))
    b = draw_digit(np.eye(8) * 16, spec, np.random.default_rng(3))
    assert a.shape == (32, 32, 3) and a.dtype == np.uint8 and np.array_equal(a, b)
    assert a.max() > 150 and a.min() < 110


def test_transforms_shapes_and_normalisation():
    image = Image.new("RGB", (10, 10), (255, 0, 0))
    x = to_tensor(image)
    assert x.shape == (3, 10, 10) and x[0].max() == 1.0 and x[1].max() == 0.0
    torch.manual_seed(0)
    train = TrainTransform(8, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5), padding=2, flip=True)(image)
    assert train.shape == (3, 8, 8)
    evaluated = EvalTransform(10, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5))(image)
    assert torch.allclose(evaluated[0], torch.ones(10, 10))


def test_digit_sizes_larger_than_the_image_are_rejected():
    from membench.core.errors import InputError
    from membench.data.images.generate import DigitsSpec

    with pytest.raises(InputError, match=r"max_digit_size \(26\) <= image_size \(16\)"):
        DigitsSpec(image_size=16)


def _snapshot(root):
    return sorted(
        (str(p.relative_to(root)), p.read_bytes() if p.is_file() else None) for p in root.rglob("*")
    )


@pytest.mark.parametrize("out", [".", "train", "train/cat"])
def test_lmdb_over_the_image_folder_is_refused_and_deletes_nothing(image_folder, out, capsys):
    from membench.cli import main

    before = _snapshot(image_folder)
    code = main(
        ["images", "lmdb", "--root", str(image_folder), "--split", "train", "--out", str(image_folder / out)]
    )
    err = capsys.readouterr().err
    assert code == 2 and str(image_folder / out) in err and ("refusing" in err or "the input" in err)
    assert _snapshot(image_folder) == before


def test_cifar_over_its_batches_is_refused_and_deletes_nothing(tmp_path, capsys):
    from membench.cli import main

    _write_cifar10(tmp_path / "cifar")
    before = _snapshot(tmp_path)
    for out in (tmp_path / "cifar", tmp_path):
        code = main(
            [
                "images",
                "cifar",
                "--root",
                str(tmp_path / "cifar"),
                "--source",
                "cifar10",
                "--split",
                "train",
                "--outdir",
                str(out),
            ]
        )
        assert code == 2
        assert str(out) in capsys.readouterr().err
    assert _snapshot(tmp_path) == before


def test_lmdb_over_a_user_directory_is_refused_but_a_previous_lmdb_is_replaced(image_folder, tmp_path):
    user = tmp_path / "notes"
    user.mkdir()
    (user / "thesis.tex").write_text("precious")
    with pytest.raises(InputError, match="not a membench output"):
        folder_to_lmdb(image_folder, "train", user)
    assert (user / "thesis.tex").read_text() == "precious" and sorted(os.listdir(user)) == ["thesis.tex"]
    digits = tmp_path / "digits"
    from membench.data.images.generate import generate_digits_folder

    generate_digits_folder(digits, DigitsSpec(images_per_class=1))
    with pytest.raises(InputError, match="'digits-image-folder' output, not a previous 'image-lmdb'"):
        folder_to_lmdb(image_folder, "train", digits)
    out = tmp_path / "train.lmdb"
    folder_to_lmdb(image_folder, "train", out)
    folder_to_lmdb(image_folder, "train", out)
    assert read_metadata(out)[0] == 6


def test_digits_folder_refuses_a_user_directory_and_uses_the_umask(tmp_path):
    from membench.data.images.generate import generate_digits_folder

    user = tmp_path / "photos"
    user.mkdir()
    (user / "a.png").write_bytes(b"precious")
    with pytest.raises(InputError, match="refusing"):
        generate_digits_folder(user, DigitsSpec(images_per_class=1))
    assert sorted(os.listdir(user)) == ["a.png"]
    previous = os.umask(0o022)
    try:
        counts = generate_digits_folder(tmp_path / "digits", DigitsSpec(images_per_class=2))
        generate_digits_folder(tmp_path / "digits", DigitsSpec(images_per_class=2))
    finally:
        os.umask(previous)
    assert sum(counts.values()) == 20
    assert oct((tmp_path / "digits").stat().st_mode & 0o777) == oct(0o755)


def _jpeg(size=32) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (size, size, 3), dtype=np.uint8)).save(
        buffer, format="JPEG"
    )
    return buffer.getvalue()


def _png_declaring(width, height) -> bytes:
    """A PNG whose header declares width x height pixels (its data is a 1x1 image's, so it is tiny)."""
    import struct
    import zlib

    png = _png((1, 2, 3), size=1)
    header = png[8:33]
    ihdr = struct.pack(">II", width, height) + header[16:21]
    chunk = struct.pack(">I", 13) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    return png[:8] + chunk + png[33:]


@pytest.mark.parametrize(
    "name,content,message",
    [
        ("truncated.jpg", _jpeg()[:-200], "truncated"),
        ("bomb.png", _png_declaring(20000, 20000), "too many pixels"),
        ("text.png", b"hello", "do not decode as an image"),
    ],
)
def test_verify_rejects_truncated_huge_and_foreign_images_naming_the_file(
    image_folder, tmp_path, name, content, message
):
    bad = image_folder / "train" / "cat" / name
    bad.write_bytes(content)
    with pytest.raises(InputError, match=message) as error:
        folder_to_lmdb(image_folder, "train", tmp_path / "out")
    assert str(bad) in str(error.value)
    assert not (tmp_path / "out").exists()


def test_a_huge_declared_image_in_a_record_is_an_input_error(image_folder, tmp_path):
    out = folder_to_lmdb(image_folder, "train", tmp_path / "train.lmdb")
    _corrupt(out, record_key(0), (0).to_bytes(8, "little") + _png_declaring(20000, 20000))
    with pytest.raises(InputError, match="key '0000000000'.*too many pixels"):
        ImageLMDB(out)[0]


@pytest.mark.parametrize("value", [b"true", b"-1", b"1.5", b'"3"', b"null", b"1" + b"0" * 5000])
def test_metadata_length_must_be_a_non_negative_integer(image_folder, tmp_path, value):
    out = folder_to_lmdb(image_folder, "train", tmp_path / "train.lmdb")
    _corrupt(out, b"__len__", value)
    with pytest.raises(InputError, match="'__len__'"):
        read_metadata(out)


@pytest.mark.timeout(20)
@pytest.mark.parametrize("value", [b"7", str(2**70).encode()])
def test_a_length_beyond_the_records_the_lmdb_holds_is_refused_before_anything_is_sized(
    image_folder, tmp_path, value, capsys
):
    from membench.cli import main

    out = folder_to_lmdb(image_folder, "train", tmp_path / "train.lmdb")
    _corrupt(out, b"__len__", value)
    with pytest.raises(
        InputError, match=f"key '__len__': {value.decode()} records named, but the LMDB holds 6$"
    ):
        ImageLMDB(out)
    assert main(["images", "check", "--lmdb", str(out)]) == 2
    assert "records named, but the LMDB holds 6" in capsys.readouterr().err


def _damage(out, damage):
    data = out / "data.mdb"
    raw = bytearray(data.read_bytes())
    if damage == "truncate_header":
        raw = raw[:5000]
    elif damage == "truncate_pages":
        raw = raw[: len(raw) - 4096]
    elif damage == "zero_meta":
        raw[: 2 * 4096] = bytes(2 * 4096)
    else:
        raw[2 * 4096 :] = (
            np.random.default_rng(0).integers(0, 256, len(raw) - 2 * 4096, dtype=np.uint8).tobytes()
        )
    data.write_bytes(bytes(raw))


@pytest.mark.parametrize(
    "damage,message",
    [("truncate_header", "truncated"), ("truncate_pages", "truncated"), ("zero_meta", "no valid meta page")],
)
def test_a_damaged_data_mdb_is_an_input_error_naming_the_file(image_folder, tmp_path, damage, message):
    out = folder_to_lmdb(image_folder, "train", tmp_path / "train.lmdb")
    _damage(out, damage)
    with pytest.raises(InputError, match=message) as error:
        ImageLMDB(out)
    assert str(out / "data.mdb") in str(error.value)


def test_check_reads_every_record_and_survives_liblmdb_crashing_on_damaged_pages(
    image_folder, tmp_path, capsys
):
    from membench.cli import main

    out = folder_to_lmdb(image_folder, "train", tmp_path / "train.lmdb")
    assert main(["images", "check", "--lmdb", str(out)]) == 0
    _damage(out, "garbage_pages")
    assert main(["images", "check", "--lmdb", str(out)]) == 2
    assert str(out) in capsys.readouterr().err
