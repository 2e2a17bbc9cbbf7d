"""NumPy reference: the PNNL OpenMP algorithm, array for array, reproducing its output exactly.

It keeps the PNNL work arrays (CV, MU, CE, FE, RE, VF, VR, FMax, RMax) and its order of floating-point
operations where the order changes the result: feature distances summed feature by feature, column
sums row by row (NumPy reduces axis 0 of a C-ordered array sequentially), belief updates pattern edge
by pattern edge, and maxima with C's ``fmax`` (NaN ignored, floor ``-DBL_MAX``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from membench.appclass.options import AppclassOptions
from membench.data.graphs import Graph

__all__ = [
    "beliefs",
    "column_max",
    "DBL_MAX",
    "initialise",
    "iterate",
    "normprob",
    "pairwise_distance",
    "ReferenceState",
]

DBL_MAX = np.finfo(np.float64).max


@dataclass
class ReferenceState:
    """PNNL work arrays (float64). DV, DE: data nodes and edges; PV, PE: pattern nodes and edges."""

    cv: np.ndarray  # (DV, PV) normalised node distances
    mu: np.ndarray  # (DV, PV) log-beliefs
    ce: np.ndarray  # (DE, PE) normalised edge distances
    fe: np.ndarray  # (DE, PE) forward edge messages
    re: np.ndarray  # (DE, PE) reverse edge messages
    fmax: np.ndarray  # (DV, PE) forward maxima by data edge destination
    rmax: np.ndarray  # (DV, PE) reverse maxima by data edge source
    cnull: np.ndarray  # (PE,) null-match cost, 0 after PNNL's one-row normalisation
    data_src: np.ndarray
    data_dst: np.ndarray
    pattern_src: np.ndarray
    pattern_dst: np.ndarray
    options: AppclassOptions


def pairwise_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Euclidean distances, shape (len(a), len(b)), summing squared differences feature by feature."""
    total = np.zeros((a.shape[0], b.shape[0]))
    for f in range(a.shape[1]):
        diff = b[None, :, f] - a[:, None, f]
        diff *= diff
        total += diff
    return np.sqrt(total, out=total)


def column_max(x: np.ndarray) -> np.ndarray:
    """Per-column maximum as PNNL's ``atomic_fmax`` loop: NaN ignored, never below ``-DBL_MAX``."""
    return np.fmax(np.fmax.reduce(x, axis=0), -DBL_MAX)


def normprob(x: np.ndarray, normalisation: str = "reference") -> None:
    """Column-wise log-softmax of ``x`` (n, k) in place.

    ``reference``: ``log(exp(x - m)) - log(sum exp(x - m))`` exactly as PNNL (underflows beyond ~745);
    ``stable``: ``x - m - log(sum exp(x - m))``.
    """
    x -= column_max(x)
    if normalisation == "reference":
        np.exp(x, out=x)
        total = x.sum(axis=0)
        np.log(x, out=x)
    else:
        total = np.exp(x).sum(axis=0)
    x -= np.log(total)


def _scatter_max(values: np.ndarray, groups: np.ndarray, floor: np.ndarray, num_nodes: int) -> np.ndarray:
    """(num_nodes, k): ``floor`` raised to the maximum of ``values`` rows per group (C fmax)."""
    out = np.empty((num_nodes, values.shape[1]))
    out[:] = floor
    np.fmax.at(out, groups, values)
    return out


def initialise(data: Graph, pattern: Graph, options: AppclassOptions = AppclassOptions()) -> ReferenceState:
    """PNNL ``initializeWorkArrays``: distances, their normalisations, and the first maxima."""
    with np.errstate(all="ignore"):
        cv = pairwise_distance(data.node_features, pattern.node_features)
        mu = -cv
        normprob(cv, options.normalisation)
        normprob(mu, options.normalisation)
        ce = pairwise_distance(data.edge_features, pattern.edge_features)
        fe = -ce
        re = -ce
        normprob(ce, options.normalisation)
        normprob(fe, options.normalisation)
        normprob(re, options.normalisation)
        # PNNL normalises the one-row Cnull table, which makes every entry log(1) - log(1) = 0.
        cnull = np.zeros(pattern.num_edges)
        vr = mu[:, pattern.edge_src]
        vf = mu[:, pattern.edge_dst]
        fmax = _scatter_max(fe, data.edge_dst, -cnull + column_max(vr), data.num_nodes)
        rmax = _scatter_max(re, data.edge_src, -cnull + column_max(vf), data.num_nodes)
    return ReferenceState(
        cv=cv,
        mu=mu,
        ce=ce,
        fe=fe,
        re=re,
        fmax=fmax,
        rmax=rmax,
        cnull=cnull,
        data_src=data.edge_src,
        data_dst=data.edge_dst,
        pattern_src=pattern.edge_src,
        pattern_dst=pattern.edge_dst,
        options=options,
    )


def iterate(state: ReferenceState) -> None:
    """One PNNL iteration (VF_VR .. MU, NormProb), updating ``state`` in place."""
    s = state
    forward_rows = s.data_src if s.options.forward_message_index == "src" else s.data_dst
    with np.errstate(all="ignore"):
        vf = s.mu[:, s.pattern_dst] - s.fmax
        vr = s.mu[:, s.pattern_src] - s.rmax
        vf_max = column_max(vf)
        vr_max = column_max(vr)
        np.take(vr, forward_rows, axis=0, out=s.fe)
        s.fe -= s.ce
        np.take(vf, s.data_src, axis=0, out=s.re)
        s.re -= s.ce
        normprob(s.fe, s.options.normalisation)
        normprob(s.re, s.options.normalisation)
        s.fmax = _scatter_max(s.fe, s.data_dst, -s.cnull + vr_max, s.mu.shape[0])
        s.rmax = _scatter_max(s.re, s.data_src, -s.cnull + vf_max, s.mu.shape[0])
        mu = -s.cv
        for j in range(len(s.pattern_src)):
            mu[:, s.pattern_dst[j]] += s.fmax[:, j]
            mu[:, s.pattern_src[j]] += s.rmax[:, j]
        normprob(mu, s.options.normalisation)
        s.mu = mu


def beliefs(state: ReferenceState) -> np.ndarray:
    """The log-belief matrix MU, float64, shape (data nodes, pattern nodes)."""
    return state.mu
