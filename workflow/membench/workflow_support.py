"""What the Snakemake rules ask the scheduler for, and how they start multi-process jobs.

The rules files only look values up in the config and call these functions, so that the
estimates, the launcher lines and the names are tested here rather than in ``.smk`` files. Nothing
here imports torch or a system: the Snakefile imports this module on every parse, login nodes
included.

Requests follow one convention (see README, "On a cluster"): ``threads`` is what a job uses, and the
Slurm executor turns it into ``--cpus-per-task``; a job on a GPU declares ``gpu`` (GPUs on one node)
or, across nodes, ``gres`` per node with ``nodes``, ``tasks`` and ``mpi``.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from typing import Any

# -- every system ---------------------------------------------------------------------------------


def _words(*words: object) -> str:
    """``words`` as shell words, each quoted where it needs it."""
    return shlex.join(str(word) for word in words)


def timing_job_threads(used_threads: int, local_cores: int | None) -> int:
    """Threads a timing job claims: on a cluster (``local_cores`` None) the threads it runs, which
    Slurm gives it as cores of its own; in a local run every core, so that no job runs beside it."""
    return max(used_threads, local_cores) if local_cores else used_threads


# -- appclass ----------------------------------------------------------------------------------------


def appclass_variant_name(variant: Mapping[str, Any]) -> str:
    """The name bench jobs record for a configured variant (``membench.appclass.bench.BenchSpec.variant``
    with the default options): ``<implementation>-<device>-t<threads>-<precision>``."""
    return f'{variant["implementation"]}-{variant["device"]}-t{variant["threads"]}-{variant["precision"]}'


def pnnl_rows(path: str, unreadable: int) -> int:
    """Rows named in the first line of a PNNL text file; ``unreadable`` (a large guess) when the
    header cannot be read: the job itself reports a bad file, the estimate only sizes the request."""
    try:
        with open(path) as handle:
            return int(handle.readline().split()[0])
    except (OSError, ValueError, IndexError):
        return unreadable


def appclass_mem_mb(graph: Mapping[str, Any], pattern: Mapping[str, Any]) -> int:
    """Host memory (MB) of a job on a graph/pattern pair given their config entries: the dominant
    arrays (3 of data edges x pattern edges and 3 of data nodes x pattern edges, float64), three
    times over for temporaries and the input, over a 1 GB base."""
    if graph["source"] == "rmat":
        nodes, edges = 2 ** graph["scale"] + 1, graph["edge_factor"] * 2 ** graph["scale"]
    else:
        nodes, edges = pnnl_rows(graph["vertices"], 2**21), pnnl_rows(graph["edges"], 2**21)
    if pattern["source"] == "files":
        pattern_edges = pnnl_rows(pattern["edges"], unreadable=64)
    else:
        size = pattern["max_pattern_nodes"]
        pattern_edges = min(size * (size - 1), 4 * size)
    array_mib = 8 * 3 * (edges + nodes) * pattern_edges / 2**20
    return int(1000 + 3 * array_mib)


# -- hotconv -----------------------------------------------------------------------------------------


def hotconv_train_mem_mb(hotconv: Mapping[str, Any], on_cpu: bool) -> int:
    """Host memory (MB) of a training job: batches of int16 tokens in flight (two per loader worker
    and two in the trainer) over a 2 GB base; on a CPU, also MalConv's dense activations."""
    batch_mib = hotconv["batch_size"] * hotconv["max_len"] * 2 / 2**20
    in_flight = 2 + 2 * hotconv["num_workers"]
    mem_mib = 2000 + batch_mib * in_flight
    if on_cpu:
        windows = hotconv["max_len"] // hotconv["stride"]
        # embedding (8 floats a byte) plus about six (B, F, windows) float maps for autograd
        mem_mib += batch_mib * 16 + hotconv["batch_size"] * hotconv["num_filters"] * windows * 4 * 6 / 2**20
    return int(mem_mib)


def hotconv_train_runtime_min(hotconv: Mapping[str, Any]) -> int:
    """Minutes: the paper's setting took 40-52 min per BODMAS epoch at max_len 2 MiB on a GPU."""
    per_epoch = max(1, round(60 * hotconv["max_len"] / 2**21))
    return 30 + hotconv["epochs"] * per_epoch


# -- division ----------------------------------------------------------------------------------------


def division_job_mem_mb(image_size: int, batch_size: int, on_gpu: bool) -> int:
    """Host memory (MB) of a memory or speed job: on a CPU the activations live in host memory
    (about 5 KiB per image pixel for ResNet-18 without compression), on a GPU only model and batch."""
    if on_gpu:
        return 8000
    return int(2000 + 0.005 * batch_size * image_size**2)


# The rendezvous port on the allocation's first node (torchrun's c10d store).
RENDEZVOUS_PORT = 29500
# The allocation's first node, found when a multi-node job's command runs: shell code, so the
# launcher lines that hold it are put into the rules' commands unquoted.
_FIRST_NODE = '"$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"'


