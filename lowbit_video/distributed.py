"""Splitting a grid of runs over processes: torchrun ranks or cluster array jobs.

    spec = ShardSpec.from_cli_or_env("--shard" value or None)   # torchrun: RANK / WORLD_SIZE
    mine = shard_runs(runs, spec)                                # this process's runs

* **Deterministic, balanced, order-free.** Every run has a stable key, (model, recipe, prompt,
  seed) for a generate run. The full grid is sorted by sha256 of that key and dealt round-robin:
  run number j of the sorted grid goes to shard j mod n. So every run is in exactly one shard,
  shard sizes differ by at most one, and the assignment does not depend on the order in which
  prompts, seeds or recipes were given (or on the machine). It does depend on the grid: adding a
  seed may move runs to other shards, which is harmless because a complete run is skipped by
  whichever shard owns it next (resume works across any change of n).
* **Paired runs may live on different shards** (the FP16 run and the quantized run of one prompt
  and seed): they share their initial noise through the seed, not through the process.
* **torchrun.** `ShardSpec.from_env()` reads RANK / WORLD_SIZE (LOCAL_RANK picks the GPU). A
  gloo process group is only created for the barrier before rank 0 writes the manifest, and only
  when WORLD_SIZE > 1 (`process_group()`); `--shard i/n` (array jobs) needs no process group.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence, TypeVar

from .errors import UserError

T = TypeVar("T")

# A barrier waits for the slowest rank's whole shard (hours on a GPU sweep); torchrun ends the
# other ranks when one fails, so a long timeout does not leave processes hanging.
BARRIER_TIMEOUT_S = float(os.environ.get("LOWBIT_VIDEO_BARRIER_TIMEOUT_S", 7 * 24 * 3600))


@dataclass(frozen=True)
class ShardSpec:
    """Shard `index` of `count` (0 <= index < count). `launched` is True under torchrun."""

    index: int = 0
    count: int = 1
    launched: bool = False
    local_rank: int = 0

    def __post_init__(self) -> None:
        if self.count < 1 or not 0 <= self.index < self.count:
            raise UserError(f"shard {self.index}/{self.count}: need 0 <= i < n")

    @property
    def is_main(self) -> bool:
        return self.index == 0

    @property
    def single(self) -> bool:
        return self.count == 1

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def to_dict(self) -> dict:
        return {"index": self.index, "count": self.count, "torchrun": self.launched}

    @classmethod
    def parse(cls, text: str) -> "ShardSpec":
        """'i/n' (0-based i), e.g. '--shard 3/8' for array task 3 of 8 (SLURM_ARRAY_TASK_ID/…)."""
        m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(text))
        if not m:
            raise UserError(f"--shard {text!r}: expected i/n, e.g. 0/4 (i counts from 0)")
        index, count = int(m.group(1)), int(m.group(2))
        if count < 1 or index >= count:
            raise UserError(f"--shard {text}: need 0 <= i < n (i counts from 0)")
        return cls(index, count)

    @classmethod
    def from_env(cls, env: dict | None = None) -> "ShardSpec":
        """RANK / WORLD_SIZE / LOCAL_RANK as torchrun sets them; a single process when absent."""
        env = os.environ if env is None else env
        if "WORLD_SIZE" not in env or "RANK" not in env:
            return cls()
        try:
            world, rank, local = int(env["WORLD_SIZE"]), int(env["RANK"]), int(env.get("LOCAL_RANK", 0))
        except ValueError:
            raise UserError(f"RANK={env.get('RANK')!r} WORLD_SIZE={env.get('WORLD_SIZE')!r}: not integers") from None
        if world < 1 or not 0 <= rank < world:
            raise UserError(f"RANK={rank} WORLD_SIZE={world}: need 0 <= RANK < WORLD_SIZE")
        return cls(rank, world, launched=world > 1, local_rank=local)

    @classmethod
    def from_cli_or_env(cls, shard: str | None, env: dict | None = None) -> "ShardSpec":
        """`--shard i/n` if given (it cannot be combined with a multi-process torchrun), else the
        torchrun environment, else one shard."""
        from_env = cls.from_env(env)
        if shard is None or str(shard).strip() == "":
            return from_env
        if from_env.launched:
            raise UserError(f"--shard {shard} cannot be combined with torchrun (WORLD_SIZE={from_env.count}): "
                            "torchrun already shards by rank")
        return cls.parse(shard)


# --------------------------------------------------------------------------------------- sharding


def _name(x: Any) -> str:
    if isinstance(x, str):
        return x
    if isinstance(x, dict):
        return str(x.get("name"))
    return str(getattr(x, "name", x))


def run_key(run: Any) -> tuple:
    """The stable identity of a run: (model, recipe, prompt, seed). Accepts generate's `Run`, a
    generate result row, a run's meta.json (model and recipe as {"name": ...}), or a tuple (as is)."""
    if isinstance(run, tuple):
        return run
    get = run.get if isinstance(run, dict) else lambda k: getattr(run, k)
    return (_name(get("model")), _name(get("recipe")), str(get("prompt")), int(get("seed")))


