"""The C++ kernels print the reference's bytes: the shared synthetic graph, RMAT graphs, every mode."""

from __future__ import annotations

import math

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

pytestmark = pytest.mark.slow


def _native(graphs, kernels, threads=2, **kwargs):
    return classify(*graphs, implementation="torch", kernels=kernels, threads=threads, **kwargs)


def test_default_run_prints_the_expected_bytes(georgiy_paths, built_manifest, capfd):
    # Default implementation and kernels; the C printf formatting of the kernels writes stdout.
    assert (
        main(["appclass", "run", *map(str, georgiy_paths[:4]), "--build-manifest", str(built_manifest)]) == 0
    )
    assert capfd.readouterr().out == georgiy_paths[4].read_text()


def test_a_run_from_another_directory_finds_the_cached_kernels(quirk_paths, built_manifest, tmp_path):
    """``membench appclass run`` anywhere, with no manifest named, loads the build of the per-user
    cache (this run's, MEMBENCH_CACHE_DIR): the same kernels, no build, one log line naming them."""
    import subprocess

    from membench.appclass.extension import SPEC
    from membench.core.extension import sources_digest
    from membench.core.processes import membench_command

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = subprocess.run(
        membench_command("appclass", "run", *quirk_paths[:4], "--threads", "1"),
        cwd=elsewhere,
        capture_output=True,
        check=True,
        timeout=300,
    )
    assert done.stdout.decode() == quirk_paths[4].read_text()
    value = f"cpp-{sources_digest(SPEC.source_paths())[:8]}"
    (line,) = [line for line in done.stderr.decode().splitlines() if "kernels" in line]
    assert f"{SPEC.name}: kernels {value} ({built_manifest.parent.resolve()})" in line
    assert list(elsewhere.iterdir()) == []


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
    [
        AppclassOptions(normalisation="stable"),
        AppclassOptions(forward_message_index="dst"),
        AppclassOptions(normalisation="stable", forward_message_index="dst"),
    ],
)
def test_every_mode_prints_the_reference_bytes(small_rmat, quirk_graphs, kernels, options):
    for graphs in (small_rmat, quirk_graphs):
        assert format_beliefs(_native(graphs, kernels, options=options)) == format_beliefs(
            classify(*graphs, options=options)
        )


def test_threads_do_not_change_a_bit(small_rmat, kernels):
    one = _native(small_rmat, kernels, threads=1)
    for threads in (2, 3, 7):
        np.testing.assert_array_equal(_native(small_rmat, kernels, threads=threads), one)


def test_unsorted_edges_print_the_reference_bytes(small_rmat, kernels):
    data, pattern = small_rmat
    order = np.random.default_rng(0).permutation(data.num_edges)
    shuffled = (
        Graph(data.node_features, data.edge_src[order], data.edge_dst[order], data.edge_features[order]),
        pattern,
    )
    assert format_beliefs(_native(shuffled, kernels)) == format_beliefs(classify(*shuffled))


def test_float32_is_close(small_rmat, kernels):
    single = _native(small_rmat, kernels, precision="float32")
    np.testing.assert_allclose(single, classify(*small_rmat), rtol=1e-3, atol=1e-4)


def test_kernel_formatting_is_c_printf(kernels):
    values = torch.tensor(
        [-8.98581, float("-inf"), float("inf"), float("nan"), -float("nan"), 1e-310, -0.0, 12345.678]
    )
    assert kernels.format_e(values.double(), 2) == format_beliefs(values.numpy()).encode()


def test_kernel_formatting_matches_printf_on_random_doubles(kernels):
    # Every kind of double: random bit patterns (subnormals, huge, tiny, NaNs of both signs), values
    # near the sizes the beliefs take, and exact decimal ties at the seventh digit (round half even).
    rng = np.random.default_rng(5)
    bits = rng.integers(0, 2**64, size=20_000, dtype=np.uint64).view(np.float64)
    near = rng.normal(0, 30, size=20_000) * 10.0 ** rng.integers(-8, 8, size=20_000)
    ties = np.array(
        [12345625.0, 12345635.0, 1.5, 2.5e-3, 1234567.5, -9999999.5, 0.125, 5e-324, 1.7976931348623157e308]
    )
    values = np.concatenate([bits, near, ties])
    assert kernels.format_e(torch.from_numpy(values), 2) == format_beliefs(values).encode()


