"""Raw-byte batches: tokens, padding, truncation, partial batches, order, isolation between batches."""

from __future__ import annotations

import gzip

import numpy as np
import pytest
import torch

from membench.core.errors import InputError
from membench.hotconv.data import ByteDataset, collate_bytes, make_loader, padded_length


def _write(tmp_path, name: str, content: bytes, compress: bool = False) -> str:
    path = tmp_path / name
    path.write_bytes(gzip.compress(content, mtime=0) if compress else content)
    return str(path)


def test_tokens_are_bytes_plus_one_and_padding_is_zero(tmp_path):
    contents = [bytes([0, 255, 7]), bytes(range(10))]
    dataset = ByteDataset(
        [_write(tmp_path, f"{i}.exe", c) for i, c in enumerate(contents)], [0, 1], max_len=100
    )
    tokens, labels = next(iter(make_loader(dataset, 2, 8, shuffle=False, seed=0)))
    assert tokens.dtype == torch.int16 and labels.tolist() == [0, 1]
    assert tokens.shape == (2, 16)  # longest (10) rounded up to a multiple of the slice size 8
    assert tokens[0, :3].tolist() == [1, 256, 8] and tokens[0, 3:].eq(0).all()
    assert tokens[1, :10].tolist() == list(range(1, 11)) and tokens[1, 10:].eq(0).all()


def test_files_are_truncated_at_max_len_and_gzip_is_read(tmp_path):
    content = bytes(range(200))
    dataset = ByteDataset(
        [_write(tmp_path, "plain.exe", content), _write(tmp_path, "packed.exe", content, True)], [1, 0], 50
    )
    for index in range(2):
        data, _ = dataset[index]
        assert data.tobytes() == content[:50]
    tokens, _ = collate_bytes([dataset[0], dataset[1]], slice_size=32)
    assert tokens.shape == (2, 64)
    assert tokens[:, :50].eq(torch.arange(1, 51, dtype=torch.int16)).all() and tokens[:, 50:].eq(0).all()


def test_partial_last_batch_is_kept(tmp_path):
    paths = [_write(tmp_path, f"{i}.exe", bytes([i]) * (i + 1)) for i in range(7)]
    loader = make_loader(ByteDataset(paths, [i % 2 for i in range(7)], 64), 3, 4, shuffle=False, seed=0)
    sizes = [len(labels) for _, labels in loader]
    assert sizes == [3, 3, 1]


def test_no_bytes_leak_from_one_batch_into_the_next(tmp_path):
    long_file = _write(tmp_path, "long.exe", b"\xaa" * 300)
    short_file = _write(tmp_path, "short.exe", b"\x01" * 5)
    loader = make_loader(ByteDataset([long_file, short_file], [1, 0], 1000), 1, 16, shuffle=False, seed=0)
    (first, _), (second, _) = list(loader)
    assert first.shape == (1, 304) and first[0, :300].eq(0xAA + 1).all()
    assert second.shape == (1, 16)
    assert second[0, :5].eq(2).all() and second[0, 5:].eq(0).all()


def test_sort_by_size_order_is_largest_first_by_content_size(tmp_path):
    # The gzip file is the largest by content but the smallest on disk.
    paths = [
        _write(tmp_path, "a.exe", bytes(np.random.default_rng(0).integers(0, 256, 100, dtype=np.uint8))),
        _write(tmp_path, "b.exe", b"\x00" * 5000, compress=True),
        _write(tmp_path, "c.exe", b"\x05" * 10),
    ]
    loader = make_loader(ByteDataset(paths, [0, 1, 0], 10_000), 1, 8, shuffle=True, seed=3, sort_by_size=True)
    lengths = [int(tokens.ne(0).sum()) for tokens, _ in loader]
    assert lengths == [5000, 100, 10]


def test_shuffle_is_seeded_and_workers_give_the_same_batches(tmp_path):
    paths = [_write(tmp_path, f"{i}.exe", bytes([i + 1]) * (i + 1)) for i in range(9)]
    dataset = ByteDataset(paths, [i % 2 for i in range(9)], 64)

    def order(seed, workers=0):
        return [
            t[:, 0].tolist()
            for t, _ in make_loader(dataset, 4, 16, shuffle=True, seed=seed, num_workers=workers)
        ]

    assert order(5) == order(5) != order(6)
    assert order(5, workers=2) == order(5)
    assert sorted(sum(order(5), [])) == [i + 2 for i in range(9)]


def test_padded_length_covers_at_least_one_slice():
    assert padded_length(0, 64) == 64
    assert padded_length(64, 64) == 64
    assert padded_length(65, 64) == 128


def test_mismatched_paths_and_labels_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="1 paths but 2 labels"):
        ByteDataset([_write(tmp_path, "x.exe", b"x")], [0, 1], 10)


def test_sort_by_size_order_takes_the_folds_sizes(tmp_path):
    # The sizes given (a fold's File_Size) decide the order; the files are not measured again.
    paths = [_write(tmp_path, f"{i}.exe", b"\x01" * 10) for i in range(3)]
    loader = make_loader(
        ByteDataset(paths, [0, 1, 0], 100, sizes=[5, 30, 20]), 1, 8, shuffle=False, seed=0, sort_by_size=True
    )
    assert [int(labels[0]) for _, labels in loader] == [1, 0, 0]
    assert list(loader.sampler) == [1, 2, 0]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [0, 1])
def test_a_damaged_binary_is_named_in_one_line_whatever_the_workers(tmp_path, workers):
    truncated = _write(tmp_path, "truncated.exe", gzip.compress(bytes(range(256)) * 64, mtime=0)[:100])
    dataset = ByteDataset([_write(tmp_path, "good.exe", b"MZ"), truncated], [0, 1], 10_000)
    loader = make_loader(dataset, 1, 8, shuffle=False, seed=0, num_workers=workers)
    with pytest.raises(InputError) as raised:
        list(loader)
    assert str(raised.value) == (
        f"{truncated}: is a damaged gzip file (truncated: the compressed data ends before its end marker)"
    )
