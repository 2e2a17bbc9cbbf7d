"""What the Snakemake rules ask the scheduler for, the options of their commands, and how they start
multi-process jobs.

The rules files only look values up in the config and call these functions, so that the
estimates, the command-line options, the launcher lines and the names are tested here rather than
in ``.smk`` files. Nothing here imports torch, and a system only inside the function that needs it
(appclass's memory formula): the Snakefile imports this module on every parse, login nodes included.

Requests follow one convention (see README, "On a cluster"): ``threads`` is what a job uses, and the
Slurm executor turns it into ``--cpus-per-task``; a job on a GPU declares ``gpu`` (GPUs on one node)
or, across nodes, ``gres`` per node with ``nodes``, ``tasks`` and ``mpi``.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterable, Mapping
from typing import Any

from membench.core.config import APPCLASS_REFERENCE

__all__ = [
    "alternatives",
    "appclass_bench_options",
    "appclass_mem_mb",
    "appclass_rmat_options",
    "appclass_uses_build",
    "appclass_variant_name",
    "appclass_variants",
    "bodmas_elf_options",
    "BODMAS_FOLD_KEYS",
    "bodmas_fold_options",
    "BODMAS_SYNTHETIC_KEYS",
    "bodmas_synthetic_options",
    "cli_options",
    "DIGITS_KEYS",
    "digits_options",
    "division_job_mem_mb",
    "division_job_options",
    "division_method_options",
    "division_train_launcher",
    "division_train_options",
    "division_train_resources",
    "division_train_threads",
    "HOTCONV_SWEEP_KEYS",
    "hotconv_sweep_options",
    "hotconv_sweep_point_mem_mb",
    "hotconv_sweep_point_runtime_min",
    "HOTCONV_TRAIN_KEYS",
    "hotconv_train_mem_mb",
    "hotconv_train_options",
    "hotconv_train_runtime_min",
    "local_gpu_count",
    "local_gpu_slots",
    "MEMNET_ESTIMATOR_KEYS",
    "memnet_datasets",
    "memnet_estimator_options",
    "MEMNET_FAMILIES",
    "memnet_generate_options",
    "memnet_measure_options",
    "memnet_measure_runtime_min",
    "memnet_measured_families",
    "meter_options",
    "pnnl_rows",
    "RENDEZVOUS_PORT",
    "robust_nodes_gres",
    "robust_run_gpus",
    "robust_run_minutes",
    "robust_train_launcher",
    "robust_train_options",
    "starts_jobs",
    "timing_job_threads",
    "trace_allocator_option",
    "with_source",
]

# -- every system ---------------------------------------------------------------------------------


def _words(*words: object) -> str:
    """``words`` as shell words, each quoted where it needs it."""
    return shlex.join(str(word) for word in words)


def timing_job_threads(used_threads: int, local_cores: int | None) -> int:
    """Threads a timing job claims: on a cluster (``local_cores`` None) the threads it runs, which
    Slurm gives it as cores of its own; in a local run every core, so that no job runs beside it."""
    return max(used_threads, local_cores) if local_cores else used_threads


def cli_options(options: Mapping[str, Any]) -> list[str]:
    """``options`` as command-line words: ``{"val_fraction": 0.1, "sort_by_size": False, "search_dir":
    ["a", "b"], "limit": None}`` is ``--val-fraction 0.1 --no-sort-by-size --search-dir a --search-dir
    b`` (a list repeats its option; None leaves it out).

    Unquoted words: a rule's command takes them as ``{params.<name>:q}``, which quotes each word. So
    do the other ``*_options`` functions here."""
    words = []
    for key, value in options.items():
        name = key.replace("_", "-")
        if isinstance(value, bool):
            words.append(f"--{name}" if value else f"--no-{name}")
        elif isinstance(value, list):
            for item in value:
                words += [f"--{name}", str(item)]
        elif value is not None:
            words += [f"--{name}", str(value)]
    return words


def alternatives(names: Iterable[str]) -> str:
    """A wildcard constraint matching exactly ``names`` (the keys of a mapping), and nothing when
    there are none."""
    names = list(names)
    return "|".join(re.escape(name) for name in names) if names else "(?!x)x"


def with_source(entries: Mapping[str, Mapping[str, Any]], *sources: str) -> list[str]:
    """Names of the config entries (data sets, graphs, patterns) whose ``source`` is one of
    ``sources``, in the config's order."""
    return [name for name, entry in entries.items() if entry["source"] in sources]


