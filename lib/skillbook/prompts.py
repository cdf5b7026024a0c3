"""The one prompt loader: prompt templates are text files in a `prompts/` folder beside the code that
uses them (`skillbook/agent/prompts/`, `skillbook/papers/<paper>/prompts/`), filled with str.format.

A prompt version other than v1 (`PROMPT_VERSIONS`) lives in a subfolder, `prompts/<version>/`, and holds
only the files it changes: the rest are read from `prompts/`. v1's files never change, so the records made
with them keep replaying (a changed prompt is a new request: a replay would miss its cached answer)."""
from __future__ import annotations

from functools import lru_cache
from importlib import resources


# v1: the prompts of chapters 01-09's records. v2 (issue 35, for the studies registered after it): what is
# the same in every call comes first and what changes last, so the server's prompt cache keeps the shared
# part; text-skill replies end where a seventh step would begin (`papers.breakdown.induction.SIX_STEPS`).
PROMPT_VERSIONS = ("v1", "v2")


def check_version(version: str) -> str:
    if version not in PROMPT_VERSIONS:
        raise ValueError(f"unknown prompt version {version!r}; valid: {', '.join(PROMPT_VERSIONS)}")
    return version


def version_files(package: str, version: str) -> dict[str, str]:
    """The files `version` changes in `package`'s prompts (none for v1), for a run's fingerprint."""
    if check_version(version) == "v1":
        return {}
    folder = resources.files(package).joinpath("prompts", version)
    return {p.name: p.read_text(encoding="utf-8") for p in folder.iterdir() if p.name.endswith(".txt")} \
        if folder.is_dir() else {}


@lru_cache(maxsize=None)
def load(package: str, name: str, version: str = "v1") -> str:
    """The text of `<package>/prompts/<name>.txt`, exactly as written (callers strip where they need to);
    under another version, `prompts/<version>/<name>.txt` where that version changes it."""
    if check_version(version) != "v1":
        changed = resources.files(package).joinpath("prompts", version, f"{name}.txt")
        if changed.is_file():
            return changed.read_text(encoding="utf-8")
    try:
        return resources.files(package).joinpath("prompts", f"{name}.txt").read_text(encoding="utf-8")
    except FileNotFoundError:
        folder = resources.files(package).joinpath("prompts")
        known = sorted(p.name[:-4] for p in folder.iterdir() if p.name.endswith(".txt")) if folder.is_dir() else []
        raise FileNotFoundError(f"no prompt {name!r} in {package}/prompts; known: {', '.join(known)}") from None
