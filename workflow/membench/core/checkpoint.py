"""Training checkpoints and the one resume rule of every training job.

A checkpoint is written atomically and read without executing code (``weights_only=True``). It
carries the identity of the run that wrote it (:func:`run_identity`): the options that shape the
result, the content of the input files, and the version of the code. A run resumes only from a
checkpoint of the same identity; on any difference it logs one line saying what differs and starts
over, and its first epoch replaces the old checkpoint. So a job rerun after its data, options or
code changed never reports the old model as a result of the new inputs.

A checkpoint serves a run that was stopped: one saved with ``finished=True`` (after the last epoch)
is not resumed, so that a finished job run again (``snakemake --forcerun``, or another device or
thread count, which the identity leaves out) trains and times again instead of reporting the old
run's times under the new settings.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import stat
from pathlib import Path
from typing import Any, Iterable, Mapping

import torch

from membench.core import atomic
from membench.core.errors import InputError
from membench.core.validate import regular_file

__all__ = [
    "FINISHED_KEY",
    "IDENTITY_KEY",
    "code_version",
    "load_checkpoint",
    "matches_identity",
    "resume_checkpoint",
    "run_identity",
    "save_checkpoint",
    "tensors_sha256",
]

IDENTITY_KEY = "run_identity"
FINISHED_KEY = "run_finished"
_log = logging.getLogger(__name__)
_SOURCE_SUFFIXES = {".py", ".cpp", ".cu", ".h"}
_PACKAGE_ROOT = Path(__file__).resolve().parents[1]
_CHUNK_BYTES = 1 << 20


def code_version(*packages: str) -> str:
    """SHA-256 of the sources (Python, C++, CUDA) of membench's ``packages`` (e.g. ``"core"``,
    ``"hotconv"``), names and contents, so that any change of the code a run depends on shows."""
    digest = hashlib.sha256()
    for package in sorted(packages):
        root = _PACKAGE_ROOT / package
        for path in sorted(p for p in root.rglob("*") if p.suffix in _SOURCE_SUFFIXES and p.is_file()):
            digest.update(path.relative_to(_PACKAGE_ROOT).as_posix().encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def tensors_sha256(*tensors: torch.Tensor) -> str:
    """SHA-256 of tensors' dtypes, shapes and bytes: the identity of data loaded into memory."""
    digest = hashlib.sha256()
    for tensor in tensors:
        flat = tensor.detach().cpu().contiguous()
        digest.update(f"{flat.dtype}{tuple(flat.shape)}".encode())
        digest.update(flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b"")
    return digest.hexdigest()


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _directory_fingerprint(root: Path) -> str:
    """SHA-256 of every file's relative path, size and modification time under ``root``: a data
    directory (binaries, an LMDB, image batches) can hold far more bytes than are worth rereading."""
    digest = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            info = os.stat(path)
            digest.update(
                f"{path.relative_to(root).as_posix()}\0{info.st_size}\0{info.st_mtime_ns}\n".encode()
            )
    return digest.hexdigest()


def _input_identity(path: str | os.PathLike) -> str:
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
        if stat.S_ISDIR(mode):
            return "directory:" + _directory_fingerprint(path)
        if stat.S_ISREG(mode):
            return "sha256:" + _file_sha256(path)
    except OSError as exc:
        raise InputError(path, f"cannot be read to identify the run ({exc.strerror or exc})") from None
    raise InputError(path, f"is {atomic.file_kind(mode)}, not a regular file or directory")


def run_identity(
    options: Mapping[str, Any], inputs: Iterable[str | os.PathLike] = (), code: str = ""
) -> dict:
    """What determines a training run's result, to store in its checkpoint and compare on resume.

    Parameters
    ----------
    options : mapping
        The settings that shape the result (JSON-serialisable); options that do not (output paths,
        the device, logging) are left out by the caller so that a killed run may resume with them
        changed.
    inputs : paths
        Input files, identified by the SHA-256 of their content, and data directories, identified
        by every file's relative path, size and modification time.
    code : str
        The code version (:func:`code_version` of the packages the run executes).
    """
    return {
        "options": json.loads(json.dumps(dict(options), sort_keys=True, default=str)),
        "inputs": {
            str(os.fspath(path)): _input_identity(path) for path in inputs
        },  # plain str: weights_only loads it
        "code": code,
    }


