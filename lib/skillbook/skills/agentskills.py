"""Skills in the format agents share: Agent Skills folders (`SKILL.md`), exported and imported (issue 39).

An Agent Skill is a folder named after the skill holding `SKILL.md`: YAML front matter with `name` and
`description` (and optionally `license`, `compatibility`, `allowed-tools`, `metadata`: a map of strings),
then the instructions in Markdown; code may sit under `scripts/`. Parsing and validation are the
format's reference library's (`skills-ref`: strictyaml front matter, the name and length rules), never
hand-rolled YAML.

    export_skills(skills, dest, provenance)   one folder per skill; the book's record in `metadata`
    import_skills(folder)                     the folder's skills as `Skill` records, all or nothing

A skill this book wrote keeps its whole record (id, format, provenance, stats) as JSON in the metadata
entry `skillbook-record`, so export then import gives the same skills; a skill from elsewhere becomes a
text skill named after its folder. A code skill's function is `scripts/<name>.py` and its body again on
import: model- or stranger-written code, which the book runs only in its jail (`skills.sandbox`), as
every code skill. A text skill's own `scripts/` are never run.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import strictyaml
from skills_ref import validate
from skills_ref.errors import ParseError
from skills_ref.parser import parse_frontmatter
from skills_ref.validator import validate_metadata

from .record import Skill

MAX_NAME = 64              # the format's limits (skills_ref.validator)
MAX_DESCRIPTION = 1024
MAX_FILE_BYTES = 256_000   # a SKILL.md or script larger than this is refused, not read
RECORD_KEY = "skillbook-record"
ORDER_KEY = "skillbook-position"   # a library is ordered; folders are not


class AgentSkillsError(ValueError):
    """Every problem of a folder of Agent Skills, each naming its file and the rule it breaks."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("not a valid folder of Agent Skills (nothing was imported):\n  " + "\n  ".join(problems))


def skill_name(text: str, taken: set[str]) -> str:
    """A valid, unused folder name for a skill: lowercase letters, digits and single hyphens, at most 64
    characters, from `text` (its id or description); a numeric suffix keeps it unique."""
    base = re.sub(r"-+", "-", re.sub(r"[^a-z0-9]+", "-", text.lower())).strip("-")
    if len(base) > MAX_NAME:                       # cut at a hyphen where one is near the limit
        cut = base[:MAX_NAME + 1].rfind("-")
        base = base[:cut] if cut > MAX_NAME // 2 else base[:MAX_NAME]
    base = base.strip("-")
    base = base or "skill"
    name, n = base, 2
    while name in taken:
        suffix = f"-{n}"
        name = base[:MAX_NAME - len(suffix)].rstrip("-") + suffix
        n += 1
    taken.add(name)
    return name


def _front_matter(fields: dict) -> str:
    return strictyaml.as_document(fields).as_yaml()


def export_skills(skills: list[Skill], dest: str | os.PathLike, provenance: dict | None = None) -> list[Path]:
    """Write `skills` to `dest` as Agent Skills folders (one per skill, validated by the reference
    validator), with the book's provenance (`provenance`: paper, run, …) and each skill's own record in
    `metadata`. `dest` must not exist yet; it appears whole or not at all. Returns the skill folders."""
    dest = Path(dest)
    if dest.exists():
        raise FileExistsError(f"{dest} exists: export writes a new folder (remove it, or choose another)")
    taken: set[str] = set()
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent if dest.parent.exists() else None))
    try:
        folders = []
        for position, s in enumerate(skills):
            # named after what it does (another agent reads names); the book's id stays in the metadata
            name = skill_name(s.description or s.id, taken)
            folder = tmp / name
            (folder / "scripts").mkdir(parents=True) if s.format == "code" else folder.mkdir()
            description = s.description.strip()[:MAX_DESCRIPTION] or name
            metadata = {"skillbook-id": s.id, "skillbook-format": s.format, ORDER_KEY: f"{position:06d}",
                        RECORD_KEY: json.dumps(_record(s, description), sort_keys=True, ensure_ascii=False)}
            if provenance:
                metadata["skillbook-provenance"] = json.dumps(provenance, sort_keys=True, ensure_ascii=False)
            if s.format == "code":
                script = f"scripts/{name.replace('-', '_')}.py"
                (folder / script).write_text(s.body, encoding="utf-8")
                body = (f"A code skill: the function in `{script}` (call it with the environment first).\n"
                        "It was written by a model: run it only in a sandbox.\n")
            else:
                body = s.body.strip() + "\n"
            text = (f"---\n{_front_matter({'name': name, 'description': description, 'metadata': metadata})}"
                    f"---\n\n{body}")
            (folder / "SKILL.md").write_text(text, encoding="utf-8")
            problems = validate(folder)
            if problems:
                raise ValueError(f"skill {s.id!r} does not export to a valid Agent Skill: {problems}")
            folders.append(dest / name)
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folders


