# Helpers every rules file uses: paths, config lookups, command-line options, wildcard constraints.
# No other rules file reads the config in ad-hoc ways.

import os
import re
import shlex

from membench import workflow_support
from snakemake.logging import logger

ENV = "../envs/membench.yaml"

# Each rules file appends the tables and figures it contributes to the default target.
FINAL_OUTPUTS = []


# -- a lock left by a killed Snakemake is removed (membench.core.snakemake_lock) ------------------
# Here, while the workflow is read: Snakemake takes its lock after reading and before onstart. Only
# in the process that runs the jobs: a dry run or a lint takes no lock, and the Snakemake of a
# cluster job must not touch the lock of the run that submitted it.
from membench.core import snakemake_lock

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


def cli_options(options):
    """Turn {"val_fraction": 0.1, "sort_by_size": False, "search_dirs": [...]} into CLI options.

    A list of words, unquoted: a shell command takes it as ``{params.<name>:q}``, which quotes
    each word. So do the other ``*_options`` helpers below."""
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


def alternatives(names):
    """A wildcard regex matching exactly ``names`` (and nothing when there are none)."""
    return "|".join(re.escape(n) for n in names) if names else "(?!x)x"


def local_cores():
    """Cores of a local run; None on a cluster (the executor submits jobs to nodes)."""
    return (
        workflow.resource_settings.cores
        if workflow.resource_settings.nodes is None
        else None
    )


def memnet_measure_threads():
    # The measured children run torch on the job's CPUs; on a cluster two of its own suffice.
    return workflow_support.timing_job_threads(2, local_cores())


def gpu_count():
    """GPUs a device job asks the scheduler for: none when the config pins the CPU."""
    return 0 if config["device"] == "cpu" else 1


# -- meter ---------------------------------------------------------------------------------------
def meter_options():
    """The meter's settings as options of a job command."""
    meter = config["meter"]
    return cli_options(
        {
            "sample_interval_s": meter["sample_interval_s"],
            "grid_intensity_g_per_kwh": meter["grid_intensity_g_per_kwh"],
        }
    )


def trace_allocator_option():
    """``meter.trace_allocator`` as an option of a job that measures memory on a CPU."""
    return cli_options({"trace_allocator": config["meter"]["trace_allocator"]})


# -- BODMAS datasets -----------------------------------------------------------------------------
BODMAS = config["bodmas"]["datasets"]
FOLD_KEYS = (
    "folds",
    "label_mode",
    "top_families",
    "val_fraction",
    "time_split_quantile",
    "time_split_date",
    "sort_by_size",
)
SYNTHETIC_KEYS = (
    "samples",
    "families",
    "benign_fraction",
    "min_bytes",
    "median_bytes",
    "max_bytes",
    "gzip_fraction",
)
SPLITS = ("train", "val", "test")


def bodmas_datasets(source=None):
    return [
        name
        for name, spec in BODMAS.items()
        if source is None or spec["source"] == source
    ]


def bodmas_dir(dataset):
    return f"results/data/bodmas/{dataset}"


def bodmas_metadata(wildcards):
    spec = BODMAS[wildcards.dataset]
    if spec["source"] == "directory":
        return spec["metadata"]
    return f"{bodmas_dir(wildcards.dataset)}/metadata.csv"


def bodmas_binaries(dataset):
    spec = BODMAS[dataset]
    if spec["source"] == "directory":
        return spec["binaries"]
    return f"{bodmas_dir(dataset)}/binaries"


def bodmas_binaries_input(wildcards):
    """Generated binaries are a rule's output (a dependency); a user's directory is not."""
    if BODMAS[wildcards.dataset]["source"] == "directory":
        return []
    return bodmas_binaries(wildcards.dataset)


def bodmas_fold_files(dataset):
    k = BODMAS[dataset]["folds"]
    return [
        f"{bodmas_dir(dataset)}/folds/{split}_{dataset}_fold_{fold}.csv"
        for fold in range(k + 1)
        for split in SPLITS
    ]


