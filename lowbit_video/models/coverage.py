"""Which recipes reach which diffusers video transformers: every class the installed diffusers exports, a tiny
random-weight instance of it (tiny_video_cases.py), one forward untouched and one per recipe through `use_recipe`.

Per class and recipe (`check_class`): the attention calls the forward made, counted independently of the hooks
(torch's own `scaled_dot_product_attention` calls inside the attention modules of the block lists, where
diffusers' default backend ends every call; cross-attention where key and query token counts differ or the module
says so), the hooks' counts by precision and type, whether the recipe changed the output, and whether the forward
after removal is bit-identical to the untouched one. `coverage_markdown` lays the rows out for
results/models-coverage.md (`lowbit-video models --coverage`).
"""

from __future__ import annotations

import time
import traceback
from typing import Any

import torch
import torch.nn.attention.flex_attention as flex
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from . import families
from .attention_hook import _sdpa_args
from .tiny_video_cases import CASES, build, video_transformer_classes

RECIPES = ("sage2-int8", "mxattention")


class _CountSDPA(TorchFunctionMode):
    def __init__(self, site: families.Site, seen: list) -> None:
        super().__init__()
        self.site, self.seen = site, seen

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention:
            q, k = _sdpa_args(*args, **kwargs)[:2]
            cross = self.site.cross or q.shape[-2] != k.shape[-2]
            self.seen.append("cross" if cross else "self")
        return func(*args, **kwargs)


def count_attention_calls(model: torch.nn.Module, inputs: dict[str, Any]) -> tuple[Any, list[str]]:
    """(output, ["self" | "cross" per attention call]) of one untouched forward: torch's SDPA calls, and flex
    attention's (diffusers' flex backend calls it through its module, where it is wrapped for the forward)."""
    seen: list[str] = []
    handles, modes = [], {}
    for site in families.attention_sites(model):
        def pre(mod, args, site=site):
            modes[id(mod)] = _CountSDPA(site, seen).__enter__()

        def post(mod, args, out):
            modes.pop(id(mod)).__exit__(None, None, None)

        handles += [site.module.register_forward_pre_hook(pre), site.module.register_forward_hook(post)]
    flex_fn = flex.flex_attention

    def counted_flex(query, key, *args, **kwargs):
        if modes:
            site = modes[next(reversed(modes))].site
            seen.append("cross" if site.cross or query.shape[-2] != key.shape[-2] else "self")
        return flex_fn(query, key, *args, **kwargs)

    flex.flex_attention = counted_flex
    try:
        with torch.no_grad():
            out = model(**inputs)
    finally:
        flex.flex_attention = flex_fn
        for h in handles:
            h.remove()
    return out, seen


def first_tensor(out: Any) -> torch.Tensor:
    while not isinstance(out, torch.Tensor):
        out = out[0] if isinstance(out, (tuple, list)) else getattr(out, "sample")
    return out


def check_class(name: str, recipes=RECIPES) -> dict[str, Any]:
    """One row of the coverage table (see the module docstring); `error` says why a class could not be run."""
    from .injection import use_recipe
    from .steps import StepTracker

    row: dict[str, Any] = {"class": name, "recipes": {}, "error": None}
    if name not in CASES:
        row["error"] = "no tiny configuration in lowbit_video/models/tiny_video_cases.py"
        return row
    try:
        model, inputs = build(name)
        row["facts"] = families.describe(model)
        ref_out, seen = count_attention_calls(model, inputs)
        ref = first_tensor(ref_out)
        row["calls"] = {"self": seen.count("self"), "cross": seen.count("cross")}
        for recipe in recipes:
            t0 = time.perf_counter()
            with torch.no_grad(), use_recipe(model, recipe, tracker=StepTracker()) as handle:
                out = first_tensor(model(**inputs))
                routes = {"dispatch_attention_fn" if h.interposer is not None else "SDPA"
                          for h in handle.hooks.values()}
                row["route"] = " + ".join(sorted(routes))
            with torch.no_grad():
                after = first_tensor(model(**inputs))
            calls = handle.calls
            row["recipes"][recipe] = {
                "quantized": calls["quantized"], "high": calls["high"], "fallback": calls["fallback"],
                "by_type": calls["by_type"], "fallback_reasons": calls["fallback_reasons"],
                "changed": not torch.equal(out, ref),
                "finite": bool(torch.isfinite(out).all()), "restored": torch.equal(after, ref),
                "seconds": round(time.perf_counter() - t0, 2),
            }
    except Exception as e:  # noqa: BLE001 - the table says what failed
        row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]
        row["traceback"] = traceback.format_exc(limit=4)
    return row


