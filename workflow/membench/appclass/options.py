"""Options shared by the implementations, and the memory formula the measurements are set against."""

from __future__ import annotations

from dataclasses import dataclass

from membench.core.errors import InputError

__all__ = [
    "AppclassOptions",
    "formula_bytes",
    "FORWARD_MESSAGE_INDEX",
    "IMPLEMENTATIONS",
    "NORMALISATIONS",
    "PRECISIONS",
]

IMPLEMENTATIONS = ("reference", "torch")
NORMALISATIONS = ("reference", "stable")
FORWARD_MESSAGE_INDEX = ("src", "dst")
PRECISIONS = ("float64", "float32")


@dataclass(frozen=True)
class AppclassOptions:
    """How the belief propagation is computed; the defaults reproduce the PNNL code.

    normalisation
        ``reference``: the PNNL column log-softmax ``log(exp(x - m)) - log(sum exp(x - m))``, which
        underflows to -inf (then NaN) when a column spans more than about 745; ``stable``:
        ``x - m - log(sum exp(x - m))``, the log-sum-exp form without the round trip.
    forward_message_index
        ``src``: the forward edge message takes the data edge's source row, as PNNL does (both
        messages then use the source); ``dst``: it takes the destination row ("dst-fixed", the
        correction Gunrock's Application Classification report suggests).
    """

    normalisation: str = "reference"
    forward_message_index: str = "src"

    def __post_init__(self) -> None:
        if self.normalisation not in NORMALISATIONS:
            raise InputError(
                None,
                f"normalisation {self.normalisation!r} is not one of {', '.join(NORMALISATIONS)}",
                "key 'normalisation'",
            )
        if self.forward_message_index not in FORWARD_MESSAGE_INDEX:
            raise InputError(
                None,
                f"forward_message_index {self.forward_message_index!r} is not one of "
                f"{', '.join(FORWARD_MESSAGE_INDEX)}",
                "key 'forward_message_index'",
            )

    @property
    def reference_compatible(self) -> bool:
        return self == AppclassOptions()


def formula_bytes(
    data_nodes: int, data_edges: int, pattern_nodes: int, pattern_edges: int, itemsize: int = 8
) -> int:
    """The dominant arrays: 3 of data.edges x pattern.edges, 3 of data.nodes x pattern.edges and
    2 of data.nodes x pattern.nodes, ``itemsize`` bytes each (the memory formula of Gunrock's
    Application Classification report)."""
    return itemsize * (
        3 * data_edges * pattern_edges + 3 * data_nodes * pattern_edges + 2 * data_nodes * pattern_nodes
    )
