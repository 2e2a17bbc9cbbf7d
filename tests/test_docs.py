"""The documentation a user reads: benchmark records stay short, and what ships cites only what users have.

A benchmark page (docs/benchmarks/*.md) is a record: setup, command, current table, what bounds
the figures; git keeps earlier versions. The internal design documents ("SPEC section 4",
"SPEC §5", "seed 003") are not shipped, so the docs, the README, the config, the published
figures, the rules and the code cite the project's own pages or the papers by name.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
# What ships to a user: every text file here is checked for citations of the internal documents.
SHIPPED = [
    ROOT / name
    for name in (".ci", "README.md", "Snakefile", "config", "docs", "resources", "rules", "workflow")
]
# Build outputs under them (an installed package's metadata copies an older README).
BUILD_OUTPUTS = {"__pycache__"}
BENCHMARK_PAGES = sorted((DOCS / "benchmarks").glob("*.md"))
MAX_BENCHMARK_LINES = 300

# "SPEC section 4", "SPEC §5", "SPEC 5", "SPEC memnet", "SPEC's formula", "seed 001", "seeds 000-004":
# internal documents. A constant named SPEC (an extension's build spec) is code, not a citation.
INTERNAL_CITATION = re.compile(r"\bSPEC(?:'s\b|\s+(?:§|section\b|\d|[a-z]))|\bseeds? 00\d\b")


def _shipped_files() -> list[Path]:
    files = []
    for root in SHIPPED:
        paths = [root] if root.is_file() else root.rglob("*")
        files += [
            path
            for path in paths
            if path.is_file()
            and not any(
                part in BUILD_OUTPUTS or part.endswith(".egg-info") for part in path.relative_to(ROOT).parts
            )
        ]
    return sorted(files)


def test_there_are_benchmark_pages():
    names = {path.stem for path in BENCHMARK_PAGES}
    assert {"appclass", "division", "gpu", "hotconv", "memnet", "meter", "robust"} <= names


@pytest.mark.parametrize("page", BENCHMARK_PAGES, ids=lambda path: path.name)
def test_a_benchmark_page_is_at_most_300_lines(page):
    lines = len(page.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_BENCHMARK_LINES, (
        f"{page.relative_to(ROOT)} has {lines} lines (at most {MAX_BENCHMARK_LINES})"
    )


def test_shipped_files_cite_no_internal_design_documents():
    found = []
    for path in _shipped_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if INTERNAL_CITATION.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "cite README.md, docs/ or the papers by name instead:\n" + "\n".join(found)


def test_the_citation_check_sees_the_forms_it_forbids():
    for text in (
        "PNNL text format (SPEC section 4)",
        "SPEC §5 hotconv",
        "SPEC's formula",
        "seed 003",
        "seeds 000-004",
        "(SPEC 5, hotconv)",
        "(SPEC memnet)",
    ):
        assert INTERNAL_CITATION.search(text), text
    for text in (
        "--seed 0",
        "one seed, so",
        "seed 0",
        "specification",
        "SPECIAL",
        "SPEC = ExtensionSpec(",
        "load_extension(path, SPEC)",
        "SPEC.source_dir",
        '"SPEC",',
    ):
        assert not INTERNAL_CITATION.search(text), text
