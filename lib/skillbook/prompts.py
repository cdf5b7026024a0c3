"""The one prompt loader: prompt templates are text files in a `prompts/` folder beside the code that
uses them (`skillbook/agent/prompts/`, `skillbook/papers/<paper>/prompts/`), filled with str.format."""
from __future__ import annotations

from functools import lru_cache
from importlib import resources


@lru_cache(maxsize=None)
def load(package: str, name: str) -> str:
    """The text of `<package>/prompts/<name>.txt`, exactly as written (callers strip where they need to)."""
    try:
        return resources.files(package).joinpath("prompts", f"{name}.txt").read_text(encoding="utf-8")
    except FileNotFoundError:
        folder = resources.files(package).joinpath("prompts")
        known = sorted(p.name[:-4] for p in folder.iterdir() if p.name.endswith(".txt")) if folder.is_dir() else []
        raise FileNotFoundError(f"no prompt {name!r} in {package}/prompts; known: {', '.join(known)}") from None
