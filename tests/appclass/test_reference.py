"""The NumPy reference reproduces the PNNL output byte for byte, quirks included."""

from __future__ import annotations

import numpy as np

from membench.appclass.api import classify
from membench.appclass.options import AppclassOptions, formula_bytes
from membench.appclass.output import format_beliefs, format_value


def test_reference_reproduces_pnnl_output_byte_for_byte(georgiy_paths, georgiy_reference):
    assert format_beliefs(georgiy_reference) == georgiy_paths[4].read_text()


def test_reference_is_bit_exact_at_full_precision(georgiy_paths, georgiy_reference):
    expected = np.loadtxt(georgiy_paths[5]).reshape(georgiy_reference.shape)
    np.testing.assert_array_equal(georgiy_reference, expected)


def test_reference_reproduces_pnnl_nan_quirk(quirk_paths, quirk_graphs):
    expected = quirk_paths[4].read_text()
    assert "-nan" in expected
    assert format_beliefs(classify(*quirk_graphs)) == expected


def test_columns_exponentiate_to_one(georgiy_reference):
    assert georgiy_reference.shape == (1000, 10)
    np.testing.assert_allclose(np.exp(georgiy_reference).sum(axis=0), 1.0, rtol=1e-12)


def test_stable_normalisation_has_no_nan_where_reference_does(quirk_graphs):
    compatible = classify(*quirk_graphs)
    stable = classify(*quirk_graphs, options=AppclassOptions(normalisation="stable"))
    assert np.isnan(compatible).any()
    assert np.isfinite(stable).all()
    np.testing.assert_allclose(np.exp(stable).sum(axis=0), 1.0, rtol=1e-12)


def test_forward_message_index_changes_the_result(small_rmat):
    by_src = classify(*small_rmat)
    by_dst = classify(*small_rmat, options=AppclassOptions(forward_message_index="dst"))
    assert not np.allclose(by_src, by_dst)
    np.testing.assert_allclose(np.exp(by_dst).sum(axis=0), 1.0, rtol=1e-12)


def test_format_matches_c_printf():
    assert format_value(-8.98581e00) == "-8.985810e+00"
    assert format_value(float("-inf")) == "-inf"
    assert format_value(float("inf")) == "inf"
    assert format_value(float("nan")) == "nan"
    assert format_value(-float("nan")) == "-nan"
    assert (
        format_beliefs(np.array([[1e-310, 0.0], [-0.0, 12345.678]]))
        == "1.000000e-310\n0.000000e+00\n-0.000000e+00\n1.234568e+04\n"
    )


def test_memory_formula_matches_gunrocks_report():
    # The example of Gunrock's Application Classification report: 6M nodes, 18M edges, 10 pattern
    # nodes, 20 pattern edges -> about 13 GB.
    assert 12e9 < formula_bytes(6_000_000, 18_000_000, 10, 20) < 13.5e9
