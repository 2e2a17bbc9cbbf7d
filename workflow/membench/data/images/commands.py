"""``membench images <step>``: generate the default image folder, build image LMDBs, check them."""

from __future__ import annotations

import argparse
import dataclasses
import logging

from membench.data.images.generate import DigitsSpec
from membench.core.options import InputDir, OutputDir


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    steps = parser.add_subparsers(dest="step", required=True, metavar="<step>")

    digits = steps.add_parser("digits", help="draw scikit-learn digits as an image folder (train/val)")
    digits.add_argument("--outdir", type=OutputDir, required=True)
    for field in dataclasses.fields(DigitsSpec):
        kind = {"int": int, "float": float}[field.type]
        digits.add_argument("--" + field.name.replace("_", "-"), type=kind, default=field.default)

    folder = steps.add_parser("lmdb", help="ImageFolder root/<split>/<class>/<image> to one LMDB")
    folder.add_argument("--root", type=InputDir, required=True)
    folder.add_argument("--split", required=True)
    folder.add_argument("--out", type=OutputDir, required=True, help="LMDB directory to create (replaced atomically)")
    folder.add_argument("--verify", action=argparse.BooleanOptionalAction, default=True,
                        help="check that every file parses as an image")

    cifar = steps.add_parser("cifar", help="CIFAR-10/100 python batches to one LMDB")
    cifar.add_argument("--batches", type=InputDir, required=True, help="directory of the python batches")
    cifar.add_argument("--variant", required=True, choices=("cifar10", "cifar100"))
    cifar.add_argument("--split", required=True, choices=("train", "test"))
    cifar.add_argument("--out", type=OutputDir, required=True)

    check = steps.add_parser("check", help="read and decode every record of an image LMDB (in a child process)")
    check.add_argument("--lmdb", type=InputDir, required=True, help="LMDB directory")
    check.add_argument("--timeout-s", type=float, default=3600.0)
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

        logging.info("wrote %s", folder_to_lmdb(args.root, args.split, args.out, verify=args.verify))
    elif args.step == "cifar":
        from membench.data.images.cifar import cifar_to_lmdb

        logging.info("wrote %s", cifar_to_lmdb(args.batches, args.variant, args.split, args.out))
    elif args.step == "check":
        from membench.data.images.lmdb_store import check_lmdb

        logging.info("%s: %d records read and decoded", args.lmdb, check_lmdb(args.lmdb, args.timeout_s))