def _record(skill: Skill, description: str) -> dict:
    """The skill's record for its metadata: everything but the texts SKILL.md carries itself, plus what
    Markdown and YAML would not keep of them (the body's surrounding whitespace, a description longer or
    otherwise than the exported one), so that import gives the same record and the same fingerprint."""
    text = skill.body.strip()
    d = skill.to_dict() | {"body": None, "description": None}
    d["body_ends"] = [skill.body[:len(skill.body) - len(skill.body.lstrip())],
                      skill.body[len(skill.body.rstrip()):]] if text else [skill.body, ""]
    if description != skill.description:
        d["description_exact"] = skill.description
    return d


def _restored(record: dict, description: str, body: str) -> Skill:
    record = dict(record)
    lead, trail = record.pop("body_ends", ["", ""])
    exact = record.pop("description_exact", None)
    text = body.strip()
    return Skill.from_dict({**record, "description": exact if exact is not None else description,
                            "body": lead + text + trail if text else lead})


def _read(path: Path, root: Path, problems: list[str]) -> str | None:
    """A file's text, or None with the problem noted: a link leaving the folder, too large, not UTF-8."""
    if path.is_symlink() and root not in path.resolve().parents:
        problems.append(f"{path}: a symbolic link out of the folder ({path.resolve()}) is not followed")
        return None
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        problems.append(f"{path}: {size:,} bytes, more than the {MAX_FILE_BYTES:,} a skill file may have")
        return None
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        problems.append(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})")
        return None


def import_skills(folder: str | os.PathLike) -> list[Skill]:
    """The Agent Skills in `folder` (one sub-folder per skill, in name order) as skill records. Every
    problem of every skill is found first — no SKILL.md, malformed front matter, an invalid or duplicate
    name, an over-long description, a file that is huge or not UTF-8, a link out of the folder — and
    reported together (`AgentSkillsError`); then nothing is imported."""
    root = Path(folder).resolve()
    if not root.is_dir():
        raise AgentSkillsError([f"{folder}: not a folder"])
    problems: list[str] = []
    for p in root.rglob("*"):
        if p.is_symlink() and root not in p.resolve().parents:
            problems.append(f"{p}: a symbolic link out of the folder ({p.resolve()}) is not followed")
    skills = []
    ids: dict[str, Path] = {}
    dirs = sorted(d for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
    if not dirs and not problems:
        problems.append(f"{root}: no skill folders (each skill is a folder holding SKILL.md)")
    for d in dirs:
        md = d / "SKILL.md"
        if not md.is_file():
            problems.append(f"{d}: no SKILL.md (a skill is a folder holding SKILL.md)")
            continue
        text = _read(md, root, problems)
        if text is None:
            continue
        try:
            meta, body = parse_frontmatter(text)
        except ParseError as e:
            problems.append(f"{md}: {e}")
            continue
        found = validate_metadata(meta, d)
        if found:
            problems += [f"{md}: {p}" for p in found]
            continue
        record = (meta.get("metadata") or {}).get(RECORD_KEY)
        if record:
            try:
                d_ = json.loads(record)
            except json.JSONDecodeError as e:
                problems.append(f"{md}: metadata {RECORD_KEY} is not JSON ({e.msg})")
                continue
            skill = _restored(d_, meta["description"], body)
            if skill.format == "code":
                scripts = sorted((d / "scripts").glob("*.py"))
                if len(scripts) != 1:
                    problems.append(f"{d}: a code skill needs exactly one scripts/*.py, found {len(scripts)}")
                    continue
                code = _read(scripts[0], root, problems)
                if code is None:
                    continue
                skill.body = code
        else:
            skill = Skill(id=meta["name"], description=meta["description"], body=body.strip(),
                          provenance={"source": "agent-skills", "folder": d.name})
        if skill.id in ids:
            problems.append(f"{md}: skill id {skill.id!r} is also {ids[skill.id]}'s")
            continue
        ids[skill.id] = md
        skills.append((str((meta.get("metadata") or {}).get(ORDER_KEY, "")), d.name, skill))
    if problems:
        raise AgentSkillsError(problems)
    return [skill for _, _, skill in sorted(skills, key=lambda t: (t[0] == "", t[0], t[1]))]
