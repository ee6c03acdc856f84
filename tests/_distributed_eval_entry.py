"""Helpers and torchrun entry for tests/test_distributed_evaluate.py.

`install(setattr)` makes `lowbit-video` log (as JSON lines [rank, kind, what] appended to
$LOWBIT_TEST_LOG) every metric it computes ("metric", [run dir, name]), every capture call of the
model ("capture", [prompt, seed]) and every file written atomically ("write", path), and replaces the
model ablate captures Q/K/V with by a cheap stand-in (FakeCaptureModel: random Q, K, V of 3 blocks,
seeded by prompt and seed). Run as a script, it installs all that and runs the CLI (under torchrun)."""

import json
import os
import zlib

import torch

from lowbit_video import evaluate as ev
from lowbit_video import runstore


def log(kind: str, what) -> None:
    path = os.environ.get("LOWBIT_TEST_LOG")
    if path:
        with open(path, "a") as f:  # one short O_APPEND write per line: lines of ranks never interleave
            f.write(json.dumps([os.environ.get("RANK", "-"), kind, what]) + "\n")


def read_log(path) -> list[tuple]:
    try:
        lines = open(path).read().splitlines()
    except FileNotFoundError:
        return []
    return [tuple(json.loads(line)[:2]) + (json.loads(line)[2],) for line in lines if line]


class FakeCaptureModel:
    BLOCKS = (0, 1, 2)

    def generate(self, prompts, seeds, *, recipe, steps, guidance, height, width, frames, capture):
        from lowbit_video.models.capture import CaptureWriter

        log("capture", [prompts[0], int(seeds[0])])
        w = CaptureWriter(capture, {"model": "fake"})
        w.prompts, w.seeds = list(prompts), list(seeds)
        g = torch.Generator().manual_seed(zlib.crc32(f"{prompts[0]}|{seeds[0]}".encode()))
        for b in self.BLOCKS:
            if capture.blocks is not None and b not in capture.blocks:
                continue
            t = {n: torch.randn(1, 64, 2, 64, generator=g) * (4.0 if n != "v" else 1.0) for n in "qkv"}
            for step in sorted(capture.steps or {0}):
                w.save(block=b, step=step, num_steps=steps, prompt=0, branch="cond", info={}, **t)
        return None


def install(set_=setattr) -> None:
    import lowbit_video.models.registry as registry

    compute = ev._compute_local
    write = runstore.atomic_write_bytes

    def compute_local(job, name, frames, root):
        log("metric", [str(job.dir), name])
        return compute(job, name, frames, root)

    def atomic_write_bytes(path, data):
        log("write", str(path))
        return write(path, data)

    set_(ev, "_compute_local", compute_local)
    set_(runstore, "atomic_write_bytes", atomic_write_bytes)
    set_(registry, "load_model", lambda name, **kw: FakeCaptureModel())


if __name__ == "__main__":
    install()
    from lowbit_video.cli import main

    main()