def bodmas_all_fold_files():
    return [
        path for dataset in bodmas_datasets() for path in bodmas_fold_files(dataset)
    ]


def bodmas_fold_options(dataset):
    spec = BODMAS[dataset]
    return cli_options({key: spec[key] for key in FOLD_KEYS} | {"seed": config["seed"]})


def bodmas_synthetic_options(dataset):
    spec = BODMAS[dataset]
    return cli_options(
        {key: spec[key] for key in SYNTHETIC_KEYS} | {"seed": config["seed"]}
    )


def bodmas_elf_options(dataset):
    spec = BODMAS[dataset]
    return cli_options(
        {
            "search_dir": spec["search_dirs"],
            "max_files": spec["max_files"],
            "max_file_bytes": spec["max_file_bytes"],
            "seed": config["seed"],
        }
    )


wildcard_constraints:
    fold=r"\d+",


# -- appclass --------------------------------------------------------------------------------------
APPCLASS = config["appclass"]
# Every torch job is checked against this job's beliefs, so it runs whatever the variants list says.
APPCLASS_REFERENCE = {
    "implementation": "reference",
    "device": "cpu",
    "threads": 1,
    "precision": "float64",
}
RMAT_KEYS = ("scale", "edge_factor", "feature_max")
APPCLASS_BUILD_MANIFEST = "results/build/appclass/manifest.json"


def appclass_variant_name(variant):
    return workflow_support.appclass_variant_name(variant)


def appclass_variants():
    variants = {appclass_variant_name(APPCLASS_REFERENCE): APPCLASS_REFERENCE}
    for variant in APPCLASS["variants"]:
        variants[appclass_variant_name(variant)] = variant
    return variants


APPCLASS_REFERENCE_VARIANT = appclass_variant_name(APPCLASS_REFERENCE)
APPCLASS_VARIANTS = appclass_variants()
APPCLASS_TORCH_VARIANTS = [
    name for name, v in APPCLASS_VARIANTS.items() if v["implementation"] == "torch"
]


def appclass_graphs(source=None):
    return [
        name
        for name, spec in APPCLASS["graphs"].items()
        if source is None or spec["source"] == source
    ]


def appclass_patterns(source=None):
    return [
        name
        for name, spec in APPCLASS["patterns"].items()
        if source is None or spec["source"] == source
    ]


def appclass_graph_files(graph):
    """(vertices, edges) of a data graph: generated under results/data/graphs, or the user's files."""
    spec = APPCLASS["graphs"][graph]
    if spec["source"] == "files":
        return spec["vertices"], spec["edges"]
    return (
        f"results/data/graphs/{graph}/data.Vertex.csv",
        f"results/data/graphs/{graph}/data.Edges.csv",
    )


def appclass_pattern_files(graph, pattern):
    """(vertices, edges) of a pattern: the configured files, or induced from ``graph``."""
    spec = APPCLASS["patterns"][pattern]
    if spec["source"] == "files":
        return spec["vertices"], spec["edges"]
    base = f"results/data/graphs/{graph}/patterns/{pattern}"
    return f"{base}.Vertex.csv", f"{base}.Edges.csv"


def appclass_pair_files(wildcards):
    """The four graph files of the pair graph/pattern, in the order the commands take them."""
    return [
        *appclass_graph_files(wildcards.graph),
        *appclass_pattern_files(wildcards.graph, wildcards.pattern),
    ]


def appclass_pairs():
    return [os.path.split(pair) for pair in APPCLASS["benchmark_pairs"]]


def appclass_rmat_options(graph):
    spec = APPCLASS["graphs"][graph]
    return cli_options(
        {key: spec[key] for key in RMAT_KEYS}
        | {
            "node_feature_dim": APPCLASS["node_feature_dim"],
            "edge_feature_dim": APPCLASS["edge_feature_dim"],
            "seed": config["seed"],
        }
    )


