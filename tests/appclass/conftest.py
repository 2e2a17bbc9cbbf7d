"""Shared inputs of the appclass tests: the georgiy-sized case from ../shared and the quirk fixture."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED_AC = Path(__file__).parents[2] / ".." / "shared" / "data" / "ac"
HERE = Path(__file__).parent / "data"


@pytest.fixture(scope="session")
def georgiy_paths():
    """(data V, data E, pattern V, pattern E, expected %e, expected %.17e) or skip without ../shared."""
    paths = (
        SHARED_AC / "georgiyData.Vertex.csv",
        SHARED_AC / "synthetic" / "synthGeorgiyLike.Edges.csv",
        SHARED_AC / "georgiyPattern.Vertex.csv",
        SHARED_AC / "georgiyPattern.Edges.csv",
        SHARED_AC / "synthetic" / "synthGeorgiyLike.expected.txt",
        SHARED_AC / "synthetic" / "synthGeorgiyLike.expected_17e.txt",
    )
    if not all(p.is_file() for p in paths):
        pytest.skip("../shared/data/ac is not present")
    return paths


@pytest.fixture(scope="session")
def georgiy_graphs(georgiy_paths):
    from membench.data.graphs import read_graph_pair

    return read_graph_pair(*georgiy_paths[:4])


@pytest.fixture(scope="session")
def georgiy_reference(georgiy_graphs):
    from membench.appclass.api import classify

    return classify(*georgiy_graphs)


@pytest.fixture(scope="session")
def quirk_paths():
    """Graphs whose PNNL output holds NaN columns, with that output (committed, see PROVENANCE.txt)."""
    names = (
        "quirkData.Vertex.csv",
        "quirkData.Edges.csv",
        "quirkPattern.Vertex.csv",
        "quirkPattern.Edges.csv",
    )
    return tuple(HERE / n for n in names) + (HERE / "quirk.expected.txt",)


@pytest.fixture(scope="session")
def quirk_graphs(quirk_paths):
    from membench.data.graphs import read_graph_pair

    return read_graph_pair(*quirk_paths[:4])


@pytest.fixture(scope="session")
def built_manifest(kernel_cache_dir):
    """Manifest of the C++ kernels built once per run into the session's kernel cache (a minute or
    two), or skip without a compiler."""
    from membench.appclass.extension import build_extension
    from membench.core.extension import MANIFEST_NAME, cxx_compiler_present

    if not cxx_compiler_present():
        pytest.skip("no C++ compiler on this machine")
    manifest = build_extension(kernel_cache_dir)
    assert manifest["status"] == "built", manifest["error"]
    return Path(manifest["cache_entry"]) / MANIFEST_NAME


@pytest.fixture(scope="session")
def kernels(built_manifest):
    """The built module."""
    from membench.appclass.extension import select_kernels

    return select_kernels("extension", built_manifest).module


@pytest.fixture(scope="session")
def small_rmat():
    """An RMAT-9 data graph (13/17 features) and a 6-node induced pattern."""
    from membench.data.graphs import induced_pattern, rmat_graph

    data = rmat_graph(9, 8, 13, 17, seed=3)
    return data, induced_pattern(data, 6, seed=4)
