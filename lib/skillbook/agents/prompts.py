"""Prompt templates are text files beside this module (agents/prompts/*.txt), filled with str.format."""
from __future__ import annotations

from functools import lru_cache
from importlib import resources


@lru_cache(maxsize=None)
def template(name: str) -> str:
    return resources.files("skillbook.agents").joinpath("prompts", f"{name}.txt").read_text(encoding="utf-8")


def render(name: str, **fields) -> str:
    return template(name).format(**fields)
