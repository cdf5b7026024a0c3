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


# Sections whose entries a profile that `extends` another overrides one by one (per chapter, per study
# setting) instead of replacing the whole section.
MERGED_SECTIONS = ("chapters", "study", "ceiling")
# Sections that are a study's design, read by its module, not a chapter's parameters: chapter 09's
# `study:` and the second study's `ceiling:` (chapter 11).
DESIGN_SECTIONS = ("study", "ceiling")


def load_profile(name: str, root: Path | None = None, _seen: tuple[str, ...] = ()) -> dict:
    """A profile's parameters. `extends: <profile>` starts from that profile: top-level keys are replaced,
    the `chapters:` and `study:` sections are merged entry by entry (a chapter's overrides key by key)."""
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
    base_name = params.pop("extends", None)
    if base_name is None:
        return params
    if base_name in (*_seen, name):    # each profile on the chain was checked here before it recursed
        raise ProfileError(f"profile {name!r}: `extends` goes round in a circle "
                           f"({' -> '.join((*_seen, name, base_name))})")
    base = load_profile(str(base_name), root, (*_seen, name))
    for section in MERGED_SECTIONS:
        mine, theirs = params.pop(section, None), base.get(section)
        if mine is None:
            continue
        if not isinstance(mine, dict) or not isinstance(theirs or {}, dict):
            raise ProfileError(f"{path}: `{section}:` must be a mapping, as in profile {base_name!r}")
        merged = dict(theirs or {})
        for key, value in mine.items():
            if section == "chapters" and isinstance(value, dict) and isinstance(merged.get(key), dict):
                merged[key] = {**merged[key], **value}
            else:
                merged[key] = value
        base[section] = merged
    return {**base, **params}
