"""The report a researcher reads first: the headline table, readable table pages, provenance.

Everything here reads only the aggregated tables (``results/tables/*.csv``) and the systems'
headline declarations (``resources/headlines/*.yaml``); it never imports a system package.
"""