def appclass_build_input(variant_name):
    """The build manifest a variant's jobs wait for; none for the NumPy reference and for variants
    that pick the pure-torch kernels."""
    variant = APPCLASS_VARIANTS[variant_name]
    uses_build = (
        variant["implementation"] == "torch"
        and variant.get("kernels", "auto") != "torch"
    )
    return APPCLASS_BUILD_MANIFEST if uses_build else []


def appclass_bench_options(variant_name):
    variant = APPCLASS_VARIANTS[variant_name]
    options = cli_options(
        {
            "implementation": variant["implementation"],
            "device": variant["device"],
            "threads": variant["threads"],
            "precision": variant["precision"],
            "kernels": variant.get("kernels", "auto"),
            "build_manifest": appclass_build_input(variant_name) or None,
            "repeats": APPCLASS["repeats"],
            "trace_live_tensors": APPCLASS["trace_live_tensors"]
            and variant["implementation"] == "torch",
        }
    )
    return options + meter_options() + trace_allocator_option()


def appclass_bench_dir(graph, pattern, variant):
    return f"results/appclass/{graph}/{pattern}/{variant}"


def appclass_all_metrics():
    return [
        f"{appclass_bench_dir(graph, pattern, variant)}/metrics.json"
        for graph, pattern in appclass_pairs()
        for variant in APPCLASS_VARIANTS
    ]


def appclass_stats_pairs():
    """--pair NAME DATA_V DATA_E PATT_V PATT_E options of the graph-statistics command."""
    words = []
    for graph, pattern in appclass_pairs():
        words += [
            "--pair",
            f"{graph}/{pattern}",
            *appclass_graph_files(graph),
            *appclass_pattern_files(graph, pattern),
        ]
    return words


def appclass_stats_inputs():
    return [
        path
        for graph, pattern in appclass_pairs()
        for path in (
            *appclass_graph_files(graph),
            *appclass_pattern_files(graph, pattern),
        )
    ]


def appclass_mem_mb(wildcards):
    return workflow_support.appclass_mem_mb(
        APPCLASS["graphs"][wildcards.graph], APPCLASS["patterns"][wildcards.pattern]
    )


def appclass_threads(variant_name):
    threads = APPCLASS_VARIANTS[variant_name]["threads"]
    return workflow_support.timing_job_threads(threads, local_cores())


def appclass_variant_gpus(variant_name):
    return 0 if APPCLASS_VARIANTS[variant_name]["device"] == "cpu" else 1


# -- hotconv -------------------------------------------------------------------------------------
HOTCONV = config["hotconv"]
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
HOTCONV_SWEEP_VARIANTS = sorted(
    {variant for name in ("sweep", "bench") for variant in HOTCONV[name]["variants"]}
)


def hotconv_job_dir(dataset, variant, fold):
    return f"results/hotconv/{dataset}/{variant}/fold_{fold}"


def hotconv_metrics_files():
    """metrics.json of every configured training job (variant x dataset x fold)."""
    return [
        f"{hotconv_job_dir(dataset, variant, fold)}/metrics.json"
        for dataset in HOTCONV["datasets"]
        for variant in HOTCONV["variants"]
        for fold in HOTCONV["folds"]
    ]


def hotconv_train_mem_mb():
    return workflow_support.hotconv_train_mem_mb(
        HOTCONV, on_cpu=config["device"] == "cpu"
    )


def hotconv_train_runtime():
    return workflow_support.hotconv_train_runtime_min(HOTCONV)


def hotconv_train_options():
    meter = config["meter"]
    return (
        cli_options({key: HOTCONV[key] for key in HOTCONV_TRAIN_KEYS})
        + cli_options(
            {
                "trace_live_tensors": meter["trace_live_tensors"],
                "trace_saved_activations": meter["trace_saved_activations"],
                "trace_allocator": meter["trace_allocator"],
                "device": config["device"],
                "seed": config["seed"],
            }
        )
        + meter_options()
    )