def test_kernel_choice(tmp_path, built_manifest):
    assert select_kernels("torch", built_manifest).module is None
    fallback = select_kernels("auto", tmp_path / "absent.json")
    assert fallback.module is None and fallback.value == "torch"
    assert "absent.json: build manifest not found" in fallback.fallback_reason
    with pytest.raises(InputError, match="kernels 'extension' cannot run: build manifest not found"):
        select_kernels("extension", tmp_path / "absent.json")
    with pytest.raises(InputError, match="kernels must be one of"):
        select_kernels("fastest", built_manifest)


def test_a_build_of_other_sources_is_refused(tmp_path, built_manifest):
    """A build records the digest of the sources it compiled; loading it from sources that differ
    (an update since the build) is refused with the command that rebuilds, and auto falls back to
    pure torch, instead of running other kernels or failing on their arguments."""
    import json
    import shutil

    from membench.appclass.extension import SPEC
    from membench.core.extension import sources_digest

    manifest = json.loads(built_manifest.read_text())
    assert manifest["source_sha256"] == sources_digest(
        [SPEC.source_dir / name for name in manifest["sources"]]
    )
    copy = tmp_path / "build"
    shutil.copytree(built_manifest.parent, copy)
    for change, message in [
        (
            {"source_sha256": "0" * 64},
            "built from other sources than .* holds now; rebuild with `membench appclass build`",
        ),
        ({"source_sha256": None}, "records no source digest"),
        ({"sources": ["gone.cpp"]}, "source .*gone.cpp of this build no longer exists"),
    ]:
        edited = {key: value for key, value in {**manifest, **change}.items() if value is not None}
        (copy / "manifest.json").write_text(json.dumps(edited))
        with pytest.raises(InputError, match=message):
            select_kernels("extension", copy / "manifest.json")
        assert select_kernels("auto", copy / "manifest.json").module is None


