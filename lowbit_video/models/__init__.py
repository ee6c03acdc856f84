"""The text-to-video models generate runs, and how a recipe gets into them.

registry.py lists the models and loads one; base.py is the interface the adapters implement
(pipeline.py: every diffusers text-to-video pipeline; tiny_shapes_adapter.py; the registry imports
them, they import base only).
injection.py, attention_hook.py and families.py (the per-family facts) put a recipe's attention into
any diffusers video transformer; steps.py,
capture.py and timing.py follow a generate call. `tiny_shapes` is the shipped tiny model: its prompt
grammar, clip renderer, training, sampling and the pixel-level adherence scorer.

Nothing is imported here, so importing `lowbit_video.models` stays cheap.
"""