def row_ok(row: dict[str, Any], recipe: str) -> bool:
    """The recipe ran on the class: every attention call counted, self/joint calls quantized (the recipes'
    default policy), cross-attention kept in 16 bit, the output changed and finite, and removal exact."""
    r = row["recipes"].get(recipe)
    if r is None or row.get("error"):
        return False
    calls = row["calls"]
    return (r["quantized"] + r["high"] + r["fallback"] == calls["self"] + calls["cross"]
            and r["quantized"] + r["fallback"] == calls["self"] and r["high"] == calls["cross"]
            and r["quantized"] > 0 and r["changed"] and r["finite"] and r["restored"])


def why_not(row: dict[str, Any], recipe: str) -> str:
    """One line on why `recipe` is not supported on the row's class (empty when it is)."""
    if row.get("error"):
        return row["error"]
    if row_ok(row, recipe):
        return ""
    r, calls = row["recipes"][recipe], row["calls"]
    if r["fallback"] and not r["quantized"]:
        return "every self-attention call runs diffusers' kernel: " + "; ".join(sorted(r["fallback_reasons"]))
    if not calls["self"] and not r["fallback"]:
        return "no softmax self-attention in its blocks (linear attention); cross-attention stays 16-bit"
    if not r["restored"]:
        return "the forward after removal differs from the untouched model"
    return f"counts differ from the forward's calls: {r['quantized']} q / {r['high']} h / {r['fallback']} f"


def draft_support(row: dict[str, Any]) -> str:
    """Whether draft recipes (video-grid layouts) can run on the class, from its facts, with the reason."""
    facts = row.get("facts")
    if facts is None:
        return "unknown: not built"
    return f"no: {facts['draft']}" if facts["draft"] else "yes"


def coverage_rows(classes=None, recipes=RECIPES) -> list[dict[str, Any]]:
    return [check_class(name, recipes) for name in (classes or video_transformer_classes())]


def coverage_markdown(rows: list[dict[str, Any]], command: str, recipes=RECIPES) -> str:
    import diffusers

    ok = {r: sum(row_ok(row, r) for row in rows) for r in recipes}
    lines = ["# Recipes on diffusers video transformers", "",
             f"Command: `{command}`", "",
             f"diffusers {diffusers.__version__}, torch {torch.__version__}, CPU, tiny random-weight instances "
             "(lowbit_video/models/tiny_video_cases.py). A recipe is supported on a class when, through "
             "`use_recipe`, every attention call of the forward (counted independently from torch's SDPA and flex "
             "attention calls) "
             "was counted, the self/joint calls quantized and cross-attention kept in 16 bit (the recipes' default "
             "policy), the output changed and stayed finite, and the forward after removal was bit-identical to the "
             "untouched model.", "",
             "Supported: " + ", ".join(f"{r} on {ok[r]} of {len(rows)} classes" for r in recipes) + ".", "",
             "| class | family | calls (self/cross) | " + " | ".join(recipes) + " | draft | route | note |",
             "|---|---|---|" + "---|" * len(recipes) + "---|---|---|"]
    for row in rows:
        facts = row.get("facts") or {}
        calls = row.get("calls")
        cells = []
        for r in recipes:
            rr = row["recipes"].get(r)
            if rr is None:
                cells.append("—")
            else:
                mark = "yes" if row_ok(row, r) else "no"
                cells.append(f"{mark} ({rr['quantized']} q / {rr['high']} h / {rr['fallback']} f)")
        note = "; ".join(dict.fromkeys(w for w in (why_not(row, r) for r in recipes) if w)) or facts.get("unknown") \
            or ""
        family = families.FACTS[row["class"]].name if row["class"] in families.FACTS else "(no facts row)"
        lines.append(f"| {row['class']} | {family} | {'%d/%d' % (calls['self'], calls['cross']) if calls else '—'} | "
                     + " | ".join(cells) + f" | {draft_support(row)} | {row.get('route', '')} | {note} |")
    lines += ["", "q / h / f: calls quantized / kept in 16 bit by the policy / run by diffusers' kernel because the "
              "quantized path cannot express them (a mask other than key padding or a few query groups, causal, "
              "grouped-query heads).", ""]
    return "\n".join(lines)


__all__ = ["RECIPES", "check_class", "count_attention_calls", "coverage_markdown", "coverage_rows", "draft_support",
           "row_ok", "why_not"]
