"""Memory hygiene of the first paper's appendix B, applied whenever a skill is written.

* text: a new skill whose description has cosine ≥ 0.85 with an existing text skill is merged into
  it (the model merges the two bodies; the existing description is kept);
* code: a new skill defining a function name that exists overwrites that skill; otherwise one whose
  description has cosine ≥ 0.85 with an existing code skill is dropped;
* code: a skill that fails to load (in the sandbox) is deleted, and so are the code skills that call it;
  so is one that cannot be load-checked because this machine has no jail (sandbox.JailUnavailable). A
  jail that failed to start (sandbox.JailStartError) says nothing about the skill: it propagates, and the
  runner retries the episode from the memory saved before it (nothing is deleted).

An overwrite is a new *version* of the same skill, not a new skill: it keeps the skill's id, its
retrieval statistics and its birth (`created_at`), and the versions it replaced are kept in order in
`extra["lineage"]` (description, body, provenance, where each was written); `extra["version"]` counts
them. So "skills written", retrieval and reuse counts are per skill identity. Records written before
this rule (an overwrite got a new id and the event log says `replaced=<old id>`) are mapped to their
identities by `identities(library)`.
"""
from __future__ import annotations

from collections.abc import Callable

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


def new_version(existing: Skill, skill: Skill) -> Skill:
    """`skill` as the next version of `existing` (same function name): the identity — id, statistics,
    birth — is the existing skill's; the existing version joins the lineage."""
    lineage = list(existing.extra.get("lineage", []))
    lineage.append({"version": existing.extra.get("version", 1), "description": existing.description,
                    "body": existing.body, "provenance": existing.provenance,
                    "written_at": existing.extra.get("written_at", existing.created_at)})
    written_at = skill.created_at
    skill.id, skill.stats, skill.created_at = existing.id, existing.stats, existing.created_at
    skill.extra.update(version=len(lineage) + 1, lineage=lineage, written_at=written_at)
    return skill


def identities(library: SkillLibrary) -> dict[str, str]:
    """skill id as recorded → the id the skill has now, for recorded ids that differ from it. Records
    made before overwrites kept the id gave each version a new id and logged `replaced=<previous id>`;
    every version of such a chain maps to its last version's id (the one in the library, unless it was
    deleted later). Empty for records made since."""
    out: dict[str, str] = {}
    for e in library.events:
        old, new = e.get("replaced"), e.get("skill")
        if e.get("event") == "overwritten" and old and new and old != new:
            for k, v in out.items():
                if v == old:
                    out[k] = new
            out[old] = new
    return out


def description_at(skill: Skill, position: int) -> str:
    """The description of the version of `skill` that was in the library at stream position `position`:
    the last version written before that position (a version written at the same position, i.e. by an
    earlier subtask of the same task, cannot be told apart from one written after it there, so it
    counts only when it is the first version)."""
    versions = skill.extra.get("lineage", []) + [{"description": skill.description,
                                                  "written_at": skill.extra.get("written_at", skill.created_at)}]
    before = [v for v in versions if v["written_at"] < position]
    return (before[-1] if before else versions[0])["description"]


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
        skill = new_version(existing, skill)
        library.replace(existing.id, skill)
        library.log("overwritten", skill=skill.id, version=skill.extra["version"], function=name)
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
        error = load_check(definitions(library, skill))   # JailStartError (infrastructure) propagates
    except sandbox.JailUnavailable as e:   # a code skill that cannot be checked (no jail) is not kept
        error = f"cannot be load-checked: {e}"
    if error:
        delete_cascade(library, skill.id, f"failed to load: {error}")
        return None, "deleted"
    return skill, event
