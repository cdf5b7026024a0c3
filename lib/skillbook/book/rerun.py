"""Re-executing one chapter with changed parameters into a run folder of one's own.

    python -m skillbook.book rerun 05_utility --from workshop --into mine --set n_buckets=4 [--live]
    python -m skillbook.book build --profile workshop --overlay mine      # or: make html RUN=mine

`rerun` (1) checks the chapter and every `--set` against the chapter's parameters cell (names and
types) and refuses a target folder that is a profile's or holds tracked files, before anything else;
(2) copies into `runs/<into>/` the records the chapter reads — its own folder, the folders it shares
with other chapters (`shared_records`), chapter 09's study records, the claims records for chapter 10 —
unless `runs/<into>/` already has them (a second rerun builds on the first); (3) says what changes and
what the recorded run cost; (4) executes the chapter with the profile's parameters and its
per-chapter overrides exactly as `make book` does (`execute`), plus the `--set` values, first as a
pure replay (`SKILLBOOK_REPLAY_ONLY=1`: every answer from the copied response cache). An
analysis-only change completes there without a model call. A change that needs new model answers
stops at the first one (`ReplayMiss`, which no runner records as an outcome) and `rerun` reports the
live time the recorded run needed; `--live` then runs it with the model. Nothing outside
`runs/<into>/` is written.

`build(..., overlay=<into>)` renders the book with the chapters executed in `runs/<into>/` in place of
the profile's, the rest as committed; each re-executed page opens with a note naming what changed.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path

import nbformat
import yaml

from ..papers import PAPERS
from ..profiles import ProfileError, load_profile, profiles, project_root
from .execution import execute, execution_plan, toc_chapters


# chapter → run folders it reads besides its own, in the profile's folder of records
def shared_records(chapter: str) -> list[str]:
    """The run folders `chapter` reads that another chapter wrote (`papers.Paper.shared`)."""
    return [f for paper in PAPERS.values() for f in paper.shared.get(chapter, ())]



# The studies keep their records in runs/<their profile>/ (each runs for days, apart from the book): per
# chapter, the parameter that names that profile, its default, and what the chapter reads there.
STUDY_RECORDS = {
    "09_study": ("study_profile", "study", ["streams", "calibration", "registration", "09_study"]),
    "11_ceiling": ("ceiling_profile", "ceiling", ["streams", "calibration", "libraries", "registration",
                                                  "games.json", "openings.json", "design.json", "sittings.jsonl",
                                                  "11_ceiling"]),
}
FINDINGS = "10_findings"          # reads every chapter's claims.json
NOT_COPIED = shutil.ignore_patterns(".responses.sqlite*", ".lock", "*.pid", "*.log", "*.ipynb")
RESERVED = {"study", "bench", "ceiling"}   # folders under runs/ that are not a profile's but are committed


def copied_text(chapter: str, source: str, study_profile: str, into: str, copied: list[str],
                had: list[str] | None = None) -> str:
    """What `rerun` says it copied: from the profile's folder and, for a study's chapter, the study's
    (`study_profile`, named once when the source profile is the study's own). `had`: what the target held already; when
    nothing was copied and the target held nothing either, the sources had no records to copy."""
    origins = [source] + ([study_profile] if chapter in STUDY_RECORDS and study_profile != source else [])
    named = " and ".join(f"runs/{o}/" for o in origins)
    if copied:
        return f"[skillbook] records copied from {named}: " + ", ".join(copied)
    if had is None or had:
        return f"[skillbook] records copied from {named}: none (runs/{into}/ has them already)"
    return (f"[skillbook] no records copied: {named} {'has' if len(origins) == 1 else 'have'} none of "
            f"{chapter} (a live execution makes them)")


class ReplayNeedsModel(RuntimeError):
    """The change needs live model time and --live was not given; the message says roughly how much."""


def parse_sets(items: list[str]) -> dict:
    """['n_buckets=4', 'split=dev'] → {'n_buckets': 4, 'split': 'dev'} (values read as YAML scalars)."""
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_]\w*", name.strip()):
            raise ProfileError(f"--set {item!r}: expected name=value, e.g. --set n_buckets=4")
        out[name.strip()] = yaml.safe_load(value) if value.strip() else ""
    return out


def _tracked(root: Path, folder: Path) -> list[str]:
    try:
        res = subprocess.run(["git", "ls-files", "--", str(folder.relative_to(root))], cwd=root,
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return []
    return res.stdout.split() if res.returncode == 0 else []


def check_target(into: str, source: str, root: Path) -> Path:
    """runs/<into>/, refused when it is a profile's folder, a committed folder, or holds tracked files."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", into or ""):
        raise ProfileError(f"--into {into!r}: a folder name under runs/ (letters, digits, '-', '_')")
    if into == source or into in profiles(root) or into in RESERVED:
        raise ProfileError(f"--into {into!r} is the folder of profile or record set {into!r}, which a rerun "
                           f"must not write; choose another name (not any of: "
                           f"{', '.join(sorted(set(profiles(root)) | RESERVED))})")
    target = root / "runs" / into
    tracked = _tracked(root, target)
    if tracked:
        raise ProfileError(f"runs/{into}/ holds files tracked by git ({tracked[0]}, …); a rerun writes only "
                           "untracked folders: choose another --into")
    return target


def _copy(src: Path, dst: Path) -> bool:
    if dst.exists() or not src.exists():
        return False
    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.is_dir():
        shutil.copytree(src, dst, ignore=NOT_COPIED)
    else:
        shutil.copyfile(src, dst)
    return True


def copy_records(chapter: str, params: dict, source: Path, studies: dict[str, Path], target: Path,
                 chapters: list[str]) -> tuple[list[str], list[str]]:
    """Copy what `chapter` reads into `target`; the names of what was copied now, and of what the target
    held already. `studies`: each study chapter's folder of records (`runs/<its study's profile>/`)."""
    pairs = [(source / f, target / f) for f in [chapter, *shared_records(chapter)]]
    if chapter in STUDY_RECORDS:
        pairs += [(studies[chapter] / f, target / f) for f in STUDY_RECORDS[chapter][2]]
    if chapter == FINDINGS:
        for c in chapters:
            pairs += [(r / c / "claims.json", target / c / "claims.json") for r in (source, *studies.values())]
    had = [str(dst.relative_to(target)) for _, dst in pairs if dst.exists()]
    return [str(dst.relative_to(target)) for src, dst in pairs if _copy(src, dst)], had


def recorded_cost(chapter: str, folders: list[Path]) -> dict:
    """What the recorded execution of `chapter` spent live: seconds, calls (its summary files)."""
    live_s, calls, seen = 0.0, 0, set()
    for folder in folders:
        for path in folder.rglob(f"summary-{chapter}.json") if folder.exists() else []:
            if path.name in seen:
                continue
            seen.add(path.name)
            s = json.loads(path.read_text())
            live_s += float(s.get("live_seconds") or s.get("recorded_model_seconds") or 0)
            calls += int(s.get("live_calls") or 0)
    return {"live_seconds": live_s, "live_calls": calls}


def _cost_text(cost: dict) -> str:
    if not cost["live_calls"]:
        return "no record says how long its live run took"
    per = cost["live_seconds"] / cost["live_calls"]
    return (f"its recorded run made {cost['live_calls']} live model calls in {cost['live_seconds'] / 60:.0f} min "
            f"(~{per:.1f} s per call); a change that touches the model costs up to about that")


_MISSING = object()


class _Default(str):
    """A parameter's default as its chapter's parameters cell writes it (shown as written, not quoted)."""
    def __repr__(self) -> str:
        return str(self)


def notebook_defaults(root: Path, chapter: str) -> dict[str, str]:
    """The chapter's parameters and their defaults as its parameters cell writes them (papermill's own
    reading): what a parameter the profile does not set is when a rerun changes it."""
    import papermill  # deferred: ~0.3 s to import; only a rerun needs it, not `import skillbook.book`
    return {name: p["default"] for name, p in papermill.inspect_notebook(
        str(root / "chapters" / f"{chapter}.ipynb")).items()}


def changed_parameters(base: dict, plan: dict, sets: dict, defaults: dict[str, str]) -> dict:
    """name → (the value it had, the value it gets) for each parameter `sets` changes: the profile's value,
    or where the profile does not set it, the chapter's default as its parameters cell writes it."""
    return {k: (base[k] if k in base else _Default(defaults.get(k, "None")), v) for k, v in plan.items()
            if k in sets and base.get(k, _MISSING) != v}


def changed_text(changed: dict) -> str:
    return "[skillbook] changed: " + (", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in changed.items())
                                      or "nothing (the same parameters as the profile)")


@contextmanager
def _replay_only(on: bool):
    old = os.environ.get("SKILLBOOK_REPLAY_ONLY")
    if on:
        os.environ["SKILLBOOK_REPLAY_ONLY"] = "1"     # the kernel inherits the environment
    else:
        os.environ.pop("SKILLBOOK_REPLAY_ONLY", None)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("SKILLBOOK_REPLAY_ONLY", None)
        else:
            os.environ["SKILLBOOK_REPLAY_ONLY"] = old


def rerun(chapter: str, source: str = "workshop", into: str = "mine", sets: dict | None = None, *,
          live: bool = False, root: Path | None = None, say=print) -> Path:
    """Re-execute `chapter` of profile `source` with `sets` into runs/<into>/ (see the module docstring).
    Returns the executed notebook; raises ReplayNeedsModel when the change needs the model and not `live`."""
    from papermill.exceptions import PapermillExecutionError  # deferred: papermill, as in notebook_defaults

    root = root or project_root()
    sets = dict(sets or {})
    known = toc_chapters(root)
    if chapter not in known:
        raise ProfileError(f"unknown chapter {chapter!r}; chapters in _toc.yml: {', '.join(known)}")
    params = load_profile(source, root)
    target = check_target(into, source, root)
    plan = execution_plan(source, [chapter], output_root=target, extra_params=sets, root=root)[0][2]
    base = execution_plan(source, [chapter], output_root=target, root=root)[0][2]
    scoped = {**params, **((params.get("chapters") or {}).get(chapter, {}) or {}), **sets}
    # each study's profile as this chapter's parameters name it (chapter 10 reads both studies' claims)
    study_names = {c: str(scoped.get(name, default)) for c, (name, default, _) in STUDY_RECORDS.items()}
    study_profile = study_names.get(chapter, study_names["09_study"])
    source_dir = root / "runs" / source
    studies = {c: root / "runs" / name for c, name in study_names.items()}
    changed = changed_parameters(base, plan, sets, notebook_defaults(root, chapter))

    target.mkdir(parents=True, exist_ok=True)
    copied, had = copy_records(chapter, params, source_dir, studies, target, known)
    cost = recorded_cost(chapter, [source_dir, *studies.values()])
    say(f"[skillbook] rerun {chapter}: profile {source} (with its overrides for {chapter}) -> runs/{into}/")
    say(changed_text(changed))
    say(copied_text(chapter, source, str(study_profile), into, copied, had))
    say(f"[skillbook] live model time: none if the change only re-analyses the records; {_cost_text(cost)}. "
        "Replaying first, without the model.")
    try:
        with _replay_only(True):
            out, = execute(source, [chapter], output_root=target, extra_params=sets, root=root)
        say(f"[skillbook] done without a model call: runs/{into}/{chapter}.ipynb")
    except PapermillExecutionError as e:
        if e.ename != "ReplayMiss":
            raise
        need = (f"{chapter} with {', '.join(f'{k}={b!r}' for k, (_, b) in changed.items()) or 'these parameters'} "
                f"needs new model answers; {_cost_text(cost)}")
        if not live:
            raise ReplayNeedsModel(need + ". Nothing was run with the model; add --live (make rerun ... LIVE=1) "
                                   "to run it.") from None
        say(f"[skillbook] {need}. Running it live (--live).")
        with _replay_only(False):
            out, = execute(source, [chapter], output_root=target, extra_params=sets, root=root)
    log = target / "rerun.json"
    record = json.loads(log.read_text()) if log.exists() else {}
    record.setdefault("chapters", {})[chapter] = {"from": source, "set": sets}
    log.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    say(f"[skillbook] the book with it: make html RUN={into}  "
        f"(python -m skillbook.book build --profile {source} --overlay {into})")
    return out


def stage_overlay(profile: str, overlay: str, root: Path) -> Path:
    """A build folder in _build/ whose runs/<profile>/ holds the chapters executed in runs/<overlay>/
    (each opening with a note on what changed) and links to the profile's for the rest."""
    src = root / "runs" / overlay
    if not src.is_dir():
        raise ProfileError(f"--overlay {overlay!r}: runs/{overlay}/ does not exist; make one with "
                           "`python -m skillbook.book rerun <chapter> --into <name> --set name=value`")
    done = json.loads((src / "rerun.json").read_text()).get("chapters", {}) if (src / "rerun.json").exists() else {}
    stage = root / "_build" / f"overlay-{overlay}"
    if stage.exists():
        shutil.rmtree(stage)
    (stage / "runs" / profile).mkdir(parents=True)
    for item in root.iterdir():       # the book's own files: config, toc, pages, bibliography, assets
        if item.name in ("_config.yml", "_toc.yml", "book_assets") or item.suffix in (".md", ".bib"):
            if item.name != "README.md":
                (stage / item.name).symlink_to(item)
    toc = (root / "_toc.yml").read_text()
    if profile != "workshop":
        (stage / "_toc.yml").unlink()
        (stage / "_toc.yml").write_text(toc.replace("runs/workshop/", f"runs/{profile}/"))
    for chapter in toc_chapters(root):
        mine, theirs = src / f"{chapter}.ipynb", root / "runs" / profile / f"{chapter}.ipynb"
        dst = stage / "runs" / profile / f"{chapter}.ipynb"
        if mine.exists():
            nb = nbformat.read(mine, as_version=4)
            sets = done.get(chapter, {}).get("set", {})
            what = ", ".join(f"`{k} = {v!r}`" for k, v in sets.items()) or "the profile's parameters"
            note = nbformat.v4.new_markdown_cell(
                f":::{{note}}\nThis page was re-executed into `runs/{overlay}/` with {what} "
                f"(profile {profile}); the other chapters are the profile's.\n:::")
            note["id"] = "rerun-note"
            # right under the page's title, not after its whole introduction (where it sat ~1,750 px down)
            heading = next((i for i, c in enumerate(nb.cells) if c.cell_type == "markdown"), -1)
            if heading >= 0 and nb.cells[heading].source.startswith("# ") and "\n" in nb.cells[heading].source:
                title, rest = nb.cells[heading].source.split("\n", 1)
                nb.cells[heading].source = title
                after = nbformat.v4.new_markdown_cell(rest.lstrip("\n"))
                after["id"] = "rerun-intro"
                nb.cells.insert(heading + 1, after)
            nb.cells.insert(heading + 1, note)
            nbformat.write(nb, dst)
        elif theirs.exists():
            dst.symlink_to(theirs)
    return stage
