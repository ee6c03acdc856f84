"""The tiny-shapes text-to-video model: a diffusers `WanTransformer3DModel` in pixel space plus a
small learned text encoder over the grammar's vocabulary.

Layout
------
* Video: (B, 3, frames, size, size) float in [-1, 1] (pixels x 2 - 1). With patch (1, 2, 2), 8 frames
  of 32x32 give 8 * 16 * 16 = 2,048 video tokens.
* Text: a prompt of the grammar, canonicalised by `grammar.parse_prompt`, split into words, mapped
  to ids (0 = padding) and padded to `text_len`. The all-padding sequence is the "empty prompt"
  used for classifier-free guidance (`null_ids`). `TinyTextEncoder` (token + learned position
  embeddings, pre-LN transformer layers, final LayerNorm) maps ids to `encoder_hidden_states`
  (B, text_len, text_dim) for the Wan model's cross-attention.
* Time: Wan's convention, timestep = 1000 * sigma, sigma in [0, 1] (1 = pure noise).
* Objective (train.py): rectified flow, x_sigma = (1 - sigma) x0 + sigma eps, target eps - x0.

Storage
-------
A model folder holds `config.json` and `model.safetensors` (keys `transformer.*` and
`text_encoder.*`, stored in `config["storage_dtype"]`, float16 for the shipped weights). Only
safetensors is ever loaded. `TinyShapesModel.from_folder()` with no argument loads the shipped
folder `lowbit_video/models/tiny_shapes/weights/`. No network access, no hub ids.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .grammar import parse_prompt, vocabulary

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"
CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
MODEL_TYPE = "tiny-shapes"
FORMAT_VERSION = 1
PAD = "<pad>"

# WanTransformer3DModel constructor arguments (diffusers 0.42.1 names). 4 heads x 64 = 256 wide,
# 6 layers, ffn 1024: about 7 M parameters.
DEFAULT_TRANSFORMER: dict[str, Any] = {
    "patch_size": [1, 2, 2],
    "num_attention_heads": 4,
    "attention_head_dim": 64,
    "in_channels": 3,
    "out_channels": 3,
    "text_dim": 128,
    "freq_dim": 256,
    "ffn_dim": 1024,
    "num_layers": 6,
    "cross_attn_norm": True,
    "qk_norm": "rms_norm_across_heads",
    "eps": 1e-6,
    "rope_max_seq_len": 1024,
}

DEFAULT_TEXT_ENCODER: dict[str, Any] = {"width": 128, "layers": 2, "heads": 4, "mlp_ratio": 4}


def default_config(**overrides: Any) -> dict[str, Any]:
    """The shipped architecture as a plain dict (what config.json holds, minus training notes).

    Top-level keys may be overridden; `transformer` / `text_encoder` overrides are merged into the
    defaults (e.g. `default_config(transformer={"num_layers": 1})`).
    """
    cfg: dict[str, Any] = {
        "model_type": MODEL_TYPE,
        "format_version": FORMAT_VERSION,
        "frames": 8,
        "size": 32,
        "text_len": 16,
        "vocab": [PAD] + vocabulary(),
        "transformer": dict(DEFAULT_TRANSFORMER),
        "text_encoder": dict(DEFAULT_TEXT_ENCODER),
        # Sampling defaults (sample.py): flow shift of the Euler schedule, steps, CFG scale. The
        # shipped weights follow their prompts without guidance at 12 steps (MODEL_CARD.md), and one
        # clip then takes ~5 s on 2 idle CPU cores.
        "sample_shift": 3.0,
        "default_steps": 12,
        "default_guidance": 1.0,
        "storage_dtype": "float32",
    }
    for key, value in overrides.items():
        if key in ("transformer", "text_encoder"):
            cfg[key] = {**cfg[key], **value}
        else:
            cfg[key] = value
    cfg["text_encoder"]["out_dim"] = cfg["transformer"]["text_dim"]
    return cfg


def tiny_test_config() -> dict[str, Any]:
    """A very small config for CPU tests (1 layer, 2 heads x 64, 4 frames of 16x16: 256 tokens)."""
    return default_config(
        frames=4, size=16,
        transformer={"num_attention_heads": 2, "attention_head_dim": 64, "ffn_dim": 64, "num_layers": 1,
                     "text_dim": 32, "freq_dim": 32},
        text_encoder={"width": 32, "layers": 1, "heads": 2},
    )


# ----------------------------------------------------------------------------------- text side


class _TextBlock(nn.Module):
    """Pre-LN transformer encoder layer (no padding mask: padding is an ordinary learned token)."""

    def __init__(self, width: int, heads: int, mlp_ratio: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, mlp_ratio * width), nn.GELU(approximate="tanh"),
                                 nn.Linear(mlp_ratio * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, d)
        x = x + self.proj(a)
        return x + self.mlp(self.norm2(x))


class TinyTextEncoder(nn.Module):
    """ids (B, L) -> (B, L, out_dim): token + position embeddings, `layers` blocks, LayerNorm, linear."""

    def __init__(self, vocab_size: int, length: int, width: int, layers: int, heads: int, mlp_ratio: int,
                 out_dim: int) -> None:
        super().__init__()
        self.token = nn.Embedding(vocab_size, width)
        self.position = nn.Parameter(torch.randn(1, length, width) * 0.02)
        self.blocks = nn.ModuleList([_TextBlock(width, heads, mlp_ratio) for _ in range(layers)])
        self.norm = nn.LayerNorm(width)
        self.out = nn.Linear(width, out_dim)
        nn.init.normal_(self.token.weight, std=0.02)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.token(ids) + self.position[:, : ids.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.out(self.norm(x))


# ------------------------------------------------------------------------------------ the model


def _dtype(name: str | torch.dtype) -> torch.dtype:
    if isinstance(name, torch.dtype):
        return name
    table = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16, "fp16": torch.float16,
             "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}
    if name not in table:
        raise ValueError(f"unknown dtype {name!r}; expected one of: {', '.join(table)}")
    return table[name]


def _dtype_name(dtype: torch.dtype) -> str:
    return {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}[dtype]


class TinyShapesModel(nn.Module):
    """Text encoder + WanTransformer3DModel. `forward(video, sigma, ids)` predicts eps - x0."""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        super().__init__()
        from diffusers import WanTransformer3DModel

        config = copy.deepcopy(config) if config is not None else default_config()
        if config.get("model_type") != MODEL_TYPE:
            raise ValueError(f"not a {MODEL_TYPE} config (model_type={config.get('model_type')!r})")
        config["text_encoder"]["out_dim"] = config["transformer"]["text_dim"]
        self.config = config
        self.vocab: list[str] = list(config["vocab"])
        if self.vocab[0] != PAD:
            raise ValueError(f"vocab[0] must be {PAD!r}")
        self._index = {w: i for i, w in enumerate(self.vocab)}
        tcfg = dict(config["transformer"])
        tcfg["patch_size"] = tuple(tcfg["patch_size"])
        self.transformer = WanTransformer3DModel(**tcfg)
        te = config["text_encoder"]
        self.text_encoder = TinyTextEncoder(len(self.vocab), config["text_len"], te["width"], te["layers"],
                                            te["heads"], te["mlp_ratio"], te["out_dim"])
        p = self.transformer.config.patch_size
        if config["frames"] % p[0] or config["size"] % p[1] or config["size"] % p[2]:
            raise ValueError(f"frames/size ({config['frames']}, {config['size']}) not divisible by patch {p}")

    # -- shapes

    @property
    def video_shape(self) -> tuple[int, int, int, int]:
        """(channels, frames, height, width) of one clip as the transformer sees it."""
        c = self.config
        return (self.transformer.config.in_channels, c["frames"], c["size"], c["size"])

    @property
    def num_video_tokens(self) -> int:
        p = self.transformer.config.patch_size
        c = self.config
        return (c["frames"] // p[0]) * (c["size"] // p[1]) * (c["size"] // p[2])

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    # -- text

    def tokenize(self, prompts: Sequence[str]) -> torch.Tensor:
        """(B, text_len) int64 ids of grammar prompts (canonicalised; ValueError on a bad prompt)."""
        L = self.config["text_len"]
        out = torch.zeros(len(prompts), L, dtype=torch.long)
        for i, text in enumerate(prompts):
            words = parse_prompt(text).prompt.split()
            if len(words) > L:
                raise ValueError(f"prompt {text!r} has {len(words)} words; the model takes at most {L}")
            missing = [w for w in words if w not in self._index]
            if missing:
                raise ValueError(f"word(s) {missing} of prompt {text!r} are not in the model's vocabulary")
            out[i, : len(words)] = torch.tensor([self._index[w] for w in words])
        return out

    def null_ids(self, n: int) -> torch.Tensor:
        """Ids of the empty prompt (all padding): the unconditional input for CFG."""
        return torch.zeros(n, self.config["text_len"], dtype=torch.long)

    def encode_text(self, ids: torch.Tensor) -> torch.Tensor:
        """encoder_hidden_states (B, text_len, text_dim) in the transformer's dtype."""
        return self.text_encoder(ids.to(self.text_encoder.token.weight.device))

    # -- denoiser

    def forward(self, video: torch.Tensor, sigma: torch.Tensor, ids: torch.Tensor | None = None, *,
                encoder_hidden_states: torch.Tensor | None = None) -> torch.Tensor:
        """Predicted velocity eps - x0 for `video` (B, 3, F, H, W) at noise level sigma (B,) in [0, 1]."""
        if encoder_hidden_states is None:
            if ids is None:
                raise ValueError("pass ids or encoder_hidden_states")
            encoder_hidden_states = self.encode_text(ids)
        timestep = sigma.to(video.device).reshape(-1).expand(video.shape[0]) * 1000.0
        return self.transformer(video, timestep=timestep, encoder_hidden_states=encoder_hidden_states,
                                return_dict=False)[0]

    # -- dtype handling

    def cast(self, dtype: str | torch.dtype) -> "TinyShapesModel":
        """Cast to `dtype`, keeping the modules Wan keeps in fp32 (`_keep_in_fp32_modules`) in fp32,
        as diffusers' loader does for half-precision Wan checkpoints."""
        dtype = _dtype(dtype)
        self.to(dtype)
        if dtype != torch.float32:
            keep = getattr(self.transformer, "_keep_in_fp32_modules", None) or []
            for name, module in self.transformer.named_modules():
                if any(k in name.split(".") for k in keep):
                    module.to(torch.float32)
            for name, param in self.transformer.named_parameters():
                if any(k in name.split(".") for k in keep):
                    param.data = param.data.float()
        return self

    # -- save / load

    def state_dict_for_storage(self, dtype: str | torch.dtype | None = None) -> dict[str, torch.Tensor]:
        dtype = _dtype(dtype or self.config.get("storage_dtype", "float32"))
        return {k: v.detach().to("cpu", dtype).contiguous() for k, v in self.state_dict().items()}

    def save(self, path: str | Path, *, dtype: str | torch.dtype | None = None,
             extra_config: dict[str, Any] | None = None) -> Path:
        """Write `config.json` and `model.safetensors` into folder `path` (created); returns it.

        `dtype` (default: config["storage_dtype"]) is the storage precision of every tensor."""
        from safetensors.torch import save_file

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        dtype = _dtype(dtype or self.config.get("storage_dtype", "float32"))
        cfg = copy.deepcopy(self.config)
        cfg["storage_dtype"] = _dtype_name(dtype)
        if extra_config:
            cfg.update(extra_config)
        tensors = self.state_dict_for_storage(dtype)
        tmp = path / (WEIGHTS_NAME + ".tmp")
        save_file(tensors, str(tmp), metadata={"format": "pt", "model_type": MODEL_TYPE})
        tmp.replace(path / WEIGHTS_NAME)
        (path / CONFIG_NAME).write_text(json.dumps(cfg, indent=2) + "\n")
        return path

    @classmethod
    def from_folder(cls, path: str | Path | None = None, *, device: str | torch.device = "cpu",
                    dtype: str | torch.dtype = "float32") -> "TinyShapesModel":
        """Load a saved folder (default: the shipped weights). Compute dtype `dtype` (fp32 default;
        fp16/bf16 keep Wan's fp32 modules in fp32). Only safetensors is read."""
        from safetensors.torch import load_file

        path = Path(path) if path is not None else WEIGHTS_DIR
        cfg_file, w_file = path / CONFIG_NAME, path / WEIGHTS_NAME
        missing = [p.name for p in (cfg_file, w_file) if not p.is_file()]
        if missing:
            raise FileNotFoundError(f"{path} is not a {MODEL_TYPE} model folder: missing {', '.join(missing)}")
        config = json.loads(cfg_file.read_text())
        model = cls(config)
        state = load_file(str(w_file))
        model.load_state_dict(state, strict=True)  # load_state_dict copies (and upcasts) into fp32 params
        model.cast(dtype)
        return model.to(device).eval()

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


