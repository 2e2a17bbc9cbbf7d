"""PNNL graph tables: reading, every bad input, writing, generators, statistics."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

from membench.core.errors import InputError
from membench.data.graphs import (
    Graph,
    graph_statistics,
    induced_pattern,
    read_graph,
    read_graph_pair,
    rmat_graph,
    write_graph,
)


def _write(path, text):
    path.write_text(text)
    return path


@pytest.fixture
def pair(tmp_path):
    """A valid 3-node data graph and 2-node pattern (2 node features, 1 edge feature)."""
    files = {
        "dv": "3 3\n0 1.0 2.0\n1 0.5 0.25\n2 -1 3e2\n",
        "de": "2 3\n0 1 0.5\n1 2 1.5\n",
        "pv": "2 3\n0 1.0 2.0\n1 0.0 0.0\n",
        "pe": "1 3\n0 1 2.0\n",
    }
    return {name: _write(tmp_path / f"{name}.txt", text) for name, text in files.items()}


def _paths(pair):
    return pair["dv"], pair["de"], pair["pv"], pair["pe"]


def test_reads_a_valid_pair(pair):
    data, pattern = read_graph_pair(*_paths(pair))
    assert data.num_nodes == 3 and data.num_edges == 2
    np.testing.assert_array_equal(data.node_features[2], [-1.0, 300.0])
    np.testing.assert_array_equal(data.edge_src, [0, 1])
    np.testing.assert_array_equal(data.edge_dst, [1, 2])
    assert data.edge_src.dtype == np.int64
    assert pattern.edge_feature_dim == 1


@pytest.mark.parametrize(
    "name, text, fragments",
    [
        ("dv", "4 3\n0 1 2\n1 1 2\n2 1 2\n", ["header says 4 row(s)", "holds 3", "line 1"]),
        ("dv", "3 3\n0 1 2\n1 1 2\n2 1 2\n3 1 2\n", ["header says 3 row(s)", "holds 4"]),
        ("dv", "3 4\n0 1 2\n1 1 2\n2 1 2\n", ["3 values", "header says 4"]),
        ("dv", "3 3\n0 1 2\n1 1\n2 1 2\n", ["line 3", "2 field(s)", "header says 3"]),
        ("dv", "three 3\n0 1 2\n", ["line 1", "header must be two non-negative integers"]),
        ("dv", "3 3\n0 1 2\n1 x 2\n2 1 2\n", ["line 3", "column 2 is 'x'", "expected a number"]),
        ("de", "2 3\n0 1 0.5\n1 2 1.5e\n", ["line 3", "column 3 is '1.5e'"]),
        ("dv", "3 3\n0 1 2\n1 nan 2\n2 1 2\n", ["line 3", "finite number"]),
        ("dv", "3 3\n0 1 2\n2 1 2\n3 1 2\n", ["line 3", "vertex id is 2; expected 1"]),
        ("dv", "3 3\n0 1 2\n1.5 1 2\n2 1 2\n", ["line 3", "non-negative integer"]),
        ("de", "2 3\n0 1 0.5\n1 3 1.5\n", ["line 3", "dst 3 is not a node", "ids 0..2"]),
        ("de", "2 3\n0 1 0.5\n-1 2 1.5\n", ["line 3", "non-negative integer"]),
        ("pv", "2 2\n0 1.0\n1 0.0\n", ["1 node feature(s)", "has 2", "line 1"]),
        ("pe", "1 4\n0 1 2.0 3.0\n", ["2 edge feature(s)", "has 1"]),
        ("pe", "0 3\n", ["pattern graph has no edges"]),
        ("pv", "0 3\n", ["pattern graph has no nodes"]),
        ("de", "2 2\n0 1\n1 2\n", ["needs 2 id column(s) and at least one feature"]),
    ],
)
def test_each_bad_input_is_named(pair, name, text, fragments):
    pair[name].write_text(text)
    with pytest.raises(InputError) as caught:
        read_graph_pair(*_paths(pair))
    message = str(caught.value)
    assert str(pair[name]) in message
    for fragment in fragments:
        assert fragment in message


def test_missing_file_is_named(pair, tmp_path):
    with pytest.raises(InputError, match="file not found"):
        read_graph(tmp_path / "absent.txt", pair["de"])


@pytest.mark.timeout(10)
@pytest.mark.parametrize("name", ["dv", "de"])
def test_a_pipe_or_directory_as_a_table_is_named_without_blocking(pair, name):
    pair[name].unlink()
    os.mkfifo(pair[name])
    with pytest.raises(
        InputError, match=rf"^{re.escape(str(pair[name]))}: is a named pipe \(FIFO\), not a regular file$"
    ):
        read_graph_pair(*_paths(pair))
    pair[name].unlink()
    pair[name].mkdir()
    with pytest.raises(InputError, match=rf"^{re.escape(str(pair[name]))}: is a directory$"):
        read_graph_pair(*_paths(pair))


def test_blank_lines_do_not_shift_line_numbers(pair):
    pair["dv"].write_text("3 3\n0 1 2\n\n1 1 2\n5 1 2\n")
    with pytest.raises(InputError, match="line 5"):
        read_graph(pair["dv"], pair["de"])


def test_write_then_read_round_trips(tmp_path):
    rng = np.random.default_rng(0)
    graph = Graph(
        rng.normal(size=(5, 3)), np.array([0, 1, 4]), np.array([2, 3, 0]), rng.normal(size=(3, 2)) * 1e-7
    )
    write_graph(graph, tmp_path / "v.txt", tmp_path / "e.txt")
    back = read_graph(tmp_path / "v.txt", tmp_path / "e.txt")
    for name in ("node_features", "edge_src", "edge_dst", "edge_features"):
        np.testing.assert_array_equal(getattr(back, name), getattr(graph, name))
    assert (tmp_path / "v.txt").read_text().splitlines()[0] == "5 4"


def test_rmat_is_deterministic_and_well_formed():
    first = rmat_graph(8, 8, 3, 4, seed=1)
    again = rmat_graph(8, 8, 3, 4, seed=1)
    other = rmat_graph(8, 8, 3, 4, seed=2)
    np.testing.assert_array_equal(first.edge_src, again.edge_src)
    np.testing.assert_array_equal(first.edge_features, again.edge_features)
    assert not np.array_equal(first.edge_features[:10], other.edge_features[:10])
    assert first.num_nodes == 2**8 + 1
    assert first.node_feature_dim == 3 and first.edge_feature_dim == 4
    stats = graph_statistics(first, "rmat8", "data")
    assert stats["self_loops"] == 0 and stats["duplicate_edges"] == 0 and stats["edges_sorted_by_src"]
    assert 0.5 * 8 * 2**8 < first.num_edges <= 8 * 2**8  # duplicates dropped
    # RMAT is skewed: the busiest node has far more than the mean number of edges.
    assert stats["max_out_degree"] > 4 * stats["mean_out_degree"]
    assert first.edge_features.min() >= 0 and first.edge_features.max() < 10


def test_induced_pattern_is_a_deterministic_induced_subgraph():
    data = rmat_graph(8, 8, 3, 4, seed=0)
    pattern = induced_pattern(data, 7, seed=5)
    assert induced_pattern(data, 7, seed=5).edge_src.tolist() == pattern.edge_src.tolist()
    assert pattern.num_nodes == 7 and pattern.num_edges >= pattern.num_nodes - 1
    # Every pattern node's features are a data node's; every pattern edge is a data edge with its features.
    originals = [
        int(np.flatnonzero((data.node_features == row).all(axis=1))[0]) for row in pattern.node_features
    ]
    data_edges = {(s, d): i for i, (s, d) in enumerate(zip(data.edge_src.tolist(), data.edge_dst.tolist()))}
    inside = set(originals)
    induced = [(s, d) for (s, d) in data_edges if s in inside and d in inside]
    assert len(induced) == pattern.num_edges
    for s, d, features in zip(pattern.edge_src, pattern.edge_dst, pattern.edge_features):
        np.testing.assert_array_equal(data.edge_features[data_edges[(originals[s], originals[d])]], features)


def test_graph_statistics_counts():
    graph = Graph(np.zeros((4, 1)), np.array([0, 0, 1, 1]), np.array([1, 1, 1, 0]), np.zeros((4, 1)))
    stats = graph_statistics(graph, "tiny", "data")
    assert stats["isolated_nodes"] == 2
    assert stats["self_loops"] == 1
    assert stats["duplicate_edges"] == 1
    assert stats["max_out_degree"] == 2 and stats["max_in_degree"] == 3


def test_fast_reader_equals_the_general_reader_bit_for_bit(tmp_path):
    from membench.data.graphs import _parse_single_spaced

    graph = rmat_graph(6, 4, 3, 2, seed=5)
    write_graph(graph, tmp_path / "v.txt", tmp_path / "e.txt")
    for name in ("v.txt", "e.txt"):
        fast = _parse_single_spaced(tmp_path / name)
        assert fast is not None
        np.testing.assert_array_equal(fast, np.loadtxt(tmp_path / name, skiprows=1, ndmin=2))


def test_fast_reader_hands_arrow_a_native_file(pair, monkeypatch):
    """Arrow's reader threads may drop the source after read_csv returns; a Python file object
    then takes the GIL from a thread at interpreter exit and aborts the process (exit 134)."""
    import pyarrow
    from pyarrow import csv

    from membench.data.graphs import _parse_single_spaced

    sources = []
    read_csv = csv.read_csv

    def recording_read_csv(source, **options):
        sources.append(source)
        return read_csv(source, **options)

    monkeypatch.setattr(csv, "read_csv", recording_read_csv)
    table = _parse_single_spaced(pair["dv"])
    np.testing.assert_array_equal(table, [[0, 1, 2], [1, 0.5, 0.25], [2, -1, 300]])
    assert len(sources) == 1
    assert isinstance(sources[0], pyarrow.NativeFile) and sources[0].closed


@pytest.mark.parametrize(
    "text",
    [
        "3 3\n0  1 2\n1 0.5 0.25\n2 -1 3e2\n",
        "3 3\n0\t1 2\n1 0.5 0.25\n2 -1 3e2\n",
        "3 3\n 0 1 2 \n1 0.5 0.25\n2 -1 3e2\n",
        "3 3\r\n0 1 2\r\n1 0.5 0.25\r\n2 -1 3e2\r\n",
    ],
    ids=["double-space", "tab", "leading-trailing-space", "crlf"],
)
def test_any_whitespace_still_reads(pair, text):
    pair["dv"].write_text(text)
    data, _ = read_graph_pair(*_paths(pair))
    np.testing.assert_array_equal(data.node_features, [[1.0, 2.0], [0.5, 0.25], [-1.0, 300.0]])


@pytest.mark.parametrize(
    "text, fragments",
    [
        ("3 3\n0 1 2\n1 1 inf\n2 1 2\n", ["line 3", "column 3 is inf", "finite number"]),
        ("3 3\n0 1 2\n1 1 2\n2 1 2 7\n", ["line 4", "4 field(s)"]),
        ("3 3\n0 1 2\n1 1 2\n2 1 \n", ["line 4", "2 field(s)"]),
        ("3 3\n0 1 2\n1 1 NA\n2 1 2\n", ["line 3", "column 3 is 'NA'"]),
        ("3 3\n0 1 2\n1 1 2\n2 \xe9 2\n", ["line 4", "not ASCII"]),
    ],
)
def test_fast_reader_errors_name_file_line_and_column(pair, text, fragments):
    pair["dv"].write_text(text, encoding="latin-1")
    with pytest.raises(InputError) as caught:
        read_graph_pair(*_paths(pair))
    message = str(caught.value)
    assert str(pair["dv"]) in message
    for fragment in fragments:
        assert fragment in message
