"""The torch implementation agrees with the reference (1e-9 relative in float64), in every mode."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from membench.appclass.api import classify
from membench.appclass.options import AppclassOptions
from membench.core.errors import InputError


def test_torch_matches_pnnl_within_1e9(georgiy_paths, georgiy_graphs, georgiy_reference):
    expected = np.loadtxt(georgiy_paths[5]).reshape(georgiy_reference.shape)
    fast = classify(*georgiy_graphs, implementation="torch")
    np.testing.assert_allclose(fast, expected, rtol=1e-9, atol=0)
    np.testing.assert_allclose(np.exp(fast).sum(axis=0), 1.0, rtol=1e-12)


def test_torch_reproduces_the_nan_quirk(quirk_graphs):
    reference = classify(*quirk_graphs)
    fast = classify(*quirk_graphs, implementation="torch")
    assert np.isnan(reference).any()
    np.testing.assert_allclose(fast, reference, rtol=1e-9, atol=0, equal_nan=True)


@pytest.mark.parametrize(
    "options",
    [
        AppclassOptions(normalisation="stable"),
        AppclassOptions(forward_message_index="dst"),
        AppclassOptions(normalisation="stable", forward_message_index="dst"),
    ],
)
def test_torch_matches_reference_in_each_mode(small_rmat, quirk_graphs, options):
    for graphs in (small_rmat, quirk_graphs):
        np.testing.assert_allclose(
            classify(*graphs, implementation="torch", options=options),
            classify(*graphs, options=options),
            rtol=1e-9,
            atol=0,
            equal_nan=True,
        )


def test_result_does_not_depend_on_chunk_size_or_threads(small_rmat):
    whole = classify(*small_rmat, implementation="torch", chunk_edges=1 << 20)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        chunked = classify(*small_rmat, implementation="torch", chunk_edges=97)
    finally:
        torch.set_num_threads(threads)
    np.testing.assert_allclose(chunked, whole, rtol=1e-12, atol=0)


def test_unsorted_edges_give_the_same_beliefs(small_rmat):
    from membench.data.graphs import Graph

    data, pattern = small_rmat
    order = np.random.default_rng(0).permutation(data.num_edges)
    shuffled = Graph(
        data.node_features, data.edge_src[order], data.edge_dst[order], data.edge_features[order]
    )
    np.testing.assert_allclose(
        classify(shuffled, pattern, implementation="torch"), classify(*small_rmat), rtol=1e-9, atol=0
    )


def test_float32_is_close(small_rmat):
    reference = classify(*small_rmat)
    single = classify(*small_rmat, implementation="torch", precision="float32")
    assert single.dtype == np.float64
    np.testing.assert_allclose(single, reference, rtol=1e-3, atol=1e-4)


def test_unknown_choices_are_input_errors(small_rmat):
    with pytest.raises(InputError, match="implementation 'cuda-magic'"):
        classify(*small_rmat, implementation="cuda-magic")
    with pytest.raises(InputError, match="float64 only"):
        classify(*small_rmat, precision="float32")
    with pytest.raises(InputError, match="normalisation 'fast'"):
        AppclassOptions(normalisation="fast")
