"""Does a profiled policy beat the uniform ones and the paper's? `lowbit-video profile --study --out PAGE.md`.

On the shipped tiny-shapes model, per recipe: one 16-bit generation of every (prompt, seed) profiles every recipe
at once (probe.py); then each candidate policy generates the same clips and is scored by mean PSNR against the
16-bit clips. Candidates, by the share of the (block, step) self-attention cells kept in 16 bit:

* profiled: the most sensitive cells of the profile, at every share asked and at the paper policy's share;
* uniform: the first k blocks, the last k blocks, the first k denoising steps, with k nearest each share;
* paper: the recipe's own fixed policy.

Policies that keep the same cells are generated once. The claim tested: at the paper policy's 16-bit share, the
profiled policy's PSNR is at least the paper policy's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Sequence

from ..generate import GenerateConfig
from ..recipes import PrecisionPolicy, Recipe, load_recipe
from .policy import cells_for_share, with_cells
from .run import ProfileConfig, Reporter, check_recipe, measure, open_session

DEFAULT_RECIPES = ("rotateattention-half", "mxattention", "draftattention2")
DEFAULT_SHARES = (0.0, 0.5)


@dataclass(frozen=True)
class StudyConfig:
    recipes: Sequence[str] = DEFAULT_RECIPES
    prompts_file: str = "prompts/shapes.txt"
    prompt_limit: int | None = None
    seeds: Sequence[int] = (0, 1)
    steps: int | None = None
    device: str = "auto"
    shares: Sequence[float] = DEFAULT_SHARES


def kept_cells(policy: PrecisionPolicy, num_blocks: int, num_steps: int) -> frozenset[tuple[int, int]]:
    """The (block, step) self-attention cells `policy` keeps in 16 bit."""
    return frozenset((b, s) for b in range(num_blocks) for s in range(num_steps)
                     if not policy.quantizes(block=b, step=s, num_steps=num_steps, num_blocks=num_blocks))


def uniform_policies(share: float, num_blocks: int, num_steps: int) -> list[tuple[str, frozenset]]:
    """(label, 16-bit cells) of the first / last k blocks and the first k steps nearest `share`."""
    kb, ks = round(share * num_blocks), round(share * num_steps)
    blocks = lambda bs: frozenset((b, s) for b in bs for s in range(num_steps))
    return [(f"first {kb} blocks", blocks(range(kb))),
            (f"last {kb} blocks", blocks(range(num_blocks - kb, num_blocks))),
            (f"first {ks} steps", frozenset((b, s) for b in range(num_blocks) for s in range(ks)))]


def run_study(cfg: StudyConfig, reporter: Reporter | None = None) -> dict[str, Any]:
    t0 = time.perf_counter()
    recipes = [load_recipe(r) for r in cfg.recipes]
    for r in recipes:
        check_recipe(r)
    clips = GenerateConfig(model="tiny-shapes", recipes=["fp16"], prompts_file=cfg.prompts_file,
                           prompt_limit=cfg.prompt_limit, seeds=cfg.seeds, steps=cfg.steps, device=cfg.device, out=".")
    session = open_session(ProfileConfig(recipe=recipes[0].name, clips=clips), reporter)
    profiles, refs, timings = measure(session, recipes)
    nb, ns = session.num_blocks, int(session.settings["steps"])
    total = nb * ns
    out: dict[str, Any] = {"model": session.info.name, "prompts": session.prompts, "seeds": session.seeds,
                           "steps": ns, "num_blocks": nb, "profile_s": timings["profile_s"], "recipes": []}
    for recipe in recipes:
        profile = profiles[recipe.name]
        paper = kept_cells(recipe.policy, nb, ns)
        paper_share = len(paper) / total
        candidates: list[tuple[str, str, frozenset]] = [("paper", "the recipe's fixed policy", paper)]
        for share in sorted({*cfg.shares, paper_share}):
            n = len(cells_for_share(profile, share))
            candidates.append(("profiled", f"{n} most sensitive cells", frozenset(profile.ranking()[:n])))
            if share > 0:
                candidates += [("uniform", label, cells) for label, cells in uniform_policies(share, nb, ns)]
        scored: dict[frozenset, float] = {}
        rows = []
        for family, label, cells in candidates:
            if cells not in scored:
                scored[cells] = session.mean_psnr(_policy_recipe(recipe, cells, family), refs)
            rows.append({"family": family, "policy": label, "fp16_share": len(cells) / total, "psnr": scored[cells],
                         "cells": len(cells)})
        at_paper = [r for r in rows if r["family"] == "profiled" and r["cells"] == len(paper)]
        out["recipes"].append({"recipe": recipe.name, "paper_share": paper_share, "rows": rows,
                               "paper_psnr": rows[0]["psnr"], "profiled_at_paper_psnr": at_paper[0]["psnr"],
                               "generations": len(scored)})
    out["seconds"] = round(time.perf_counter() - t0, 1)
    return out


def _policy_recipe(base: Recipe, cells: frozenset, family: str) -> Recipe:
    return base if family == "paper" else with_cells(base, sorted(cells), name=f"{base.name}-{family}-{len(cells)}")


def study_markdown(result: dict[str, Any], cfg: StudyConfig, out: str = "results/profile-tiny-shapes.md") -> str:
    command = study_command(cfg, out)
    n_prompts, n_seeds = len(result["prompts"]), len(result["seeds"])
    lines = [
        "# Profiled precision policies against uniform and the papers' policies (tiny-shapes, CPU)",
        "",
        f"Command: `{command}`",
        "",
        f"Model {result['model']} ({result['num_blocks']} blocks x {result['steps']} steps = "
        f"{result['num_blocks'] * result['steps']} self-attention cells per clip), {n_prompts} prompt(s) of "
        f"{cfg.prompts_file} ({'the first ' + str(cfg.prompt_limit) if cfg.prompt_limit else 'all'}) x seeds "
        f"{', '.join(map(str, result['seeds']))} = {n_prompts * n_seeds} clips per policy. One 16-bit generation "
        f"of those clips profiled every recipe ({result['profile_s']:.0f} s); each policy then generated the same "
        f"clips, scored by PSNR against the 16-bit clips (mean over frames, then clips; identical frames score the "
        f"cap). The whole study took {result['seconds']:.0f} s on the CPU.",
        "",
        "16-bit share: the share of the (block, step) cells kept in 16 bit. Profiled: the most sensitive cells of "
        "the profile (mean rel-L2 against the 16-bit call); uniform: the first / last k blocks or the first k "
        "steps, k nearest the share; paper: the recipe's own policy.",
        "",
    ]
    if cfg.prompt_limit:
        lines += [f"Reduced to the first {cfg.prompt_limit} prompt(s) of {cfg.prompts_file} to keep the CPU run "
                  "within minutes; the numbers are of those clips only.", ""]
    verdicts = []
    for rec in result["recipes"]:
        lines += [f"## {rec['recipe']}", "", "| policy | kind | 16-bit share | PSNR vs 16 bit (dB) |", "|---|---|---|---|"]
        for r in sorted(rec["rows"], key=lambda r: (r["fp16_share"], r["family"])):
            lines.append(f"| {r['policy']} | {r['family']} | {r['fp16_share']:.3f} | {r['psnr']:.2f} |")
        share, prof, paper = rec["paper_share"], rec["profiled_at_paper_psnr"], rec["paper_psnr"]
        if share == 0:
            verdict = (f"the paper's policy keeps nothing in 16 bit, so at its share (0) the profiled policy is the "
                       f"same policy ({paper:.2f} dB): no claim to test at that share")
        else:
            holds = prof >= paper
            verdict = (f"at the paper's 16-bit share {share:.3f}, profiled {prof:.2f} dB vs paper {paper:.2f} dB: "
                       f"the claim {'holds' if holds else 'does not hold'} ({prof - paper:+.2f} dB)")
        verdicts.append(f"- {rec['recipe']}: {verdict}; {against_uniform(rec['rows'])}.")
        lines += ["", f"{rec['recipe']}: {verdict}.", "", f"Against the uniform policies: {against_uniform(rec['rows'])}.",
                  ""]
    lines[len(lines):] = ["## Summary", "", *verdicts, ""]
    return "\n".join(lines)


def against_uniform(rows: list[dict]) -> str:
    """How the profiled policies fare against the uniform ones of the same 16-bit share (the best of them)."""
    uniform: dict[float, dict] = {}
    for r in rows:
        key = round(r["fp16_share"], 3)
        if r["family"] == "uniform" and (key not in uniform or r["psnr"] > uniform[key]["psnr"]):
            uniform[key] = r
    pairs = [(r, uniform[round(r["fp16_share"], 3)]) for r in rows
             if r["family"] == "profiled" and r["fp16_share"] > 0 and round(r["fp16_share"], 3) in uniform]
    if not pairs:
        return "no uniform policy has the share of a profiled one"
    wins = sum(p["psnr"] >= u["psnr"] for p, u in pairs)
    detail = "; ".join(f"share {p['fp16_share']:.3f}: profiled {p['psnr']:.2f} dB, best uniform "
                       f"{u['policy']} {u['psnr']:.2f} dB" for p, u in pairs)
    return f"the profiled policy is at least as good at {wins} of {len(pairs)} shares ({detail})"


def study_command(cfg: StudyConfig, out: str) -> str:
    words = ["lowbit-video profile --study", f"--prompts {cfg.prompts_file}"]
    if cfg.prompt_limit:
        words.append(f"--prompt-limit {cfg.prompt_limit}")
    words.append("--seeds " + " ".join(map(str, cfg.seeds)))
    if cfg.steps:
        words.append(f"--steps {cfg.steps}")
    if tuple(cfg.recipes) != DEFAULT_RECIPES:
        words += [f"--study-recipe {r}" for r in cfg.recipes]
    return " ".join(words) + f" --out {out}"


__all__ = ["DEFAULT_RECIPES", "DEFAULT_SHARES", "StudyConfig", "against_uniform", "kept_cells", "run_study", "study_command",
           "study_markdown", "uniform_policies"]
