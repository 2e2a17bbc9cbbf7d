"""The CPU implementation on the C++ kernels (``csrc/appclass_ops.cpp``): the reference's operations
in the reference's order where the order changes a double, without storing edge messages.

An iteration makes four passes and then normalises the beliefs: one pass over the node arrays
(``prepare_messages``: the messages' node values, their column maxima, and the reverse messages'
maxima, which come from the nodes), the exp-sums of both directions from the nodes with edges, one
pass over the edges for the forward messages' maxima by destination, and one over the node arrays
that normalises the maxima and updates the beliefs (``update_beliefs_``). Why each step equals the
reference's is in the kernel source's header comment.

The edge distances are stored by destination range (:func:`edge_parts`), in edge order within
each range, so that the edge pass streams them while each range's rows of maxima stay in cache;
the kernels that sum or break ties in the reference's edge order take the edges through their
storage rows (``positions``).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

import numpy as np
import torch

from membench.appclass.options import AppclassOptions
from membench.data.graphs import Graph

__all__ = [
    "beliefs",
    "edge_parts",
    "EDGE_PARTS_PER_THREAD",
    "EdgeParts",
    "initialise",
    "iterate",
    "NativeState",
    "nodes_with_edges",
    "owner_bounds",
]

EDGE_PARTS_PER_THREAD = 4  # destination ranges per thread in the edge pass (RMAT-18: 4 and 8 alike, 1 slower)


def owner_bounds(groups: torch.Tensor, num_nodes: int, parts: int) -> torch.Tensor:
    """(parts + 1,) int64 node boundaries: part t owns the nodes [b[t], b[t + 1]), which hold about
    1 / parts of the edges of ``groups``; RMAT-like graphs put most edges on a few low node ids."""
    edges_up_to = torch.bincount(groups, minlength=num_nodes).cumsum(0)
    targets = torch.arange(1, parts, dtype=torch.int64) * len(groups) // parts
    inner = torch.searchsorted(edges_up_to, targets, right=True)
    return torch.cat(
        [torch.zeros(1, dtype=torch.int64), inner, torch.full((1,), num_nodes, dtype=torch.int64)]
    )


@dataclass
class EdgeParts:
    """A split of the nodes and their edges (by a grouping such as the destinations) into parts.

    Part t owns the nodes ``bounds[t] .. bounds[t + 1]`` and the edges ``order[edge_bounds[t] ..
    edge_bounds[t + 1]]``, in edge order: those whose group is one of its nodes. Edges stored in
    ``order`` put edge i in row ``positions[i]``.
    """

    bounds: torch.Tensor  # (parts + 1,) int64 node boundaries
    order: torch.Tensor  # (DE,) int64 edge indices, part by part
    edge_bounds: torch.Tensor  # (parts + 1,) int64 boundaries in order
    positions: torch.Tensor  # (DE,) int64 the inverse permutation of order


def edge_parts(groups: torch.Tensor, num_nodes: int, parts: int) -> EdgeParts:
    """``parts`` parts of about equal edge counts (:func:`owner_bounds`) with their edges listed."""
    bounds = owner_bounds(groups, num_nodes, parts)
    part_of_edge = torch.bucketize(groups, bounds[1:-1], right=True)
    order = torch.cat([torch.nonzero(part_of_edge == t).squeeze(1) for t in range(parts)])
    counts = torch.bincount(part_of_edge, minlength=parts)
    positions = torch.empty_like(order)
    positions[order] = torch.arange(len(order))
    return EdgeParts(
        bounds, order, torch.cat([torch.zeros(1, dtype=torch.int64), counts.cumsum(0)]), positions
    )


def nodes_with_edges(groups: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """The nodes (int64, increasing) that group at least one edge."""
    return torch.nonzero(torch.bincount(groups, minlength=num_nodes)).squeeze(1)


@dataclass
class NativeState:
    """Work tensors (CPU, one dtype). DV, DE: data nodes and edges; PV, PE: pattern nodes and edges."""

    ops: ModuleType
    threads: int
    stable: bool
    cv: torch.Tensor  # (DV, PV) normalised node distances
    mu: torch.Tensor  # (DV, PV) log-beliefs
    ce: torch.Tensor  # (DE, PE) normalised edge distances, stored by destination part (edge_bounds)
    src_by_part: torch.Tensor  # (DE,) int64 the sources of ce's rows
    dst_by_part: torch.Tensor  # (DE,) int64 the destinations of ce's rows
    bounds: (
        torch.Tensor
    )  # (parts + 1,) int64: part t holds the edges into the nodes bounds[t] .. bounds[t + 1]
    edge_bounds: torch.Tensor  # (parts + 1,) int64: and ce's rows edge_bounds[t] .. edge_bounds[t + 1]
    forward_from_src: bool  # forward messages read the source (PNNL), else the destination (no edge pass)
    ce_min_forward: torch.Tensor  # (DV, PE) minimum of CE over each node's edges by forward_rows
    ce_min_src: torch.Tensor  # (DV, PE) the same by source
    exp_sums_forward: torch.Tensor  # (DV, PE) float64 sum of exp(ce_min_forward - CE) over each node's edges
    exp_sums_src: torch.Tensor  # (DV, PE) float64 the same by source
    listed_forward: torch.Tensor  # int64 nodes with edges by forward_rows (the others' exp-sums are 0)
    listed_src: torch.Tensor  # int64 nodes with edges by source
    fmax: torch.Tensor  # (DV, PE)
    rmax: torch.Tensor  # (DV, PE)
    vr: torch.Tensor  # (DV, PE) work buffer, reused every iteration (fresh pages cost a fault each)
    minus_cnull: torch.Tensor  # (PE,) -Cnull: -0.0 (PNNL's normalised one-row table, negated)
    pattern_src: torch.Tensor  # (PE,) int64
    pattern_dst: torch.Tensor  # (PE,) int64


def initialise(
    data: Graph, pattern: Graph, options: AppclassOptions, dtype: torch.dtype, ops: ModuleType, threads: int
) -> NativeState:
    """PNNL ``initializeWorkArrays``: distances, their normalisations, and the first maxima."""
    stable = options.normalisation == "stable"

    def tensor(array, kind=dtype):
        return torch.as_tensor(array).to(dtype=kind).contiguous()

    def by_column(features):
        """(features, rows): no copy for the reader's column-major tables."""
        return tensor(np.asarray(features).T)

    cv = ops.distances(by_column(data.node_features), tensor(pattern.node_features), threads)
    mu = cv.neg()
    ops.normprob_(cv, stable, threads)
    ops.normprob_(mu, stable, threads)
    src = tensor(data.edge_src, torch.int64)
    dst = tensor(data.edge_dst, torch.int64)
    forward_rows = src if options.forward_message_index == "src" else dst
    src_bounds = owner_bounds(src, data.num_nodes, threads)
    dst_bounds = None if forward_rows is src else owner_bounds(dst, data.num_nodes, threads)
    listed_src = nodes_with_edges(src, data.num_nodes)
    listed_forward = listed_src if forward_rows is src else nodes_with_edges(dst, data.num_nodes)
    dst_parts = edge_parts(dst, data.num_nodes, EDGE_PARTS_PER_THREAD * threads)
    positions, bounds, edge_bounds = dst_parts.positions, dst_parts.bounds, dst_parts.edge_bounds
    src_by_part, dst_by_part = src[dst_parts.order], dst[dst_parts.order]
    del dst_parts  # its order: 8 bytes an edge
    ce = ops.distances(by_column(data.edge_features), tensor(pattern.edge_features), threads, positions)
    pattern_src = tensor(pattern.edge_src, torch.int64)
    pattern_dst = tensor(pattern.edge_dst, torch.int64)
    minus_cnull = torch.zeros(pattern.num_edges, dtype=dtype).neg_()

    def edge_statistics(distances):
        """Per node, by source and by forward_rows: the smallest edge distance and the exp-sums over
        its edges."""
        ce_min_src = ops.group_min(distances, src, data.num_nodes, src_bounds, positions)
        exp_sums_src = ops.group_exp_sums(distances, src, ce_min_src, src_bounds, positions)
        if forward_rows is src:
            return ce_min_src, exp_sums_src, ce_min_src, exp_sums_src
        ce_min_dst = ops.group_min(distances, dst, data.num_nodes, dst_bounds, positions)
        exp_sums_dst = ops.group_exp_sums(distances, dst, ce_min_dst, dst_bounds, positions)
        return ce_min_dst, exp_sums_dst, ce_min_src, exp_sums_src

    # The first messages FE = RE = normprob(-CE) of the raw distances: zero node arrays minus CE.
    # Their column maxima are minus the smallest distances, the smallest of the nodes' (every edge
    # has a source; min is exact).
    zeros = torch.zeros((data.num_nodes, pattern.num_edges), dtype=dtype)
    min_forward, sums_forward, min_src, sums_src = edge_statistics(ce)
    first_max = min_src.amin(0).neg_()
    forward_raw, reverse_raw, vr = (torch.empty_like(zeros) for _ in range(3))
    # Messages grouped by the node they read have the raw maxima node - ce_min (see the kernel
    # source), which are also what the exp-sums read; PNNL's forward messages need the edges.
    torch.sub(zeros, min_src, out=reverse_raw)
    forward_diff = torch.sub(zeros, min_forward, out=vr if forward_rows is src else forward_raw)
    sums = ops.node_exp_sums(
        forward_diff,
        sums_forward,
        first_max,
        listed_forward,
        reverse_raw,
        sums_src,
        first_max,
        listed_src,
        threads,
    )
    if forward_rows is src:
        ops.scatter_max_(forward_raw, ce, src_by_part, dst_by_part, zeros, bounds, edge_bounds, threads)
    del min_forward, sums_forward, min_src, sums_src, forward_diff
    # The column maxima of VR = MU[:, pattern_src] and VF = MU[:, pattern_dst] (the messages are 0).
    mu_max = ops.column_max(mu, threads)
    vr_max, vf_max = mu_max[pattern_src], mu_max[pattern_dst]
    ops.normalise_maxima_(forward_raw, first_max, sums[0], minus_cnull + vr_max, stable, threads)
    ops.normalise_maxima_(reverse_raw, first_max, sums[1], minus_cnull + vf_max, stable, threads)

    ops.normprob_(ce, stable, threads, None, positions)
    ce_min_forward, exp_sums_forward, ce_min_src, exp_sums_src = edge_statistics(ce)
    return NativeState(
        ops=ops,
        threads=threads,
        stable=stable,
        cv=cv,
        mu=mu,
        ce=ce,
        src_by_part=src_by_part,
        dst_by_part=dst_by_part,
        bounds=bounds,
        edge_bounds=edge_bounds,
        forward_from_src=forward_rows is src,
        ce_min_forward=ce_min_forward,
        ce_min_src=ce_min_src,
        exp_sums_forward=exp_sums_forward,
        exp_sums_src=exp_sums_src,
        listed_forward=listed_forward,
        listed_src=listed_src,
        fmax=forward_raw,
        rmax=reverse_raw,
        vr=vr,
        minus_cnull=minus_cnull,
        pattern_src=pattern_src,
        pattern_dst=pattern_dst,
    )