def meter_options(meter: Mapping[str, Any]) -> list[str]:
    """The meter's settings (config ``meter``) as options of a job command."""
    return cli_options({key: meter[key] for key in ("sample_interval_s", "grid_intensity_g_per_kwh")})


def trace_allocator_option(meter: Mapping[str, Any]) -> list[str]:
    """``meter.trace_allocator`` as the option of a job that measures memory on a CPU."""
    return cli_options({"trace_allocator": meter["trace_allocator"]})


# -- data sets ---------------------------------------------------------------------------------------

BODMAS_FOLD_KEYS = (
    "folds",
    "label_mode",
    "top_families",
    "val_fraction",
    "time_split_quantile",
    "time_split_date",
    "sort_by_size",
)
BODMAS_SYNTHETIC_KEYS = (
    "samples",
    "families",
    "benign_fraction",
    "min_bytes",
    "median_bytes",
    "max_bytes",
    "gzip_fraction",
)
DIGITS_KEYS = (
    "image_size",
    "min_digit_size",
    "max_digit_size",
    "max_shift",
    "background_max",
    "foreground_min",
    "noise_std",
    "val_fraction",
    "images_per_class",
)


def bodmas_fold_options(dataset: Mapping[str, Any], seed: int) -> list[str]:
    """Options of ``membench bodmas fold`` for a data set (``bodmas.datasets.<name>``)."""
    return cli_options({key: dataset[key] for key in BODMAS_FOLD_KEYS} | {"seed": seed})


def bodmas_synthetic_options(dataset: Mapping[str, Any], seed: int) -> list[str]:
    """Options of ``membench bodmas synthetic`` for a generated data set."""
    return cli_options({key: dataset[key] for key in BODMAS_SYNTHETIC_KEYS} | {"seed": seed})


def bodmas_elf_options(dataset: Mapping[str, Any], seed: int) -> list[str]:
    """Options of ``membench bodmas elf`` for a data set collected from this machine's programs."""
    return cli_options(
        {
            "search_dir": dataset["search_dirs"],
            "max_files": dataset["max_files"],
            "max_file_bytes": dataset["max_file_bytes"],
            "seed": seed,
        }
    )


def digits_options(dataset: Mapping[str, Any], seed: int) -> list[str]:
    """Options of ``membench images digits`` for a generated image data set (``images.datasets.<name>``);
    a key the entry leaves out is left to the command's default."""
    return cli_options({key: dataset.get(key) for key in DIGITS_KEYS} | {"seed": seed})


# -- appclass ----------------------------------------------------------------------------------------


def appclass_variant_name(variant: Mapping[str, Any]) -> str:
    """The name bench jobs record for a configured variant (``membench.appclass.bench.BenchSpec.variant``
    with the default options): ``<implementation>-<device>-t<threads>-<precision>``, and
    ``-kernels_<kernels>`` unless the kernels are ``auto``."""
    name = f"{variant['implementation']}-{variant['device']}-t{variant['threads']}-{variant['precision']}"
    kernels = variant.get("kernels", "auto")
    return name if kernels == "auto" else f"{name}-kernels_{kernels}"


