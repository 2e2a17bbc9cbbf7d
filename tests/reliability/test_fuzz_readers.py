"""Fuzz every reader of outside data through its public function: nothing but InputError escapes.

Inputs mix well-formed files with mutations (flipped, inserted, deleted and truncated bytes) and
free-form text or bytes. Hypothesis runs derandomized (the same examples every run) with a fixed
number of examples per reader (``MEMBENCH_FUZZ_EXAMPLES``, default 60), so CI time stays bounded.
"""

from __future__ import annotations

import gzip
import io
import os
import pickle
import tempfile
from pathlib import Path

import faults
import lmdb
import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from membench.core.config import check_config, load_schema
from membench.core.errors import InputError
from membench.data.bodmas.folds import read_fold, read_metadata
from membench.data.bodmas.stats import read_class_names
from membench.data.graphs import read_graph
from membench.data.images.cifar import cifar_to_lmdb, load_cifar_batch
from membench.data.images.lmdb_store import (
    FORMAT,
    ImageLMDB,
    encode_record,
)
from membench.data.images.lmdb_store import (
    read_metadata as read_lmdb_metadata,
)
from membench.data.images.transforms import decode_image
from membench.memnet.dataset import FAMILIES, load_jobs

EXAMPLES = int(os.environ.get("MEMBENCH_FUZZ_EXAMPLES", "60"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
REPO = Path(__file__).resolve().parents[2]
TRIED: dict[str, int] = {}


@pytest.fixture(scope="module", autouse=True)
def _log_inputs_tried():
    yield
    for reader, count in TRIED.items():
        faults.log_fault(reader, "fuzzed input", count)
        faults.record_survived()


def _tried(reader: str) -> None:
    TRIED[reader] = TRIED.get(reader, 0) + 1


def _only_input_errors(call, reader: str):
    _tried(reader)
    try:
        return call()
    except InputError:
        return None


@st.composite
def mutated(draw, seed: bytes) -> bytes:
    """``seed`` with a few random flips, insertions, deletions and a possible truncation."""
    data = bytearray(seed)
    for _ in range(draw(st.integers(0, 6))):
        if not data:
            break
        position = draw(st.integers(0, len(data) - 1))
        action = draw(st.sampled_from(["flip", "insert", "delete", "digit"]))
        if action == "flip":
            data[position] ^= 1 << draw(st.integers(0, 7))
        elif action == "insert":
            data[position:position] = draw(st.binary(min_size=1, max_size=8))
        elif action == "delete":
            del data[position : position + draw(st.integers(1, 8))]
        else:
            data[position] = ord(draw(st.sampled_from("0123456789-.e+ \n,\tnaif")))
    if draw(st.booleans()):
        data = data[: draw(st.integers(0, len(data)))]
    return bytes(data)


def _file_bytes(seed: bytes):
    return st.one_of(mutated(seed), st.binary(max_size=300), st.text(max_size=300).map(str.encode))


# -- PNNL graph tables -------------------------------------------------------------------------
_VERTICES = b"4 3\n0 1.0 2.0\n1 0.5 1e3\n2 -3 0\n3 4 5\n"
_EDGES = b"3 3\n0 1 0.25\n1 2 1.5\n3 0 2\n"


@FUZZ
@given(vertices=_file_bytes(_VERTICES), edges=_file_bytes(_EDGES))
def test_graph_reader(vertices, edges):
    with tempfile.TemporaryDirectory() as directory:
        v, e = Path(directory, "g.v"), Path(directory, "g.e")
        v.write_bytes(vertices)
        e.write_bytes(edges)
        graph = _only_input_errors(lambda: read_graph(v, e), "PNNL graph tables")
    if graph is not None:
        assert graph.num_nodes >= 1 and graph.num_edges >= 1
        assert np.isfinite(graph.node_features).all() and graph.edge_src.max() < graph.num_nodes


# -- BODMAS metadata, fold CSVs and classes ---------------------------------------------------
_METADATA = (
    b"sha,timestamp,family\naaa,2020-01-01 10:00:00,\nbbb,2020-02-03,wacatac\nccc,2021-05-06T07:08:09Z,x\n"
)
_FOLD = b"FileName,Label,File_Size\naaa.exe,0,10\nbbb.exe,1,3\nccc.exe,1,4\n"
_CLASSES = b"Label,Name,Count\n0,benign,1\n1,malware,2\n"


def _binaries(directory: Path, contents: list[bytes]) -> Path:
    binaries = directory / "binaries"
    binaries.mkdir()
    for name, content in zip(("aaa", "bbb", "ccc"), contents):
        (binaries / f"{name}.exe").write_bytes(content)
    return binaries


@st.composite
def damaged_gzip(draw) -> bytes:
    """A gzip binary with its stream or trailer damaged: cut anywhere, CRC-32 or length trailer
    rewritten, bytes appended, or a second member (possibly damaged itself) concatenated."""
    data = bytearray(gzip.compress(draw(st.binary(max_size=64)), mtime=0))
    action = draw(st.sampled_from(["cut", "crc", "length", "append", "member"]))
    if action == "cut":
        return bytes(data[: draw(st.integers(0, len(data) - 1))])
    if action in ("crc", "length"):
        offset = len(data) - (8 if action == "crc" else 4)
        data[offset : offset + 4] = draw(st.binary(min_size=4, max_size=4))
        return bytes(data)
    if action == "append":
        return bytes(data) + draw(st.binary(min_size=1, max_size=8))
    return bytes(data) + draw(mutated(gzip.compress(draw(st.binary(max_size=16)), mtime=0)))


_BINARY = st.one_of(
    st.binary(max_size=40),
    damaged_gzip(),
    mutated(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03KLJ\x06\x00\xc2A$5\x03\x00\x00\x00"),
)


def _content_length(content: bytes) -> int:
    return len(gzip.decompress(content)) if content[:2] == b"\x1f\x8b" else len(content)


@FUZZ
@given(metadata=_file_bytes(_METADATA), contents=st.lists(_BINARY, min_size=3, max_size=3))
def test_bodmas_metadata_reader(metadata, contents):
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory, "metadata.csv")
        path.write_bytes(metadata)
        binaries = _binaries(Path(directory), contents)
        frame = _only_input_errors(lambda: read_metadata(path, binaries), "BODMAS metadata.csv")
    if frame is not None:
        # An accepted binary holds content, and File_Size is what it really decompresses to.
        lengths = dict(zip(("aaa", "bbb", "ccc"), map(_content_length, contents)))
        assert frame["sha"].is_unique and (frame["File_Size"] >= 1).all()
        assert frame["File_Size"].tolist() == [lengths[sha] for sha in frame["sha"]]


@FUZZ
@given(
    fold=_file_bytes(_FOLD), classes=_file_bytes(_CLASSES), contents=st.lists(_BINARY, min_size=3, max_size=3)
)
def test_fold_and_classes_readers(fold, classes, contents):
    with tempfile.TemporaryDirectory() as directory:
        fold_path, classes_path = Path(directory, "train_x_fold_0.csv"), Path(directory, "classes.csv")
        fold_path.write_bytes(fold)
        classes_path.write_bytes(classes)
        binaries = _binaries(Path(directory), contents)
        frame = _only_input_errors(lambda: read_fold(fold_path, binaries, num_classes=2), "BODMAS fold CSV")
        if frame is not None:
            assert frame["Label"].between(0, 1).all() and all(
                Path(p).parent == binaries for p in frame["path"]
            )
        _only_input_errors(lambda: read_class_names(classes_path), "BODMAS classes.csv")


# -- image files and LMDB records --------------------------------------------------------------
def _encoded(fmt: str) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.arange(8 * 8 * 3, dtype=np.uint8).reshape(8, 8, 3)).save(buffer, format=fmt)
    return buffer.getvalue()


_IMAGES = st.one_of(
    *(mutated(_encoded(fmt)) for fmt in ("PNG", "JPEG", "BMP", "GIF", "WEBP", "TIFF")),
    st.binary(max_size=200),
)


@FUZZ
@given(image=_IMAGES)
def test_image_decoder(image):
    decoded = _only_input_errors(
        lambda: decode_image(image, "image.png", "file"), "image files (PNG, JPEG, BMP, GIF, WebP, TIFF)"
    )
    if decoded is not None:
        assert decoded.mode == "RGB"


_METADATA_VALUES = st.one_of(
    st.binary(max_size=30), st.sampled_from([b"true", b"-1", b"1e9", b"null", b"[]", b'"x"', b"2"])
)


@FUZZ
@given(
    records=st.lists(st.one_of(_IMAGES, st.binary(max_size=12)), min_size=1, max_size=3),
    labels=st.lists(st.integers(-2, 3), min_size=3, max_size=3),
    length=_METADATA_VALUES,
    classes=st.one_of(_METADATA_VALUES, st.just(b'["a", "b"]')),
    raw_record=st.booleans(),
)
def test_lmdb_reader(records, labels, length, classes, raw_record):
    with tempfile.TemporaryDirectory() as directory:
        with lmdb.open(directory, map_size=2**22) as env, env.begin(write=True) as txn:
            txn.put(b"__format__", repr(FORMAT).replace("'", '"').encode())
            txn.put(b"__len__", length)
            txn.put(b"__classes__", classes)
            for index, (record, label) in enumerate(zip(records, labels)):
                txn.put(f"{index:010d}".encode(), record if raw_record else encode_record(label, record))

        def read_all():
            dataset = ImageLMDB(directory)
            return [dataset[i] for i in range(len(dataset))]

        items = _only_input_errors(read_all, "LMDB records and metadata")
    if items is not None:
        assert all(0 <= label < 2 for _, label in items)
    _only_input_errors(lambda: read_lmdb_metadata(Path(directory)), "LMDB records and metadata")


# -- CIFAR python batches ----------------------------------------------------------------------
def _batch(data, labels) -> bytes:
    return pickle.dumps({b"data": data, b"labels": labels, b"batch_label": b"x"}, protocol=2)


_META = pickle.dumps({b"label_names": [f"c{i}".encode() for i in range(10)]}, protocol=2)
_GOOD_BATCH = _batch(np.zeros((2, 3072), np.uint8), [0, 9])
_ARRAYS = st.one_of(
    st.builds(
        lambda n, k, t: np.zeros((n, k), t),
        st.integers(0, 3),
        st.sampled_from([3072, 3071, 0]),
        st.sampled_from([np.uint8, np.float32, np.int64]),
    ),
    st.just("not an array"),
    st.none(),
)
_LABELS = st.one_of(
    st.lists(st.one_of(st.integers(-3, 12), st.text(max_size=2), st.none()), max_size=3), st.integers()
)


@FUZZ
@given(
    meta=_file_bytes(_META), batch=st.one_of(_file_bytes(_GOOD_BATCH), st.builds(_batch, _ARRAYS, _LABELS))
)
def test_cifar_reader(meta, batch):
    with tempfile.TemporaryDirectory() as directory:
        batches = Path(directory, "cifar")
        batches.mkdir()
        (batches / "batches.meta").write_bytes(meta)
        (batches / "test_batch").write_bytes(batch)
        _only_input_errors(lambda: load_cifar_batch(batches / "test_batch"), "CIFAR python batches")
        _only_input_errors(
            lambda: cifar_to_lmdb(batches, "cifar10", "test", Path(directory, "out")), "CIFAR python batches"
        )


# -- GPUMemNet CSVs ------------------------------------------------------------------------------
_GPUMEMNET = {
    "mlp": (
        b"Filename,Depth,Activations-Params,Activation Function,Total Activations,Total Parameters,"
        b"Batch Size,Max GPU Memory (MiB)\n"
        b"input:4_output:2_arch:uniform.out,2,\"[('linear', 3, 15), ('ReLU', 3, 0), ('linear', 2, 8)]\","
        b"ReLU,8,23,16,1500\n"
        b"input:6_output:3_arch:pyramid.out,1,\"[('linear', 3, 21)]\",Tanh,3,21,4,0\n"
    ),
    "cnn": (
        b"Filename,Depth,Activations-Params,Activation Function,Total Activations,Total "
        b"Parameters,Batch Size,"
        b"Conv2d Count,BatchNorm2d Count,Dropout Count,AdaptiveAvgPool2d Count,Linear Count,"
        b"Max GPU Memory (MiB),Status\n"
        b"input:32_channels:3_arch:plain.out,2,\"[('conv2d', 3072, 84), ('linear', 10, 30730)]\",ReLU,3082,"
        b"30814,8,1,0,0,0,1,2100.5,SUCCESSFUL\n"
        b"input:64_arch:plain.out,2,\"[('conv2d', 12288, 84)]\",GELU,12288,84,512,1,1,0,1,1,9000,OOM_CRASH\n"
    ),
    "transformer": (
        b"Batch Size,Seq Length,Embedding Size,Num Layers,Num Heads,Depth,Total Activations,"
        b"Total Parameters,Max GPU Memory (MiB),Status\n"
        b"8,128,64,2,4,2,50000,120000,3000,SUCCESSFUL\n16,256,64,2,8,2,90000,120000,7000,OOM_CRASH\n"
    ),
}


@FUZZ
@given(family=st.sampled_from(FAMILIES), data=st.data())
def test_gpumemnet_reader(family, data):
    content = data.draw(_file_bytes(_GPUMEMNET[family]))
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory, f"{family}_data.csv")
        path.write_bytes(content)
        jobs = _only_input_errors(lambda: load_jobs(path, family), "GPUMemNet CSVs")
    if jobs is not None:
        frame = jobs.frame
        assert len(jobs) + jobs.dropped_failed >= 1 and (frame["batch_size"] >= 1).all()
        assert np.isfinite(frame["memory_mib"]).all() and (frame["memory_mib"] >= 0).all()
        assert all(count >= 0 for layers in frame["layers"] for _, *counts in layers for count in counts)


# -- the config ----------------------------------------------------------------------------------
_CONFIG = yaml.safe_load((REPO / "tests" / "workflow" / "config.yaml").read_text())
_SCHEMA = load_schema(REPO / "config" / "schema.yaml")
_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=6)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, prefix + (key,))


_CONFIG_PATHS = [p for p in _paths(_CONFIG) if p]


@FUZZ
@given(
    path=st.sampled_from(_CONFIG_PATHS),
    value=_VALUES,
    as_string=st.booleans(),
    text=st.one_of(st.none(), st.text(max_size=60)),
)
def test_config_checker(path, value, as_string, text):
    """A fuzzed config (one value replaced, also by a string as ``--config`` passes it, or free text
    read as YAML) is accepted or refused with one InputError naming the key; nothing else escapes."""
    import copy

    if text is not None:
        try:
            config = yaml.safe_load(text)
        except yaml.YAMLError:
            return  # Snakemake reports unparsable YAML itself
        if not isinstance(config, dict):
            return
    else:
        config = copy.deepcopy(_CONFIG)
        node = config
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = str(value) if as_string else value
    _only_input_errors(lambda: check_config(config, _SCHEMA), "config (YAML + schema)")
