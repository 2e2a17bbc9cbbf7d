"""Node- and edge-attributed graphs in the PNNL text format: read, validate, write, generate, describe.

Format (the tables of PNNL's ApplicationClassification code), whitespace separated, one table per
file:

* first line ``num_rows num_cols``;
* vertex table rows ``id f1 .. f(num_cols-1)``, ids ``0 .. num_rows-1`` in order;
* edge table rows ``src dst f1 .. f(num_cols-2)``, ids of the vertex table's graph.

A data graph and its pattern graph must have the same node and edge feature dimensions. Every
problem raises :class:`~membench.core.errors.InputError` naming the file, the line (the header is
line 1) and what was expected.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from membench.core import atomic
from membench.core.errors import InputError
from membench.core.validate import csv_line, open_regular

__all__ = [
    "Graph",
    "graph_statistics",
    "induced_pattern",
    "read_graph",
    "read_graph_pair",
    "RMAT_FIRST_ID",
    "rmat_graph",
    "RMAT_PROBABILITIES",
    "STATS_COLUMNS",
    "write_graph",
]

# The ids the generators write start at 1 (node 0 isolated), as the PNNL rmat18 graph's did
# (262,145 = 2**18 + 1 nodes), so "RMAT-18-sized" means the same node count here.
RMAT_FIRST_ID = 1
RMAT_PROBABILITIES = (0.57, 0.19, 0.19)  # Graph500 a, b, c (d = 1 - a - b - c)
STATS_COLUMNS = (
    "graph",
    "role",
    "num_nodes",
    "num_edges",
    "node_feature_dim",
    "edge_feature_dim",
    "mean_out_degree",
    "max_out_degree",
    "max_in_degree",
    "isolated_nodes",
    "self_loops",
    "duplicate_edges",
    "edges_sorted_by_src",
)


@dataclass(frozen=True)
class Graph:
    """A directed graph with node and edge features.

    Attributes
    ----------
    node_features : np.ndarray
        float64, shape (num_nodes, node_feature_dim); row i belongs to node i.
    edge_src, edge_dst : np.ndarray
        int64, shape (num_edges,); node ids in ``[0, num_nodes)``.
    edge_features : np.ndarray
        float64, shape (num_edges, edge_feature_dim).

    The feature arrays may have any memory layout: :func:`read_graph` gives column-major views of
    the tables it parses (a copy into rows would cost a pass over the largest array).
    """

    node_features: np.ndarray
    edge_src: np.ndarray
    edge_dst: np.ndarray
    edge_features: np.ndarray

    @property
    def num_nodes(self) -> int:
        return int(self.node_features.shape[0])

    @property
    def num_edges(self) -> int:
        return int(self.edge_src.shape[0])

    @property
    def node_feature_dim(self) -> int:
        return int(self.node_features.shape[1])

    @property
    def edge_feature_dim(self) -> int:
        return int(self.edge_features.shape[1])


# -- reading ---------------------------------------------------------------------------------------
def _read_table(path: str | os.PathLike, id_columns: int, kind: str) -> np.ndarray:
    """The rows of one PNNL table as float64, shape (num_rows, num_cols), after checking its shape.

    ``id_columns`` leading columns hold ids (1 for vertices, 2 for edges); at least one feature
    column must follow.
    """
    path = Path(path)
    with open_regular(path, missing=f"file not found (expected a PNNL {kind} table)") as handle:
        header = handle.readline().decode("ascii", errors="replace").split()
    if len(header) != 2 or not all(word.isdigit() for word in header):
        raise InputError(
            path,
            f"header must be two non-negative integers 'num_rows num_cols', found {' '.join(header)!r}",
            "line 1",
        )
    num_rows, num_cols = (int(word) for word in header)
    if num_cols < id_columns + 1:
        raise InputError(
            path,
            f"header says {num_cols} column(s); a {kind} table needs {id_columns} id column(s) and "
            "at least one feature",
            "line 1",
        )
    table = _parse_single_spaced(path)
    if table is None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # "input contained no data": checked below
                with open_regular(path, "r", encoding="ascii") as handle:
                    table = np.loadtxt(handle, dtype=np.float64, skiprows=1, ndmin=2, comments=None)
        except (ValueError, UnicodeDecodeError):
            _raise_first_malformed_row(path, num_cols)
            raise
    if table.shape[0] == 0:
        table = np.empty((0, num_cols))
    if table.shape[0] != num_rows:
        raise InputError(path, f"header says {num_rows} row(s) but the file holds {table.shape[0]}", "line 1")
    if table.shape[1] != num_cols:
        raise InputError(
            path,
            f"rows hold {table.shape[1]} values but the header says {num_cols} column(s)",
            _line(path, 0),
        )
    finite = np.isfinite(table)
    if not finite.all():
        row, column = np.argwhere(~finite)[0]
        raise InputError(
            path,
            f"column {column + 1} is {float(table[row, column])!r}; expected a finite number",
            _line(path, row),
        )
    ids = table[:, :id_columns]
    not_integer = (ids != np.floor(ids)) | (ids < 0)
    if not_integer.any():
        row, column = np.argwhere(not_integer)[0]
        raise InputError(
            path,
            f"id column {column + 1} is {float(ids[row, column])!r}; expected a non-negative integer",
            _line(path, row),
        )
    return table


def _parse_single_spaced(path: Path) -> np.ndarray | None:
    """The data rows after the header as float64 (rows, columns), read by pyarrow's multi-threaded
    CSV reader with single spaces as delimiters (the files membench and PNNL write); None when
    pyarrow cannot read the file so (other whitespace, bad values), for the general reader to judge.
    Floats parse correctly rounded, as NumPy parses them."""
    from pyarrow import ArrowInvalid, OSFile, csv, default_memory_pool

    try:
        # Arrow reads a native file, never the Python file object: its reader threads drop their
        # last reference to the source after read_csv returns, and dropping a Python file object
        # takes the GIL, which aborts the process when that happens during interpreter exit
        # (apache/arrow#34314). /dev/fd reopens the very file open_regular checked, so a file
        # replaced by a named pipe still cannot block the read.
        with open_regular(path) as handle, OSFile(f"/dev/fd/{handle.fileno()}") as source:
            table = csv.read_csv(
                source,
                read_options=csv.ReadOptions(skip_rows=1, autogenerate_column_names=True),
                parse_options=csv.ParseOptions(delimiter=" ", quote_char=False, ignore_empty_lines=True),
                convert_options=csv.ConvertOptions(
                    null_values=[],
                    strings_can_be_null=False,
                    quoted_strings_can_be_null=False,
                    column_types={f"f{i}": "float64" for i in range(_count_fields(path))},
                ),
            )
    except (ArrowInvalid, UnicodeDecodeError):
        return None
    if any(column.type != "double" for column in table.columns):
        return None
    # Column by column into a column-major array (contiguous copies, where filling the columns of a
    # row-major one writes every cache line once per column); the caller gets its (rows, columns)
    # view.
    out = np.empty((table.num_columns, table.num_rows), dtype=np.float64)
    for index, column in enumerate(table.columns):
        start = 0
        for chunk in column.chunks:
            out[index, start : start + len(chunk)] = chunk.to_numpy()
            start += len(chunk)
    del table
    # Arrow's allocator keeps freed buffers for reuse; hand them back before the algorithm runs.
    default_memory_pool().release_unused()
    return out.T


def _count_fields(path: Path) -> int:
    """Fields of the first data line (0 when there is none)."""
    with open_regular(path) as handle:
        handle.readline()
        return len(handle.readline().split())


def _raise_first_malformed_row(path: Path, num_cols: int) -> None:
    """Find the first data line with a wrong number of fields or a non-numeric field, and raise."""
    with open_regular(path) as handle:
        handle.readline()
        for line_number, raw in enumerate(handle, start=2):
            try:
                fields = raw.decode("ascii").split()
            except UnicodeDecodeError:
                raise InputError(path, "line is not ASCII text", f"line {line_number}") from None
            if not fields:
                continue
            if len(fields) != num_cols:
                raise InputError(
                    path,
                    f"{len(fields)} field(s) but the header says {num_cols} column(s)",
                    f"line {line_number}",
                )
            for column, field in enumerate(fields, start=1):
                try:
                    float(field)
                except ValueError:
                    raise InputError(
                        path, f"column {column} is {field!r}; expected a number", f"line {line_number}"
                    ) from None


def _line(path: Path, row: int) -> str:
    """Editor line of data row ``row`` (0-based), counting the blank lines the reader skipped."""
    with open_regular(path) as handle:
        handle.readline()
        seen = -1
        for line_number, raw in enumerate(handle, start=2):
            if raw.strip():
                seen += 1
                if seen == row:
                    return f"line {line_number}"
    return csv_line(row)


def read_graph(vertex_path: str | os.PathLike, edge_path: str | os.PathLike, role: str = "data") -> Graph:
    """Read and check one graph (``role``: data or pattern): a vertex and an edge table, non-empty."""
    vertices = _read_table(vertex_path, 1, "vertex")
    if len(vertices) == 0:
        raise InputError(vertex_path, f"the {role} graph has no nodes; expected at least one", "line 1")
    ids = vertices[:, 0]
    expected = np.arange(len(ids), dtype=np.float64)
    if not np.array_equal(ids, expected):
        row = int(np.flatnonzero(ids != expected)[0])
        raise InputError(
            vertex_path,
            f"vertex id is {int(ids[row])}; expected {row} (ids 0..n-1 in order)",
            _line(Path(vertex_path), row),
        )
    edges = _read_table(edge_path, 2, "edge")
    if len(edges) == 0:
        raise InputError(edge_path, f"the {role} graph has no edges; expected at least one", "line 1")
    num_nodes = len(ids)
    outside = edges[:, :2] >= num_nodes
    if outside.any():
        row, column = np.argwhere(outside)[0]
        end = ("src", "dst")[column]
        raise InputError(
            edge_path,
            f"{end} {int(edges[row, column])} is not a node of {vertex_path} (ids 0..{num_nodes - 1})",
            _line(Path(edge_path), row),
        )
    return Graph(
        node_features=vertices[:, 1:],
        edge_src=edges[:, 0].astype(np.int64),
        edge_dst=edges[:, 1].astype(np.int64),
        edge_features=edges[:, 2:],
    )


def read_graph_pair(
    data_vertices: str | os.PathLike,
    data_edges: str | os.PathLike,
    pattern_vertices: str | os.PathLike,
    pattern_edges: str | os.PathLike,
) -> tuple[Graph, Graph]:
    """Read a data graph and a pattern graph; check both are non-empty and their feature dims agree."""
    data = read_graph(data_vertices, data_edges, "data")
    pattern = read_graph(pattern_vertices, pattern_edges, "pattern")
    if pattern.node_feature_dim != data.node_feature_dim:
        raise InputError(
            pattern_vertices,
            f"{pattern.node_feature_dim} node feature(s) but the data graph {data_vertices} has "
            f"{data.node_feature_dim}",
            "line 1",
        )
    if pattern.edge_feature_dim != data.edge_feature_dim:
        raise InputError(
            pattern_edges,
            f"{pattern.edge_feature_dim} edge feature(s) but the data graph {data_edges} has "
            f"{data.edge_feature_dim}",
            "line 1",
        )
    return data, pattern


# -- writing ---------------------------------------------------------------------------------------
def write_graph(
    graph: Graph,
    vertex_path: str | os.PathLike,
    edge_path: str | os.PathLike,
    float_format: str | None = None,
) -> None:
    """Write ``graph`` as a vertex table and an edge table, each atomically.

    ``float_format`` (printf style) formats the features; the default, the shortest repr, round-trips
    float64 exactly.
    """
    import pandas as pd

    vertex_frame = pd.DataFrame(graph.node_features)
    vertex_frame.insert(0, "id", np.arange(graph.num_nodes, dtype=np.int64))
    edge_frame = pd.DataFrame(graph.edge_features)
    edge_frame.insert(0, "dst", graph.edge_dst)
    edge_frame.insert(0, "src", graph.edge_src)
    for frame, path in ((vertex_frame, vertex_path), (edge_frame, edge_path)):
        with atomic.atomic_path(path) as tmp:
            with open(tmp, "w") as handle:
                handle.write(f"{frame.shape[0]} {frame.shape[1]}\n")
                frame.to_csv(
                    handle, sep=" ", header=False, index=False, float_format=float_format, lineterminator="\n"
                )


# -- generators ------------------------------------------------------------------------------------
def rmat_graph(
    scale: int,
    edge_factor: int,
    node_feature_dim: int,
    edge_feature_dim: int,
    seed: int,
    feature_max: float = 10.0,
    feature_decimals: int = 4,
) -> Graph:
    """An RMAT graph (Graph500 probabilities) with uniform random node and edge features.

    ``edge_factor * 2**scale`` edges are drawn; self loops and duplicates are dropped and the rest
    sorted by (src, dst). Node ids run from ``RMAT_FIRST_ID``, so there are ``2**scale + 1`` nodes
    (node 0 isolated), like the PNNL rmat18 graph. Features are uniform in ``[0, feature_max)``,
    rounded to ``feature_decimals`` (files stay small; the algorithm's cost does not depend on values).
    """
    rng = np.random.default_rng(seed)
    num_draws = edge_factor << scale
    src = np.zeros(num_draws, dtype=np.int64)
    dst = np.zeros(num_draws, dtype=np.int64)
    a, b, c = RMAT_PROBABILITIES
    for bit in range(scale):
        # Each level picks one quadrant per edge: (0,0) a, (0,1) b, (1,0) c, (1,1) d.
        draw = rng.random(num_draws)
        src_bit = draw >= a + b
        dst_bit = ((draw >= a) & (draw < a + b)) | (draw >= a + b + c)
        src |= src_bit.astype(np.int64) << bit
        dst |= dst_bit.astype(np.int64) << bit
    src += RMAT_FIRST_ID
    dst += RMAT_FIRST_ID
    keep = src != dst
    pairs = np.unique(np.stack([src[keep], dst[keep]], axis=1), axis=0)
    num_nodes = (1 << scale) + RMAT_FIRST_ID
    return Graph(
        node_features=np.round(rng.random((num_nodes, node_feature_dim)) * feature_max, feature_decimals),
        edge_src=pairs[:, 0].copy(),
        edge_dst=pairs[:, 1].copy(),
        edge_features=np.round(rng.random((len(pairs), edge_feature_dim)) * feature_max, feature_decimals),
    )


def induced_pattern(data: Graph, max_pattern_nodes: int, seed: int) -> Graph:
    """A pattern graph by neighbourhood induction (the recipe of Gunrock's Application
    Classification report).

    Sample a node q with at least one edge; take up to ``max_pattern_nodes - 1`` of its neighbours
    (either direction), widening to their neighbours, breadth first, while the neighbourhood is too
    small; return the subgraph induced by q and those nodes, ids relabelled 0..k-1 in BFS order,
    with the data graph's node and edge features (so the pattern does occur in the data graph).
    """
    if max_pattern_nodes < 2:
        raise InputError(
            None, f"max_pattern_nodes is {max_pattern_nodes}; expected at least 2", "key 'max_pattern_nodes'"
        )
    rng = np.random.default_rng(seed)
    both_src = np.concatenate([data.edge_src, data.edge_dst])
    both_dst = np.concatenate([data.edge_dst, data.edge_src])
    order = np.argsort(both_src, kind="stable")
    neighbours = both_dst[order]
    starts = np.searchsorted(both_src[order], np.arange(data.num_nodes + 1))
    candidates = np.flatnonzero(np.diff(starts) > 0)
    if len(candidates) == 0:
        raise InputError(None, "the data graph has no edges to induce a pattern from")
    q = int(rng.choice(candidates))
    chosen = [q]
    seen = {q}
    frontier = [q]
    while frontier and len(chosen) < max_pattern_nodes:
        next_frontier = []
        for node in frontier:
            around = np.unique(neighbours[starts[node] : starts[node + 1]])
            for u in rng.permutation(around):
                u = int(u)
                if u not in seen and len(chosen) < max_pattern_nodes:
                    seen.add(u)
                    chosen.append(u)
                    next_frontier.append(u)
        frontier = next_frontier
    new_id = np.full(data.num_nodes, -1, dtype=np.int64)
    new_id[np.array(chosen)] = np.arange(len(chosen))
    inside = (new_id[data.edge_src] >= 0) & (new_id[data.edge_dst] >= 0)
    return Graph(
        node_features=data.node_features[np.array(chosen)].copy(),
        edge_src=new_id[data.edge_src[inside]],
        edge_dst=new_id[data.edge_dst[inside]],
        edge_features=data.edge_features[inside].copy(),
    )


# -- statistics ------------------------------------------------------------------------------------
def graph_statistics(graph: Graph, name: str, role: str) -> dict[str, object]:
    """One statistics row (``STATS_COLUMNS``) for a graph; ``role`` is ``data`` or ``pattern``."""
    out_degree = np.bincount(graph.edge_src, minlength=graph.num_nodes)
    in_degree = np.bincount(graph.edge_dst, minlength=graph.num_nodes)
    pairs = graph.edge_src * graph.num_nodes + graph.edge_dst
    return {
        "graph": name,
        "role": role,
        "num_nodes": graph.num_nodes,
        "num_edges": graph.num_edges,
        "node_feature_dim": graph.node_feature_dim,
        "edge_feature_dim": graph.edge_feature_dim,
        "mean_out_degree": graph.num_edges / max(graph.num_nodes, 1),
        "max_out_degree": int(out_degree.max(initial=0)),
        "max_in_degree": int(in_degree.max(initial=0)),
        "isolated_nodes": int(((out_degree + in_degree) == 0).sum()),
        "self_loops": int((graph.edge_src == graph.edge_dst).sum()),
        "duplicate_edges": int(graph.num_edges - len(np.unique(pairs))),
        "edges_sorted_by_src": bool(np.all(np.diff(graph.edge_src) >= 0)),
    }
