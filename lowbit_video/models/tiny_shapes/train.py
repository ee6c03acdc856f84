"""Training of tiny-shapes: rectified flow as Wan does it, resumable, fast on one GPU.

    x_sigma = (1 - sigma) * x0 + sigma * eps,   target v = eps - x0,   timestep = 1000 * sigma,
    loss = mean((model(x_sigma, sigma, text) - v)^2)

* sigma ~ logit-normal(0, 1) passed through Wan's time shift (`train_shift`); pixels in [-1, 1].
* Classifier-free guidance: the prompt is replaced by the empty (all-padding) prompt with
  probability `cfg_dropout`, so sampling can guide.
* Augmentation: a horizontal flip of the clip with "left" <-> "right" swapped in the prompt.
* Data: `clips.batch` renders clips on the CPU (numpy). A pool of `pool_chunks` x `chunk_size`
  clips lives on the training device as uint8; worker processes render fresh chunks ahead of time
  and one chunk is replaced every `refresh_every` steps (each clip is seen about `data_reuse` times).
  Which chunk sits in which slot is a function of the step, so a resumed run sees the same data.
* All training randomness (batch indices, sigma, noise, dropout, flips) comes from one
  torch.Generator on the training device, saved in the checkpoint with the step, the model, the
  EMA of the weights and the optimizer; `--resume` continues exactly where the checkpoint left.
* Outputs in OUT: checkpoint.pt (every `ckpt_every_s` seconds and at the end), loss.jsonl (one
  line per step), model/ (EMA weights as a tiny-shapes model folder, float16) at the end,
  summary.json.

`lowbit-video train-tiny --steps N --out DIR [--resume] [--batch B] [--lr LR] [--device cuda]
[--minutes M]` calls `train()`.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import os
import time
import zlib
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F

from ..regional_compile import compile_blocks, uncompile_blocks
from .model import TinyShapesModel, default_config, shift_sigma

CHECKPOINT = "checkpoint.pt"
LOSS_LOG = "loss.jsonl"
SUMMARY = "summary.json"
PART_BYTES = 15 * 2**20
COMPILE_AFTER = 40  # eager steps (timed) before --compile compiles the blocks


@dataclass
class TrainConfig:
    steps: int
    out: str
    batch: int = 64
    lr: float = 5e-4
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.99)
    warmup: int = 250
    grad_clip: float = 1.0
    ema: float = 0.999
    cfg_dropout: float = 0.1
    train_shift: float = 2.0
    hflip: bool = True
    seed: int = 0
    device: str = "auto"
    minutes: float | None = None
    compile: bool = False
    amp: bool = True                 # bf16 autocast on CUDA (ignored on CPU)
    ckpt_every_s: float = 60.0
    log_every: int = 25              # steps between host syncs of the loss (every step is logged)
    chunk_size: int = 1024
    pool_chunks: int = 64
    data_reuse: float = 2.0
    workers: int = -1                # -1: os.cpu_count() - 1; 0: render in this process
    model_config: dict[str, Any] = field(default_factory=default_config)

    @property
    def refresh_every(self) -> int:
        return max(1, round(self.chunk_size * self.data_reuse / self.batch))


# ------------------------------------------------------------------------------------- data


def _chunk_seed(seed: int, chunk: int) -> int:
    return (seed * 1_000_003 + chunk * 7919 + 12345) % (2**63 - 1)


def render_chunk(args: tuple[int, int, int, int, int]) -> tuple[np.ndarray, list[str]]:
    """(clips uint8 (n, F, H, W, 3), prompts) of chunk `chunk` (module-level: picklable for workers)."""
    from .clips import batch

    seed, chunk, n, frames, size = args
    clips, prompts = batch(n, seed=_chunk_seed(seed, chunk), frames=frames, size=size)
    return np.rint(clips * 255.0).astype(np.uint8), prompts


class ClipPool:
    """A device-resident pool of rendered clips (uint8) with their token ids, refreshed chunk-wise.

    Slot j holds chunk c with c % n_slots == j; at step s the newest chunk is
    n_slots - 1 + s // refresh_every.
    """

    def __init__(self, model: TinyShapesModel, cfg: TrainConfig, device: torch.device, start_step: int,
                 executor: Any = None, workers: int = 0) -> None:
        self.model, self.cfg, self.device = model, cfg, device
        mc = model.config
        self.frames, self.size = mc["frames"], mc["size"]
        self.n_slots, self.chunk = cfg.pool_chunks, cfg.chunk_size
        self.executor, self.workers = executor, workers
        n = self.n_slots * self.chunk
        self.video = torch.empty((n, 3, self.frames, self.size, self.size), dtype=torch.uint8, device=device)
        self.ids = torch.empty((n, mc["text_len"]), dtype=torch.long, device=device)
        self.pending: dict[int, Any] = {}
        newest = self.newest_chunk(start_step)
        t0 = time.perf_counter()
        initial = [max(c for c in range(newest + 1) if c % self.n_slots == j) for j in range(self.n_slots)]
        results = self._render_many(initial)
        for c, r in zip(initial, results):
            self._install(c, r)
        self.next_chunk = newest + 1
        self.init_seconds = time.perf_counter() - t0
        self._prefetch()

    def newest_chunk(self, step: int) -> int:
        return self.n_slots - 1 + step // self.cfg.refresh_every

    def _args(self, c: int) -> tuple[int, int, int, int, int]:
        return (self.cfg.seed, c, self.chunk, self.frames, self.size)

    def _render_many(self, chunks: list[int]) -> list[tuple[np.ndarray, list[str]]]:
        if self.executor is None:
            return [render_chunk(self._args(c)) for c in chunks]
        return self.executor.map(render_chunk, [self._args(c) for c in chunks], chunksize=1)

    def _prefetch(self) -> None:
        if self.executor is None:
            return
        ahead = 2 * max(1, self.workers)
        for c in range(self.next_chunk, self.next_chunk + ahead):
            if c not in self.pending:
                self.pending[c] = self.executor.apply_async(render_chunk, (self._args(c),))

    def _install(self, c: int, result: tuple[np.ndarray, list[str]]) -> None:
        clips, prompts = result
        j = c % self.n_slots
        sl = slice(j * self.chunk, (j + 1) * self.chunk)
        v = torch.from_numpy(clips).permute(0, 4, 1, 2, 3)
        self.video[sl].copy_(v.to(self.device, non_blocking=False))
        self.ids[sl].copy_(self.model.tokenize(prompts).to(self.device))

    def before_step(self, step: int) -> float:
        """Install the chunks due at `step`; returns seconds spent waiting for renders."""
        waited = 0.0
        while self.next_chunk <= self.newest_chunk(step):
            c = self.next_chunk
            t0 = time.perf_counter()
            result = self.pending.pop(c).get() if c in self.pending else render_chunk(self._args(c))
            waited += time.perf_counter() - t0
            self._install(c, result)
            self.next_chunk += 1
            self._prefetch()
        return waited

    def close(self) -> None:
        if self.executor is not None:
            self.executor.terminate()
            self.executor.join()
            self.executor = None


# ------------------------------------------------------------------------------- checkpoints


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(state, tmp)
    tmp.replace(path)


def load_checkpoint(path: Path) -> dict[str, Any]:
    return torch.load(path, map_location="cpu", weights_only=False)


def _cast_floats(obj: Any, dtype: torch.dtype) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.to(dtype) if obj.is_floating_point() and obj.dim() > 0 else obj
    if isinstance(obj, dict):
        return {k: _cast_floats(v, dtype) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_cast_floats(v, dtype) for v in obj)
    return obj


def export_compact(checkpoint: str | Path, dest: str | Path, part_bytes: int = PART_BYTES) -> list[Path]:
    """Write `checkpoint` compactly as dest/checkpoint.partNN files of at most `part_bytes` each.

    For carrying a run between machines whose transfers limit file sizes: model and EMA weights in
    float16 (rounding far below one optimizer step), Adam moments in bfloat16, zlib-compressed.
    Everything else (step, RNG, history) is exact. `import_compact` reassembles a normal checkpoint.
    """
    ck = load_checkpoint(Path(checkpoint))
    ck["model"] = _cast_floats(ck["model"], torch.float16)
    ck["ema"] = _cast_floats(ck["ema"], torch.float16)
    ck["optimizer"]["state"] = _cast_floats(ck["optimizer"]["state"], torch.bfloat16)
    ck["compact"] = True
    buf = io.BytesIO()
    torch.save(ck, buf)
    data = zlib.compress(buf.getvalue(), 1)
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob("checkpoint.part*"):
        old.unlink()
    paths = []
    for i in range(0, len(data), part_bytes):
        p = dest / f"checkpoint.part{i // part_bytes:02d}"
        p.write_bytes(data[i: i + part_bytes])
        paths.append(p)
    return paths


def import_compact(src: str | Path, checkpoint: str | Path) -> int:
    """Reassemble src/checkpoint.partNN into a checkpoint file (fp32 again); returns its step."""
    parts = sorted(Path(src).glob("checkpoint.part*"))
    if not parts:
        raise FileNotFoundError(f"no checkpoint.part* files in {src}")
    data = zlib.decompress(b"".join(p.read_bytes() for p in parts))
    ck = torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)
    ck["model"] = _cast_floats(ck["model"], torch.float32)
    ck["ema"] = _cast_floats(ck["ema"], torch.float32)
    ck["optimizer"]["state"] = _cast_floats(ck["optimizer"]["state"], torch.float32)
    Path(checkpoint).parent.mkdir(parents=True, exist_ok=True)
    save_checkpoint(Path(checkpoint), ck)
    return int(ck["step"])


def export_model(checkpoint: str | Path, dest: str | Path, *, dtype: str = "float16",
                 extra_config: dict[str, Any] | None = None) -> Path:
    """Write the checkpoint's EMA weights as a tiny-shapes model folder (what training writes to
    OUT/model at the end)."""
    ck = load_checkpoint(Path(checkpoint))
    model = TinyShapesModel(ck["train_config"]["model_config"])
    with torch.no_grad():
        for p, e in zip(model.parameters(), ck["ema"]):
            p.copy_(e.float())
    return model.save(dest, dtype=dtype, extra_config=extra_config)


def checkpoint_step(path: str | Path) -> int | None:
    p = Path(path)
    return int(load_checkpoint(p)["step"]) if p.is_file() else None


# ------------------------------------------------------------------------------------ training


def _resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError("--device cuda asked for, but torch sees no CUDA device")
    return torch.device(name)


def _lr_at(cfg: TrainConfig, step: int) -> float:
    return cfg.lr * min(1.0, (step + 1) / max(1, cfg.warmup))


def train(cfg: TrainConfig, *, resume: bool = False, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Train (or resume) into cfg.out until cfg.steps steps or cfg.minutes minutes; returns the summary."""
    t_start = time.perf_counter()
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    ck_path = out / CHECKPOINT
    ck = None
    if resume:
        if not ck_path.is_file():
            raise FileNotFoundError(f"--resume: no {CHECKPOINT} in {out}")
        ck = load_checkpoint(ck_path)
        # The architecture and the data recipe come from the checkpoint; step/time budgets,
        # batch, lr and device from this call.
        saved = ck["train_config"]
        for key in ("model_config", "seed", "chunk_size", "pool_chunks", "train_shift", "hflip", "cfg_dropout",
                    "ema"):
            setattr(cfg, key, saved[key])
        if cfg.batch != saved["batch"] or cfg.data_reuse != saved["data_reuse"]:
            log(f"note: batch/data_reuse changed from the checkpoint ({saved['batch']}/{saved['data_reuse']})"
                " -- the data order differs from an uninterrupted run")
    start_step = int(ck["step"]) if ck else 0

    device = _resolve_device(cfg.device)
    torch.manual_seed(cfg.seed)
    model = TinyShapesModel(cfg.model_config)
    model.train()

    # Render workers are forked before this process touches CUDA (they only run numpy).
    workers = max(0, (os.cpu_count() or 2) - 1) if cfg.workers < 0 else cfg.workers
    executor = None
    if workers > 0:
        import multiprocessing as mp

        executor = mp.get_context("fork").Pool(workers)
    model.to(device)
    ema = [p.detach().clone().float() for p in model.parameters()]
    params = list(model.parameters())
    fused = device.type == "cuda"
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=tuple(cfg.betas), weight_decay=cfg.weight_decay,
                            fused=fused)
    gen = torch.Generator(device=device)
    gen.manual_seed(cfg.seed + 1)
    history: list[dict[str, Any]] = []
    if ck:
        model.load_state_dict(ck["model"])
        for e, v in zip(ema, ck["ema"]):
            e.copy_(v.to(device))
        opt.load_state_dict(ck["optimizer"])
        gen.set_state(ck["rng"])
        history = list(ck.get("history", []))
        log(f"resumed from {ck_path} at step {start_step}")
    if start_step >= cfg.steps:
        log(f"nothing to do: checkpoint step {start_step} >= --steps {cfg.steps}")

    try:
        pool = ClipPool(model, cfg, device, start_step, executor, workers)
    except BaseException:
        if executor is not None:
            executor.terminate()
        raise
    log(f"data pool: {pool.n_slots * pool.chunk} clips rendered in {pool.init_seconds:.1f}s with "
        f"{pool.workers} workers; refresh one chunk every {cfg.refresh_every} steps")

    use_amp = cfg.amp and device.type == "cuda"
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        # Wan's RoPE tables are float64; fp32 is plenty for 16 positions and keeps the GPU off fp64.
        model.transformer.rope.freqs_cos = model.transformer.rope.freqs_cos.float()
        model.transformer.rope.freqs_sin = model.transformer.rope.freqs_sin.float()
    compiled = False
    eager_rate: float | None = None
    blocks: list[torch.nn.Module] = []

    def set_compiled(on: bool) -> None:
        # Regional compilation (the same as generate --compile's): one graph for all Wan blocks.
        if on:
            blocks[:] = compile_blocks(model.transformer)
        else:
            uncompile_blocks(blocks)

    left_id, right_id = model._index.get("left"), model._index.get("right")
    B = cfg.batch
    n_pool = pool.video.shape[0]

    def train_step(step: int) -> torch.Tensor:
        idx = torch.randint(0, n_pool, (B,), device=device, generator=gen)
        x0 = pool.video[idx].float().div_(127.5).sub_(1.0)
        ids = pool.ids[idx]
        if cfg.hflip and left_id is not None:
            flip = torch.rand(B, device=device, generator=gen) < 0.5
            x0 = torch.where(flip[:, None, None, None, None], x0.flip(-1), x0)
            swapped = torch.where(ids == left_id, right_id, torch.where(ids == right_id, left_id, ids))
            ids = torch.where(flip[:, None], swapped, ids)
        drop = torch.rand(B, device=device, generator=gen) < cfg.cfg_dropout
        ids = torch.where(drop[:, None], torch.zeros_like(ids), ids)
        u = torch.sigmoid(torch.randn(B, device=device, generator=gen))
        sigma = shift_sigma(u, cfg.train_shift)
        eps = torch.randn(x0.shape, device=device, generator=gen)
        s = sigma[:, None, None, None, None]
        xt = (1.0 - s) * x0 + s * eps
        target = eps - x0
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_amp):
            pred = model(xt, sigma, ids)
        loss = F.mse_loss(pred.float(), target)
        for g in opt.param_groups:
            g["lr"] = _lr_at(cfg, step)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
        opt.step()
        d = min(cfg.ema, (1.0 + step) / (10.0 + step))
        with torch.no_grad():
            torch._foreach_lerp_(ema, [p.detach() for p in params], 1.0 - d)
        return loss.detach()

    def checkpoint(step: int, seconds_this_run: float) -> None:
        state = {
            "step": step,
            "model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
            "ema": [e.detach().cpu() for e in ema],
            "optimizer": opt.state_dict(),
            "rng": gen.get_state().cpu(),
            "train_config": dataclasses.asdict(cfg),
            "history": history + [run_record(step, seconds_this_run)],
        }
        save_checkpoint(ck_path, state)

    run_started = time.strftime("%Y-%m-%dT%H:%M:%S")
    dev_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"

    def run_record(step: int, seconds: float) -> dict[str, Any]:
        return {"started": run_started, "device": dev_name, "start_step": start_step, "end_step": step,
                "seconds": round(seconds, 1), "batch": cfg.batch, "lr": cfg.lr, "compiled": compiled}

    log_file = (out / LOSS_LOG).open("a")
    pending: list[tuple[int, torch.Tensor, float]] = []
    loss_window: deque[float] = deque(maxlen=200)
    data_wait = 0.0

    def flush() -> None:
        if not pending:
            return
        vals = torch.stack([p[1] for p in pending]).float().cpu().tolist()
        for (st, _, lr), v in zip(pending, vals):
            log_file.write(json.dumps({"step": st, "loss": round(v, 6), "lr": lr,
                                       "t": round(time.perf_counter() - t_start, 2)}) + "\n")
            loss_window.append(v)
        log_file.flush()
        pending.clear()

    step = start_step
    deadline = t_start + cfg.minutes * 60.0 if cfg.minutes else None
    last_ck = time.perf_counter()
    t_loop = time.perf_counter()
    timing_from, timing_t = None, None
    # With --compile, the first COMPILE_AFTER steps run eagerly (timed), then the blocks compile.
    compile_at = start_step + COMPILE_AFTER if cfg.compile else None

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    try:
        while step < cfg.steps:
            if step == compile_at:
                sync()
                if timing_t is not None and step > timing_from:
                    eager_rate = (step - timing_from) / (time.perf_counter() - timing_t)
                    log(f"eager: {eager_rate:.2f} steps/s; compiling the transformer blocks")
                set_compiled(True)
                compiled = True
                timing_from, timing_t = None, None
                t_c = time.perf_counter()
            data_wait += pool.before_step(step)
            try:
                loss = train_step(step)
            except Exception as e:
                if not (compiled and step == compile_at):
                    raise
                log(f"torch.compile failed ({type(e).__name__}: {str(e).splitlines()[0][:200]}); running eager")
                set_compiled(False)
                compiled = False
                loss = train_step(step)
            if compiled and step == compile_at:
                sync()
                log(f"first compiled step took {time.perf_counter() - t_c:.1f}s")
            step += 1
            pending.append((step, loss, _lr_at(cfg, step - 1)))
            warm = 10 if cfg.compile and compile_at is not None and step <= compile_at else 20
            since = step - (compile_at if compile_at is not None and step > compile_at else start_step)
            if timing_t is None and since == warm:
                sync()
                timing_from, timing_t = step, time.perf_counter()
            if len(pending) >= cfg.log_every:
                flush()
                if step % (cfg.log_every * 8) == 0:
                    rate = ""
                    if timing_t is not None and step > timing_from:
                        rate = f", {(step - timing_from) / (time.perf_counter() - timing_t):.2f} steps/s"
                    log(f"step {step}: loss {np.mean(loss_window):.4f} (mean of last {len(loss_window)}){rate}")
            now = time.perf_counter()
            if not math.isfinite(loss_window[-1] if loss_window else 0.0):
                raise FloatingPointError(f"loss is not finite at step {step}")
            if now - last_ck >= cfg.ckpt_every_s:
                flush()
                checkpoint(step, now - t_start)
                last_ck = now
            if deadline is not None and now >= deadline:
                log(f"time budget of {cfg.minutes} min reached at step {step}")
                break
    finally:
        flush()
        log_file.close()
        pool.close()
    elapsed = time.perf_counter() - t_start
    if step > start_step or not ck_path.is_file():
        checkpoint(step, elapsed)
    steps_per_s = None
    if timing_t is not None and step > timing_from:
        steps_per_s = (step - timing_from) / (time.perf_counter() - timing_t)

    # Final weights: the EMA, as a model folder in float16.
    final = TinyShapesModel(model.config)
    with torch.no_grad():
        for p, e in zip(final.parameters(), ema):
            p.copy_(e.cpu())
    final.save(out / "model", dtype="float16")
    summary = {
        "step": step,
        "steps_this_run": step - start_step,
        "seconds_this_run": round(elapsed, 1),
        "loop_seconds": round(time.perf_counter() - t_loop, 1),
        "steps_per_s": None if steps_per_s is None else round(steps_per_s, 2),
        "data_wait_s": round(data_wait, 2),
        "pool_init_s": round(pool.init_seconds, 2),
        "final_loss_mean_last_200": float(np.mean(loss_window)) if loss_window else None,
        "device": dev_name,
        "compiled": compiled,
        "eager_steps_per_s": None if eager_rate is None else round(eager_rate, 2),
        "batch": cfg.batch,
        "lr": cfg.lr,
        "history": history + [run_record(step, elapsed)],
    }
    (out / SUMMARY).write_text(json.dumps(summary, indent=2) + "\n")
    log(f"done: step {step}, {summary['steps_this_run']} steps in {elapsed:.0f}s"
        + (f" ({steps_per_s:.2f} steps/s)" if steps_per_s else "")
        + (f", loss {summary['final_loss_mean_last_200']:.4f}" if loss_window else ""))
    return summary


__all__ = ["TrainConfig", "export_compact", "export_model", "import_compact", "load_checkpoint", "train"]