def test_sources_digest_follows_names_and_contents(tmp_path):
    from membench.core.extension import sources_digest

    first, second = tmp_path / "a.cpp", tmp_path / "b.cpp"
    first.write_text("int a;")
    second.write_text("int b;")
    digest = sources_digest([first, second])
    assert digest == sources_digest([first, second]) and digest != sources_digest([second, first])
    second.write_text("int c;")
    assert sources_digest([first, second]) != digest


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_the_allocator_trace_sees_every_byte_the_kernels_hold(kernels, threads):
    """Scratch included: column_max holds its (C,) result and a (threads, C) table of partial maxima;
    normprob_ the column maxima, the (C,) float64 exp-sums, a chunk of rows (up to 32768 values, no
    more rows than the matrix has) in float64 once for its values and twice for their exponentials,
    each of those two followed by the 16 values its column sums may read past it, then the (C,)
    log-sums."""
    from membench.core.tracers import CpuAllocatorTracker

    rows, cols = 5, 3
    x = torch.randn(rows, cols, dtype=torch.float64)
    with CpuAllocatorTracker() as column_max:
        kernels.column_max(x, threads)
    assert column_max.peak_bytes == 8 * cols * (1 + threads)
    with CpuAllocatorTracker() as normprob:
        kernels.normprob_(x, False, threads)
    scratch = 8 * (3 * min(rows, 32768 // cols) * cols + 2 * 16)
    assert normprob.peak_bytes == max(8 * cols * (1 + threads), 8 * cols * 2 + scratch, 8 * cols * 3)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_prepare_messages_equals_the_steps_it_fuses_bit_for_bit(kernels, threads):
    """The fused node pass against index_select, subtraction and column_max one by one, with NaN,
    infinities and signed zeros among the values; its scratch is the (4, C) result and a
    (threads, 4, C) table of partial maxima."""
    from membench.core.tracers import CpuAllocatorTracker

    generator = torch.Generator().manual_seed(3)
    rows, nodes, cols = 37, 4, 6
    mu, fmax, rmax, ce_min_forward, ce_min_src = (
        torch.randn(rows, width, generator=generator, dtype=torch.float64)
        for width in (nodes, cols, cols, cols, cols)
    )
    mu[3, 1], fmax[5, 2], rmax[7, 0], ce_min_src[2, 4] = (
        float("nan"),
        float("inf"),
        -float("inf"),
        float("inf"),
    )
    mu[9], fmax[9], ce_min_forward[10] = 0.0, -0.0, 0.0
    pattern_src = torch.tensor([0, 1, 2, 3, 0, 2])
    pattern_dst = torch.tensor([1, 2, 3, 0, 3, 1])
    expected_vf = mu.index_select(1, pattern_dst) - fmax
    expected_vr = mu.index_select(1, pattern_src) - rmax
    expected_forward, expected_reverse = expected_vr - ce_min_forward, expected_vf - ce_min_src
    vr = torch.empty(rows, cols, dtype=torch.float64)
    with CpuAllocatorTracker() as allocations:
        maxima = kernels.prepare_messages(
            mu, fmax, rmax, pattern_src, pattern_dst, ce_min_forward, ce_min_src, vr, threads
        )
    assert allocations.peak_bytes == 8 * 4 * cols * (1 + threads)

    expected = [
        kernels.column_max(x, threads) for x in (expected_vf, expected_vr, expected_forward, expected_reverse)
    ]
    for got, want in [
        (vr, expected_vr),
        (fmax, expected_forward),
        (rmax, expected_reverse),
        *zip(maxima.unbind(0), expected),
    ]:
        assert torch.equal(got.view(torch.int64), want.view(torch.int64))  # every bit, NaN and -0 included


@pytest.mark.parametrize("stable", [False, True])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_update_beliefs_equals_the_steps_it_fuses_bit_for_bit(kernels, stable, threads):
    """normalise_maxima_ of both directions, the beliefs pattern edge by pattern edge as the
    reference adds them, and column_max of the beliefs, over more rows than one block, with
    subnormal and zero exponentials, NaN, infinities and signed zeros; a pattern edge that is a
    self-loop adds both its terms to one node, forward first. normprob_ given those column maxima
    equals normprob_ taking them itself."""
    from membench.core.tracers import CpuAllocatorTracker

    generator = torch.Generator().manual_seed(13)
    rows, nodes, cols = 150, 4, 6
    cv = torch.rand(rows, nodes, generator=generator, dtype=torch.float64) * 5
    fmax, rmax = (torch.randn(rows, cols, generator=generator, dtype=torch.float64) * 300 for _ in range(2))
    fmax[2, 1], fmax[70, 1], rmax[71, 3], rmax[140, 0] = -740.0, -745.2, -800.0, -math.inf
    fmax[7, 0], rmax[8, 2], fmax[9, 4], rmax[9, 4], cv[9, 2] = math.nan, -0.0, 0.0, -0.0, 0.0
    forward_max, reverse_max = (torch.randn(cols, generator=generator, dtype=torch.float64) for _ in range(2))
    forward_sums, reverse_sums = (
        torch.rand(cols, generator=generator, dtype=torch.float64) * 5 + 0.5 for _ in range(2)
    )
    forward_floor = torch.full((cols,), -600.0, dtype=torch.float64)
    reverse_floor = torch.full((cols,), -650.0, dtype=torch.float64)
    forward_floor[1], reverse_floor[3] = -math.inf, -math.inf
    pattern_src = torch.tensor([0, 1, 2, 3, 0, 2])
    pattern_dst = torch.tensor([1, 2, 3, 0, 3, 2])

    expected_fmax, expected_rmax = fmax.clone(), rmax.clone()
    kernels.normalise_maxima_(expected_fmax, forward_max, forward_sums, forward_floor, stable, threads)
    kernels.normalise_maxima_(expected_rmax, reverse_max, reverse_sums, reverse_floor, stable, threads)
    expected_mu = -cv
    for j in range(cols):
        expected_mu[:, pattern_dst[j]] += expected_fmax[:, j]
        expected_mu[:, pattern_src[j]] += expected_rmax[:, j]

    mu = torch.full_like(cv, 7.0)  # overwritten
    with CpuAllocatorTracker() as allocations:
        mu_max = kernels.update_beliefs_(
            mu,
            cv,
            fmax,
            forward_max,
            forward_sums,
            forward_floor,
            rmax,
            reverse_max,
            reverse_sums,
            reverse_floor,
            pattern_src,
            pattern_dst,
            stable,
            threads,
        )
    # The terms' table (starts, then each term's column and array), the result, the log-sums and the
    # (threads, nodes) partial maxima.
    assert allocations.peak_bytes == 8 * ((nodes + 1) + 2 * 2 * cols + nodes + 2 * cols + nodes * threads)
    for got, want in [
        (fmax, expected_fmax),
        (rmax, expected_rmax),
        (mu, expected_mu),
        (mu_max, kernels.column_max(expected_mu, threads)),
    ]:
        assert torch.equal(got.view(torch.int64), want.view(torch.int64))

    expected_mu = mu.clone()
    kernels.normprob_(expected_mu, stable, threads)
    kernels.normprob_(mu, stable, threads, mu_max)
    assert torch.equal(mu.view(torch.int64), expected_mu.view(torch.int64))


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_edges_stored_out_of_order_give_the_edge_order_bits(kernels, threads):
    """distances writes edge i into row positions[i]; column_max and normprob_ given the positions
    take the rows in edge order, so they give the bits they give on the edges in edge order: the
    first of two tied signed zeros, and the exp-sums' rounding, which storage order would change."""
    generator = torch.Generator().manual_seed(17)
    edges, features, cols = 150, 4, 3
    at = torch.rand(features, edges, generator=generator, dtype=torch.float64)
    b = torch.rand(cols, features, generator=generator, dtype=torch.float64)
    positions = torch.randperm(edges, generator=generator)
    if positions[10] < positions[20]:  # the later edge of the tie below must be stored first
        positions[[10, 20]] = positions[[20, 10]]
    by_edge = kernels.distances(at, b, threads)
    assert torch.equal(
        kernels.distances(at, b, threads, positions)[positions].view(torch.int64), by_edge.view(torch.int64)
    )

    x = torch.randn(edges, cols, generator=generator, dtype=torch.float64)
    x[:, 0] = -1.0
    x[10, 0], x[20, 0], x[30, 1] = -0.0, 0.0, math.nan
    stored = torch.empty_like(x)
    stored[positions] = x
    expected_max = kernels.column_max(x, threads)
    assert torch.equal(
        kernels.column_max(stored, threads, positions).view(torch.int64), expected_max.view(torch.int64)
    )
    assert math.copysign(1.0, expected_max[0].item()) == -1.0
    assert math.copysign(1.0, kernels.column_max(stored, threads)[0].item()) == 1.0  # storage order differs
    for stable in (False, True):
        expected, got, in_storage_order = x.clone(), stored.clone(), stored.clone()
        kernels.normprob_(expected, stable, threads)
        kernels.normprob_(got, stable, threads, None, positions)
        kernels.normprob_(in_storage_order, stable, threads)
        assert torch.equal(got[positions].view(torch.int64), expected.view(torch.int64))
        assert not torch.equal(in_storage_order[positions].view(torch.int64), expected.view(torch.int64))


def _log_exp(y: float) -> float:
    """The kernels' log(exp(y)): y + 0 where exp(y) is a normal double, else libm's composition."""
    if y >= -708.0:
        return y + 0.0
    if y == -math.inf or math.exp(y) == 0.0:
        return -math.inf  # log(0); Python's math.log raises instead
    return math.log(math.exp(y))


@pytest.mark.parametrize("stable", [False, True])
def test_normprob_over_many_chunks_is_the_same_for_any_thread_count(kernels, stable):
    """normprob_ takes its exp-sums chunk by chunk of rows (32768 values each), the threads sharing
    each chunk's exponentials by rows and its sums by columns: over several chunks and a partial
    one, every thread count gives the same bits, within rounding of the reference's normprob."""
    from membench.appclass.reference import normprob

    rows, cols = 3 * (32768 // 7) + 5, 7
    x = torch.randn(rows, cols, generator=torch.Generator().manual_seed(5), dtype=torch.float64) * 40
    x[17, 2], x[9000, 4] = -math.inf, -900.0  # a node without edges, and an exp that underflows
    results = []
    for threads in (1, 2, 3, 4):
        out = x.clone()
        kernels.normprob_(out, stable, threads)
        results.append(out)
    for out in results[1:]:
        assert torch.equal(out.view(torch.int64), results[0].view(torch.int64))
    expected = x.numpy().copy()
    with np.errstate(all="ignore"):  # log(0) where the exp underflows, as the reference allows
        normprob(expected, "stable" if stable else "reference")
    np.testing.assert_allclose(results[0].numpy(), expected, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("stable", [False, True])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_normalise_maxima_equals_its_definition_bit_for_bit(kernels, stable, threads):
    """Rows whose values all have normal exponentials take a vectorised loop, the others log_exp
    value by value; both give fmax(floor, log_exp(raw - m) - log(sums)) to the bit. Of the three
    64-row blocks, the first and second hold values that need libm, the third none (-inf aside)."""
    generator = torch.Generator().manual_seed(5)
    rows, cols = 150, 6
    raw = torch.randn(rows, cols, generator=generator, dtype=torch.float64) * 100
    raw[:23] *= 3
    raw[2, 1], raw[11, 1], raw[12, 1] = -740.0, -745.2, -800.0  # subnormal exp, and 0 (column 1 has no floor)
    raw[5, 3], raw[7, 0], raw[8, 2], raw[9, 4] = -math.inf, math.nan, -0.0, 0.0
    raw[100, 1], raw[130, 3], raw[131, 2], raw[132, 4] = -745.2, -math.inf, -0.0, 0.0
    m = torch.randn(cols, generator=generator, dtype=torch.float64)
    m[2] = 0.0
    sums = torch.rand(cols, generator=generator, dtype=torch.float64) * 5 + 0.5
    floor = torch.full((cols,), -600.0, dtype=torch.float64)
    floor[1] = -math.inf
    out = raw.clone()
    kernels.normalise_maxima_(out, m, sums, floor, stable, threads)
    expected = torch.empty_like(raw)
    for i in range(rows):
        for j in range(cols):
            y = raw[i, j].item() - m[j].item()
            value = (y if stable else _log_exp(y)) - math.log(sums[j].item())
            expected[i, j] = floor[j].item() if (floor[j].item() >= value or value != value) else value
    assert torch.equal(out.view(torch.int64), expected.view(torch.int64))


def _edge_case_graph():
    """9 nodes (nodes 4 and 7 without edges either way), 40 edges, 5 columns of edge distances with
    NaN, infinities, signed zeros and ties among them; node arrays likewise."""
    generator = torch.Generator().manual_seed(11)
    nodes, edges, cols = 9, 40, 5
    keep = torch.tensor([u for u in range(nodes) if u not in (4, 7)])
    src = keep[torch.randint(len(keep), (edges,), generator=generator)]
    dst = keep[torch.randint(len(keep), (edges,), generator=generator)]
    ce = torch.randn(edges, cols, generator=generator, dtype=torch.float64) * 3
    ce[3, 1], ce[8, 2], ce[12, 4] = float("nan"), float("inf"), -float("inf")
    ce[20, 0], ce[21, 0] = 0.0, -0.0
    ce[30] = ce[31]  # ties
    node = torch.randn(nodes, cols, generator=generator, dtype=torch.float64)
    node[src[20], 0], node[2, 3], node[4, 2], node[7, 1] = -0.0, float("nan"), float("inf"), float("nan")
    return src, dst, ce, node


def _fmax_keep(a, b):
    return a if (a >= b or b != b) else b


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_edge_kernels_equal_their_definitions(kernels, threads):
    """group_min, group_exp_sums, scatter_max_ and node_exp_sums against loops over the edges in edge order
    (the maxima bit for bit, the sums within the exp polynomial's rounding), for any thread split,
    with the edges stored part by part as the native state stores them: the group kernels give the
    bits they give on the edges in edge order. Nodes without edges add nothing even where their
    values are NaN or infinite."""
    from membench.appclass.native import edge_parts, nodes_with_edges, owner_bounds

    src, dst, ce_by_edge, node = _edge_case_graph()
    nodes, cols = node.shape
    parts = edge_parts(dst, nodes, 2 * threads)  # more parts than threads, as the native state
    bounds = parts.bounds
    assert bounds[0] == 0 and bounds[-1] == nodes and bool((bounds[1:] >= bounds[:-1]).all())
    for t in range(2 * threads):  # each part lists exactly the edges into its nodes, in edge order
        listed = parts.order[parts.edge_bounds[t] : parts.edge_bounds[t + 1]]
        assert (
            listed.tolist() == torch.nonzero((dst >= bounds[t]) & (dst < bounds[t + 1])).squeeze(1).tolist()
        )
    assert torch.equal(parts.order[parts.positions], torch.arange(len(src)))
    ce = ce_by_edge[parts.order]  # edge i in row positions[i]

    raw = torch.full_like(node, 5.0)  # overwritten, not merged
    kernels.scatter_max_(
        raw, ce, src[parts.order], dst[parts.order], node, bounds, parts.edge_bounds, threads
    )
    expected = torch.full_like(node, -float("inf"))
    for e in range(len(src)):
        for j in range(cols):
            expected[dst[e], j] = _fmax_keep(
                expected[dst[e], j].item(), (node[src[e], j] - ce_by_edge[e, j]).item()
            )
    assert torch.equal(raw.view(torch.int64), expected.view(torch.int64))

    src_bounds = owner_bounds(src, nodes, threads)
    ce_min = kernels.group_min(ce, src, nodes, src_bounds, parts.positions)
    expected_min = torch.full_like(node, float("inf"))
    for e in range(len(src)):
        for j in range(cols):
            expected_min[src[e], j] = min(expected_min[src[e], j].item(), ce_by_edge[e, j].item())
    assert torch.equal(ce_min.view(torch.int64), expected_min.view(torch.int64))
    sums = kernels.group_exp_sums(ce, src, ce_min, src_bounds, parts.positions)
    expected_sums = torch.zeros(nodes, cols, dtype=torch.float64)
    for e in range(len(src)):
        expected_sums[src[e]] += torch.exp(ce_min[src[e]] - ce_by_edge[e])
    torch.testing.assert_close(sums, expected_sums, rtol=1e-15, atol=0, equal_nan=True)
    by_edge = kernels.group_exp_sums(ce_by_edge, src, ce_min, src_bounds)
    assert torch.equal(sums.view(torch.int64), by_edge.view(torch.int64))
    assert bool((sums[4] == 0).all() and (sums[7] == 0).all())

    m = torch.nan_to_num(
        torch.where(torch.isnan(node - ce_min), -float("inf"), node - ce_min).amax(0), neginf=-1.0
    )
    listed = nodes_with_edges(src, nodes)
    assert listed.tolist() == [0, 1, 2, 3, 5, 6, 8]
    diffs = [node - ce_min, node.flip(1) - ce_min]
    both = kernels.node_exp_sums(diffs[0], sums, m, listed, diffs[1], sums, m.flip(0), listed, threads)
    for direction, (diff, maxima) in enumerate(zip(diffs, [m, m.flip(0)])):
        terms = torch.exp(diff - maxima) * sums
        terms[sums == 0] = 0.0
        expected_total = torch.zeros(cols, dtype=torch.float64)
        for u in range(nodes):
            expected_total += terms[u]
        torch.testing.assert_close(both[direction], expected_total, rtol=1e-15, atol=0, equal_nan=True)


def test_kernels_reject_malformed_node_lists_and_edge_parts(kernels):
    """node_exp_sums needs increasing in-range node lists; scatter_max_ one edge range per node part,
    each edge grouping into its part's nodes and reading a row of node; positions a permutation."""
    from membench.appclass.native import edge_parts, nodes_with_edges, owner_bounds

    src, dst, ce, node = _edge_case_graph()
    nodes, cols = node.shape
    src_bounds = owner_bounds(src, nodes, 1)
    ce_min = kernels.group_min(ce, src, nodes, src_bounds)
    sums = kernels.group_exp_sums(ce, src, ce_min, src_bounds)
    m, listed = torch.zeros(cols, dtype=torch.float64), nodes_with_edges(src, nodes)
    for bad in (torch.tensor([3, 1]), torch.tensor([0, nodes])):
        with pytest.raises(RuntimeError, match="listed nodes must be increasing node indices"):
            kernels.node_exp_sums(node, sums, m, bad, node, sums, m, listed, 1)
    parts = edge_parts(dst, nodes, 2)
    src_by_part, dst_by_part, ce_by_part = src[parts.order], dst[parts.order], ce[parts.order]
    raw = torch.full_like(node, 5.0)
    with pytest.raises(RuntimeError, match="edge_bounds must hold one edge range per part of bounds"):
        kernels.scatter_max_(
            raw, ce_by_part, src_by_part, dst_by_part, node, parts.bounds, torch.tensor([0, len(src)]), 1
        )
    # Edges left in edge order: some group outside their part's nodes (a race between threads).
    with pytest.raises(RuntimeError, match="every edge of part t must group into the nodes"):
        kernels.scatter_max_(raw, ce, src, dst, node, parts.bounds, parts.edge_bounds, 1)
    with pytest.raises(RuntimeError, match="every edge of part t must group into the nodes"):
        kernels.scatter_max_(
            raw, ce_by_part, src_by_part + nodes, dst_by_part, node, parts.bounds, parts.edge_bounds, 1
        )
    with pytest.raises(RuntimeError, match="a part with edges must own nodes"):
        kernels.scatter_max_(
            raw, ce_by_part, src_by_part, dst_by_part, node, torch.tensor([0, 0, nodes]), parts.edge_bounds, 1
        )
    repeated = parts.positions.clone()
    repeated[1] = repeated[0]
    for bad in (repeated, parts.positions + 1, parts.positions[1:]):
        with pytest.raises(RuntimeError, match="positions must"):
            kernels.group_min(ce_by_part, src, nodes, src_bounds, bad)


def test_update_beliefs_and_normprob_reject_mismatched_arguments(kernels):
    """update_beliefs_ needs pattern edges that join pattern nodes (it indexes beliefs by them),
    per-column vectors of the maxima's width, float64 exp-sums and floors that are numbers (the
    normalisations raise values to them with one max instruction, which NaN would break), and so
    does normalise_maxima_; normprob_ given column maxima needs one per column."""
    rows, nodes, cols = 5, 3, 4
    cv, mu = torch.zeros(rows, nodes, dtype=torch.float64), torch.empty(rows, nodes, dtype=torch.float64)
    fmax, rmax = torch.zeros(rows, cols, dtype=torch.float64), torch.zeros(rows, cols, dtype=torch.float64)
    column, sums = torch.zeros(cols, dtype=torch.float64), torch.ones(cols, dtype=torch.float64)
    src, dst = torch.tensor([0, 1, 2, 0]), torch.tensor([1, 2, 0, 2])

    def update(pattern_src=src, forward_sums=sums, floor=column):
        kernels.update_beliefs_(
            mu, cv, fmax, column, forward_sums, floor, rmax, column, sums, column, pattern_src, dst, False, 1
        )

    with pytest.raises(RuntimeError, match="pattern edges must join pattern nodes"):
        update(pattern_src=torch.tensor([0, 1, 3, 0]))
    with pytest.raises(RuntimeError, match="exp-sums must be contiguous float64"):
        update(forward_sums=sums.float())
    with pytest.raises(RuntimeError, match="column maxima and floors must be contiguous"):
        update(floor=torch.zeros(cols + 1, dtype=torch.float64))
    nan_floor = column.clone()
    nan_floor[2] = math.nan
    with pytest.raises(RuntimeError, match="floors must not be NaN"):
        update(floor=nan_floor)
    with pytest.raises(RuntimeError, match="floors must not be NaN"):
        kernels.normalise_maxima_(fmax.clone(), column, sums, nan_floor, False, 1)
    with pytest.raises(RuntimeError, match="column maxima and floors must be contiguous"):
        kernels.normalise_maxima_(fmax.clone(), column[:-1], sums, column, False, 1)
    with pytest.raises(RuntimeError, match="exp-sums must be contiguous float64"):
        kernels.normalise_maxima_(fmax.clone(), column, sums.float(), column, False, 1)
    with pytest.raises(RuntimeError, match="column_max must be contiguous"):
        kernels.normprob_(mu, False, 1, torch.zeros(nodes + 1, dtype=torch.float64))


def test_owner_bounds_share_the_edges_evenly():
    from membench.appclass.native import owner_bounds

    graph = rmat_graph(12, 8, 1, 1, seed=2)
    groups = torch.from_numpy(graph.edge_dst.astype(np.int64))
    nodes, edges = graph.num_nodes, len(groups)
    in_degree = torch.bincount(groups, minlength=nodes)
    for parts in (1, 2, 3, 7):
        bounds = owner_bounds(groups, nodes, parts)
        shares = [int(in_degree[bounds[t] : bounds[t + 1]].sum()) for t in range(parts)]
        assert sum(shares) == edges and max(shares) <= edges / parts + int(in_degree.max())


def test_bench_records_the_algorithms_allocator_peak(small_rmat, built_manifest, tmp_path):
    from membench.appclass.bench import BenchSpec, run_bench_job
    from membench.data.graphs import write_graph

    paths = []
    for role, graph in zip(("data", "pattern"), small_rmat):
        vertices, edges = tmp_path / f"{role}.Vertex.csv", tmp_path / f"{role}.Edges.csv"
        write_graph(graph, vertices, edges)
        paths += [str(vertices), str(edges)]
    records = {
        kernels_choice: run_bench_job(
            tuple(paths),
            "small",
            BenchSpec(implementation=implementation, threads=1, kernels=kernels_choice),
            tmp_path / kernels_choice,
            sample_interval_s=0,
            build_manifest=built_manifest,
        )
        for implementation, kernels_choice in (
            ("torch", "extension"),
            ("torch", "torch"),
            ("reference", "auto"),
        )
    }
    data, pattern = small_rmat
    state_mib = 8 * 2 * data.num_nodes * pattern.num_nodes / 2**20  # CV and MU at least
    for name in ("extension", "torch"):
        assert records[name]["alloc_peak_mib"] > state_mib and records[name]["trace_allocator"] is True
        assert "alloc_peak_note" not in records[name]
    from membench.appclass.extension import SPEC
    from membench.core.extension import sources_digest

    assert records["extension"]["kernels"] == f"cpp-{sources_digest(SPEC.source_paths())[:8]}"
    assert records["torch"]["kernels"] == "torch" and records["auto"]["kernels"] == "numpy"
    assert (
        records["auto"]["alloc_peak_mib"] is None
        and "outside torch's allocator" in records["auto"]["alloc_peak_note"]
    )