def iterate(state: NativeState) -> None:
    """One PNNL iteration (VF_VR .. MU, NormProb), updating ``state`` in place."""
    s = state
    ops, threads = s.ops, s.threads
    # VR, the four column maxima, and in fmax and rmax the messages minus their nodes' smallest
    # edge distance (for rmax, and for fmax in the dst-fixed mode, these are the raw maxima).
    maxima = ops.prepare_messages(
        s.mu, s.fmax, s.rmax, s.pattern_src, s.pattern_dst, s.ce_min_forward, s.ce_min_src, s.vr, threads
    )
    vf_max, vr_max, forward_max, reverse_max = maxima.unbind(0)
    sums = ops.node_exp_sums(
        s.fmax,
        s.exp_sums_forward,
        forward_max,
        s.listed_forward,
        s.rmax,
        s.exp_sums_src,
        reverse_max,
        s.listed_src,
        threads,
    )
    if s.forward_from_src:
        ops.scatter_max_(s.fmax, s.ce, s.src_by_part, s.dst_by_part, s.vr, s.bounds, s.edge_bounds, threads)
    mu_max = ops.update_beliefs_(
        s.mu,
        s.cv,
        s.fmax,
        forward_max,
        sums[0],
        s.minus_cnull + vr_max,
        s.rmax,
        reverse_max,
        sums[1],
        s.minus_cnull + vf_max,
        s.pattern_src,
        s.pattern_dst,
        s.stable,
        threads,
    )
    ops.normprob_(s.mu, s.stable, threads, mu_max)


def beliefs(state: NativeState) -> torch.Tensor:
    """The log-belief matrix MU, shape (data nodes, pattern nodes)."""
    return state.mu
