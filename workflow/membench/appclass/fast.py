"""Fast torch implementation for CPU threads and CUDA, equal to the reference within rounding.

Three changes of method, none of which changes the result beyond floating-point rounding:

* Edge messages are never stored. Every normalisation here, ``y -> log(exp(y - m)) - log(s)`` or
  ``y - m - log(s)``, is non-decreasing in ``y``, so the neighbourhood maximum of normalised messages
  is the normalisation of the raw maximum. One pass over the edges, in chunks that stay in cache,
  gathers the node rows, subtracts the edge distances, takes the per-node maximum
  (``scatter_reduce`` amax) and the column maximum and exp-sum (rescaled online as the maximum
  grows); the normalisation is then applied to the (nodes x pattern edges) maxima only.
* Each maximum runs over edges sorted by the node it groups by, so ``scatter_reduce`` writes
  sequentially; the edge distances are kept twice, in source order and in destination order
  (2 arrays of data.edges x pattern.edges instead of the reference's 3 plus temporaries).
* A column holding a NaN normalises to all NaN in the reference (its exp-sum is NaN), so the
  NaN-propagating torch maxima give the same result as C's ``fmax`` over edge messages; maxima of
  node arrays, where that argument does not hold, ignore NaN as ``fmax`` does.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from membench.appclass.options import AppclassOptions
from membench.data.graphs import Graph

__all__ = [
    "beliefs",
    "column_max",
    "default_chunk_edges",
    "DISTANCE_CHUNK_BYTES",
    "FastState",
    "initialise",
    "iterate",
    "normprob_",
    "pairwise_distance",
]

DISTANCE_CHUNK_BYTES = 8 * 2**20  # (rows x pattern rows x features) temporaries of the distance


@dataclass
class FastState:
    """Work tensors on one device. DV, DE: data nodes and edges; PV, PE: pattern nodes and edges."""

    cv: torch.Tensor  # (DV, PV) normalised node distances
    mu: torch.Tensor  # (DV, PV) log-beliefs
    ce_by_src: torch.Tensor  # (DE, PE) normalised edge distances, edges sorted by source
    ce_by_dst: torch.Tensor  # (DE, PE) the same, edges sorted by destination
    src_by_src: torch.Tensor  # (DE,) int64 edge sources in source order
    dst_by_dst: torch.Tensor  # (DE,) int64 edge destinations in destination order
    forward_rows: torch.Tensor  # (DE,) int64 row of VR each forward message reads, destination order
    fmax: torch.Tensor  # (DV, PE)
    rmax: torch.Tensor  # (DV, PE)
    cnull: torch.Tensor  # (PE,) zeros (PNNL's normalised one-row table)
    pattern_src: torch.Tensor  # (PE,) int64
    pattern_dst: torch.Tensor  # (PE,) int64
    pattern_edges: list[tuple[int, int]]  # (src, dst) per pattern edge, on the host
    options: AppclassOptions
    chunk_edges: int
    # Buffers reused every iteration: a fresh large tensor costs page faults on every allocation.
    message_buffer: torch.Tensor  # (chunk_edges, PE)
    vf: torch.Tensor  # (DV, PE)
    vr: torch.Tensor  # (DV, PE)


def default_chunk_edges(device: torch.device) -> int:
    """Edges per chunk: a few MiB on a CPU (cache-resident), everything at once on a GPU."""
    return 1 << 22 if device.type == "cuda" else 1 << 15


def pairwise_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Euclidean distances (len(a), len(b)) from explicit differences (no matmul cancellation)."""
    out = torch.empty((a.shape[0], b.shape[0]), dtype=a.dtype, device=a.device)
    rows = max(1, DISTANCE_CHUNK_BYTES // (a.element_size() * max(1, b.shape[0] * a.shape[1])))
    for start in range(0, a.shape[0], rows):
        diff = b.unsqueeze(0) - a[start : start + rows].unsqueeze(1)
        torch.sum(diff.square_(), dim=2, out=out[start : start + rows]).sqrt_()
    return out


def column_max(x: torch.Tensor) -> torch.Tensor:
    """Per-column maximum ignoring NaN, never below the dtype's lowest finite value (C fmax loop)."""
    col_max = x.amax(0)
    if torch.isnan(col_max).any():
        # Rare (PNNL's underflow quirk): only then pay for a NaN-free copy.
        col_max = torch.where(torch.isnan(x), float("-inf"), x).amax(0)
    return col_max.clamp_min_(torch.finfo(x.dtype).min)


def _normalise_(
    y: torch.Tensor, col_max: torch.Tensor, log_sum: torch.Tensor, normalisation: str
) -> torch.Tensor:
    """Normalise, in place, values ``y`` of columns with maximum ``col_max`` and log exp-sum ``log_sum``."""
    y.sub_(col_max)
    if normalisation == "reference":
        y.exp_().log_()
    return y.sub_(log_sum)


def normprob_(x: torch.Tensor, normalisation: str = "reference") -> torch.Tensor:
    """Column-wise log-softmax of ``x`` (n, k) in place (see the reference's ``normprob``)."""
    x.sub_(column_max(x))
    if normalisation == "reference":
        x.exp_()
        log_sum = x.sum(0).log_()
        x.log_()
    else:
        log_sum = torch.exp(x).sum(0).log_()
    return x.sub_(log_sum)


def _negated_column_stats(x: torch.Tensor, chunk_edges: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Column maximum and log exp-sum of ``-x`` without materialising ``-x``."""
    col_max = (-x.amin(0)).clamp_min(torch.finfo(x.dtype).min)
    total = torch.zeros(x.shape[1], dtype=x.dtype, device=x.device)
    for start in range(0, x.shape[0], chunk_edges):
        total += torch.exp(-x[start : start + chunk_edges] - col_max).sum(0)
    return col_max, total.log_()


def _group_min(x: torch.Tensor, groups: torch.Tensor, num_nodes: int) -> torch.Tensor:
    out = torch.full((num_nodes, x.shape[1]), float("inf"), dtype=x.dtype, device=x.device)
    return out.scatter_reduce_(0, groups.unsqueeze(1).expand_as(x), x, "amin")


def _message_maxima(
    node_values: torch.Tensor,
    rows: torch.Tensor,
    edge_distance: torch.Tensor,
    groups: torch.Tensor,
    floor: torch.Tensor,
    out: torch.Tensor,
    state: FastState,
) -> torch.Tensor:
    """``fmax(floor, max over edges e of group i of normprob(node_values[rows] - edge_distance)[e])``.

    Shapes: node_values (DV, PE); rows, groups (DE,) with groups sorted; edge_distance (DE, PE);
    floor (PE,). Writes the (DV, PE) result into ``out`` (which must not alias ``node_values``).
    """
    num_edges, width = edge_distance.shape
    dtype, device = edge_distance.dtype, edge_distance.device
    group_max = out.fill_(float("-inf"))
    col_max = torch.full((width,), torch.finfo(dtype).min, dtype=dtype, device=device)
    col_sum = torch.zeros(width, dtype=dtype, device=device)
    buffer = state.message_buffer
    for start in range(0, num_edges, state.chunk_edges):
        stop = min(start + state.chunk_edges, num_edges)
        message = buffer[: stop - start]
        torch.index_select(node_values, 0, rows[start:stop], out=message)
        message.sub_(edge_distance[start:stop])
        group_max.scatter_reduce_(0, groups[start:stop].unsqueeze(1).expand_as(message), message, "amax")
        new_max = torch.maximum(col_max, message.amax(0))
        col_sum.mul_(torch.exp(col_max - new_max)).add_(message.sub_(new_max).exp_().sum(0))
        col_max = new_max
    _normalise_(group_max, col_max, col_sum.log_(), state.options.normalisation)
    return torch.fmax(group_max, floor, out=out)


def initialise(
    data: Graph,
    pattern: Graph,
    options: AppclassOptions = AppclassOptions(),
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float64,
    chunk_edges: int | None = None,
) -> FastState:
    """Distances, their normalisations and the first maxima, on ``device`` in ``dtype``."""
    device = torch.device(device)
    chunk_edges = chunk_edges or default_chunk_edges(device)
    normalisation = options.normalisation

    def tensor(array, kind=dtype):
        return torch.as_tensor(array).to(device=device, dtype=kind)

    cv = pairwise_distance(tensor(data.node_features), tensor(pattern.node_features))
    mu = normprob_(-cv, normalisation)
    normprob_(cv, normalisation)

    src = tensor(data.edge_src, torch.int64)
    dst = tensor(data.edge_dst, torch.int64)
    by_src = torch.argsort(src, stable=True)
    by_dst = torch.argsort(dst, stable=True)
    ce_by_src = pairwise_distance(tensor(data.edge_features)[by_src], tensor(pattern.edge_features))
    # Position, in source order, of each edge taken in destination order.
    rank_in_src = torch.empty_like(by_src)
    rank_in_src[by_src] = torch.arange(len(by_src), device=device)
    ce_by_dst = ce_by_src.index_select(0, rank_in_src[by_dst])
    src_by_src, dst_by_dst = src[by_src], dst[by_dst]

    # The first edge messages are FE = RE = normprob(-CE) of the raw distances.
    col_max, log_sum = _negated_column_stats(ce_by_src, chunk_edges)
    first_rmax = _normalise_(
        _group_min(ce_by_src, src_by_src, data.num_nodes).neg_(), col_max, log_sum, normalisation
    )
    first_fmax = _normalise_(
        _group_min(ce_by_dst, dst_by_dst, data.num_nodes).neg_(), col_max, log_sum, normalisation
    )

    col_max = ce_by_src.amax(0).clamp_min(torch.finfo(dtype).min)
    log_sum = torch.zeros_like(col_max)
    for start in range(0, len(ce_by_src), chunk_edges):
        log_sum += torch.exp(ce_by_src[start : start + chunk_edges] - col_max).sum(0)
    log_sum.log_()
    for ce in (ce_by_src, ce_by_dst):
        for start in range(0, len(ce), chunk_edges):
            _normalise_(ce[start : start + chunk_edges], col_max, log_sum, normalisation)

    pattern_src = tensor(pattern.edge_src, torch.int64)
    pattern_dst = tensor(pattern.edge_dst, torch.int64)
    cnull = torch.zeros(pattern.num_edges, dtype=dtype, device=device)
    fmax = torch.fmax(first_fmax, -cnull + column_max(mu[:, pattern_src]), out=first_fmax)
    rmax = torch.fmax(first_rmax, -cnull + column_max(mu[:, pattern_dst]), out=first_rmax)
    forward_rows = src[by_dst] if options.forward_message_index == "src" else dst_by_dst
    return FastState(
        cv=cv,
        mu=mu,
        ce_by_src=ce_by_src,
        ce_by_dst=ce_by_dst,
        src_by_src=src_by_src,
        dst_by_dst=dst_by_dst,
        forward_rows=forward_rows,
        fmax=fmax,
        rmax=rmax,
        cnull=cnull,
        pattern_src=pattern_src,
        pattern_dst=pattern_dst,
        pattern_edges=list(zip(pattern.edge_src.tolist(), pattern.edge_dst.tolist())),
        options=options,
        chunk_edges=chunk_edges,
        message_buffer=torch.empty(
            (min(chunk_edges, data.num_edges), pattern.num_edges), dtype=dtype, device=device
        ),
        vf=torch.empty_like(fmax),
        vr=torch.empty_like(fmax),
    )


def iterate(state: FastState) -> None:
    """One belief-propagation iteration, updating ``state`` in place."""
    s = state
    torch.index_select(s.mu, 1, s.pattern_dst, out=s.vf).sub_(s.fmax)
    torch.index_select(s.mu, 1, s.pattern_src, out=s.vr).sub_(s.rmax)
    vf_max = column_max(s.vf)
    vr_max = column_max(s.vr)
    _message_maxima(s.vr, s.forward_rows, s.ce_by_dst, s.dst_by_dst, -s.cnull + vr_max, s.fmax, s)
    _message_maxima(s.vf, s.src_by_src, s.ce_by_src, s.src_by_src, -s.cnull + vf_max, s.rmax, s)
    mu = torch.neg(s.cv, out=s.mu)
    # Pattern edge by pattern edge, as PNNL adds them (the order matters where sums overflow).
    for j, (src, dst) in enumerate(s.pattern_edges):
        mu[:, dst] += s.fmax[:, j]
        mu[:, src] += s.rmax[:, j]
    normprob_(mu, s.options.normalisation)


def beliefs(state: FastState) -> torch.Tensor:
    """The log-belief matrix MU, shape (data nodes, pattern nodes), on the state's device."""
    return state.mu
