"""Data-parallel training under ``torchrun``: one process per rank, gradients averaged every step.

``torchrun --nproc_per_node=N -m fastweights.cli <recipe> train …`` (or the ``fastweights`` script)
starts N processes with ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT`` set;
multi-node runs add torchrun's usual rendezvous flags. :func:`setup` joins the process group (NCCL for
CUDA devices, Gloo for CPU) and pins each rank to ``cuda:LOCAL_RANK``. Without ``WORLD_SIZE`` > 1 every
function here is a no-op, so single-process runs are unchanged.

The protocol every recipe follows (through :func:`fastweights.recipes.run.start_run` and
:func:`fastweights.train.loop.fit`):

- the recipe's batch (``train.batch_size``, or ``env.num_envs`` for RL) is the *global* batch, split
  evenly over the ranks (:func:`rank_config`); rank r samples its own episodes with seed
  ``train.seed + r``;
- rank 0 holds the run folder's lock and writes ``config.yaml``, the log, the checkpoints and the
  reports; the other ranks write nothing;
- all ranks start from rank 0's weights (:func:`broadcast_module`); after every backward the gradients
  are averaged over the ranks in one flat all-reduce (:func:`average_gradients`) — the update of
  ``DistributedDataParallel``, done explicitly because the recipes call model methods other than
  ``forward`` (``embed``, ``read`` …), which DDP's forward hooks would not see;
- validation runs on rank 0 and its record is broadcast; the ranks stop together (any rank's clock
  past ``train.max_minutes`` stops them all);
- each checkpoint holds every rank's random streams, and ``--resume`` restores each rank's own (the
  number of ranks must be the one the run was started with).
"""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

__all__ = [
    "World",
    "world",
    "setup",
    "rank_config",
    "broadcast_module",
    "average_gradients",
    "broadcast_object",
    "gather_objects",
    "all_mean",
    "barrier",
    "rank_device",
    "shutdown",
    "RankStopped",
]


class RankStopped(RuntimeError):
    """Raised on the other ranks when rank 0 stopped before training (it reports why; the CLI exits
    with code 2 and no message on these ranks)."""


@dataclass(frozen=True)
class World:
    """This process's place among the ranks (``size`` 1: not distributed)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        """Rank 0: the one that writes."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    if value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name}: expected an integer (set by torchrun), got {value!r}") from None


def world() -> World:
    """The ranks as torchrun's environment variables describe them.

    Raises:
        ValueError: for a malformed ``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK``.
    """
    size = _env_int("WORLD_SIZE", 1)
    rank = _env_int("RANK", 0)
    if size < 1 or not 0 <= rank < size:
        raise ValueError(f"RANK / WORLD_SIZE: expected 0 <= RANK < WORLD_SIZE, got {rank} / {size}")
    return World(rank, size, _env_int("LOCAL_RANK", rank))


def setup(device: torch.device) -> World:
    """Join the process group once (NCCL on CUDA, Gloo on CPU); returns :func:`world`.

    Under torchrun with a CUDA ``device`` the rank runs on ``cuda:LOCAL_RANK``
    (see :func:`rank_device`).
    """
    w = world()
    if w.distributed and not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        if device.type == "cuda":
            torch.cuda.set_device(w.local_rank)
        dist.init_process_group(backend=backend, rank=w.rank, world_size=w.size)
    return w


def rank_device(device: torch.device, w: World) -> torch.device:
    """``cuda`` → ``cuda:LOCAL_RANK`` under torchrun; other devices unchanged."""
    if w.distributed and device.type == "cuda":
        return torch.device("cuda", w.local_rank)
    return device


def _batch_key(cfg: Any) -> tuple[str, str]:
    """(section, field) of the recipe's global batch."""
    if hasattr(cfg.train, "batch_size"):
        return "train", "batch_size"
    return "env", "num_envs"  # the RL recipe: environments stepped together


def rank_config(cfg: Any, w: World) -> Any:
    """This rank's copy of a recipe config: the global batch divided by the number of ranks and
    ``train.seed + rank`` (``cfg`` itself when not distributed).

    Raises:
        ValueError: naming the batch key when it is not a multiple of the number of ranks (or, for RL,
            when each rank would get fewer environments than games).
    """
    if not w.distributed:
        return cfg
    section, key = _batch_key(cfg)
    total = getattr(getattr(cfg, section), key)
    if total % w.size:
        raise ValueError(
            f"{section}.{key}: expected a multiple of the {w.size} ranks (torchrun --nproc_per_node x "
            f"nodes), got {total}"
        )
    if section == "env" and total // w.size < len(cfg.env.games):
        raise ValueError(
            f"env.num_envs: expected at least {len(cfg.env.games)} environments per rank (one per game) "
            f"x {w.size} ranks = {len(cfg.env.games) * w.size}, got {total}"
        )
    local = replace(getattr(cfg, section), **{key: total // w.size})
    cfg = replace(cfg, **{section: local})
    return replace(cfg, train=replace(cfg.train, seed=cfg.train.seed + w.rank))


def broadcast_module(module: nn.Module, w: World) -> None:
    """Copy rank 0's parameters and buffers to every rank (in place)."""
    if not w.distributed:
        return
    with torch.no_grad():
        for t in module.state_dict().values():
            if isinstance(t, torch.Tensor):
                dist.broadcast(t, src=0)


def average_gradients(module: nn.Module, w: World) -> None:
    """Replace every parameter's gradient by its mean over the ranks: one all-reduce of all gradients
    flattened into one buffer (a parameter without gradient on a rank counts as zeros there, and gets
    the averaged gradient)."""
    if not w.distributed:
        return
    params = [p for p in module.parameters() if p.requires_grad]
    if not params:
        return
    flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params])
    dist.all_reduce(flat)
    flat /= w.size
    offset = 0
    for p in params:
        n = p.numel()
        p.grad = flat[offset : offset + n].view_as(p).clone()
        offset += n


def all_mean(values: list[float], w: World) -> list[float]:
    """The mean of each value over the ranks."""
    if not w.distributed:
        return list(values)
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t)
    return (t / w.size).tolist()


def broadcast_object(obj: Any, w: World) -> Any:
    """Rank 0's ``obj`` on every rank (picklable)."""
    if not w.distributed:
        return obj
    box = [obj if w.main else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def gather_objects(obj: Any, w: World) -> list[Any]:
    """Every rank's ``obj``, in rank order, on every rank."""
    if not w.distributed:
        return [obj]
    out: list[Any] = [None] * w.size
    dist.all_gather_object(out, obj)
    return out


def barrier(w: World) -> None:
    if w.distributed:
        dist.barrier()


def shutdown() -> None:
    """Leave the process group, if this process joined one (idempotent).

    ``destroy_process_group`` only drops Python's references; the Gloo group and its worker threads
    are freed once the last one goes. A collection right after makes that happen now, while the
    interpreter is alive: left to interpreter exit, it sometimes aborted a rank
    ("terminate called without an active exception", SIGABRT after a finished run).
    """
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
        gc.collect()
