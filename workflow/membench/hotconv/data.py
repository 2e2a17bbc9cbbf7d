"""Raw-byte batches for the MalConv family.

A sample is the first ``max_len`` bytes of a binary (gzip is decompressed). A batch is a fresh
(B, L) int16 tensor of tokens ``byte + 1`` with 0 as padding, where L is the longest sample of the
batch rounded up to a multiple of the slice size (so every sliced pass sees whole slices). The
last batch may be smaller than the batch size. Host memory is bounded by B x L x 2 bytes per batch
(plus the loader's prefetch); nothing is cached between batches, so no bytes leak from one batch
into another. The dataset holds only paths, labels and sizes, so DataLoader workers can use it. A
binary that cannot be read (damaged gzip, an I/O error) raises :class:`InputError` naming it.
"""

from __future__ import annotations

import math
import os
from typing import Sequence

import numpy as np
import pandas as pd
import torch
from torch.utils.data import DataLoader, Dataset

from membench.core.errors import InputError
from membench.data.bodmas.binaries import content_size, read_prefix

__all__ = ["ByteDataset", "collate_bytes", "make_loader", "padded_length", "TOKEN_DTYPE"]

TOKEN_DTYPE = torch.int16  # holds 0..256


class ByteDataset(Dataset):
    """Binaries and their labels; item i is ``(bytes as uint8 array of length <= max_len, label)``.

    ``sizes``: the content sizes in bytes (a fold's ``File_Size``, checked when the fold was made),
    for the size-sorted order; without them that order measures every binary.
    """

    def __init__(
        self,
        paths: Sequence[str | os.PathLike],
        labels: Sequence[int],
        max_len: int,
        sizes: Sequence[int] | None = None,
    ) -> None:
        if len(paths) != len(labels):
            raise ValueError(f"{len(paths)} paths but {len(labels)} labels")
        if sizes is not None and len(sizes) != len(paths):
            raise ValueError(f"{len(paths)} paths but {len(sizes)} sizes")
        if max_len < 1:
            raise ValueError(f"max_len must be positive, got {max_len}")
        self.paths = [os.fspath(p) for p in paths]
        self.labels = [int(label) for label in labels]
        self.sizes = None if sizes is None else [int(size) for size in sizes]
        self.max_len = max_len

    @classmethod
    def from_fold(cls, fold: pd.DataFrame, max_len: int) -> "ByteDataset":
        """From a frame read by :func:`membench.data.bodmas.folds.read_fold` (columns path, Label,
        File_Size)."""
        return cls(list(fold["path"]), list(fold["Label"]), max_len, list(fold["File_Size"]))

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[np.ndarray, int]:
        content = read_prefix(self.paths[index], self.max_len)
        return np.frombuffer(content, dtype=np.uint8), self.labels[index]

    def __getitems__(self, indices: list[int]) -> list[tuple[np.ndarray, int]] | list[InputError]:
        """The samples of one batch, as the loader fetches them; a binary that cannot be read gives
        ``[its InputError]`` instead, which the collate passes on as the batch for the loader to
        raise in the main process (torch turns an exception raised in a worker process into a
        RuntimeError holding a traceback)."""
        try:
            return [self[index] for index in indices]
        except InputError as exc:
            return [exc]


def padded_length(longest: int, slice_size: int) -> int:
    """Batch length in tokens: ``longest`` rounded up to a multiple of ``slice_size`` (at least one slice)."""
    return max(1, math.ceil(longest / slice_size)) * slice_size


def collate_bytes(
    samples: list[tuple[np.ndarray, int]], slice_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Samples -> (tokens (B, L) int16 with byte + 1 and 0 padding, labels (B,) int64)."""
    longest = max(len(content) for content, _ in samples)
    tokens = torch.zeros((len(samples), padded_length(longest, slice_size)), dtype=TOKEN_DTYPE)
    for row, (content, _) in enumerate(samples):
        tokens[row, : len(content)] = torch.from_numpy(content.astype(np.int16)) + 1
    labels = torch.tensor([label for _, label in samples], dtype=torch.long)
    return tokens, labels


class _Collate:
    """A picklable collate function (worker processes need to import it); passes on a read error."""

    def __init__(self, slice_size: int) -> None:
        self.slice_size = slice_size

    def __call__(self, samples):
        if isinstance(samples[0], InputError):
            return samples[0]
        return collate_bytes(samples, self.slice_size)


class _ByteLoader(DataLoader):
    """A DataLoader that raises, in this process, the read error a batch carries (see
    :meth:`ByteDataset.__getitems__`)."""

    def __iter__(self):
        for batch in super().__iter__():
            if isinstance(batch, InputError):
                raise batch
            yield batch


def make_loader(
    dataset: ByteDataset,
    batch_size: int,
    slice_size: int,
    *,
    shuffle: bool,
    seed: int,
    sort_by_size: bool = False,
    num_workers: int = 0,
) -> DataLoader:
    """A loader over ``dataset``.

    ``shuffle``: a seeded random order (pass a different ``seed`` per epoch for a new order that a
    resumed job reproduces). ``sort_by_size``: largest files first, no shuffle (memory-measurement
    order, as MalConv2 and HotConv measured). Otherwise file order. Iterating raises
    :class:`InputError` naming a binary that cannot be read, whatever ``num_workers`` is.
    """
    if sort_by_size:
        sizes = dataset.sizes if dataset.sizes is not None else [content_size(p) for p in dataset.paths]
        order = sorted(range(len(dataset)), key=lambda i: (-sizes[i], i))
        sampler, shuffle = order, False
    else:
        sampler = None
    # Also without shuffling: the loader draws its workers' seeds from it, not from the global generator.
    generator = torch.Generator().manual_seed(seed)
    return _ByteLoader(
        dataset,
        batch_size=batch_size,
        shuffle=shuffle,
        sampler=sampler,
        drop_last=False,
        collate_fn=_Collate(slice_size),
        num_workers=num_workers,
        generator=generator,
    )