def hotconv_sweep_point_dir(name, variant, batch_size, max_len):
    return f"results/hotconv/sweeps/{name}/{variant}/b{batch_size}_l{max_len}"


def hotconv_sweep_files(name):
    """metrics.json of every point of the sweep ``hotconv.<name>`` (variant x batch size x max_len):
    one job each."""
    sweep = HOTCONV[name]
    return [
        f"{hotconv_sweep_point_dir(name, variant, batch_size, max_len)}/metrics.json"
        for max_len in sweep["max_lens"]
        for batch_size in sweep["batch_sizes"]
        for variant in sweep["variants"]
    ]


def hotconv_sweep_point_mem_mb(name):
    """Host memory of a sweep point: the paper model at 2 MiB inputs needs several GB on a CPU."""
    return 4000 if name == "sweep" else 8000


def hotconv_sweep_options(name):
    """Options of ``membench hotconv bench`` for a point of the sweep ``hotconv.<name>``."""
    sweep = HOTCONV[name]
    return (
        cli_options({key: sweep[key] for key in HOTCONV_SWEEP_KEYS})
        + cli_options({"device": config["device"], "seed": config["seed"]})
        + trace_allocator_option()
        + meter_options()
    )


# -- images and division ---------------------------------------------------------------------------
IMAGES = config["images"]["datasets"]
DIVISION = config["division"]
DIVISION_METHODS = DIVISION["variants"]
DIVISION_MODELS = ("resnet18", "resnet164", "densenet121", "resnet50")
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
DIVISION_BUILD_MANIFEST = "results/build/division/manifest.json"


def image_datasets(source=None):
    return [
        name
        for name, spec in IMAGES.items()
        if source is None or spec["source"] == source
    ]


def image_lmdb(dataset, split):
    """results/data/images/<dataset>/lmdb/<split>: one LMDB directory per split."""
    return f"results/data/images/{dataset}/lmdb/{split}"


def image_folder(dataset):
    spec = IMAGES[dataset]
    return (
        spec["root"]
        if spec["source"] == "folder"
        else f"results/data/images/{dataset}/folder"
    )


def image_folder_input(wildcards):
    """A generated folder is a rule's output (a dependency); a user's folder is not."""
    return (
        []
        if IMAGES[wildcards.dataset]["source"] == "folder"
        else image_folder(wildcards.dataset)
    )


def digits_options(dataset):
    spec = IMAGES[dataset]
    return cli_options(
        {key: spec.get(key) for key in DIGITS_KEYS} | {"seed": config["seed"]}
    )


def division_build_input():
    """The build manifest a division job waits for; none when the config picks the pure-torch kernels."""
    return [] if DIVISION["kernels"] == "torch" else DIVISION_BUILD_MANIFEST


def division_method_options():
    """Method settings and kernel choice shared by every division job."""
    return cli_options(
        {
            "block_size": DIVISION["block_size"],
            "hfc_bits": DIVISION["hfc_bits"],
            "group_size": DIVISION["group_size"],
            "amp": DIVISION["amp"],
            "kernels": DIVISION["kernels"],
            "build_manifest": division_build_input() or None,
            "device": config["device"],
            "seed": config["seed"],
        }
    )


def division_job_options(section):
    """Model options of a division benchmark section (memory, speed, max_batch)."""
    spec = DIVISION[section]
    keys = ("width", "stem", "image_size", "num_classes")
    return (
        cli_options({k: spec.get(k) for k in keys})
        + division_method_options()
        + meter_options()
    )


def division_job_mem_mb(section):
    image_size = DIVISION[section]["image_size"]
    return lambda wildcards: workflow_support.division_job_mem_mb(
        image_size, int(wildcards.division_batch), on_gpu=gpu_count() > 0
    )


def division_build_gpus():
    return 0 if DIVISION["cuda"] == "no" else gpu_count()


