"""What the rule files and the workflow profile promise every run, read from the files themselves:
each rule logs, every job that times nothing has a Snakemake benchmark, and no timed job shares its
cores with Snakemake's benchmark poller or with a scheduler that wakes many times a second."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RULE_FILES = [REPO / "Snakefile", *sorted((REPO / "rules").glob("*.smk"))]
# The jobs that time something (throughput, step or kernel times, the meter's overhead).
TIMED_RULES = {
    "division_speed",
    "hotconv_sweep_point",
    "appclass_bench",
    "meter_check",
    "robust_train",
    "robust_train_nodes",
}


def rule_blocks() -> dict[str, str]:
    """Each rule's text, from its `rule name:` line to the next top-level line."""
    blocks = {}
    for path in RULE_FILES:
        text = path.read_text()
        for match in re.finditer(r"^rule (\w+):\n((?:[ \t]+.*\n|\n)*)", text, re.M):
            blocks[match.group(1)] = match.group(2)
    return blocks


def directives(block: str) -> set[str]:
    return set(re.findall(r"^    (\w+):", block, re.M))


def test_the_rule_files_are_read():
    blocks = rule_blocks()
    assert TIMED_RULES <= set(blocks), sorted(TIMED_RULES - set(blocks))
    assert len(blocks) > 40


@pytest.mark.parametrize("rule", sorted(set(rule_blocks()) - {"all"}))
def test_every_job_logs_and_only_untimed_jobs_are_benchmarked(rule):
    found = directives(rule_blocks()[rule])
    assert "log" in found, f"rule {rule} has no log:"
    if rule in TIMED_RULES:
        assert "benchmark" not in found, f"rule {rule} times something: no benchmark poller"
    else:
        assert "benchmark" in found, f"rule {rule} has no benchmark:"


def test_the_workflow_profile_keeps_snakemake_quiet_while_jobs_run():
    from snakemake.cli import parse_args

    _, args = parse_args(["--snakefile", str(REPO / "Snakefile"), "--cores", "2"])
    assert args.scheduler == "greedy"
    # Snakemake's default window is 1 s, and every finished job adds a wake-up per window.
    assert args.max_jobs_per_timespan.timespan >= 10
    assert args.max_jobs_per_timespan.max_jobs >= 100
