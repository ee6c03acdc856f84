"""Prompt sets, not code: this file makes the folder the package lowbit_video.data.prompts
(pyproject.toml's package-dir), which importlib.resources reads from a checkout, a wheel or a zip."""