def _digest(key: tuple) -> str:
    return hashlib.sha256(json.dumps(list(key), ensure_ascii=False).encode("utf-8")).hexdigest()


def shard_of(items: Sequence[T], spec: ShardSpec, key: Callable[[T], tuple] = run_key) -> list[int]:
    """Shard index of each item (same order as `items`)."""
    keys = [key(x) for x in items]
    order = sorted(range(len(items)), key=lambda i: (_digest(keys[i]), i))
    owner = [0] * len(items)
    for pos, i in enumerate(order):
        owner[i] = pos % spec.count
    return owner


def shard_runs(items: Sequence[T], spec: ShardSpec, key: Callable[[T], tuple] = run_key) -> list[T]:
    """The items of shard `spec.index`, in their original order. Every item is in exactly one shard.
    Items with equal keys are one run; give each distinct run once."""
    if spec.count == 1:
        return list(items)
    return [x for x, s in zip(items, shard_of(items, spec, key)) if s == spec.index]


# ------------------------------------------------------------------------------------ torchrun


def device_for(device: str, spec: ShardSpec) -> str:
    """'cuda' -> 'cuda:<LOCAL_RANK>' under torchrun (one GPU per rank); anything else unchanged."""
    if spec.launched and str(device) == "cuda":
        return f"cuda:{spec.local_rank}"
    return str(device)


@contextlib.contextmanager
def process_group(spec: ShardSpec, *, device: str = "cpu") -> Iterator[bool]:
    """Initialise torch.distributed under torchrun (WORLD_SIZE > 1) and destroy it on exit; yields
    whether a group is active. Backend: gloo ("cpu:gloo,cuda:nccl" when `device` is CUDA, for context
    parallelism). A group someone else initialised is used and left alone."""
    if not spec.launched:
        yield False
        return
    import torch.distributed as dist

    if dist.is_initialized():
        yield True
        return
    backend = "cpu:gloo,cuda:nccl" if str(device).startswith("cuda") else "gloo"
    if str(device).startswith("cuda"):
        import torch

        torch.cuda.set_device(spec.local_rank)
    dist.init_process_group(backend=backend, timeout=_dt.timedelta(seconds=BARRIER_TIMEOUT_S))
    try:
        yield True
    finally:
        with contextlib.suppress(Exception):
            dist.destroy_process_group()


def barrier() -> None:
    """Wait for every rank (no-op without a process group)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def all_gather(obj: Any) -> list:
    """Every rank's `obj` (picklable), in rank order; `[obj]` without a process group."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return [obj]
    out: list = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


__all__ = ["ShardSpec", "all_gather", "barrier", "device_for", "process_group", "run_key", "shard_of", "shard_runs"]
