"""The CPU implementation on the C++ kernels (``csrc/appclass_ops.cpp``): the reference's operations
in the reference's order where the order changes a double, without storing edge messages.

Per iteration one fused pass streams the normalised edge distances CE once per direction and
column; everything else works on (nodes x pattern edges) arrays. Why each step equals the
reference's is in the kernel source's header comment.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

import torch

from membench.appclass.options import AppclassOptions
from membench.data.graphs import Graph


@dataclass
class NativeState:
    """Work tensors (CPU, one dtype). DV, DE: data nodes and edges; PV, PE: pattern nodes and edges."""

    ops: ModuleType
    threads: int
    stable: bool
    cv: torch.Tensor  # (DV, PV) normalised node distances
    mu: torch.Tensor  # (DV, PV) log-beliefs
    ce: torch.Tensor  # (DE, PE) normalised edge distances, edges in file order
    src: torch.Tensor  # (DE,) int64
    dst: torch.Tensor  # (DE,) int64
    forward_rows: torch.Tensor  # (DE,) int64: the VR row each forward message reads (src as PNNL, or dst)
    ce_min_forward: torch.Tensor  # (DV, PE) minimum of CE over each node's edges by forward_rows
    ce_min_src: torch.Tensor  # (DV, PE) the same by source
    fmax: torch.Tensor  # (DV, PE)
    rmax: torch.Tensor  # (DV, PE)
    vf: torch.Tensor  # (DV, PE) work buffers, reused every iteration (fresh pages cost a fault each)
    vr: torch.Tensor  # (DV, PE)
    minus_cnull: torch.Tensor  # (PE,) -Cnull: -0.0 (PNNL's normalised one-row table, negated)
    pattern_src: torch.Tensor  # (PE,) int64
    pattern_dst: torch.Tensor  # (PE,) int64


def initialise(data: Graph, pattern: Graph, options: AppclassOptions, dtype: torch.dtype, ops: ModuleType, threads: int) -> NativeState:
    """PNNL ``initializeWorkArrays``: distances, their normalisations, and the first maxima."""
    stable = options.normalisation == "stable"

    def tensor(array, kind=dtype):
        return torch.as_tensor(array).to(dtype=kind).contiguous()

    cv = ops.distances(tensor(data.node_features), tensor(pattern.node_features), threads)
    mu = cv.neg()
    ops.normprob_(cv, stable, threads)
    ops.normprob_(mu, stable, threads)
    src = tensor(data.edge_src, torch.int64)
    dst = tensor(data.edge_dst, torch.int64)
    ce = ops.distances(tensor(data.edge_features), tensor(pattern.edge_features), threads)
    pattern_src = tensor(pattern.edge_src, torch.int64)
    pattern_dst = tensor(pattern.edge_dst, torch.int64)
    minus_cnull = torch.zeros(pattern.num_edges, dtype=dtype).neg_()

    # The first messages FE = RE = normprob(-CE) of the raw distances: zero node arrays minus CE.
    first_max = ce.amin(0).neg_()
    zeros = torch.zeros((data.num_nodes, pattern.num_edges), dtype=dtype)
    forward_raw, reverse_raw = torch.empty_like(zeros), torch.empty_like(zeros)
    sums = ops.message_pass(ce, src, src, dst, zeros, zeros, first_max, first_max, forward_raw, reverse_raw, threads)
    vr_max = ops.column_max(mu.index_select(1, pattern_src), threads)
    vf_max = ops.column_max(mu.index_select(1, pattern_dst), threads)
    ops.normalise_maxima_(forward_raw, first_max, sums[0], minus_cnull + vr_max, stable, threads)
    ops.normalise_maxima_(reverse_raw, first_max, sums[1], minus_cnull + vf_max, stable, threads)

    ops.normprob_(ce, stable, threads)
    forward_rows = src if options.forward_message_index == "src" else dst
    ce_min_src = ops.group_min(ce, src, data.num_nodes, threads)
    ce_min_forward = ce_min_src if forward_rows is src else ops.group_min(ce, dst, data.num_nodes, threads)
    return NativeState(
        ops=ops, threads=threads, stable=stable, cv=cv, mu=mu, ce=ce, src=src, dst=dst, forward_rows=forward_rows,
        ce_min_forward=ce_min_forward, ce_min_src=ce_min_src, fmax=forward_raw, rmax=reverse_raw, vf=zeros,
        vr=torch.empty_like(zeros),
        minus_cnull=minus_cnull, pattern_src=pattern_src, pattern_dst=pattern_dst,
    )


def iterate(state: NativeState) -> None:
    """One PNNL iteration (VF_VR .. MU, NormProb), updating ``state`` in place."""
    s = state
    ops, threads = s.ops, s.threads
    # VF, VR and the column maxima of VF, VR and of the messages (the last two from each node's
    # smallest edge distance; see the kernel source), in one pass over the node arrays.
    maxima = ops.prepare_messages(
        s.mu, s.fmax, s.rmax, s.pattern_src, s.pattern_dst, s.ce_min_forward, s.ce_min_src, s.vf, s.vr, threads
    )
    vf_max, vr_max, forward_max, reverse_max = maxima.unbind(0)
    # The pass overwrites fmax and rmax with the new maxima.
    sums = ops.message_pass(
        s.ce, s.forward_rows, s.src, s.dst, s.vr, s.vf, forward_max, reverse_max, s.fmax, s.rmax, threads
    )
    ops.normalise_maxima_(s.fmax, forward_max, sums[0], s.minus_cnull + vr_max, s.stable, threads)
    ops.normalise_maxima_(s.rmax, reverse_max, sums[1], s.minus_cnull + vf_max, s.stable, threads)
    ops.update_beliefs_(s.mu, s.cv, s.fmax, s.rmax, s.pattern_src, s.pattern_dst, threads)
    ops.normprob_(s.mu, s.stable, threads)


def beliefs(state: NativeState) -> torch.Tensor:
    """The log-belief matrix MU, shape (data nodes, pattern nodes)."""
    return state.mu
