"""Adversarial but realistic command lines, each run as a user runs it (``membench ...`` in a process
of its own, with a time limit: :func:`faults.run_membench`), and each outcome sorted: a clear
one-line error (or a correct run), a traceback, a hang, a user file lost, code executed, a stale
result. The counts are the figures of docs/reliability.md ("Adversarial command lines"); with
``MEMBENCH_FAULT_REPORT`` set they are written there too.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import pickle
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import faults
import pytest

from membench.core.metrics import MEASURED_FIELDS

TIME_LIMIT_S = 120
OUTCOMES: dict[str, int] = {}


@dataclass
class Case:
    """One command line; ``setup(tmp)`` makes its files and returns its arguments and the user's files."""

    name: str
    setup: Callable[[Path], tuple[list[str], list[Path]]]
    expect_error: str | None = None  # a text the one-line error must hold; None: the command succeeds
    check: Callable[[Path], str | None] | None = (
        None  # after the run: None, or what went wrong (a stale result)
    )
    before: list[list[str]] = field(default_factory=list)  # commands run first (fixtures made by membench)


def membench(argv: list[str], cwd: Path) -> faults.Ran:
    return faults.run_membench(argv, cwd, TIME_LIMIT_S)


def _digest(paths: list[Path]) -> dict[Path, str]:
    found = {}
    for path in paths:
        if path.is_dir():
            for item in sorted(path.rglob("*")):
                if item.is_file():
                    found[item] = hashlib.sha256(item.read_bytes()).hexdigest()
        elif path.is_file():
            found[path] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            found[path] = "missing" if not os.path.lexists(path) else "special"
    return found


# -- inputs -----------------------------------------------------------------------------------------
METADATA = "sha,timestamp,family\n" + "".join(
    f"{i:064x},2020-01-{i + 1:02d},{'fam' if i % 2 else ''}\n" for i in range(12)
)


def _bodmas(tmp: Path) -> tuple[Path, Path]:
    metadata, binaries = tmp / "metadata.csv", tmp / "binaries"
    metadata.write_text(METADATA)
    binaries.mkdir(exist_ok=True)
    for i in range(12):
        (binaries / f"{i:064x}.exe").write_bytes(b"MZ" + bytes([i]) * (200 + i))
    return metadata, binaries


def _fold(tmp: Path, *extra: str) -> list[str]:
    metadata, binaries = _bodmas(tmp)
    return [
        "bodmas",
        "fold",
        "--metadata",
        str(metadata),
        "--binaries",
        str(binaries),
        "--dataset",
        "d",
        "--fold",
        "1",
        "--outdir",
        str(tmp / "folds"),
        "--folds",
        "2",
        *extra,
    ]


def _with_binary(content: bytes, mode: str = "write") -> Callable[[Path], tuple[list[str], list[Path]]]:
    def setup(tmp: Path):
        argv = _fold(tmp)
        target = tmp / "binaries" / f"{3:064x}.exe"
        target.unlink()
        if mode == "fifo":
            os.mkfifo(target)
        elif mode == "link to fifo":
            target.symlink_to(_fifo(tmp / "binaries", "pipe"))
        else:
            target.write_bytes(content)
        return argv, [tmp / "metadata.csv", tmp / "binaries"]

    return setup


