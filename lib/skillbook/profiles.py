"""Profiles and the checkout: where the project is and what a profile (a papermill parameter file) says.

Low in the layers so that anything — a paper's long-running study as well as the book — can read them.
"""
from __future__ import annotations

from pathlib import Path

import yaml

import skillbook


class ProfileError(ValueError):
    """Unknown profile or chapter; the message lists the valid ones."""


def project_root() -> Path:
    """The checkout that holds _toc.yml: the current folder or its nearest parent, else the one beside
    the editable package. The current folder comes first so that a command run inside a copy of the
    project acts on that copy, not on the checkout the package was installed from."""
    here = Path.cwd().resolve()
    candidates = [here, *here.parents, Path(skillbook.__file__).resolve().parents[2]]
    for c in candidates:
        if (c / "_toc.yml").exists() and (c / "pyproject.toml").exists():
            return c
    raise FileNotFoundError("cannot find the skillbook checkout (a folder with _toc.yml and pyproject.toml)")


def profiles(root: Path | None = None) -> list[str]:
    return sorted(p.stem for p in ((root or project_root()) / "profiles").glob("*.yml"))


def load_profile(name: str, root: Path | None = None) -> dict:
    root = root or project_root()
    path = root / "profiles" / f"{name}.yml"
    if not path.exists():
        raise ProfileError(f"unknown profile {name!r}; valid profiles: {', '.join(profiles(root))}")
    try:
        params = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        raise ProfileError(f"{path}{where}: not a valid YAML profile ({getattr(e, 'problem', e)})") from None
    if not isinstance(params, dict):
        raise ProfileError(f"{path}: a profile is a mapping of parameter names to values")
    return params
