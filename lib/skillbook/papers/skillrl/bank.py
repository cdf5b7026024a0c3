"""SkillRL's hierarchical SkillBank as records of the one skill library, and its public JSON layout.

The public SkillRL code keeps a bank as one JSON object:

    {"general_skills": [{"skill_id": "gen_001", "title", "principle", "when_to_apply"}, ...],
     "task_specific_skills": {"<category>": [{"skill_id", "title", "principle", "when_to_apply"}, ...]},
     "common_mistakes": [{"mistake_id": "err_001", "description", "why_it_happens", "how_to_avoid"}, ...],
     "metadata": {...}}

Here every entry is a `Skill` in a `SkillLibrary` (so retrieval, persistence and the chapters' tools
are shared with the other papers): `extra["kind"]` is general | task_specific | mistake, the fields
above live in `extra`, the embedded `description` is "title: when_to_apply" (a mistake's own
description), and the `body` is the principle (for a mistake: why it happens and how to avoid it).
`bank_from_json(bank_to_json(lib)) == lib` field for field, and foreign banks load unchanged.
"""
from __future__ import annotations

from ...skills.library import SkillLibrary
from ...skills.record import Skill

KINDS = ("general", "task_specific", "mistake")
SKILL_FIELDS = ("title", "principle", "when_to_apply")
MISTAKE_FIELDS = ("description", "why_it_happens", "how_to_avoid")


class BankFormatError(ValueError):
    """A bank JSON object that does not follow the public SkillRL layout; the message says what is wrong."""


def bank_skill(skill_id: str, title: str, principle: str, when_to_apply: str, category: str | None = None,
               **provenance) -> Skill:
    kind = "general" if category is None else "task_specific"
    return Skill(id=skill_id, description=f"{title.strip()}: {when_to_apply.strip()}", body=principle.strip(),
                 provenance=dict(provenance),
                 extra={"kind": kind, "category": category, "title": title.strip(), "principle": principle.strip(),
                        "when_to_apply": when_to_apply.strip()})


def mistake(mistake_id: str, description: str, why_it_happens: str, how_to_avoid: str, **provenance) -> Skill:
    return Skill(id=mistake_id, description=description.strip(),
                 body=f"Why it happens: {why_it_happens.strip()}\nHow to avoid it: {how_to_avoid.strip()}",
                 provenance=dict(provenance),
                 extra={"kind": "mistake", "category": None, "description": description.strip(),
                        "why_it_happens": why_it_happens.strip(), "how_to_avoid": how_to_avoid.strip()})


def kind(skill: Skill) -> str:
    return skill.extra.get("kind", "")


def bank_to_json(library: SkillLibrary, metadata: dict | None = None) -> dict:
    out = {"general_skills": [], "task_specific_skills": {}, "common_mistakes": [], "metadata": dict(metadata or {})}
    for s in library:
        k = kind(s)
        if k == "general":
            out["general_skills"].append({"skill_id": s.id, **{f: s.extra[f] for f in SKILL_FIELDS}})
        elif k == "task_specific":
            out["task_specific_skills"].setdefault(s.extra["category"], []).append(
                {"skill_id": s.id, **{f: s.extra[f] for f in SKILL_FIELDS}})
        elif k == "mistake":
            out["common_mistakes"].append({"mistake_id": s.id, **{f: s.extra[f] for f in MISTAKE_FIELDS}})
    return out


def _need(entry, fields: tuple[str, ...], where: str) -> None:
    if not isinstance(entry, dict):
        raise BankFormatError(f"{where}: expected an object with {', '.join(fields)}, got {type(entry).__name__}")
    missing = [f for f in fields if not isinstance(entry.get(f), str) or not entry[f].strip()]
    if missing:
        raise BankFormatError(f"{where}: missing or empty field(s) {missing}")


def bank_from_json(obj: dict, embedder=None) -> tuple[SkillLibrary, dict]:
    """(library, metadata) from a bank in the public layout; unknown top-level keys are an error."""
    if not isinstance(obj, dict):
        raise BankFormatError("a SkillBank is a JSON object with general_skills, task_specific_skills, common_mistakes")
    unknown = set(obj) - {"general_skills", "task_specific_skills", "common_mistakes", "metadata"}
    if unknown:
        raise BankFormatError(f"unknown SkillBank key(s) {sorted(unknown)}; valid: general_skills, "
                              "task_specific_skills, common_mistakes, metadata")
    lib = SkillLibrary(embedder)
    for i, e in enumerate(obj.get("general_skills", [])):
        _need(e, ("skill_id", *SKILL_FIELDS), f"general_skills[{i}]")
        lib.add(bank_skill(e["skill_id"], e["title"], e["principle"], e["when_to_apply"]))
    specific = obj.get("task_specific_skills", {})
    if not isinstance(specific, dict):
        raise BankFormatError("task_specific_skills must map each category to a list of skills")
    for cat, entries in specific.items():
        for i, e in enumerate(entries):
            _need(e, ("skill_id", *SKILL_FIELDS), f"task_specific_skills[{cat!r}][{i}]")
            lib.add(bank_skill(e["skill_id"], e["title"], e["principle"], e["when_to_apply"], category=cat))
    for i, e in enumerate(obj.get("common_mistakes", [])):
        _need(e, ("mistake_id", *MISTAKE_FIELDS), f"common_mistakes[{i}]")
        lib.add(mistake(e["mistake_id"], e["description"], e["why_it_happens"], e["how_to_avoid"]))
    return lib, dict(obj.get("metadata", {}))


def render_bank(skills: list[Skill], max_chars: int = 2400) -> str:
    """The prompt block of a bank: general principles, skills for this task, mistakes to avoid (ids shown,
    so that a reply can cite them)."""
    parts = {"general": [], "task_specific": [], "mistake": []}
    for s in skills:
        k = kind(s)
        if k == "mistake":
            parts[k].append(f"- [{s.id}] {s.extra['description']} Avoid: {s.extra['how_to_avoid']}")
        elif k in parts:
            parts[k].append(f"- [{s.id}] {s.extra['title']}: {s.extra['principle']} (when: {s.extra['when_to_apply']})")
    text = ""
    for k, head in (("general", "General skills:"), ("task_specific", "Skills for this kind of task:"),
                    ("mistake", "Common mistakes:")):
        if parts[k]:
            block = head + "\n" + "\n".join(parts[k]) + "\n"
            if len(text) + len(block) > max_chars:
                block = block[: max(0, max_chars - len(text))]
            text += block
    return text


__all__ = ["KINDS", "BankFormatError", "bank_skill", "mistake", "kind", "bank_to_json", "bank_from_json", "render_bank"]
