"""Image LMDBs: one environment per split, values in a fixed binary layout, never pickle.

Layout of an LMDB written here:

``__format__``
    JSON ``{"format": "membench-image-lmdb", "version": 1}``.
``__len__``
    JSON integer, the number of records.
``__classes__``
    JSON list of class names; label ``k`` is ``classes[k]``.
``0000000000`` ... (zero-padded decimal index, so LMDB's key order is index order)
    8-byte little-endian signed label, then the raw encoded image bytes (PNG, JPEG, ...).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import struct
from pathlib import Path
from typing import Callable, Iterable, Iterator

import lmdb
import torch
from tqdm import tqdm

from membench.core import atomic
from membench.core.errors import InputError
from membench.core.validate import open_regular

__all__ = [
    "check_lmdb",
    "decode_record",
    "encode_record",
    "FORMAT",
    "ImageLMDB",
    "KEY_DIGITS",
    "LABEL",
    "OUTPUT_KIND",
    "read_metadata",
    "record_key",
    "write_lmdb",
]

FORMAT = {"format": "membench-image-lmdb", "version": 1}
OUTPUT_KIND = "image-lmdb"
LABEL = struct.Struct("<q")
KEY_DIGITS = 10
_MIN_MAP_BYTES = 64 * 2**20
_PAGE_BYTES = 4096
# liblmdb's meta page layout (64-bit builds): a 16-byte page header, then magic, version, ...,
# the free-list database (whose pad field holds the page size), the main database, the last page
# number and the transaction id.
_LMDB_MAGIC = 0xBEEFC0DE
_PAGE_HEADER_BYTES = 16
_META_PAGE_SIZE_OFFSET = 24
_META_LAST_PAGE_OFFSET = 120
_PAGE_SIZES = {2**k for k in range(9, 17)}
_META_READ_BYTES = 2 * 2**16 + 256


def record_key(index: int) -> bytes:
    """The LMDB key of record ``index`` (zero-padded decimal)."""
    return f"{index:0{KEY_DIGITS}d}".encode()


def encode_record(label: int, image_bytes: bytes) -> bytes:
    """8-byte little-endian label followed by the encoded image bytes."""
    return LABEL.pack(label) + image_bytes


def decode_record(value: bytes, path, key: bytes, num_classes: int) -> tuple[int, bytes]:
    """Split a record into ``(label, image bytes)``; raise :class:`InputError` naming the key if corrupt."""
    where = f"key {key.decode(errors='replace')!r}"
    if len(value) <= LABEL.size:
        raise InputError(
            path, f"corrupt record: {len(value)} bytes, expected an 8-byte label and image bytes", where
        )
    (label,) = LABEL.unpack_from(value)
    if not 0 <= label < num_classes:
        raise InputError(path, f"corrupt record: label {label} outside 0..{num_classes - 1}", where)
    return label, bytes(value[LABEL.size :])


def write_lmdb(
    out_dir: str | os.PathLike,
    records: Iterable[tuple[int, bytes]],
    count: int,
    classes: list[str],
    estimated_bytes: int,
    description: str = "lmdb",
    inputs: Iterable[str | os.PathLike] = (),
) -> Path:
    """Write ``count`` ``(label, image bytes)`` records to a new LMDB directory ``out_dir``.

    The environment is built in a temporary directory beside ``out_dir`` and renamed onto it at the
    end (a replaced ``out_dir`` is removed only then), so a killed build leaves no half LMDB.
    An existing ``out_dir`` that is not a previous image LMDB, or that is or holds one of
    ``inputs``, is refused (:class:`InputError`) and left untouched.
    ``estimated_bytes`` (total image bytes) sizes the memory map.
    """
    out_dir = Path(out_dir)
    with atomic.atomic_directory(out_dir, OUTPUT_KIND, inputs) as tmp_dir:
        map_bytes = 2 * (estimated_bytes + count * 2 * _PAGE_BYTES) + _MIN_MAP_BYTES
        env = lmdb.open(str(tmp_dir), map_size=map_bytes, subdir=True, meminit=False, map_async=True)
        written = 0
        try:
            txn = env.begin(write=True)
            for index, (label, image_bytes) in enumerate(
                tqdm(records, total=count, desc=description, unit="img")
            ):
                txn.put(record_key(index), encode_record(label, image_bytes))
                written += 1
                if written % 1000 == 0:
                    txn.commit()
                    txn = env.begin(write=True)
            txn.put(b"__format__", json.dumps(FORMAT).encode())
            txn.put(b"__len__", json.dumps(written).encode())
            txn.put(b"__classes__", json.dumps(classes).encode())
            txn.commit()
            env.sync()
        finally:
            env.close()
    return out_dir


def _check_data_file(data_file: Path) -> None:
    """Check the two meta pages of ``data.mdb`` and that the file holds every page they name.

    liblmdb maps the file and trusts it: a truncated file ends in SIGBUS, not an error. This cheap
    check turns the common damage (truncation, overwritten header) into :class:`InputError`.
    """
    with open_regular(data_file) as handle:
        head = handle.read(_META_READ_BYTES)
        size = os.fstat(handle.fileno()).st_size
    # Meta page 0 starts the file, meta page 1 starts one page in (the page size is not known yet).
    metas = [
        meta
        for offset in (0, *sorted(_PAGE_SIZES))
        if (meta := _meta_page(head, offset)) and (offset == 0 or offset == meta[0])
    ]
    if not metas:
        raise InputError(data_file, "not an LMDB data file or its header is damaged (no valid meta page)")
    page_bytes, last_page, _ = max(metas, key=lambda meta: meta[2])
    needed = (last_page + 1) * page_bytes
    if size < needed:
        raise InputError(data_file, f"truncated: {size} bytes, the LMDB header names {needed}")


def _meta_page(head: bytes, offset: int) -> tuple[int, int, int] | None:
    """``(page bytes, last page number, transaction id)`` of a valid meta page at ``offset``."""
    if len(head) < offset + _PAGE_HEADER_BYTES + _META_LAST_PAGE_OFFSET + 16:
        return None
    base = offset + _PAGE_HEADER_BYTES
    magic, version = struct.unpack_from("<II", head, base)
    (page_bytes,) = struct.unpack_from("<I", head, base + _META_PAGE_SIZE_OFFSET)
    last_page, txn_id = struct.unpack_from("<QQ", head, base + _META_LAST_PAGE_OFFSET)
    if magic != _LMDB_MAGIC or version != 1 or page_bytes not in _PAGE_SIZES:
        return None
    return page_bytes, last_page, txn_id


def check_lmdb(path: str | os.PathLike, timeout_s: float = 3600.0) -> int:
    """Read and decode every record of the LMDB at ``path`` in a child process; return the count.

    LMDB keeps no checksums, so a ``data.mdb`` damaged inside its pages can crash liblmdb itself
    (a segmentation fault) instead of raising. The child absorbs that: a crash, a timeout or a bad
    record becomes :class:`InputError` naming the LMDB.
    """
    path = Path(path)
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    child = context.Process(target=_read_every_record, args=(path, sender), daemon=True)
    child.start()
    sender.close()
    try:
        ready = receiver.poll(timeout_s)
        outcome = receiver.recv() if ready else None
    except EOFError:
        outcome = None
    finally:
        child.join(1 if outcome is not None else 0)
        if child.is_alive():
            child.kill()
            child.join()
        receiver.close()
    if outcome is None:
        if child.exitcode is not None and child.exitcode < 0:
            raise InputError(
                path / "data.mdb", f"the LMDB reader crashed (signal {-child.exitcode}): the file is damaged"
            )
        raise InputError(path, f"reading every record took more than {timeout_s:g} s")
    kind, value = outcome
    if kind == "error":
        raise InputError(path, value)
    return value


def _read_every_record(path: Path, sender) -> None:
    try:
        dataset = ImageLMDB(path)
        for index in range(len(dataset)):
            dataset[index]
        sender.send(("ok", len(dataset)))
    except InputError as exc:
        sender.send(("error", str(exc)))


def read_metadata(path: str | os.PathLike) -> tuple[int, list[str]]:
    """``(number of records, class names)`` of an LMDB written by :func:`write_lmdb`."""
    path = Path(path)
    if not os.path.lexists(path / "data.mdb"):
        raise InputError(path, "not an LMDB directory (no data.mdb)")
    # Also what liblmdb opens: a named pipe there is refused, not waited on. (lock.mdb is never
    # opened: every environment here is read with lock=False.)
    _check_data_file(path / "data.mdb")
    try:
        env = lmdb.open(str(path), readonly=True, lock=False, readahead=False, subdir=True)
    except lmdb.Error as exc:
        raise InputError(
            path / "data.mdb", f"cannot open the LMDB, the file is damaged or not an LMDB ({exc})"
        ) from None
    try:
        with env.begin() as txn:
            raw = {key: txn.get(key) for key in (b"__format__", b"__len__", b"__classes__")}
        entries = env.stat()["entries"]
    except lmdb.Error as exc:
        raise InputError(path / "data.mdb", f"the LMDB is damaged ({exc})", "metadata") from None
    finally:
        env.close()
    values = {}
    for key, value in raw.items():
        if value is None:
            raise InputError(
                path, "metadata key missing (not a membench image LMDB)", f"key {key.decode()!r}"
            )
        try:
            values[key] = json.loads(value)
        except (ValueError, UnicodeDecodeError):  # JSONDecodeError, or an integer of over 4300 digits
            raise InputError(path, "metadata is not valid JSON", f"key {key.decode()!r}") from None
    if values[b"__format__"] != FORMAT:
        raise InputError(
            path, f"unsupported format {values[b'__format__']!r}, expected {FORMAT!r}", "key '__format__'"
        )
    length, classes = values[b"__len__"], values[b"__classes__"]
    if type(length) is not int or length < 0:  # JSON true is a Python bool, an int subclass
        raise InputError(path, f"expected a non-negative integer, got {length!r}", "key '__len__'")
    # Readers size index arrays, samplers and ranges by the length: it must be one the LMDB holds.
    if length > entries - len(raw):
        raise InputError(
            path, f"{length} records named, but the LMDB holds {entries - len(raw)}", "key '__len__'"
        )
    if not isinstance(classes, list) or not classes or not all(isinstance(c, str) for c in classes):
        raise InputError(path, "expected a non-empty JSON list of class names", "key '__classes__'")
    return length, classes


class ImageLMDB(torch.utils.data.Dataset):
    """Map-style dataset over an image LMDB: item ``i`` is ``(transform(PIL RGB image), label)``.

    The environment is opened lazily by the process that reads first (each DataLoader worker opens
    its own after the fork); only the metadata is read at construction. A corrupt record raises
    :class:`InputError` naming the LMDB and the key.
    """

    def __init__(self, path: str | os.PathLike, transform: Callable | None = None) -> None:
        self.path = Path(path)
        self.length, self.classes = read_metadata(self.path)
        self.transform = transform
        self._env: lmdb.Environment | None = None
        self._pid: int | None = None

    def __len__(self) -> int:
        return self.length

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_env"] = None
        state["_pid"] = None
        return state

    def _environment(self) -> lmdb.Environment:
        if self._env is None or self._pid != os.getpid():
            try:
                self._env = lmdb.open(
                    str(self.path), readonly=True, lock=False, readahead=False, meminit=False, subdir=True
                )
            except lmdb.Error as exc:
                raise InputError(self.path / "data.mdb", f"cannot open the LMDB ({exc})") from None
            self._pid = os.getpid()
        return self._env

    def read_record(self, index: int) -> tuple[int, bytes]:
        """``(label, encoded image bytes)`` of record ``index``."""
        if not 0 <= index < self.length:
            raise IndexError(f"index {index} outside 0..{self.length - 1}")
        key = record_key(index)
        try:
            with self._environment().begin() as txn:
                value = txn.get(key)
        except lmdb.Error as exc:
            raise InputError(
                self.path / "data.mdb", f"the LMDB is damaged ({exc})", f"key {key.decode()!r}"
            ) from None
        if value is None:
            raise InputError(self.path, "record missing", f"key {key.decode()!r}")
        return decode_record(value, self.path, key, len(self.classes))

    def __getitem__(self, index: int):
        from membench.data.images.transforms import decode_image

        label, image_bytes = self.read_record(index)
        image = decode_image(image_bytes, self.path, f"key {record_key(index).decode()!r}")
        return (self.transform(image) if self.transform is not None else image), label

    def labels(self) -> Iterator[int]:
        """Every record's label in index order (reads only the 8-byte headers' records)."""
        for index in range(self.length):
            yield self.read_record(index)[0]
