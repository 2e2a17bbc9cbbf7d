"""Datasets: digits in [0, 1]; bad MNIST and CIFAR-10 files give errors naming the file and the fault."""

import gzip
import pickle

import numpy as np
import pytest

from membench.core.errors import InputError
from membench.robust.data import load_dataset


def _idx(values: np.ndarray) -> bytes:
    header = bytes([0, 0, 0x08, values.ndim]) + b"".join(int(n).to_bytes(4, "big") for n in values.shape)
    return header + values.astype(np.uint8).tobytes()


def _write_mnist(root, train_n=20, test_n=10, gz=False, labels_fn=None):
    rng = np.random.default_rng(0)
    for split, n in (("train", train_n), ("t10k", test_n)):
        images = rng.integers(0, 256, (n, 28, 28))
        labels = rng.integers(0, 10, n) if labels_fn is None else labels_fn(n)
        for name, data in (
            (f"{split}-images-idx3-ubyte", _idx(images)),
            (f"{split}-labels-idx1-ubyte", _idx(labels)),
        ):
            if gz:
                (root / f"{name}.gz").write_bytes(gzip.compress(data))
            else:
                (root / name).write_bytes(data)


def test_digits_are_images_in_the_unit_interval(digits):
    assert digits.x_train.shape[1:] == (1, 8, 8) and len(digits.x_train) + len(digits.x_test) == 1797
    assert digits.x_train.min() >= 0 and digits.x_train.max() <= 1
    assert set(digits.y_train.tolist()) == set(range(10))


@pytest.mark.parametrize("gz", [False, True])
def test_mnist_idx_files_load(tmp_path, gz):
    _write_mnist(tmp_path, gz=gz)
    data = load_dataset("mnist", tmp_path)
    assert data.x_train.shape == (20, 1, 28, 28) and data.x_test.shape == (10, 1, 28, 28)
    assert 0 <= data.x_train.min() and data.x_train.max() <= 1


@pytest.mark.parametrize(
    "corrupt, message",
    [
        (lambda raw: b"\x01" + raw[1:], "not an idx file"),
        (lambda raw: raw[:2] + b"\x0d" + raw[3:], "type code 0x0d is not unsigned byte"),
        (lambda raw: raw[:-5], "header announces shape"),
        (lambda raw: raw[:6], "file ends inside the header"),
        # 2**31 x 2**31 x 4 bytes, which a 64-bit product takes for 0, in a file with no data
        (
            lambda raw: raw[:4] + (2**31).to_bytes(4, "big") * 2 + (4).to_bytes(4, "big"),
            "header announces shape",
        ),
    ],
)
def test_bad_mnist_image_file_is_named(tmp_path, corrupt, message):
    _write_mnist(tmp_path)
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(corrupt(path.read_bytes()))
    with pytest.raises(InputError, match=message) as error:
        load_dataset("mnist", tmp_path)
    assert error.value.path == str(path)


def test_mnist_label_out_of_range_names_file_and_item(tmp_path):
    _write_mnist(tmp_path, labels_fn=lambda n: np.r_[np.zeros(n - 1), 12])
    with pytest.raises(InputError, match=r"train-labels-idx1-ubyte, item 19: label 12 outside 0..9"):
        load_dataset("mnist", tmp_path)


def test_mnist_count_mismatch_and_missing_file(tmp_path):
    _write_mnist(tmp_path)
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(_idx(np.zeros(7)))
    with pytest.raises(InputError, match="7 labels for 20 images"):
        load_dataset("mnist", tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    _write_mnist(other)
    (other / "t10k-images-idx3-ubyte").unlink()
    with pytest.raises(InputError, match="t10k-images-idx3-ubyte: MNIST file not found"):
        load_dataset("mnist", other)


def _write_cifar(root, n=4):
    rng = np.random.default_rng(0)
    (root / "batches.meta").write_bytes(pickle.dumps({b"label_names": [f"c{i}".encode() for i in range(10)]}))
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {
            b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
            b"labels": [int(v) for v in rng.integers(0, 10, n)],
        }
        (root / name).write_bytes(pickle.dumps(batch))


class _Exploit:
    def __reduce__(self):
        return (print, ("pwned",))


def test_cifar10_batches_load_as_chw_images(tmp_path):
    _write_cifar(tmp_path)
    data = load_dataset("cifar10", tmp_path)
    assert data.x_train.shape == (20, 3, 32, 32) and data.x_test.shape == (4, 3, 32, 32)


def test_tampered_cifar_batch_is_refused_without_running_code(tmp_path, capsys):
    _write_cifar(tmp_path)
    (tmp_path / "data_batch_3").write_bytes(pickle.dumps({b"data": _Exploit(), b"labels": []}))
    with pytest.raises(
        InputError, match=r"data_batch_3: not a plain CIFAR python batch .*builtins.print is not allowed"
    ):
        load_dataset("cifar10", tmp_path)
    assert "pwned" not in capsys.readouterr().out


def test_missing_root_is_named(tmp_path):
    with pytest.raises(InputError, match="cifar10 root is not a directory"):
        load_dataset("cifar10", tmp_path / "nowhere")
    with pytest.raises(InputError, match="needs a root directory"):
        load_dataset("mnist", None)