# ------------------------------------------------------------------------------ pixel helpers


def clips_to_model(clips: Any, device: str | torch.device | None = None) -> torch.Tensor:
    """(n, frames, H, W, 3) in [0, 1] (numpy or torch) -> (n, 3, frames, H, W) float32 in [-1, 1]."""
    x = torch.as_tensor(clips)
    if x.dtype == torch.uint8:
        x = x.float() / 255.0
    x = x.float().permute(0, 4, 1, 2, 3) * 2.0 - 1.0
    return x.contiguous() if device is None else x.to(device).contiguous()


def model_to_clips(x: torch.Tensor) -> "Any":
    """(n, 3, frames, H, W) in [-1, 1] -> numpy float32 (n, frames, H, W, 3) in [0, 1]."""
    y = ((x.detach().float().cpu() + 1.0) / 2.0).clamp(0.0, 1.0)
    return y.permute(0, 2, 3, 4, 1).contiguous().numpy()


def shift_sigma(sigma: torch.Tensor, shift: float) -> torch.Tensor:
    """Wan / SD3 time shift: s * sigma / (1 + (s - 1) * sigma)."""
    if shift == 1.0:
        return sigma
    return shift * sigma / (1.0 + (shift - 1.0) * sigma)


__all__ = [
    "DEFAULT_TEXT_ENCODER", "DEFAULT_TRANSFORMER", "TinyShapesModel", "TinyTextEncoder", "WEIGHTS_DIR",
    "clips_to_model", "default_config", "model_to_clips", "shift_sigma", "tiny_test_config",
]
