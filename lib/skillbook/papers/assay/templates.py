"""Assay's protected templates: five hand-written skills per benchmark, id prefix `tpl-`.

Like every skill they take part in attribution (the random masks draw them too: the paper's §2.1);
after that they are protected: never split, retired or merged, never suppressed by per-task masking,
so every Assay test condition with a library shows them.
Written for this book (the paper's own templates are for AppWorld and τ-bench and not published in
our copy); kept short so a 1.5B model's prompt stays small.
"""
from __future__ import annotations

from ...skills.library import SkillLibrary
from ...skills.record import Skill

TEMPLATES: dict[str, list[tuple[str, str, str]]] = {
    "twx": [
        ("tpl-look", "Look before acting",
         "Read the observation and any instructions book first; act only on objects you have seen."),
        ("tpl-one-step", "One action at a time",
         "Write exactly one valid action per turn, in the forms you are shown."),
        ("tpl-follow", "Follow the game's own instructions",
         "When the game or Simon says what to do, do exactly that, in that order."),
        ("tpl-containers", "Open containers before using them",
         "Open a closed container before taking from or putting into it."),
        ("tpl-no-repeat", "Do not repeat a useless action",
         "If an action changed nothing, choose a different one."),
    ],
    "sciworld": [
        ("tpl-look", "Look before acting",
         "Look around and read the task; act only on objects you have seen."),
        ("tpl-one-step", "One action at a time",
         "Write exactly one valid action per turn, in the forms you are shown."),
        ("tpl-focus", "Focus only on the target",
         "Use 'focus on' only for the object the task names; a wrong focus ends the task."),
        ("tpl-move", "Go where the object is",
         "Teleport or walk to the room that holds what you need before using it."),
        ("tpl-no-repeat", "Do not repeat a useless action",
         "If an action changed nothing, choose a different one."),
    ],
    "tau2": [
        ("tpl-authenticate", "Authenticate the user first",
         "Find the user id by email, or by name and zip code, before looking up or changing anything."),
        ("tpl-tool-form", "How to call a tool",
         'Write one tool call per turn as tool_name({"arg": "value"}) with ids you have seen; '
         'talk to the user with: respond <message>.'),
        ("tpl-confirm", "Confirm before changing data",
         "Before a write action, state the details and get an explicit yes from the user."),
        ("tpl-no-invent", "Never invent ids or facts",
         "Use only order ids, item ids and details from the user or from tool results."),
        ("tpl-policy", "Stay within the policy",
         "Refuse requests the policy forbids; transfer to a human only when the policy says so."),
    ],
}


def template_skills(env: str) -> list[Skill]:
    if env not in TEMPLATES:
        raise ValueError(f"no Assay templates for env {env!r}; valid: {', '.join(TEMPLATES)}")
    return [Skill(id=i, description=d, body=b, provenance={"template": True, "env": env}) for i, d, b in TEMPLATES[env]]


def with_templates(library: SkillLibrary, env: str) -> SkillLibrary:
    """A copy of `library` with the env's templates first."""
    return library.with_first(template_skills(env))


__all__ = ["TEMPLATES", "template_skills", "with_templates"]
