"""The one prompt loader: prompt templates are text files in a `prompts/` folder beside the code that
uses them (`skillbook/agent/prompts/`, `skillbook/papers/<paper>/prompts/`), filled with str.format.

A prompt version other than v1 (`PROMPT_VERSIONS`) lives in a subfolder, `prompts/<version>/`, and holds
only the files it changes against the version before it: a name is read from the newest folder of the chain
v1 … version that has it (`prompts/` is v1). No version's files change once records use them, so those
records keep replaying (a changed prompt is a new request: a replay would miss its cached answer)."""
from __future__ import annotations

from functools import cache
from importlib import resources

# v1: the prompts of chapters 01-09's records. v2 (issue 35, for the studies registered after it): what is
# the same in every call comes first and what changes last, so the server's prompt cache keeps the shared
# part; text-skill replies end where a seventh step would begin (`papers.breakdown.induction.SIX_STEPS`).
# v3 (issue 35, second round): the summarizer is one more turn of the executor's own conversation
# (`summarizer_turn`), so its prefix is the one the server has just evaluated and it reads the observations
# whole (the separate v1 prompt cut them at 150 characters, which hid the coin at the end of a room's
# description); the induction record keeps each observation's head and tail (`text.cut_middle`), where a
# room's description names what lies there and its exits. Tried on dev and dropped (chapter 01): an
# executor without its thought, references in place of observations the conversation already held, and
# the planner as a turn of that conversation; on coin each lost games v2 won.
PROMPT_VERSIONS = ("v1", "v2", "v3")


def check_version(version: str) -> str:
    if version not in PROMPT_VERSIONS:
        raise ValueError(f"unknown prompt version {version!r}; valid: {', '.join(PROMPT_VERSIONS)}")
    return version


def at_least(version: str, since: str) -> bool:
    """Whether prompt version `version` is `since` or newer (a behaviour that came with `since`)."""
    return PROMPT_VERSIONS.index(check_version(version)) >= PROMPT_VERSIONS.index(check_version(since))


def _chain(version: str) -> list[str]:
    """The versions after v1 up to `version`, newest first: where a name is looked up before `prompts/`."""
    return list(reversed(PROMPT_VERSIONS[1:PROMPT_VERSIONS.index(check_version(version)) + 1]))


def version_files(package: str, version: str) -> dict[str, str]:
    """The files `version` changes in `package`'s prompts against v1 (none for v1), for a run's
    fingerprint: each name as the chain reads it."""
    files: dict[str, str] = {}
    for v in reversed(_chain(version)):           # oldest first, so that a newer file wins
        folder = resources.files(package).joinpath("prompts", v)
        if folder.is_dir():
            files.update({p.name: p.read_text(encoding="utf-8") for p in folder.iterdir()
                          if p.name.endswith(".txt")})
    return files


def has(package: str, name: str, version: str) -> bool:
    """Whether `version` of `package`'s prompts has a template `name` (some exist from one version on)."""
    return any(resources.files(package).joinpath("prompts", v, f"{name}.txt").is_file()
               for v in _chain(version)) or \
        resources.files(package).joinpath("prompts", f"{name}.txt").is_file()


@cache
def load(package: str, name: str, version: str = "v1") -> str:
    """The text of `<package>/prompts/<name>.txt`, exactly as written (callers strip where they need to);
    under another version, `prompts/<version>/<name>.txt` where that version changes it."""
    for v in _chain(version):
        changed = resources.files(package).joinpath("prompts", v, f"{name}.txt")
        if changed.is_file():
            return changed.read_text(encoding="utf-8")
    try:
        return resources.files(package).joinpath("prompts", f"{name}.txt").read_text(encoding="utf-8")
    except FileNotFoundError:
        folder = resources.files(package).joinpath("prompts")
        known = sorted(p.name[:-4] for p in folder.iterdir() if p.name.endswith(".txt")) if folder.is_dir() else []
        raise FileNotFoundError(f"no prompt {name!r} in {package}/prompts; known: {', '.join(known)}") from None
