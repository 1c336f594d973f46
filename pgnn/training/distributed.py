"""Where a training process sits: rank, world size, device, and the process group under torchrun."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Dist:
    """Where this process sits: rank / world size, its device, whether ``train`` made the process group."""

    rank: int
    world_size: int
    device: torch.device
    owns_group: bool

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    def all_reduce_sum(self, t: torch.Tensor) -> torch.Tensor:
        """Sum over ranks (identity on one process); returns a CPU tensor."""
        if not self.enabled:
            return t.cpu()
        t = t.to(self.device)
        torch.distributed.all_reduce(t)
        return t.cpu()


def resolve_device(pref: str, local_rank: int) -> torch.device:
    if pref == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("train device 'cuda' requested but CUDA is not available")
    if pref == "cpu" or (pref == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    torch.cuda.set_device(local_rank)
    return torch.device("cuda", local_rank)


def init_distributed(device_pref: str) -> Dist:
    """Join (or make, under torchrun) the process group; pick this rank's device."""
    dist = torch.distributed
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if dist.is_available() and dist.is_initialized():
        device = resolve_device(device_pref, local_rank)
        return Dist(dist.get_rank(), dist.get_world_size(), device, owns_group=False)
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        device = resolve_device(device_pref, local_rank)
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
        return Dist(dist.get_rank(), dist.get_world_size(), device, owns_group=True)
    return Dist(0, 1, resolve_device(device_pref, 0), owns_group=False)