def division_train_threads(local_cores: int | None, local_gpus: int) -> int:
    """Threads of a DIVISION accuracy job: 2 on a cluster (``local_cores`` None) or beside a GPU, the
    CPUs of each node's processes (data loading, the host side of the step); 1 in a local run without
    a GPU. There the accuracy run is not a timing job, and a second torch thread saves only 12 to
    32 % of its time (docs/benchmarks/division.md), so the other core is better left to the next job."""
    return 2 if local_cores is None or local_gpus > 0 else 1


def division_train_launcher(gpus: int, nodes: int, threads: int) -> str:
    """What starts a training job: membench itself, torchrun with one process per GPU on one node,
    or, across nodes, one ``srun`` task per node (each with the job's ``threads`` CPUs) running
    torchrun with a rendezvous on the allocation's first node.

    Shell code, not one word: the rule puts it into its command unquoted, so that the multi-node
    line reads the job's id and first node when it runs; every value in it is quoted."""
    if gpus == 1 and nodes == 1:
        return "membench"
    if nodes == 1:
        return _words("torchrun", "--standalone", "--nproc-per-node", gpus, "-m", "membench.cli")
    srun = _words("srun", "--nodes", nodes, "--ntasks", nodes, "--ntasks-per-node", 1, "--cpus-per-task", threads)
    torchrun = _words("torchrun", "--nnodes", nodes, "--nproc-per-node", gpus, "--rdzv-backend", "c10d")
    return (
        f'{srun} {torchrun} --rdzv-id "$SLURM_JOB_ID" --rdzv-endpoint {_FIRST_NODE}:{RENDEZVOUS_PORT}'
        " -m membench.cli"
    )


def division_train_resources(gpus: int, nodes: int, on_gpu: bool) -> dict[str, Any]:
    """Scheduler requests of a training job beyond memory and time.

    On one node: ``gpu`` GPUs (``sbatch --gpus``; the executor runs the job in one ``srun`` step
    holding them). Across nodes, the executor plugin's mechanism for multi-task jobs: ``mpi`` set
    (the executor then runs the shell command in the batch step, and the command's own ``srun``
    starts the tasks), ``tasks`` = ``nodes`` (one torchrun per node), ``gres`` = GPUs per node, and
    ``tasks_per_gpu`` = 0 so that the plugin adds no ``--ntasks-per-gpu``, which conflicts with
    ``--cpus-per-task``.
    """
    if not on_gpu:
        return {"gpu": 0}
    if nodes == 1:
        return {"gpu": gpus}
    return {"gres": f"gpu:{gpus}", "nodes": nodes, "tasks": nodes, "tasks_per_gpu": 0, "mpi": "srun"}


# -- robust ------------------------------------------------------------------------------------------


def robust_train_launcher(options: Mapping[str, Any], nodes: int) -> str:
    """What starts a robust training run of ``options`` (as :func:`membench.robust.plan.plan_runs`
    gives them): membench itself (sequential, or parallel on shared memory, which spawns its
    producers), torchrun with one process per rank (trainer and P producers) on one node, or across
    ``nodes`` one ``srun`` task per rank, each taking its rank from Slurm and the trainer's address
    (the allocation's first node) from ``MASTER_ADDR``. Shell code, as
    :func:`division_train_launcher`'s."""
    if options["mode"] != "parallel" or options["transport"] != "distributed":
        return "membench"
    ranks = options["producers"] + 1
    if nodes == 1:
        return _words("torchrun", "--standalone", "--nproc-per-node", ranks, "-m", "membench.cli")
    srun = _words("srun", "--nodes", nodes, "--ntasks", ranks, "--cpus-per-task", options["threads"], "membench")
    return f"MASTER_ADDR={_FIRST_NODE} MASTER_PORT={RENDEZVOUS_PORT} {srun}"


# -- local runs --------------------------------------------------------------------------------------


def starts_jobs(workflow: Any) -> bool:
    """Whether the Snakemake process reading the workflow (``workflow``, Snakemake's object) is the
    one that runs its jobs and takes the working directory's lock: not a dry run (``-n``), not a
    lint (``--lint`` reads the workflow with ``check_envvars`` off), and not the Snakemake that a
    cluster job or a job group runs for one job (``is_main_process`` false)."""
    return bool(workflow.is_main_process and not workflow.output_settings.dryrun and workflow.check_envvars)


def local_gpu_count() -> int:
    """GPUs this machine shows to its jobs: ``CUDA_VISIBLE_DEVICES`` where set, else NVML's count,
    else 0 (no driver). Jobs measured on a GPU read the whole device (NVML memory, energy), so a
    local run lets at most this many of them run at once."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        # CUDA stops at the first entry that is not a device (e.g. "-1" hides every GPU).
        count = 0
        for entry in visible.split(","):
            entry = entry.strip()
            if not entry or entry.startswith("-"):
                break
            count += 1
        return count
    try:
        import pynvml
    except ImportError:
        return 0
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:  # no NVML library or no driver: no GPU to share
        return 0
    try:
        return int(pynvml.nvmlDeviceGetCount())
    finally:
        pynvml.nvmlShutdown()


def local_gpu_slots() -> int:
    """The ``gpu`` resource a local run provides: one slot per GPU present, and one where there is
    none, so that jobs of ``device: auto`` (which then run on the CPU) are still scheduled."""
    return max(1, local_gpu_count())
