"""lowbit-video: 4-bit and mixed-precision attention for video diffusion transformers.

    import lowbit_video
    with lowbit_video.use_recipe(pipe, "sage2-int8") as handle:   # a diffusers pipeline or transformer
        frames = pipe(prompt, ...).frames
    handle.calls   # attention calls: quantized / high (kept in 16 bit by the policy) / fallback

`use_recipe`, `install_recipe` and `RecipeHandle` live in `lowbit_video.models.injection`; they are
imported on first use so that `import lowbit_video` stays free of torch and diffusers.
"""

__version__ = "0.1.0"

_PUBLIC = ("RecipeHandle", "install_recipe", "use_recipe")


def _map_checkout_folders() -> None:
    # a checkout's kernels/, recipes/ and prompts/ where no install maps them (lowbit_video/checkout_folders.py)
    import os

    from .checkout_folders import install

    install(os.path.dirname(os.path.abspath(__file__)))


_map_checkout_folders()


def __getattr__(name: str):
    if name in _PUBLIC:
        from .models import injection

        return getattr(injection, name)
    raise AttributeError(f"module 'lowbit_video' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_PUBLIC])


__all__ = ["__version__", *_PUBLIC]
