"""Which attention calls of a model a recipe can quantize: `lowbit-video profile`.

* probe.py: the recipe's output next to the 16-bit one at every attention call of a 16-bit generation
  (a capture sink of the attention hooks; sums kept on the device, read back once).
* cells.py: those errors aggregated by attention type x block x denoising step.
* policy.py: budgets (`rel-l2=`, `fp16-share=`, `psnr=`) and the recipe file that keeps the chosen
  (block, step) cells in 16 bit (`policy.high_precision_calls`).
* search.py: the short bisection behind `psnr=`.
* run.py: the command's library side (resolve like generate, profile, write the files).
* heatmap.py: the PNG. study.py: profiled against uniform and the papers' policies (results page).
"""
