"""Names the command line, tables and figures share with the models, without importing torch."""

from __future__ import annotations

__all__ = ["VARIANTS"]

# The four ways of computing the temporal max-pool (membench.hotconv.models), in the order tables
# and figures show them.
VARIANTS = ("malconv", "malconv2", "hotconv", "hotconv_eco")
