"""DraftAttention2's layout and routing, shared by the exact engine (lowbit_video/attention/draft*.py) and the
GPU kernels (lowbit_video/kernels/draft*.py), and importing neither:

- `layout`: video tokens -> connected regions -> contiguous blocks (`VideoGeometry`, `pack_layout`);
- `scores`: pooled Q/K per region and the region-pair draft map;
- `alloc`: the recipe's budget as per-head quotas, handed out down one ranking of the draft scores.
"""

from .layout import PackedLayout, VideoGeometry, pack_layout

__all__ = ["PackedLayout", "VideoGeometry", "pack_layout"]
