"""``membench bodmas <step>``: generate, collect, fold and describe BODMAS-shaped datasets."""

from __future__ import annotations

import argparse
import dataclasses

from membench import workflow_support
from membench.core.options import SEED, InputDir, InputFile, OutputDir, OutputFile, integer, real
from membench.data.bodmas.folds import LABEL_MODES, FoldSpec
from membench.data.bodmas.synthetic import SyntheticSpec

__all__ = ["build_parser", "CONFIG_KEYS", "FIELD_TYPES", "FILE_BYTES", "run", "TOP_FAMILIES"]

# The range of every numeric field of SyntheticSpec and FoldSpec, as its option's type. Files of
# up to 1 GiB; the config schema repeats the ranges of the fields it sets.
FILE_BYTES = integer(64, 2**30)
TOP_FAMILIES = integer(1, 10_000)
FIELD_TYPES = {
    "samples": integer(4, 1_000_000),
    "families": integer(1, 1000),
    "benign_fraction": real(0, 1),
    "min_bytes": FILE_BYTES,
    "median_bytes": FILE_BYTES,
    "max_bytes": FILE_BYTES,
    "size_sigma": real(0, 10),
    "motifs_per_class": integer(1, 1000),
    "motif_bytes": integer(1, 4096),
    "motif_copies": integer(0, 1000),
    "gzip_fraction": real(0, 1),
    "seed": SEED,
    "folds": integer(2, 1000),
    "top_families": TOP_FAMILIES,
    "val_fraction": real(0, 0.5),
    "time_split_quantile": real(0, 1, exclusive_low=True, exclusive_high=True),
}


def _add_dataclass_options(parser: argparse.ArgumentParser, spec_type) -> None:
    for field in dataclasses.fields(spec_type):
        option = "--" + field.name.replace("_", "-")
        if field.name == "label_mode":
            parser.add_argument(option, choices=LABEL_MODES, default=field.default)
        elif field.type == "bool":
            parser.add_argument(option, action=argparse.BooleanOptionalAction, default=field.default)
        elif field.type == "str | None":
            parser.add_argument(option, default=field.default)
        else:
            parser.add_argument(option, type=FIELD_TYPES[field.name], default=field.default)


def _spec_from_args(spec_type, args: argparse.Namespace):
    return spec_type(**{f.name: getattr(args, f.name) for f in dataclasses.fields(spec_type)})


# Config keys the workflow passes to each step (``*``: any name, ``[]``: each item), each as the
# step's option spelled the same way; tests/test_vocabulary.py checks them against the schema,
# these parsers and the rules.
CONFIG_KEYS = {
    "synthetic": (
        "seed",
        *(f"bodmas.datasets.*.{key}" for key in workflow_support.BODMAS_SYNTHETIC_KEYS),
    ),
    "elf": (
        "seed",
        *(f"bodmas.datasets.*.{key}" for key in ("search_dirs.[]", "max_files", "max_file_bytes")),
    ),
    "fold": (
        "seed",
        *(f"bodmas.datasets.*.{key}" for key in workflow_support.BODMAS_FOLD_KEYS),
    ),
    "classes": ("bodmas.datasets.*.label_mode", "bodmas.datasets.*.top_families"),
}


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    steps = parser.add_subparsers(dest="step", required=True, metavar="<step>")

    synthetic = steps.add_parser(
        "synthetic", help="write a synthetic BODMAS-shaped set (metadata + binaries)"
    )
    synthetic.add_argument("--outdir", type=OutputDir, required=True)
    _add_dataclass_options(synthetic, SyntheticSpec)

    elf = steps.add_parser("elf", help="collect ELF programs and shared libraries found on this machine")
    elf.add_argument("--outdir", type=OutputDir, required=True)
    elf.add_argument(
        "--search-dir", type=InputDir, action="append", required=True, help="directory to search (repeatable)"
    )
    elf.add_argument("--max-files", type=integer(4, 1_000_000), default=200)
    elf.add_argument("--max-file-bytes", type=FILE_BYTES, default=1 << 20)
    elf.add_argument("--seed", type=SEED, default=0)

    fold = steps.add_parser("fold", help="validate a dataset and write one fold's train/val/test CSVs")
    fold.add_argument(
        "--metadata", type=InputFile, required=True, help="bodmas_metadata.csv (sha, timestamp, family)"
    )
    fold.add_argument("--binaries", type=InputDir, required=True, help="directory of <sha>.exe files")
    fold.add_argument("--dataset", required=True, help="dataset name used in the fold file names")
    fold.add_argument(
        "--fold", type=integer(0, 1000), required=True, help="0 (time split) or 1..k (stratified)"
    )
    fold.add_argument("--outdir", type=OutputDir, required=True)
    _add_dataclass_options(fold, FoldSpec)

    classes = steps.add_parser("classes", help="write the class table (Label, Name, Count)")
    classes.add_argument("--metadata", type=InputFile, required=True)
    classes.add_argument("--out", type=OutputFile, required=True)
    classes.add_argument("--label-mode", default="binary", choices=LABEL_MODES)
    classes.add_argument("--top-families", type=TOP_FAMILIES, default=10)

    stats = steps.add_parser("stats", help="samples, classes and size quantiles per split")
    stats.add_argument(
        "--out", type=OutputFile, required=True, help="table CSV; the Parquet twin is written beside it"
    )
    stats.add_argument("folds", type=InputFile, nargs="+", help="fold CSV files")

    plot = steps.add_parser("plot-sizes", help="file-size distribution per dataset and class")
    plot.add_argument("--out", type=OutputFile, required=True, help="PNG path")
    plot.add_argument("folds", type=InputFile, nargs="+", help="fold CSV files")
    return parser


def run(args: argparse.Namespace) -> None:
    if args.step == "synthetic":
        from membench.data.bodmas.synthetic import generate_synthetic

        generate_synthetic(args.outdir, _spec_from_args(SyntheticSpec, args))
    elif args.step == "elf":
        from membench.data.bodmas.elf import build_elf_set

        build_elf_set(args.outdir, args.search_dir, args.max_files, args.max_file_bytes, args.seed)
    elif args.step == "fold":
        from membench.data.bodmas.folds import make_fold

        make_fold(
            args.metadata,
            args.binaries,
            args.dataset,
            args.fold,
            args.outdir,
            _spec_from_args(FoldSpec, args),
        )
    elif args.step == "classes":
        from membench.data.bodmas.folds import write_classes

        write_classes(args.metadata, args.out, args.label_mode, args.top_families)
    elif args.step == "stats":
        from membench.core.tables import parquet_path_for, write_table
        from membench.data.bodmas.stats import dataset_statistics

        write_table(dataset_statistics(args.folds), args.out, parquet_path_for(args.out))
    elif args.step == "plot-sizes":
        from membench.data.bodmas.stats import plot_size_distribution

        plot_size_distribution(args.folds, args.out)
