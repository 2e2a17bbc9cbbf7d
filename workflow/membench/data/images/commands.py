"""``membench images <step>``: generate the default image folder, build image LMDBs, check them."""

from __future__ import annotations

import argparse
import dataclasses
import logging

from membench.core.options import IMAGE_SIZE, SEED, TIMEOUT_S, InputDir, OutputDir, integer, real
from membench.data.images.generate import DigitsSpec

__all__ = ["build_parser", "CHANNEL", "CONFIG_KEYS", "FIELD_TYPES", "PIXELS", "run"]

# The range of every field of DigitsSpec, as its option's type (the config schema repeats them).
PIXELS = integer(8, 4096)
CHANNEL = real(0, 255)
FIELD_TYPES = {
    "image_size": IMAGE_SIZE,
    "min_digit_size": PIXELS,
    "max_digit_size": PIXELS,
    "max_shift": integer(0, 4096),
    "background_max": CHANNEL,
    "foreground_min": CHANNEL,
    "noise_std": CHANNEL,
    "val_fraction": real(0, 1, exclusive_low=True, exclusive_high=True),
    "images_per_class": integer(0, 1_000_000),
    "seed": SEED,
}


# Config keys the workflow passes to each step (``*``: any name, ``[]``: each item), each as the
# step's option spelled the same way; tests/test_vocabulary.py checks them against the schema,
# these parsers and the rules.
CONFIG_KEYS = {
    "digits": ("seed", *(f"images.datasets.*.{key}" for key in FIELD_TYPES if key != "seed")),
    "lmdb": ("images.datasets.*.root",),
    "cifar": ("images.datasets.*.root", "images.datasets.*.source"),
}


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    steps = parser.add_subparsers(dest="step", required=True, metavar="<step>")

    digits = steps.add_parser("digits", help="draw scikit-learn digits as an image folder (train/val)")
    digits.add_argument("--outdir", type=OutputDir, required=True)
    for field in dataclasses.fields(DigitsSpec):
        digits.add_argument(
            "--" + field.name.replace("_", "-"), type=FIELD_TYPES[field.name], default=field.default
        )

    folder = steps.add_parser("lmdb", help="ImageFolder root/<split>/<class>/<image> to one LMDB")
    folder.add_argument("--root", type=InputDir, required=True)
    folder.add_argument("--split", required=True)
    folder.add_argument(
        "--outdir", type=OutputDir, required=True, help="LMDB directory to create (replaced atomically)"
    )
    folder.add_argument(
        "--verify",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="check that every file parses as an image",
    )

    cifar = steps.add_parser("cifar", help="CIFAR-10/100 python batches to one LMDB")
    cifar.add_argument("--root", type=InputDir, required=True, help="directory of the python batches")
    cifar.add_argument("--source", required=True, choices=("cifar10", "cifar100"))
    cifar.add_argument("--split", required=True, choices=("train", "test"))
    cifar.add_argument(
        "--outdir", type=OutputDir, required=True, help="LMDB directory to create (replaced atomically)"
    )

    check = steps.add_parser(
        "check", help="read and decode every record of an image LMDB (in a child process)"
    )
    check.add_argument("--lmdb", type=InputDir, required=True, help="LMDB directory")
    check.add_argument("--timeout-s", type=TIMEOUT_S, default=3600.0)
    return parser


def run(args: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if args.step == "digits":
        from membench.data.images.generate import generate_digits_folder

        spec = DigitsSpec(**{f.name: getattr(args, f.name) for f in dataclasses.fields(DigitsSpec)})
        counts = generate_digits_folder(args.outdir, spec)
        logging.info("wrote %s images to %s", counts, args.outdir)
    elif args.step == "lmdb":
        from membench.data.images.folder import folder_to_lmdb

        logging.info("wrote %s", folder_to_lmdb(args.root, args.split, args.outdir, verify=args.verify))
    elif args.step == "cifar":
        from membench.data.images.cifar import cifar_to_lmdb

        logging.info("wrote %s", cifar_to_lmdb(args.root, args.source, args.split, args.outdir))
    elif args.step == "check":
        from membench.data.images.lmdb_store import check_lmdb

        logging.info("%s: %d records read and decoded", args.lmdb, check_lmdb(args.lmdb, args.timeout_s))
