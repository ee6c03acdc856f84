"""Scoring generated runs: paired fidelity against FP16, VBench dimensions, tiny-shapes adherence.

Submodules have one job each and import their heavy dependencies lazily, so `weights check` and
`metrics` stay fast:

* `weights`   -- the manifest of weight files, where they live, and whether they are usable;
* `fetch`     -- downloading the manifest's files into the weights root (`weights fetch`; the only
  module that touches the network, and only when asked);
* `registry`  -- every metric by name, one spec each: how it is computed, what it needs (weights,
  python modules, model family), its direction, label and number format;
* `paired`    -- PSNR, SSIM, frame cosine of a run against its baseline (no weights);
* `lpips_metric` -- LPIPS (AlexNet) from verified local weights only;
* `video`     -- per-run metrics computed in-process (tiny-shapes adherence);
* `vbench`    -- VBench dimensions in a subprocess (owned by the VBench integration).
"""
