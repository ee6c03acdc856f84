"""Shipped text-to-video models.

`tiny_shapes`: the data side (closed prompt grammar, procedural clip renderer) and the pixel-level
adherence scorer of the tiny text-to-video model trained on coloured shapes. Subpackages are not
imported here, so importing `lowbit_video.models` stays cheap.
"""