def division_benchmark_files(section):
    if not DIVISION_METHODS:
        return []
    spec = DIVISION[section]
    return [
        f"results/division/{section}/{spec['model']}/{method}/b{batch}/metrics.json"
        for method in DIVISION_METHODS
        for batch in spec["batch_sizes"]
    ]


def division_max_batch_files():
    if not DIVISION_METHODS:
        return []
    model = DIVISION["max_batch"].get("model", "resnet50")
    return [
        f"results/division/max_batch/{model}/{method}/metrics.json"
        for method in DIVISION_METHODS
    ]


def division_accuracy_files():
    if not DIVISION_METHODS:
        return []
    spec = DIVISION["accuracy"]
    return [
        f"results/division/accuracy/{spec['dataset']}/{spec['model']}/{method}/metrics.json"
        for method in spec.get("variants") or DIVISION_METHODS
    ]


def division_train_options():
    spec = DIVISION["accuracy"]
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
    return (
        cli_options({k: spec.get(k) for k in keys})
        + division_method_options()
        + meter_options()
    )


def division_train_threads():
    return workflow_support.division_train_threads(
        local_cores(), workflow_support.local_gpu_count()
    )


def division_train_launcher():
    spec = DIVISION["accuracy"]
    return workflow_support.division_train_launcher(
        spec["gpus"], spec["nodes"], division_train_threads()
    )


def division_train_resources():
    spec = DIVISION["accuracy"]
    return workflow_support.division_train_resources(
        spec["gpus"], spec["nodes"], on_gpu=gpu_count() > 0
    )


def division_accuracy_lmdbs(wildcards):
    spec = IMAGES[wildcards.image_dataset]
    return {
        "train": image_lmdb(wildcards.image_dataset, spec.get("train_split", "train")),
        "val": image_lmdb(wildcards.image_dataset, spec.get("val_split", "val")),
    }


wildcard_constraints:
    division_method=alternatives(DIVISION_METHODS),
    division_model=alternatives(DIVISION_MODELS),
    division_batch=r"\d+",
    image_dataset=alternatives(image_datasets()),
    image_split=r"[A-Za-z0-9_-]+",


# -- robust ----------------------------------------------------------------------------------------
from membench.robust.plan import plan_runs, run_cores, spans_nodes

ROBUST = config["robust"]
ROBUST_RUNS = plan_runs(ROBUST) if ROBUST["enabled"] else {}
# Parallel runs over several nodes: a multi-task Slurm job each (rule robust_train_nodes).
ROBUST_NODE_RUNS = [
    run for run, options in ROBUST_RUNS.items() if spans_nodes(options, ROBUST["nodes"])
]


def robust_job_dir(run):
    return f"results/robust/{run}"


def robust_metrics_files():
    return [f"{robust_job_dir(run)}/metrics.json" for run in ROBUST_RUNS]


def robust_train_options(run):
    options = ROBUST_RUNS[run] | {"device": config["device"], "seed": config["seed"]}
    return cli_options(options) + meter_options()


def robust_run_cores(run):
    return run_cores(ROBUST_RUNS[run], ROBUST["nodes"])


def robust_launcher(run):
    return workflow_support.robust_train_launcher(ROBUST_RUNS[run], ROBUST["nodes"])


def robust_run_gpus(run):
    """GPUs of a one-node run: one, or one per rank when torchrun starts its ranks (NCCL wants a GPU each)."""
    options = ROBUST_RUNS[run]
    if options["mode"] == "parallel" and options["transport"] == "distributed":
        return gpu_count() * robust_run_tasks(run)
    return gpu_count()


def robust_run_tasks(run):
    return ROBUST_RUNS[run]["producers"] + 1


def robust_nodes_gpu_resources():
    """GPUs per node of a multi-node run on GPUs: one per rank the node holds (at most)."""
    if gpu_count() == 0:
        return {}
    nodes = ROBUST["nodes"]
    return {
        "gres": lambda wildcards: f"gpu:{-(-robust_run_tasks(wildcards.robust_run) // nodes)}"
    }


