"""Memory hygiene of the first paper's appendix B, applied whenever a skill is written.

* text: a new skill whose description has cosine ≥ 0.85 with an existing text skill is merged into
  it (the model merges the two bodies; the existing description is kept);
* code: a new skill defining a function name that exists overwrites that skill; otherwise one whose
  description has cosine ≥ 0.85 with an existing code skill is dropped;
* code: a skill that fails to load (in the sandbox) is deleted, and so are the code skills that call it;
  so is one that cannot be load-checked because this machine has no jail (sandbox.JailUnavailable).
"""
from __future__ import annotations

from typing import Callable

from ...skills import sandbox
from ...skills.library import SkillLibrary
from ...skills.record import Skill

DUPLICATE_THRESHOLD = 0.85


def code_name(skill: Skill) -> str:
    return skill.extra.get("function") or sandbox.function_name(skill.body)


def dependencies(library: SkillLibrary, skill: Skill) -> list[Skill]:
    """Code skills `skill` calls, transitively, in load order (dependencies first)."""
    by_name = {code_name(s): s for s in library if s.format == "code" and s.id != skill.id}
    order, seen = [], set()

    def visit(s: Skill):
        for name in sorted(sandbox.called_names(s.body)):
            dep = by_name.get(name)
            if dep is not None and dep.id not in seen:
                seen.add(dep.id)
                visit(dep)
                order.append(dep)

    visit(skill)
    return order


def definitions(library: SkillLibrary, skill: Skill) -> list[str]:
    return [d.body for d in dependencies(library, skill)] + [skill.body]


def delete_cascade(library: SkillLibrary, skill_id: str, reason: str) -> list[str]:
    """Delete a code skill and every code skill that (transitively) calls it."""
    gone = [skill_id]
    removed = library.remove(skill_id)
    library.log("deleted", skill=skill_id, reason=reason)
    name = code_name(removed)
    for s in list(library):
        if s.format == "code" and s.id in library and name in sandbox.called_names(s.body):
            gone += delete_cascade(library, s.id, f"depends on deleted {name}")
    return gone


def add_with_hygiene(library: SkillLibrary, skill: Skill, merge_bodies: Callable[[Skill, Skill], str] | None = None,
                     load_check: Callable[[list[str]], str] = sandbox.load_check,
                     threshold: float = DUPLICATE_THRESHOLD) -> tuple[Skill | None, str]:
    """Write `skill` under the hygiene rules; returns (the skill now in the library or None, event)."""
    same_format = lambda s: s.format == skill.format  # noqa: E731
    nearest = library.search(skill.description, k=1, threshold=threshold, where=same_format)
    if skill.format == "text":
        if nearest:
            old, sim = nearest[0]
            if merge_bodies is not None:
                old.body = merge_bodies(old, skill)
            old.provenance.setdefault("merged_from", []).append(skill.provenance)
            library.log("merged", skill=old.id, similarity=round(sim, 3), new_description=skill.description)
            return old, "merged"
        library.add(skill)
        library.log("added", skill=skill.id)
        return skill, "added"
    # code
    name = code_name(skill)
    skill.extra["function"] = name
    existing = next((s for s in library if s.format == "code" and code_name(s) == name), None)
    if existing is not None:
        library.replace(existing.id, skill)
        library.log("overwritten", skill=skill.id, replaced=existing.id, function=name)
        event = "overwritten"
    elif nearest:
        library.log("dropped", description=skill.description, duplicate_of=nearest[0][0].id,
                    similarity=round(nearest[0][1], 3))
        return None, "dropped"
    else:
        library.add(skill)
        library.log("added", skill=skill.id, function=name)
        event = "added"
    try:
        error = load_check(definitions(library, skill))
    except sandbox.JailUnavailable as e:   # a code skill that cannot be checked (no jail) is not kept
        error = f"cannot be load-checked: {e}"
    if error:
        delete_cascade(library, skill.id, f"failed to load: {error}")
        return None, "deleted"
    return skill, event