def _same_run(found: Any, expected: dict) -> bool:
    """Same options, input contents (in order; where the inputs lie may differ) and code."""
    return (
        isinstance(found, dict)
        and found.get("options") == expected["options"]
        and list((found.get("inputs") or {}).values()) == list(expected["inputs"].values())
        and found.get("code") == expected["code"]
    )


def _differences(found: Any, expected: dict) -> str:
    if not isinstance(found, dict):
        return "it records no run identity (written by an older membench)"
    parts = []
    old_options, new_options = found.get("options") or {}, expected["options"]
    changed = sorted(
        k for k in old_options.keys() | new_options.keys() if old_options.get(k) != new_options.get(k)
    )
    if changed:
        parts.append("options changed: " + ", ".join(changed))
    old_inputs, new_inputs = found.get("inputs") or {}, expected["inputs"]
    if list(old_inputs.values()) != list(new_inputs.values()) or len(old_inputs) != len(new_inputs):
        names = [Path(p).name for p in new_inputs if old_inputs.get(p) != new_inputs[p]] or [
            "their order or number"
        ]
        parts.append("input files changed: " + ", ".join(names))
    if found.get("code") != expected["code"]:
        parts.append("the code changed")
    return "; ".join(parts) or "its identity differs"


def matches_identity(found: Any, identity: dict, path: str | os.PathLike) -> bool:
    """Whether a saved result at ``path`` with identity ``found`` was made by a run of ``identity``;
    if not, one warning line says what differs (the caller then starts over)."""
    if _same_run(found, identity):
        return True
    _log.warning("%s: not resumed, the run starts over: %s", path, _differences(found, identity))
    return False


def save_checkpoint(
    path: str | os.PathLike, state: dict, identity: dict | None = None, *, finished: bool = False
) -> None:
    """Save ``state`` (tensors, state dicts, numbers, strings) to ``path`` atomically, with the
    run's ``identity`` (:func:`run_identity`) for :func:`resume_checkpoint`; ``finished``: the run
    trained its last epoch (it is then not resumed)."""
    if identity is not None:
        state = {**state, IDENTITY_KEY: identity, FINISHED_KEY: finished}
    with atomic.atomic_path(path, suffix=".pt") as tmp:
        torch.save(state, tmp)


def load_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict | None:
    """Load a checkpoint written by :func:`save_checkpoint`; ``None`` if there is none yet."""
    path = Path(path)
    if not path.exists():
        return None
    regular_file(path)  # torch.load would wait forever on a named pipe
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError:
        # torch's message advises weights_only=False, which would run whatever code the file names.
        raise InputError(
            path,
            "not a membench checkpoint: it holds pickled objects other than tensors and plain "
            "values, or is damaged; membench never loads pickled code",
        ) from None
    except Exception as exc:  # a torn or foreign file must not crash into a traceback
        raise InputError(path, f"not a readable membench checkpoint ({exc})") from None


def resume_checkpoint(
    path: str | os.PathLike, identity: dict, map_location: str | torch.device = "cpu"
) -> dict | None:
    """The checkpoint at ``path`` if it was written by a stopped run of the same ``identity``, else
    ``None``.

    A checkpoint of another identity (other options, input files or code) is not resumed from: one
    warning line says what differs, the run starts over, and its next checkpoint replaces it. Nor is
    a finished run's (module docstring): one line says so.
    """
    state = load_checkpoint(path, map_location)
    if state is None:
        return None
    if not matches_identity(state.get(IDENTITY_KEY), identity, path):
        return None
    if state.get(FINISHED_KEY):
        _log.info("%s: the run finished; it runs again, so that its figures are measured again", path)
        return None
    _log.info("%s: same options, inputs and code; resuming", path)
    return state
