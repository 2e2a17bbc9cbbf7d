"""Data-parallel training across processes started by ``torchrun`` (or ``srun torchrun``).

A job launched as ``torchrun --nproc-per-node N -m membench.cli ...`` finds ``RANK``,
``WORLD_SIZE`` and ``LOCAL_RANK`` in its environment; :func:`process_group` joins the group they
describe (NCCL on GPUs, gloo on CPUs) and gives each process its own GPU. A caller may also accept
one task per rank started by ``srun`` (``from_slurm``): ranks then come from ``SLURM_PROCID``,
``SLURM_NTASKS`` and ``SLURM_LOCALID``, and the launcher sets ``MASTER_ADDR`` and ``MASTER_PORT``.
Launched plainly, the same code runs as one process with no group at all.
"""

from __future__ import annotations

import contextlib
import datetime
import os
from dataclasses import dataclass
from typing import Iterator

import torch
import torch.distributed as dist
from torch import nn

from membench.core.errors import InputError

__all__ = ["data_parallel", "launched_ranks", "per_process_batch", "process_group", "Ranks", "SINGLE_PROCESS"]


@dataclass(frozen=True)
class Ranks:
    """This process's place in the job: ``rank`` of ``world_size``, ``local_rank`` on its node."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        """The process that writes the job's outputs."""
        return self.rank == 0


SINGLE_PROCESS = Ranks()


def launched_ranks(from_slurm: bool = False) -> Ranks:
    """The ranks ``torchrun`` put in the environment (one process when it did not launch us); with
    ``from_slurm``, where torchrun did not, those of an ``srun`` task."""
    names = ("RANK", "WORLD_SIZE", "LOCAL_RANK")
    if from_slurm and "RANK" not in os.environ and "SLURM_PROCID" in os.environ:
        names = ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID")
    try:
        return Ranks(
            rank=int(os.environ.get(names[0], 0)),
            world_size=int(os.environ.get(names[1], 1)),
            local_rank=int(os.environ.get(names[2], 0)),
        )
    except ValueError as exc:
        raise InputError(None, f"{'/'.join(names)} are not integers ({exc})", "environment") from None


@contextlib.contextmanager
def process_group(
    device: torch.device, timeout_s: float | None = None, from_slurm: bool = False
) -> Iterator[tuple[Ranks, torch.device]]:
    """Join the launcher's process group for the enclosed code; yield ``(ranks, this process's device)``.

    On CUDA each process takes GPU ``local_rank`` of its node and the group uses NCCL; on a CPU it
    uses gloo. ``timeout_s`` bounds the rendezvous and every operation of the group (torch's
    default where None). Without a launcher this yields :data:`SINGLE_PROCESS` and ``device`` unchanged.
    """
    ranks = launched_ranks(from_slurm)
    if ranks.world_size == 1:
        yield ranks, device
        return
    if device.type == "cuda":
        device = torch.device("cuda", ranks.local_rank)
        torch.cuda.set_device(device)
    timeout = None if timeout_s is None else datetime.timedelta(seconds=timeout_s)
    try:
        dist.init_process_group(
            "nccl" if device.type == "cuda" else "gloo",
            init_method="env://",
            rank=ranks.rank,
            world_size=ranks.world_size,
            timeout=timeout,
        )
    except (dist.DistStoreError, dist.DistNetworkError) as exc:
        # A rank that never started or an unreachable MASTER_ADDR: one line, not torch's traceback.
        address = f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"
        raise InputError(
            None,
            f"rank {ranks.rank} of {ranks.world_size} found no process group at {address} "
            f"(a rank did not start, or the address is unreachable): {str(exc).splitlines()[0]}",
            "environment MASTER_ADDR/MASTER_PORT",
        ) from None
    try:
        yield ranks, device
    finally:
        dist.destroy_process_group()


def data_parallel(model: nn.Module, ranks: Ranks, device: torch.device) -> nn.Module:
    """``model`` wrapped for gradient averaging across the group (itself when there is one process)."""
    if ranks.world_size == 1:
        return model
    device_ids = [device.index] if device.type == "cuda" else None
    return nn.parallel.DistributedDataParallel(model, device_ids=device_ids)


def per_process_batch(batch_size: int, ranks: Ranks) -> int:
    """Each process's share of the global ``batch_size`` (which the world size must divide)."""
    if batch_size % ranks.world_size:
        raise InputError(
            None,
            f"batch size {batch_size} is not divisible by the {ranks.world_size} processes",
            "key 'batch_size'",
        )
    return batch_size // ranks.world_size
