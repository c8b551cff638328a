"""Distributed data parallel for pretraining: the process group torchrun sets up, or one process.

Each process takes an equal shard of the same global batch; gloo on CPU, nccl on GPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ..core.errors import check


@dataclass
class Dist:
    rank: int = 0
    world: int = 1
    device: torch.device = torch.device("cpu")

    @property
    def main(self) -> bool:
        return self.rank == 0

    @classmethod
    def from_env(cls, device: str = "auto") -> "Dist":
        """Join the process group torchrun set up (WORLD_SIZE > 1), else run alone.

        On GPUs each process takes the GPU of its local rank and the group talks over nccl.
        """
        use_cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
        world = int(os.environ.get("WORLD_SIZE", "1"))
        local = int(os.environ.get("LOCAL_RANK", "0"))
        where = torch.device("cuda", local) if use_cuda else torch.device("cpu")
        if use_cuda:
            gpus = torch.cuda.device_count()
            check(
                local < gpus,
                f"process {local} has no GPU of its own ({gpus} visible): "
                f"start at most {gpus} processes per node, or pass --device cpu",
            )
            torch.cuda.set_device(where)
        if world <= 1:
            return cls(device=where)
        if not dist.is_initialized():
            dist.init_process_group("nccl" if use_cuda else "gloo")
        return cls(dist.get_rank(), world, where)

    def mean(self, value: float) -> float:
        if self.world == 1:
            return value
        t = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return t.item() / self.world

    def close(self) -> None:
        if self.world > 1 and dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()

    def shard(self, batch: torch.Tensor) -> torch.Tensor:
        per = batch.shape[0] // self.world
        return batch[self.rank * per : (self.rank + 1) * per]


def wrap_ddp(model: torch.nn.Module, world: Dist) -> torch.nn.Module:
    ids = [world.device.index] if world.device.type == "cuda" else None
    return torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)
