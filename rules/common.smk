# Helpers every rules file uses: paths, config lookups, command-line options, wildcard constraints.
# No other rules file reads the config in ad-hoc ways.

import re
import shlex

ENV = "../envs/membench.yaml"

# Each rules file appends the tables and figures it contributes to the default target.
FINAL_OUTPUTS = []


def final_outputs():
    return FINAL_OUTPUTS


def log_path(rule_name, pattern="all"):
    """results/logs/<rule>/<wildcards>.log"""
    return f"results/logs/{rule_name}/{pattern}.log"


def benchmark_path(rule_name, pattern="all"):
    """results/benchmarks/<rule>/<wildcards>.tsv"""
    return f"results/benchmarks/{rule_name}/{pattern}.tsv"


def cli_options(options):
    """Turn {"val_fraction": 0.1, "sort_by_size": False, "search_dirs": [...]} into CLI options."""
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
    return " ".join(shlex.quote(w) for w in words)


def alternatives(names):
    """A wildcard regex matching exactly ``names`` (and nothing when there are none)."""
    return "|".join(re.escape(n) for n in names) if names else "(?!x)x"


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


# -- BODMAS datasets -----------------------------------------------------------------------------
BODMAS = config["bodmas"]["datasets"]
FOLD_KEYS = ("folds", "label_mode", "top_families", "val_fraction", "time_split_quantile", "time_split_date", "sort_by_size")
SYNTHETIC_KEYS = ("samples", "families", "benign_fraction", "min_bytes", "median_bytes", "max_bytes", "gzip_fraction")
SPLITS = ("train", "val", "test")


def bodmas_datasets(source=None):
    return [name for name, spec in BODMAS.items() if source is None or spec["source"] == source]


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
    return [path for dataset in bodmas_datasets() for path in bodmas_fold_files(dataset)]


def bodmas_fold_options(dataset):
    spec = BODMAS[dataset]
    return cli_options({key: spec[key] for key in FOLD_KEYS} | {"seed": config["seed"]})


def bodmas_synthetic_options(dataset):
    spec = BODMAS[dataset]
    return cli_options({key: spec[key] for key in SYNTHETIC_KEYS} | {"seed": config["seed"]})


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


# -- images and division ---------------------------------------------------------------------------
IMAGES = config["images"]["datasets"]
DIVISION = config["division"]
DIVISION_METHODS = DIVISION["methods"]
DIVISION_MODELS = ("resnet18", "resnet164", "densenet121", "resnet50")
DIGITS_KEYS = ("image_size", "min_digit_size", "max_digit_size", "max_shift", "background_max",
               "foreground_min", "noise_std", "val_fraction", "images_per_class")
DIVISION_BUILD_MANIFEST = "results/build/division/manifest.json"


def image_datasets(source=None):
    return [name for name, spec in IMAGES.items() if source is None or spec["source"] == source]


def image_lmdb(dataset, split):
    """results/data/images/<dataset>/lmdb/<split>: one LMDB directory per split."""
    return f"results/data/images/{dataset}/lmdb/{split}"


def image_folder(dataset):
    spec = IMAGES[dataset]
    return spec["root"] if spec["source"] == "folder" else f"results/data/images/{dataset}/folder"


def image_folder_input(wildcards):
    """A generated folder is a rule's output (a dependency); a user's folder is not."""
    return [] if IMAGES[wildcards.dataset]["source"] == "folder" else image_folder(wildcards.dataset)


def digits_options(dataset):
    spec = IMAGES[dataset]
    return cli_options({key: spec.get(key) for key in DIGITS_KEYS} | {"seed": config["seed"]})


def division_method_options():
    """Method settings and kernel choice shared by every division job."""
    return cli_options(
        {
            "block_size": DIVISION["block_size"],
            "hfc_bits": DIVISION["hfc_bits"],
            "group_size": DIVISION["group_size"],
            "kernels": DIVISION["kernels"],
            "build_manifest": DIVISION_BUILD_MANIFEST,
            "device": config["device"],
            "seed": config["seed"],
        }
    )


def division_job_options(section):
    """Model options of a division benchmark section (memory, speed, max_batch)."""
    spec = DIVISION[section]
    keys = ("width", "stem", "image_size", "num_classes")
    return f"{cli_options({k: spec.get(k) for k in keys})} {division_method_options()} {meter_options()}"


def division_benchmark_files(section):
    spec = DIVISION[section]
    return [
        f"results/division/{section}/{spec['model']}/{method}/b{batch}/metrics.json"
        for method in DIVISION_METHODS
        for batch in spec["batch_sizes"]
    ]


def division_max_batch_files():
    model = DIVISION["max_batch"].get("model", "resnet50")
    return [f"results/division/max_batch/{model}/{method}/metrics.json" for method in DIVISION_METHODS]


def division_accuracy_dataset():
    name = DIVISION["accuracy"]["dataset"]
    if name not in IMAGES:
        raise ValueError(f"config key division.accuracy.dataset: {name!r} is not one of images.datasets ({', '.join(IMAGES)})")
    return name


def division_accuracy_files():
    spec = DIVISION["accuracy"]
    dataset = division_accuracy_dataset()
    return [f"results/division/accuracy/{dataset}/{spec['model']}/{method}/metrics.json" for method in DIVISION_METHODS]


def division_train_options():
    spec = DIVISION["accuracy"]
    keys = ("width", "stem", "image_size", "epochs", "batch_size", "lr", "momentum", "weight_decay", "num_workers", "flip")
    return f"{cli_options({k: spec.get(k) for k in keys})} {division_method_options()} {meter_options()}"


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