def appclass_variants(configured: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """The benchmark variants by name: the NumPy reference first (every torch variant is checked
    against its beliefs, so it runs whatever the list says), then the configured ones."""
    variants = {appclass_variant_name(APPCLASS_REFERENCE): APPCLASS_REFERENCE}
    for variant in configured:
        variants[appclass_variant_name(variant)] = variant
    return variants


def appclass_uses_build(variant: Mapping[str, Any]) -> bool:
    """Whether a variant's jobs load the C++ kernels of ``membench appclass build``: not the NumPy
    reference, and not a variant that picks the pure-torch kernels."""
    return variant["implementation"] == "torch" and variant.get("kernels", "auto") != "torch"


def appclass_rmat_options(graph: Mapping[str, Any], appclass: Mapping[str, Any], seed: int) -> list[str]:
    """Options of ``membench appclass generate-rmat`` for a generated graph (``appclass.graphs.<name>``)."""
    return cli_options(
        {key: graph[key] for key in ("scale", "edge_factor", "feature_max")}
        | {key: appclass[key] for key in ("node_feature_dim", "edge_feature_dim")}
        | {"seed": seed}
    )


def appclass_bench_options(
    variant: Mapping[str, Any],
    appclass: Mapping[str, Any],
    build_manifest: str | None,
    meter: Mapping[str, Any],
) -> list[str]:
    """Options of ``membench appclass bench`` for a variant; ``build_manifest`` where its jobs load
    the C++ kernels (:func:`appclass_uses_build`)."""
    torch = variant["implementation"] == "torch"
    options = cli_options(
        {
            **{key: variant[key] for key in ("implementation", "device", "threads", "precision")},
            "kernels": variant.get("kernels", "auto"),
            "build_manifest": build_manifest,
            "repeats": appclass["repeats"],
            "trace_live_tensors": appclass["trace_live_tensors"] and torch,
        }
    )
    return options + meter_options(meter) + trace_allocator_option(meter)


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
    arrays of :func:`membench.appclass.options.formula_bytes` (float64), three times over for
    temporaries and the input, over a 1 GB base."""
    from membench.appclass.options import formula_bytes

    if graph["source"] == "rmat":
        nodes, edges = 2 ** graph["scale"] + 1, graph["edge_factor"] * 2 ** graph["scale"]
    else:
        nodes, edges = pnnl_rows(graph["vertices"], 2**21), pnnl_rows(graph["edges"], 2**21)
    if pattern["source"] == "files":
        pattern_nodes, pattern_edges = pnnl_rows(pattern["vertices"], 64), pnnl_rows(pattern["edges"], 64)
    else:
        pattern_nodes = pattern["max_pattern_nodes"]
        pattern_edges = min(pattern_nodes * (pattern_nodes - 1), 4 * pattern_nodes)
    array_mib = formula_bytes(nodes, edges, pattern_nodes, pattern_edges, itemsize=8) / 2**20
    return int(1000 + 3 * array_mib)


# -- hotconv -----------------------------------------------------------------------------------------

HOTCONV_TRAIN_KEYS = (
    "epochs",
    "max_len",
    "batch_size",
    "num_filters",
    "window_size",
    "stride",
    "fp_slice_size",
    "fp2_slice_size",
    "learning_rate",
    "early_stopping_patience",
    "num_workers",
    "memory_probe_steps",
    "sort_by_size",
)
HOTCONV_SWEEP_KEYS = (
    "num_filters",
    "window_size",
    "stride",
    "fp_slice_size",
    "fp2_slice_size",
    "train_steps",
)


def hotconv_train_options(
    hotconv: Mapping[str, Any], meter: Mapping[str, Any], device: str, seed: int
) -> list[str]:
    """Options of ``membench hotconv train`` (config ``hotconv``) beside the job's data and names.

    Its epochs are the timings the report compares, so the CPU allocator is never traced there (the
    profiler costs a record per operator); the live-tensor and saved-activation tracers follow the
    config (``meter``, off by default). The training step's memory is measured untimed, by the
    ``hotconv.bench`` points."""
    tracers = {key: meter[key] for key in ("trace_live_tensors", "trace_saved_activations")}
    tracers["trace_allocator"] = False
    return (
        cli_options({key: hotconv[key] for key in HOTCONV_TRAIN_KEYS})
        + cli_options(tracers | {"device": device, "seed": seed})
        + meter_options(meter)
    )


def hotconv_sweep_options(
    sweep: Mapping[str, Any], meter: Mapping[str, Any], device: str, seed: int
) -> list[str]:
    """Options of ``membench hotconv bench`` for a point of a sweep (``hotconv.sweep`` or
    ``hotconv.bench``) beside the point's variant, batch size and length."""
    return (
        cli_options({key: sweep[key] for key in HOTCONV_SWEEP_KEYS})
        + cli_options({"device": device, "seed": seed})
        + trace_allocator_option(meter)
        + meter_options(meter)
    )


def hotconv_sweep_point_mem_mb(sweep_name: str) -> int:
    """Host memory (MB) of a point of the sweep ``hotconv.<sweep_name>``: the paper model's sweep
    (``bench``) at 2 MiB inputs needs several GB on a CPU."""
    return 4000 if sweep_name == "sweep" else 8000


def hotconv_sweep_point_runtime_min(sweep_name: str) -> int:
    """Minutes of a sweep point: one or two steps, longer for the paper model's sweep (``bench``)."""
    return 30 if sweep_name == "sweep" else 60


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


def division_method_options(
    division: Mapping[str, Any], build_manifest: str | None, device: str, seed: int
) -> list[str]:
    """Method settings and kernel choice every division job takes (config ``division``);
    ``build_manifest`` where the jobs load the built kernels."""
    return cli_options(
        {key: division[key] for key in ("block_size", "hfc_bits", "group_size", "amp", "kernels")}
        | {"build_manifest": build_manifest, "device": device, "seed": seed}
    )


def division_job_options(
    division: Mapping[str, Any],
    section: str,
    build_manifest: str | None,
    meter: Mapping[str, Any],
    device: str,
    seed: int,
) -> list[str]:
    """Model options of a benchmark section (``memory``, ``speed``, ``max_batch``), then the method's
    and the meter's."""
    spec = division[section]
    return (
        cli_options({key: spec.get(key) for key in ("width", "stem", "image_size", "num_classes")})
        + division_method_options(division, build_manifest, device, seed)
        + meter_options(meter)
    )


def division_train_options(
    division: Mapping[str, Any], build_manifest: str | None, meter: Mapping[str, Any], device: str, seed: int
) -> list[str]:
    """Options of ``membench division train`` (``division.accuracy``), then the method's and the meter's."""
    keys = (
        "width",
        "stem",
        "image_size",
        "epochs",
        "batch_size",
        "learning_rate",
        "momentum",
        "weight_decay",
        "num_workers",
        "flip",
    )
    spec = division["accuracy"]
    return (
        cli_options({key: spec.get(key) for key in keys})
        + division_method_options(division, build_manifest, device, seed)
        + meter_options(meter)
    )


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
    srun = _words(
        "srun", "--nodes", nodes, "--ntasks", nodes, "--ntasks-per-node", 1, "--cpus-per-task", threads
    )
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
    srun = _words(
        "srun", "--nodes", nodes, "--ntasks", ranks, "--cpus-per-task", options["threads"], "membench"
    )
    return f"MASTER_ADDR={_FIRST_NODE} MASTER_PORT={RENDEZVOUS_PORT} {srun}"


def robust_train_options(
    options: Mapping[str, Any], meter: Mapping[str, Any], device: str, seed: int
) -> list[str]:
    """Options of ``membench robust train`` for a planned run (:func:`membench.robust.plan.plan_runs`)."""
    return cli_options({**options, "device": device, "seed": seed}) + meter_options(meter)


def robust_run_minutes(robust: Mapping[str, Any], options: Mapping[str, Any]) -> int:
    """Minutes of a run: the default digits runs take seconds; CIFAR-10 PreActResNet-18 about 10 min
    an epoch on a GPU per attack step."""
    per_epoch = 15 if robust["dataset"] == "cifar10" else 1
    return 10 + robust["epochs"] * per_epoch * options["attack_steps"]


def robust_run_gpus(options: Mapping[str, Any], gpus: int) -> int:
    """GPUs of a one-node run when a process asks for ``gpus`` (0 on the CPU): one process's, or
    one for each rank where torchrun starts trainer and producers (NCCL wants a GPU each)."""
    if options["mode"] == "parallel" and options["transport"] == "distributed":
        return gpus * (options["producers"] + 1)
    return gpus


def robust_nodes_gres(options: Mapping[str, Any], nodes: int) -> str:
    """GPUs per node of a run over ``nodes`` nodes: one for each rank a node holds at most."""
    return f"gpu:{-(-(options['producers'] + 1) // nodes)}"


# -- memnet ------------------------------------------------------------------------------------------

MEMNET_FAMILIES = ("mlp", "cnn", "transformer")
MEMNET_ESTIMATOR_KEYS = (
    "max_under",
    "calibration_fraction",
    "faketensor_rows",
    "members",
    "mlp_epochs",
    "transformer_epochs",
    "optimizer",
)


def memnet_measured_families(memnet: Mapping[str, Any]) -> list[str]:
    """The model families of config ``memnet`` with configurations to measure."""
    return [family for family in MEMNET_FAMILIES if memnet["families"].get(family, {}).get("count", 0) > 0]


def memnet_generate_options(family: Mapping[str, Any], seed: int) -> list[str]:
    """Options of ``membench memnet generate`` for a family (``memnet.families.<name>``)."""
    ranges = [
        word
        for key, (low, high) in family.get("ranges", {}).items()
        for word in ("--range", key, str(low), str(high))
    ]
    return ["--count", str(family["count"]), "--seed", str(seed), *ranges]


def memnet_measure_options(memnet: Mapping[str, Any], meter: Mapping[str, Any], device: str) -> list[str]:
    """Options of ``membench memnet measure``."""
    keys = ("train_steps", "optimizer", "timeout_s", "threads")
    return cli_options({key: memnet[key] for key in keys} | {"device": device}) + meter_options(meter)


def memnet_measure_runtime_min(memnet: Mapping[str, Any]) -> int:
    """Minutes of a family's measurement: every configuration may use its whole timeout."""
    counts = [memnet["families"][family]["count"] for family in memnet_measured_families(memnet)]
    return 10 + int(max(counts, default=0) * memnet["timeout_s"] / 60)


def memnet_estimator_options(
    memnet: Mapping[str, Any],
    family: str,
    bins: Mapping[str, Any] | None,
    seed: int,
    evaluate: bool,
    device_name: str | None = None,
) -> list[str]:
    """Options of ``membench memnet evaluate`` (``evaluate``) or ``train`` for a data set of ``family``:
    its memory classes (``bins``: ``start_mib``, ``width_mib``, ``count``; None or empty: the
    command's GPUMemNet defaults), the GPU it was measured on (``device_name``, where known), the
    estimators' settings and, to evaluate, the folds, timed rows and splits."""
    keys = (("folds", "timing_rows") if evaluate else ()) + MEMNET_ESTIMATOR_KEYS
    classes = ["--bins", *(str(bins[key]) for key in ("start_mib", "width_mib", "count"))] if bins else []
    device = ["--device-name", device_name] if device_name else []
    splits = ["--splits", *memnet["splits"]] if evaluate else []
    return [
        "--family",
        family,
        *classes,
        *device,
        *cli_options({key: memnet[key] for key in keys} | {"seed": seed}),
        *splits,
    ]


def memnet_datasets(memnet: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The data sets the workflow evaluates and trains on, by name: ``measured_<family>`` for each
    measured family, the shipped ones ``memnet.shipped`` names, then the user's ``published`` CSVs;
    each with ``path`` (a shipped one's ``resource``: a file of the checkout instead), ``family``,
    ``bins`` (None: the family's) and ``device_name`` (None: what the file says)."""
    from membench.memnet.shipped import SHIPPED

    datasets = {
        f"measured_{family}": {
            "path": f"results/memnet/{family}/gpumemnet.csv",
            "family": family,
            "bins": memnet["families"][family].get("bins"),
            "device_name": None,
        }
        for family in memnet_measured_families(memnet)
    }
    for name in memnet["shipped"]:
        spec = SHIPPED[name]
        datasets[name] = {
            "resource": spec["resource"],
            "family": spec["family"],
            "bins": None,
            "device_name": spec["device_name"],
        }
    for name, spec in memnet["published"].items():
        datasets[name] = {
            "path": spec["path"],
            "family": spec["family"],
            "bins": spec.get("bins"),
            "device_name": spec.get("device_name"),
        }
    return datasets


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