def robust_run_minutes(run):
    """Minutes: the default digits runs take seconds; CIFAR-10 PreActResNet-18 about 10 min an epoch on a GPU."""
    per_epoch = 15 if ROBUST["dataset"] == "cifar10" else 1
    return 10 + ROBUST["epochs"] * per_epoch * ROBUST_RUNS[run]["attack_steps"]


wildcard_constraints:
    robust_run=alternatives(list(ROBUST_RUNS)),


# -- memnet ----------------------------------------------------------------------------------------
MEMNET = config["memnet"]
MEMNET_FAMILIES = [
    f
    for f in ("mlp", "cnn", "transformer")
    if MEMNET["families"].get(f, {}).get("count", 0) > 0
]
MEMNET_PUBLISHED = MEMNET["published"]
MEMNET_ESTIMATOR_KEYS = (
    "quantile",
    "members",
    "mlp_epochs",
    "transformer_epochs",
    "optimizer",
)


def memnet_datasets():
    """Evaluated datasets: ``measured_<family>`` for each measured family, then the published CSVs."""
    return [f"measured_{family}" for family in MEMNET_FAMILIES] + list(MEMNET_PUBLISHED)


def memnet_dataset_csv(wildcards):
    if wildcards.memnet_dataset in MEMNET_PUBLISHED:
        return MEMNET_PUBLISHED[wildcards.memnet_dataset]["path"]
    return f"results/memnet/{wildcards.memnet_dataset.removeprefix('measured_')}/gpumemnet.csv"


def memnet_dataset_family(dataset):
    if dataset in MEMNET_PUBLISHED:
        return MEMNET_PUBLISHED[dataset]["family"]
    return dataset.removeprefix("measured_")


def memnet_bins_option(dataset):
    """--bins of a dataset: its configured classes, else the command's GPUMemNet defaults."""
    if dataset in MEMNET_PUBLISHED:
        bins = MEMNET_PUBLISHED[dataset].get("bins")
    else:
        bins = MEMNET["families"][memnet_dataset_family(dataset)].get("bins")
    if not bins:
        return []
    return ["--bins", *(str(bins[key]) for key in ("start_mib", "width_mib", "count"))]


def memnet_generate_options(family):
    spec = MEMNET["families"][family]
    ranges = [
        word
        for key, (low, high) in spec.get("ranges", {}).items()
        for word in ("--range", key, str(low), str(high))
    ]
    return ["--count", str(spec["count"]), "--seed", str(config["seed"]), *ranges]


def memnet_measure_options():
    keys = ("train_steps", "optimizer", "timeout_s", "threads")
    return (
        cli_options({key: MEMNET[key] for key in keys} | {"device": config["device"]})
        + meter_options()
    )


def memnet_evaluate_options(dataset):
    keys = ("folds", "faketensor_rows", "timing_rows") + MEMNET_ESTIMATOR_KEYS
    options = cli_options({key: MEMNET[key] for key in keys} | {"seed": config["seed"]})
    return [
        "--family",
        memnet_dataset_family(dataset),
        *memnet_bins_option(dataset),
        *options,
    ]


def memnet_train_options(dataset):
    options = cli_options(
        {key: MEMNET[key] for key in MEMNET_ESTIMATOR_KEYS} | {"seed": config["seed"]}
    )
    return [
        "--family",
        memnet_dataset_family(dataset),
        *memnet_bins_option(dataset),
        *options,
    ]


def memnet_measure_runtime():
    """Minutes of a family's measurement: every configuration may use its whole timeout."""
    families = MEMNET["families"]
    most = max((families[f]["count"] for f in MEMNET_FAMILIES), default=0)
    return 10 + int(most * MEMNET["timeout_s"] / 60)


wildcard_constraints:
    memnet_family=alternatives(MEMNET_FAMILIES),
    memnet_dataset=alternatives(memnet_datasets()),
