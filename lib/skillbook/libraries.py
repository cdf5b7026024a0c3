"""Every skill library a run wrote, whatever its paper, found in its records and exported as Agent Skills.

    python -m skillbook.libraries list   RUN_DIR          the libraries under RUN_DIR
    python -m skillbook.libraries export RUN_DIR DEST     each as a folder of Agent Skills under DEST
    python -m skillbook.libraries check  FOLDER           import a folder of Agent Skills, or name its faults

What counts as a library (each paper keeps its own): a memory condition's run folder (`run.json` and
memory checkpoints: the first paper's text and code skills, Assay's upstream, restructured and gated
libraries, the second study's streams), a `SkillLibrary` state in a JSON file (SKILLC's macros in
`library.json`), and a SkillRL bank (`bank/round<k>.json`). This module sits above the papers (it reads
their formats); the Agent Skills format itself is `skills/agentskills.py`.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from .papers.skillrl.bank import bank_from_json
from .profiles import project_root
from .run.streams import RunDir
from .skills.agentskills import AgentSkillsError, export_skills, import_skills
from .skills.library import SkillLibrary
from .skills.record import Skill

# the records folder a library sits in → the paper whose library it is (the rest: "unknown")
PAPER_OF = {"transfer": "breakdown", "streams": "breakdown", "ceiling": "breakdown", "study": "breakdown",
            "06_assay": "assay", "07_skillrl": "skillrl", "08_credit": "skillc"}


def _library_of_file(path: Path) -> list[Skill] | None:
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    if isinstance(obj, dict) and isinstance(obj.get("library"), dict):
        obj = obj["library"]
    if isinstance(obj, dict) and "skills" in obj and "format" in obj:
        return list(SkillLibrary().load_state(obj))
    if isinstance(obj, dict) and "general_skills" in obj:
        return list(bank_from_json(obj)[0])
    return None


def _library_of_run(path: Path) -> list[Skill] | None:
    if not (path / "run.json").exists() or not (path / "memory").is_dir():
        return None
    run = RunDir(path)
    state = run.memory_state("stream")[1]
    if not state:
        # independent streams (a frozen library, one stream per task: Assay's gated libraries) each
        # hold the same library; the first one's is the condition's
        first = next(iter(sorted((path / "memory").glob("*.json"))), None)
        state = run.memory_state(first.stem)[1] if first else {}
    library = state.get("library") or (state.get("inner") or {}).get("library")
    return list(SkillLibrary().load_state(library)) if library else None


def libraries_in(root: str | Path) -> dict[str, list[Skill]]:
    """name (the path under `root`) → the skills of every library found there, in path order; libraries
    with no skill are left out."""
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(f"{root}: no such run folder or library file")
    candidates = [root] if root.is_file() else [root, *sorted(p for p in root.rglob("*")
                                                             if p.is_dir() or p.suffix == ".json")]
    out = {}
    for p in candidates:
        if p.is_file() and p.name in ("run.json", "design.json", "games.json", "claims.json"):
            continue
        skills = _library_of_file(p) if p.is_file() else _library_of_run(p)
        if skills:
            name = "." if p == root else p.relative_to(root).with_suffix("").as_posix()
            out[name] = skills
    return out


def paper_of(path: Path) -> str:
    return next((PAPER_OF[part] for part in reversed(Path(path).resolve().parts) if part in PAPER_OF), "unknown")


def export_run(root: str | Path, dest: str | Path) -> dict[str, list[Path]]:
    """Every library under `root` as a folder of Agent Skills `dest/<library path>/`, with the book's
    provenance (paper, run folder, library) in each skill's metadata."""
    root, dest = Path(root), Path(dest)
    found = libraries_in(root)
    if not found:
        raise ValueError(f"{root}: no skill library found (a memory condition's run folder, a library JSON "
                         "or a SkillRL bank)")
    if dest.exists():
        raise FileExistsError(f"{dest} exists: export writes a new folder (remove it, or choose another)")
    out = {}
    for name, skills in found.items():
        target = dest if name == "." else dest / name
        out[name] = export_skills(skills, target, {"paper": paper_of(root / name), "run": run_name(root),
                                                   "library": name})
    return out


def run_name(root: Path) -> str:
    """The run folder as provenance: relative to the project when inside it (no machine's path)."""
    try:
        return Path(root).resolve().relative_to(project_root().resolve()).as_posix()
    except (ValueError, FileNotFoundError):
        return Path(root).as_posix()


def export_preview(root: str | Path, show: str | None = None, where: str | None = None) -> str:
    """Markdown for a chapter: the libraries under `root` as Agent Skills (exported into a temporary
    folder, so a replay writes nothing), the command that writes them, and one skill's SKILL.md — the
    first of library `show` (default: the largest). `where` is `root` as the reader should type it."""
    found = libraries_in(root) if Path(root).exists() else {}
    if not found:
        return f"No skill library was recorded under `{where or root}`."
    show = show if show in found else max(found, key=lambda n: len(found[n]))
    with tempfile.TemporaryDirectory() as tmp:
        folders = export_run(root, Path(tmp) / "skills")
        first = folders[show][0]
        text = (first / "SKILL.md").read_text(encoding="utf-8")
        scripts = sorted(p.name for p in (first / "scripts").glob("*")) if (first / "scripts").exists() else []
    rows = "\n".join(f"| `{name}` | {len(skills)} | {', '.join(sorted({s.format for s in skills}))} |"
                     for name, skills in found.items())
    return (f"**As Agent Skills.** `python -m skillbook.libraries export {where or root} DEST` writes each library "
            f"below as a folder of Agent Skills (one `SKILL.md` folder per skill):\n\n"
            f"| library | skills | format |\n|---|---|---|\n{rows}\n\n"
            f"The first skill of `{show}`, `{first.name}/SKILL.md`"
            + (f" (and `scripts/{scripts[0]}`)" if scripts else "") + ":\n\n````markdown\n" + text + "````\n")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m skillbook.libraries", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list").add_argument("run_dir")
    ex = sub.add_parser("export")
    ex.add_argument("run_dir")
    ex.add_argument("dest")
    sub.add_parser("check").add_argument("folder")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "list":
            for name, skills in libraries_in(args.run_dir).items():
                print(f"{name}: {len(skills)} skills ({', '.join(sorted({s.format for s in skills}))})")
        elif args.cmd == "export":
            for name, folders in export_run(args.run_dir, args.dest).items():
                print(f"{name}: {len(folders)} skills -> {Path(args.dest) / name if name != '.' else args.dest}")
        else:
            skills = import_skills(args.folder)
            print(f"{args.folder}: {len(skills)} valid Agent Skills")
    except (AgentSkillsError, ValueError, FileNotFoundError, FileExistsError) as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    main()
