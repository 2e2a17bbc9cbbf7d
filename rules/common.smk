# Helpers every rules file uses: the paths of logs and benchmarks, and what a job asks the scheduler
# for. Each system's config lookups open its own rules file; what is worth a test (estimates,
# command-line options, launcher lines, names) is in membench.workflow_support.

import os

from snakemake.io import get_flag_value
from snakemake.logging import logger

from membench import workflow_support
from membench.core import snakemake_lock
from membench.workflow_support import alternatives, cli_options, with_source

ENV = "../envs/membench.yaml"

# Each rules file appends the tables and figures it contributes to the default target.
FINAL_OUTPUTS = []


# -- a lock left by a killed Snakemake is removed (membench.core.snakemake_lock) ------------------
# Here, while the workflow is read: Snakemake takes its lock after reading and before onstart. Only
# in the process that runs the jobs: a dry run or a lint takes no lock, and the Snakemake of a
# cluster job must not touch the lock of the run that submitted it.
if workflow_support.starts_jobs(workflow):
    _stale_lock = snakemake_lock.clear_stale_lock()
    if _stale_lock:
        logger.warning(f"membench: {_stale_lock}")


onstart:
    snakemake_lock.record_owner()


def final_outputs():
    return FINAL_OUTPUTS


def log_path(rule_name, pattern="all"):
    """results/logs/<rule>/<wildcards>.log"""
    return f"results/logs/{rule_name}/{pattern}.log"


def benchmark_path(rule_name, pattern="all"):
    """results/benchmarks/<rule>/<wildcards>.tsv"""
    return f"results/benchmarks/{rule_name}/{pattern}.tsv"


def checkout_path(path):
    """A file of this checkout (``path`` from its root) as a job's input: relative to the working
    directory, so that a run copied or moved with its checkout (or beside it) keeps the paths its
    jobs were run with, and stays up to date. Through Snakemake's source cache where the checkout is
    not a local directory (a module from a repository)."""
    source = workflow.source_path(f"../{path}")
    original = get_flag_value(source, "sourcecache_entry")
    return local(os.path.relpath(original)) if os.path.isabs(original) else source


def local_cores():
    """Cores of a local run; None on a cluster (the executor submits jobs to nodes)."""
    return (
        workflow.resource_settings.cores
        if workflow.resource_settings.nodes is None
        else None
    )


def gpu_count():
    """GPUs a device job asks the scheduler for: none when the config pins the CPU."""
    return 0 if config["device"] == "cpu" else 1
