"""The C++ kernels print the reference's bytes: the shared synthetic graph, RMAT graphs, every mode."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from membench.appclass.api import classify
from membench.appclass.extension import select_kernels
from membench.appclass.options import AppclassOptions
from membench.appclass.output import format_beliefs
from membench.cli import main
from membench.core.errors import InputError
from membench.data.graphs import Graph, induced_pattern, rmat_graph


def _native(graphs, kernels, threads=2, **kwargs):
    return classify(*graphs, implementation="torch", kernels=kernels, threads=threads, **kwargs)


def test_default_run_prints_the_expected_bytes(georgiy_paths, built_manifest, capfd):
    # Default implementation and kernels; the C printf formatting of the kernels writes stdout.
    assert main(["appclass", "run", *map(str, georgiy_paths[:4]), "--build-manifest", str(built_manifest)]) == 0
    assert capfd.readouterr().out == georgiy_paths[4].read_text()


def test_synthetic_graph_is_within_rounding_of_pnnl(georgiy_paths, georgiy_graphs, kernels):
    expected = np.loadtxt(georgiy_paths[5]).reshape(1000, 10)
    np.testing.assert_allclose(_native(georgiy_graphs, kernels), expected, rtol=1e-12, atol=0)


@pytest.mark.parametrize("scale, pattern_nodes", [(8, 5), (10, 10), (12, 8)])
def test_rmat_graphs_print_the_reference_bytes(kernels, scale, pattern_nodes):
    data = rmat_graph(scale, 8, 13, 17, seed=scale)
    graphs = (data, induced_pattern(data, pattern_nodes, seed=scale + 1))
    assert format_beliefs(_native(graphs, kernels)) == format_beliefs(classify(*graphs))


def test_quirk_prints_the_reference_nan_and_inf(quirk_paths, quirk_graphs, kernels):
    assert format_beliefs(_native(quirk_graphs, kernels)) == quirk_paths[4].read_text()


@pytest.mark.parametrize(
    "options",
    [AppclassOptions(normalisation="stable"), AppclassOptions(forward_message_index="dst"),
     AppclassOptions(normalisation="stable", forward_message_index="dst")],
)
def test_every_mode_prints_the_reference_bytes(small_rmat, quirk_graphs, kernels, options):
    for graphs in (small_rmat, quirk_graphs):
        assert format_beliefs(_native(graphs, kernels, options=options)) == format_beliefs(classify(*graphs, options=options))


def test_threads_do_not_change_a_bit(small_rmat, kernels):
    one = _native(small_rmat, kernels, threads=1)
    for threads in (2, 3, 7):
        np.testing.assert_array_equal(_native(small_rmat, kernels, threads=threads), one)


def test_unsorted_edges_print_the_reference_bytes(small_rmat, kernels):
    data, pattern = small_rmat
    order = np.random.default_rng(0).permutation(data.num_edges)
    shuffled = (Graph(data.node_features, data.edge_src[order], data.edge_dst[order], data.edge_features[order]), pattern)
    assert format_beliefs(_native(shuffled, kernels)) == format_beliefs(classify(*shuffled))


def test_float32_is_close(small_rmat, kernels):
    single = _native(small_rmat, kernels, precision="float32")
    np.testing.assert_allclose(single, classify(*small_rmat), rtol=1e-3, atol=1e-4)


def test_kernel_formatting_is_c_printf(kernels):
    values = torch.tensor([-8.98581, float("-inf"), float("inf"), float("nan"), -float("nan"), 1e-310, -0.0, 12345.678])
    assert kernels.format_e(values.double(), 2) == format_beliefs(values.numpy()).encode()


def test_kernel_formatting_matches_printf_on_random_doubles(kernels):
    # Every kind of double: random bit patterns (subnormals, huge, tiny, NaNs of both signs), values
    # near the sizes the beliefs take, and exact decimal ties at the seventh digit (round half even).
    rng = np.random.default_rng(5)
    bits = rng.integers(0, 2**64, size=20_000, dtype=np.uint64).view(np.float64)
    near = rng.normal(0, 30, size=20_000) * 10.0 ** rng.integers(-8, 8, size=20_000)
    ties = np.array([12345625.0, 12345635.0, 1.5, 2.5e-3, 1234567.5, -9999999.5, 0.125, 5e-324, 1.7976931348623157e308])
    values = np.concatenate([bits, near, ties])
    assert kernels.format_e(torch.from_numpy(values), 2) == format_beliefs(values).encode()


def test_kernel_choice(tmp_path, built_manifest):
    assert select_kernels("torch", built_manifest) is None
    assert select_kernels("auto", tmp_path / "absent.json") is None
    with pytest.raises(InputError, match="cannot be loaded"):
        select_kernels("extension", tmp_path / "absent.json")
    with pytest.raises(InputError, match="kernels must be one of"):
        select_kernels("fastest", built_manifest)
