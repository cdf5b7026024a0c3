"""SkillRL's hierarchical SkillBank as records of the one skill library, and its public JSON layout.

The public SkillRL code keeps a bank as one JSON object:

    {"general_skills": [{"skill_id": "gen_001", "title", "principle", "when_to_apply"}, ...],
     "task_specific_skills": {"<category>": [{"skill_id", "title", "principle", "when_to_apply"}, ...]},
     "common_mistakes": [{"mistake_id": "err_001", "description", "why_it_happens", "how_to_avoid"}, ...],
     "metadata": {...}}

Here every entry is a `Skill` in a `SkillLibrary` (so retrieval, persistence and the chapters' tools
are shared with the other papers): `extra["kind"]` is general | task_specific | mistake, the fields
above live in `extra`, and the `body` is the principle (for a mistake: why it happens and how to avoid
it). The embedded `description` of a skill is what the public code embeds by default (its
`skill_text_for_retrieval="full"`): title, principle and when_to_apply joined by ". " — not the title
alone, which for a small teacher's skills ("Pattern Recognition") says nothing about the task; a
mistake's description is its own.

A mistake distilled from a failed run belongs to that run's category: `extra["category"]`, written as
an optional "category" field of its `common_mistakes` entry (public loaders read the fields they know
and skip it). A mistake without one — every mistake of a foreign bank — is general: shown for every task.
`bank_from_json(bank_to_json(lib)) == lib` field for field, and foreign banks load unchanged.
"""
from __future__ import annotations

from html import escape

from ...skills.library import SkillLibrary
from ...skills.record import Skill

KINDS = ("general", "task_specific", "mistake")
SKILL_FIELDS = ("title", "principle", "when_to_apply")
MISTAKE_FIELDS = ("description", "why_it_happens", "how_to_avoid")


class BankFormatError(ValueError):
    """A bank JSON object that does not follow the public SkillRL layout; the message says what is wrong."""


def retrieval_text(title: str, principle: str, when_to_apply: str) -> str:
    """The text a skill is embedded as: "title. principle. when_to_apply" (the public code's "full")."""
    return ". ".join(p.strip().rstrip(".").strip() for p in (title, principle, when_to_apply) if p.strip()) + "."


def bank_skill(skill_id: str, title: str, principle: str, when_to_apply: str, category: str | None = None,
               **provenance) -> Skill:
    kind = "general" if category is None else "task_specific"
    return Skill(id=skill_id, description=retrieval_text(title, principle, when_to_apply), body=principle.strip(),
                 provenance=dict(provenance),
                 extra={"kind": kind, "category": category, "title": title.strip(), "principle": principle.strip(),
                        "when_to_apply": when_to_apply.strip()})


def mistake(mistake_id: str, description: str, why_it_happens: str, how_to_avoid: str, category: str | None = None,
            **provenance) -> Skill:
    """A common mistake; `category` is the task category of the failure it was learned from (None: general)."""
    return Skill(id=mistake_id, description=description.strip(),
                 body=f"Why it happens: {why_it_happens.strip()}\nHow to avoid it: {how_to_avoid.strip()}",
                 provenance=dict(provenance),
                 extra={"kind": "mistake", "category": category, "description": description.strip(),
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
            out["common_mistakes"].append({"mistake_id": s.id, **{f: s.extra[f] for f in MISTAKE_FIELDS},
                                           **({"category": s.extra["category"]} if s.extra.get("category") else {})})
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
        cat = e.get("category")
        if cat is not None and (not isinstance(cat, str) or not cat.strip()):
            raise BankFormatError(f"common_mistakes[{i}]: 'category' must be a category name, got {cat!r}")
        lib.add(mistake(e["mistake_id"], e["description"], e["why_it_happens"], e["how_to_avoid"], category=cat))
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


def bank_html(library: SkillLibrary) -> str:
    """The bank for a page: one collapsible section per level — general skills, each category's
    task-specific skills, each category's common mistakes (general ones last) — each a small table."""

    def table(head: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
        th = "".join(f"<th style='text-align:left'>{escape(h)}</th>" for h in head)
        tr = "".join("<tr>" + "".join(f"<td style='text-align:left'>{escape(c)}</td>" for c in r) + "</tr>"
                     for r in rows)
        return f"<table><thead><tr>{th}</tr></thead><tbody>{tr}</tbody></table>"

    skills = list(library)
    sections: list[tuple[str, str]] = []
    head = ("id", "title", "principle", "when to apply")
    row = lambda s: (s.id, s.extra["title"], s.extra["principle"], s.extra["when_to_apply"])  # noqa: E731
    general = [s for s in skills if kind(s) == "general"]
    if general:
        sections.append((f"General skills ({len(general)})", table(head, [row(s) for s in general])))
    for cat in dict.fromkeys(s.extra["category"] for s in skills if kind(s) == "task_specific"):
        mine = [s for s in skills if kind(s) == "task_specific" and s.extra["category"] == cat]
        sections.append((f"Task-specific skills: {cat} ({len(mine)})", table(head, [row(s) for s in mine])))
    mistakes = [s for s in skills if kind(s) == "mistake"]
    for cat in sorted({s.extra.get("category") or "" for s in mistakes}, key=lambda c: (c == "", c)):
        mine = [s for s in mistakes if (s.extra.get("category") or "") == cat]
        sections.append((f"Common mistakes: {cat or 'general'} ({len(mine)})",
                         table(("id", "mistake", "why it happens", "how to avoid"),
                               [(s.id, s.extra["description"], s.extra["why_it_happens"], s.extra["how_to_avoid"])
                                for s in mine])))
    return "".join(f"<details><summary>{escape(title)}</summary>{body}</details>" for title, body in sections)


__all__ = ["KINDS", "BankFormatError", "bank_skill", "mistake", "kind", "retrieval_text", "bank_to_json",
           "bank_from_json", "render_bank", "bank_html"]