def _gzip(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


def _graphs(tmp: Path) -> list[str]:
    names = ["data.v", "data.e", "pattern.v", "pattern.e"]
    (tmp / "data.v").write_text("0 1.0 2.0\n1 2.0 1.0\n2 0.5 0.5\n")
    (tmp / "data.e").write_text("0 1 1.0\n1 2 0.5\n")
    (tmp / "pattern.v").write_text("0 1.0 2.0\n1 2.0 1.0\n")
    (tmp / "pattern.e").write_text("0 1 1.0\n")
    return [str(tmp / n) for n in names]


MEMNET_CSV = (
    "Filename,Depth,Activations-Params,Activation Function,Total Activations,Total Parameters,Batch Size,"
    "Max GPU Memory (MiB)\n"
    + "".join(
        f"input:{4 + i}_output:2_arch:uniform.out,1,\"[('linear', {2 + i}, {10 + i})]\",ReLU,"
        f"{2 + i},{10 + i},{8 + i},{1500 + 40 * i}\n"
        for i in range(12)
    )
)


def _memnet(tmp: Path, text: str = MEMNET_CSV) -> Path:
    path = tmp / "mlp_data.csv"
    path.write_text(text)
    return path


def _file(tmp: Path, name: str, content: bytes | str = b"user data\n") -> Path:
    path = tmp / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


def _fifo(tmp: Path, name: str) -> Path:
    path = tmp / name
    os.mkfifo(path)
    return path


def _simple(build: Callable[[Path], list[str]], *protected: str):
    def setup(tmp: Path):
        return build(tmp), [tmp / p for p in protected]

    return setup


class _HugeArray:
    """Pickles as a NumPy array of shape (2**40, 3072) whose data is empty: 3 PiB declared in a few bytes."""

    def __reduce__(self):
        import numpy as np

        return (
            np.core.multiarray._reconstruct,
            (np.ndarray, (0,), b"b"),
            (1, (2**40, 3072), np.dtype("uint8"), False, b""),
        )


def _cifar_batch(tmp: Path) -> Path:
    root = tmp / "batches"
    root.mkdir()
    (root / "data_batch_1").write_bytes(pickle.dumps({b"data": _HugeArray(), b"labels": [0]}, protocol=2))
    (root / "batches.meta").write_bytes(pickle.dumps({b"label_names": [b"a"]}, protocol=2))
    return root


def _lmdb_with_length(tmp: Path, length: int) -> Path:
    import lmdb

    from membench.data.images.lmdb_store import FORMAT

    path = tmp / "db"
    env = lmdb.open(str(path), map_size=1 << 20, subdir=True)
    with env.begin(write=True) as txn:
        txn.put(b"__len__", json.dumps(length).encode())
        txn.put(b"__classes__", json.dumps(["a"]).encode())
        txn.put(b"__format__", json.dumps(FORMAT).encode())
    env.close()
    return path


# Command lines of words without spaces, written as one string each.
HOTCONV_TRAIN = (
    "hotconv train --variant malconv --train folds/train_d_fold_1.csv --val folds/val_d_fold_1.csv"
    " --test folds/test_d_fold_1.csv --classes classes.csv --binaries binaries --dataset d --fold 1"
    " --outdir job --epochs 1 --batch-size 4 --max-len 512 --num-filters 4 --device cpu --sample-interval-s 0"
).split()
HOTCONV_FOLD = (
    "bodmas fold --metadata metadata.csv --binaries binaries --dataset d --fold 1 --outdir folds --folds 2"
).split()
MEMNET_MEASURE = (
    "memnet measure --configs configs.csv --family mlp --records-dir records --out measured.csv --device cpu"
    " --train-steps 1 --threads 1 --sample-interval-s 0"
).split()
METRICS = {
    **dict.fromkeys(MEASURED_FIELDS),
    "system": "x",
    "variant": "v",
    "dataset": "d",
    "device": "cpu",
    "device_name": "cpu",
    "torch_version": "2",
    "seed": 0,
    "batch_size": 1,
    "wall_s": 1.0,
}

CASES = [
    # 2. outputs onto inputs, and outputs onto a user's files
    Case(
        "appclass run --out-npy onto an input graph",
        lambda t: (
            ["appclass", "run", *_graphs(t), "--out-npy", str(t / "data.e"), "--kernels", "torch"],
            [t / "data.e"],
        ),
        "is the input",
    ),
    Case(
        "appclass run --out-npy onto a user's file",
        lambda t: (
            ["appclass", "run", *_graphs(t), "--out-npy", str(_file(t, "mine.npy")), "--kernels", "torch"],
            [t / "mine.npy"],
        ),
        "not written by membench",
    ),
    Case(
        "bodmas classes --out onto its metadata",
        lambda t: (
            ["bodmas", "classes", "--metadata", str(_bodmas(t)[0]), "--out", str(t / "metadata.csv")],
            [t / "metadata.csv"],
        ),
        "is the input",
    ),
    Case(
        "bodmas classes --out onto a hard link of its metadata",
        lambda t: (
            [
                "bodmas",
                "classes",
                "--metadata",
                str(_bodmas(t)[0]),
                "--out",
                str((os.link(t / "metadata.csv", t / "link.csv"), t / "link.csv")[1]),
            ],
            [t / "metadata.csv"],
        ),
        "is the input",
    ),
    Case(
        "bodmas classes --out onto a symlink to its metadata",
        lambda t: (
            [
                "bodmas",
                "classes",
                "--metadata",
                str(_bodmas(t)[0]),
                "--out",
                str(((t / "alias.csv").symlink_to(t / "metadata.csv"), t / "alias.csv")[1]),
            ],
            [t / "metadata.csv"],
        ),
        "is the input",
    ),
    Case(
        "bodmas fold --outdir holding its metadata",
        lambda t: (
            _fold(t)[:-4] + ["--outdir", str(t), "--folds", "2"],
            [t / "metadata.csv", t / "binaries"],
        ),
        "contains the input",
    ),
    Case(
        "bodmas fold --outdir an existing file",
        lambda t: (
            _fold(t)[:-4] + ["--outdir", str(_file(t, "notes.txt")), "--folds", "2"],
            [t / "notes.txt"],
        ),
        "not a directory",
    ),
    Case(
        "memnet evaluate --out onto its --data",
        lambda t: (
            [
                "memnet",
                "evaluate",
                "--data",
                str(_memnet(t)),
                "--family",
                "mlp",
                "--out",
                str(t / "mlp_data.csv"),
            ],
            [t / "mlp_data.csv"],
        ),
        "is the input",
    ),
    Case(
        "memnet evaluate --out-predictions onto a user's file",
        lambda t: (
            [
                "memnet",
                "evaluate",
                "--data",
                str(_memnet(t)),
                "--family",
                "mlp",
                "--out",
                str(t / "e.csv"),
                "--out-predictions",
                str(_file(t, "p.csv")),
            ],
            [t / "p.csv"],
        ),
        "not written by membench",
    ),
    Case(
        "table metrics --out onto one of its metrics",
        lambda t: (
            ["table", "metrics", "--out", str(_file(t, "metrics.json", "{}")), str(t / "metrics.json")],
            [t / "metrics.json"],
        ),
        "is the input",
    ),
    Case(
        "table metrics: the Parquet twin would replace a user's file",
        lambda t: (
            [
                "table",
                "metrics",
                "--out",
                str(t / "t.csv"),
                str(_file(t, "metrics.json", json.dumps(METRICS))),
            ],
            [_file(t, "t.parquet")],
        ),
        "not written by membench",
    ),
    Case(
        "report table --out onto its --csv",
        lambda t: (
            [
                "report",
                "table",
                "--name",
                "x",
                "--csv",
                str(_file(t, "x.csv", "a\n1\n")),
                "--out",
                str(t / "x.csv"),
            ],
            [t / "x.csv"],
        ),
        "is the input",
    ),
    Case(
        "images lmdb --outdir onto its own --root",
        lambda t: (
            [
                "images",
                "lmdb",
                "--root",
                str((t / "root").mkdir() or t / "root"),
                "--split",
                "train",
                "--outdir",
                str(t / "root"),
            ],
            [t / "root"],
        ),
        "is the input",
    ),
    Case(
        "images digits --outdir onto a user's directory",
        lambda t: (
            [
                "images",
                "digits",
                "--outdir",
                str((t / "mine").mkdir() or _file(t / "mine", "keep.txt").parent),
            ],
            [t / "mine"],
        ),
        "not a membench output",
    ),
    Case(
        "images digits rebuilt over a user's file placed in the previous output",
        lambda t: (
            [
                "images",
                "digits",
                "--outdir",
                str(t / "digits"),
                "--images-per-class",
                "2",
                "--image-size",
                "16",
                "--min-digit-size",
                "10",
                "--max-digit-size",
                "14",
            ],
            [t / "digits" / "notes.txt"],
        ),
        "which membench did not write there",
        before=[
            [
                "images",
                "digits",
                "--outdir",
                "digits",
                "--images-per-class",
                "2",
                "--image-size",
                "16",
                "--min-digit-size",
                "10",
                "--max-digit-size",
                "14",
            ],
            ["#user-file", "digits/notes.txt"],
        ],
    ),
    Case(
        "meter plot --out onto a user's PNG",
        lambda t: (
            [
                "meter",
                "plot",
                "--memlog",
                str(_file(t, "memlog.csv", "t_s,rss_mib\n0,1\n")),
                "--out",
                str(_file(t, "figure.png")),
            ],
            [t / "figure.png"],
        ),
        "not written by membench",
    ),
    Case(
        "hotconv sweep-table --out onto a named pipe",
        lambda t: (
            [
                "hotconv",
                "sweep-table",
                "--out",
                str(_fifo(t, "pipe.csv")),
                str(_file(t, "metrics.json", "{}")),
            ],
            [t / "metrics.json"],
        ),
        "named pipe",
    ),
    Case(
        "appclass generate-rmat with one path for both outputs",
        _simple(
            lambda t: [
                "appclass",
                "generate-rmat",
                "--scale",
                "3",
                "--vertices",
                str(t / "g"),
                "--edges",
                str(t / "g"),
            ]
        ),
        "two outputs",
    ),
    Case(
        "appclass generate-pattern --vertices onto its input through ..",
        lambda t: (
            [
                "appclass",
                "generate-pattern",
                *_graphs(t)[:2],
                "--max-pattern-nodes",
                "2",
                "--vertices",
                str(t / "sub" / ".." / "data.v"),
                "--edges",
                str(t / "p.e"),
            ],
            [t / "data.v"],
        ),
        "is the input",
    ),
    Case(
        "report provenance --out onto its --default-config",
        lambda t: (
            [
                "report",
                "provenance",
                "--command",
                "x",
                "--config-json",
                str(_file(t, "c.json", "{}")),
                "--default-config",
                str(_file(t, "config.yaml", "seed: 0\n")),
                "--schema",
                str(_file(t, "s.yaml", "{}")),
                "--checkout",
                str(t),
                "--out",
                str(t / "config.yaml"),
            ],
            [t / "config.yaml"],
        ),
        "is the input",
    ),
    # 4. no input blocks
    Case("bodmas fold: a named pipe named like a binary", _with_binary(b"", "fifo"), "named pipe"),
    Case(
        "bodmas classes: a named pipe as metadata",
        _simple(
            lambda t: ["bodmas", "classes", "--metadata", str(_fifo(t, "m.csv")), "--out", str(t / "c.csv")]
        ),
        "named pipe",
    ),
    Case(
        "appclass run: a named pipe as the edge table",
        lambda t: (
            [
                "appclass",
                "run",
                *(_graphs(t)[:1]),
                str((os.remove(t / "data.e"), _fifo(t, "data.e"))[1]),
                *_graphs_rest(t),
            ],
            [],
        ),
        "named pipe",
    ),
    Case(
        "memnet evaluate: a named pipe as --data",
        _simple(
            lambda t: [
                "memnet",
                "evaluate",
                "--data",
                str(_fifo(t, "d.csv")),
                "--family",
                "mlp",
                "--out",
                str(t / "e.csv"),
            ]
        ),
        "named pipe",
    ),
    Case(
        "table metrics: a named pipe as a metrics file",
        _simple(lambda t: ["table", "metrics", "--out", str(t / "t.csv"), str(_fifo(t, "metrics.json"))]),
        "named pipe",
    ),
    Case(
        "table metrics: a character device as a metrics file",
        _simple(lambda t: ["table", "metrics", "--out", str(t / "t.csv"), "/dev/zero"]),
        "character device",
    ),
    Case(
        "images check: a named pipe as data.mdb",
        _simple(
            lambda t: [
                "images",
                "check",
                "--lmdb",
                str((t / "db").mkdir() or (_fifo(t / "db", "data.mdb").parent)),
            ]
        ),
        "named pipe",
    ),
    Case(
        "bodmas stats: a directory as a fold file",
        _simple(
            lambda t: [
                "bodmas",
                "stats",
                "--out",
                str(t / "s.csv"),
                str((t / "fold.csv").mkdir() or t / "fold.csv"),
            ]
        ),
        "is a directory",
    ),
    Case(
        "hotconv train: a named pipe as classes.csv",
        lambda t: ((_bodmas(t), _fifo(t, "classes.csv"), HOTCONV_TRAIN)[2], []),
        "named pipe",
        before=[HOTCONV_FOLD],
    ),
    Case(
        "report summary: a named pipe as --headline",
        _simple(
            lambda t: [
                "report",
                "summary",
                "--table",
                str(_file(t, "hotconv.csv", "variant\nhotconv\n")),
                "--headline",
                str(_fifo(t, "hotconv.yaml")),
                "--provenance",
                str(_file(t, "p.json", "{}")),
                "--out-html",
                str(t / "s.html"),
                "--out-fragment",
                str(t / "f.html"),
                "--out-csv",
                str(t / "s.csv"),
                "--out-verdicts",
                str(t / "v.csv"),
            ]
        ),
        "named pipe",
    ),
    Case(
        "meter plot: a named pipe as --memlog",
        _simple(
            lambda t: ["meter", "plot", "--memlog", str(_fifo(t, "memlog.csv")), "--out", str(t / "m.png")]
        ),
        "named pipe",
    ),
    Case(
        "memnet predict: a named pipe as estimators.pt",
        _simple(
            lambda t: [
                "memnet",
                "predict",
                "--model",
                "torch.nn:Identity",
                "--batch-size",
                "2",
                "--input-shape",
                "4",
                "--estimators",
                str((t / "est").mkdir() or _fifo(t / "est", "estimators.pt").parent),
            ]
        ),
        "named pipe",
    ),
    Case(
        "bodmas fold: a symbolic link to a named pipe as a binary",
        _with_binary(b"", "link to fifo"),
        "named pipe",
    ),
    # 5. damaged gzip binaries
    Case("bodmas fold: a truncated gzip binary", _with_binary(_gzip(b"MZ" * 4000)[:-9]), "gzip"),
    Case("bodmas fold: a two-byte gzip binary", _with_binary(b"\x1f\x8b"), "gzip"),
    Case(
        "bodmas fold: a gzip binary whose trailer says 0 bytes",
        _with_binary(_gzip(b"MZ" * 100)[:-4] + b"\0\0\0\0"),
        "gzip",
    ),
    Case(
        "bodmas fold: a gzip binary with a wrong CRC",
        _with_binary(
            _gzip(b"MZ" * 100)[:-8]
            + (zlib.crc32(b"x") & 0xFFFFFFFF).to_bytes(4, "little")
            + (200).to_bytes(4, "little")
        ),
        "gzip",
    ),
    Case("bodmas fold: a gzip binary of nothing", _with_binary(_gzip(b"")), "empty"),
    # 6. ranges, and sizes checked before memory is asked for
    Case(
        "appclass run --threads -3",
        lambda t: (["appclass", "run", *_graphs(t), "--threads", "-3"], []),
        "--threads",
    ),
    Case(
        "appclass generate-rmat --scale 60",
        _simple(
            lambda t: [
                "appclass",
                "generate-rmat",
                "--scale",
                "60",
                "--vertices",
                str(t / "v"),
                "--edges",
                str(t / "e"),
            ]
        ),
        "--scale",
    ),
    Case("bodmas fold --seed 1e29", lambda t: (_fold(t, "--seed", "1e29"), []), "--seed"),
    Case(
        "memnet evaluate: Batch Size inf",
        _simple(
            lambda t: [
                "memnet",
                "evaluate",
                "--data",
                str(_memnet(t, MEMNET_CSV.replace(",8,1500\n", ",inf,1500\n"))),
                "--family",
                "mlp",
                "--out",
                str(t / "e.csv"),
            ]
        ),
        "Batch Size",
    ),
    Case(
        "memnet evaluate: activations of 1e30",
        _simple(
            lambda t: [
                "memnet",
                "evaluate",
                "--data",
                str(_memnet(t, MEMNET_CSV.replace(",2,10,8,1500", ",1e30,10,8,1500"))),
                "--family",
                "mlp",
                "--out",
                str(t / "e.csv"),
            ]
        ),
        "Total Activations",
    ),
    Case(
        "images cifar: a 63-byte batch declaring a huge array",
        _simple(
            lambda t: [
                "images",
                "cifar",
                "--root",
                str(_cifar_batch(t)),
                "--source",
                "cifar10",
                "--split",
                "train",
                "--outdir",
                str(t / "db"),
            ]
        ),
        "data_batch_1",
    ),
    Case(
        "images check: __len__ of 2**70",
        _simple(lambda t: ["images", "check", "--lmdb", str(_lmdb_with_length(t, 2**70))]),
        "__len__",
    ),
    Case(
        "robust train --batch-size 0",
        _simple(lambda t: ["robust", "train", "--outdir", str(t / "j"), "--batch-size", "0"]),
        "--batch-size",
    ),
    Case(
        "robust train --timeout-s nan",
        _simple(lambda t: ["robust", "train", "--outdir", str(t / "j"), "--timeout-s", "nan"]),
        "--timeout-s",
    ),
    Case("hotconv train --epochs 1e9", _simple(lambda t: HOTCONV_TRAIN + ["--epochs", "1e9"]), "--epochs"),
    Case(
        "division memory --image-size -32",
        _simple(
            lambda t: [
                "division",
                "memory",
                "--outdir",
                str(t / "j"),
                "--variant",
                "vanilla",
                "--batch-size",
                "2",
                "--image-size",
                "-32",
            ]
        ),
        "--image-size",
    ),
    # 7. smaller
    Case(
        "a 20 MB line in a fold file is echoed in 200 characters",
        _simple(
            lambda t: [
                "bodmas",
                "stats",
                "--out",
                str(t / "s.csv"),
                str(_file(t, "train_d_fold_1.csv", "x" * 20_000_000 + "\n")),
            ]
        ),
        "train_d_fold_1.csv",
    ),
    Case(
        "an integer of 2**64 as a timestamp",
        lambda t: (
            _fold(t)[:2]
            + ["--metadata", str(_file(t, "m.csv", METADATA.replace("2020-01-02", str(2**64))))]
            + _fold(t)[4:],
            [t / "m.csv"],
        ),
        str(2**64),
    ),
    Case(
        "an integer of 2**64 as a class label",
        _simple(
            lambda t: [
                "bodmas",
                "stats",
                "--out",
                str(t / "s.csv"),
                str(_file(t, "train_d_fold_1.csv", f"FileName,Label,File_Size\nab,{2**64},3\n")),
            ]
        ),
        str(2**64),
    ),
    Case(
        "a fold file of another name",
        _simple(
            lambda t: [
                "bodmas",
                "stats",
                "--out",
                str(t / "s.csv"),
                str(_file(t, "fold.csv", "FileName,Label,File_Size\n")),
            ]
        ),
        "name must be",
    ),
    Case(
        "a pickled checkpoint is refused without loading code",
        lambda t: (
            [
                "robust",
                "train",
                "--outdir",
                str(t / "job"),
                "--epochs",
                "1",
                "--train-limit",
                "64",
                "--test-limit",
                "32",
                "--eval-attack-steps",
                "1",
                "--eval-restarts",
                "1",
                "--guard-samples",
                "16",
                "--attack-steps",
                "1",
                "--hidden-units",
                "8",
                "--device",
                "cpu",
            ],
            [_pickled_checkpoint(t)],
        ),
        "never loads pickled code",
    ),
]


def _graphs_rest(tmp: Path) -> list[str]:
    return [str(tmp / "pattern.v"), str(tmp / "pattern.e")]


def _pickled_checkpoint(tmp: Path) -> Path:
    job = tmp / "job"
    job.mkdir()
    sentinel = tmp / "executed"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {sentinel}",))

    path = job / "checkpoint.pt"
    path.write_bytes(pickle.dumps(Payload()))
    return path


def _run_before(commands: list[list[str]], tmp: Path) -> None:
    for command in commands:
        if command[0] == "#user-file":
            (tmp / command[1]).write_text("mine\n")
        elif command[0] == "#drop-last-line":
            lines = (tmp / command[1]).read_text().splitlines(keepends=True)
            (tmp / command[1]).write_text("".join(lines[:-1]))
        elif command[0] == "#double-batch":
            import pandas as pd

            table = pd.read_csv(tmp / command[1])
            table["batch"] *= 2
            table.to_csv(tmp / command[1], index=False)
        else:
            done = membench(command, tmp)
            assert done.returncode == 0, done.stderr[-1500:]


def _trained_anew(tmp: Path) -> str | None:
    record = json.loads((tmp / "job" / "metrics.json").read_text())
    return None if record["resumed_from_epoch"] == 0 else f"resumed from epoch {record['resumed_from_epoch']}"


def _measured_anew(tmp: Path) -> str | None:
    edited = (tmp / "configs.csv").stat().st_mtime_ns
    old = [p.name for p in (tmp / "records").glob("*.json") if p.stat().st_mtime_ns < edited]
    return f"records measured before the edit reused: {old}" if old else None


STALE_CASES = [
    Case(
        "hotconv train rerun after the fold was re-split",
        lambda t: (_bodmas(t), (HOTCONV_TRAIN, []))[1],
        None,
        _trained_anew,
        before=[
            HOTCONV_FOLD,
            ["bodmas", "classes", "--metadata", "metadata.csv", "--out", "classes.csv"],
            HOTCONV_TRAIN,
            ["#drop-last-line", "folds/train_d_fold_1.csv"],
        ],
    ),
    Case(
        "memnet measure rerun after the configuration table was edited",
        lambda t: (_write_configs(t), (MEMNET_MEASURE, []))[1],
        None,
        _measured_anew,
        before=[MEMNET_MEASURE, ["#double-batch", "configs.csv"]],
    ),
]
CASES += STALE_CASES


def _write_configs(tmp: Path) -> None:
    from membench.memnet.generate import generate

    generate("mlp", 2, 0, {"input": (4, 8), "output": (2, 3), "depth": (1, 1), "batch": (2, 2)}).to_csv(
        tmp / "configs.csv", index=False
    )


@pytest.mark.parametrize(
    "case", [pytest.param(c, id=c.name, marks=[pytest.mark.slow] if c in STALE_CASES else []) for c in CASES]
)
def test_adversarial_case(case: Case, tmp_path: Path):
    argv, protected = case.setup(tmp_path)
    _run_before(case.before, tmp_path)
    before = _digest(protected)
    done = membench(argv, tmp_path)
    if done.returncode is None:
        _tally("hangs")
        pytest.fail(f"hung for {TIME_LIMIT_S} s")
    lost = _digest(protected) != before
    executed = (tmp_path / "executed").exists()
    stale = case.check(tmp_path) if case.check else None
    traceback = "Traceback" in done.stderr or done.returncode not in (0, 2)
    error_lines = [
        line for line in done.stderr.splitlines() if line.startswith("membench") and "error:" in line
    ]
    clear = (
        done.returncode == 2
        and len(error_lines) == 1
        and len(error_lines[0]) <= 700
        and (case.expect_error is None or case.expect_error in error_lines[0])
    )
    if case.expect_error is None:
        clear = done.returncode == 0
    for outcome, happened in (
        ("tracebacks", traceback),
        ("user files lost", lost),
        ("code executed", executed),
        ("stale results", stale is not None),
        ("clear errors", clear and not lost),
    ):
        if happened:
            _tally(outcome)
    _tally("cases tried")
    assert not traceback, done.stderr[-2000:]
    assert not lost and not executed and stale is None, stale
    assert clear, f"exit {done.returncode}: {done.stderr[-1500:]}"


def _tally(outcome: str) -> None:
    OUTCOMES[outcome] = OUTCOMES.get(outcome, 0) + 1


@pytest.fixture(scope="module", autouse=True)
def _log_outcomes():
    yield
    faults.log_fault(
        "adversarial command lines",
        "bad input",
        OUTCOMES.get("cases tried", 0),
        outcomes={
            k: OUTCOMES.get(k, 0)
            for k in (
                "cases tried",
                "clear errors",
                "tracebacks",
                "hangs",
                "user files lost",
                "code executed",
                "stale results",
            )
        },
    )
    faults.record_survived(
        all(
            OUTCOMES.get(k, 0) == 0
            for k in ("tracebacks", "hangs", "user files lost", "code executed", "stale results")
        )
    )
