"""SKILLC's macro skills: a credited window of actions abstracted by the model into a parameterised
template (name, description, inputs, preconditions, steps with {placeholders}), kept only if some binding
of its inputs reproduces the window, and compiled to a code skill so that `call name(args)` runs it in
the code-skill sandbox."""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field

import numpy as np

from ...agent.parsing import parse_json
from ...prompts import load
from ...skills.record import Skill

# -- macro skills -------------------------------------------------------------------------------------------


_IDENT = re.compile(r"^[a-z_][a-z0-9_]{1,40}$")


@dataclass
class Macro:
    name: str
    description: str
    inputs: list[str]
    preconditions: str
    steps: list[str]
    credit: list[float] = field(default_factory=list)

    def commands(self, *args) -> list[str]:
        values = dict(zip(self.inputs, map(str, args)))
        return [s.format(**values) for s in self.steps]

    def binding(self, actions: list[str]) -> dict[str, str] | None:
        """The input values under which the macro's steps are exactly `actions` (case aside), or None.
        A macro generalises the credited window it was written from; one that cannot reproduce it (a
        made-up step, a lost step) is not that window's skill."""
        if len(actions) != len(self.steps):
            return None
        bound: dict[str, str] = {}
        for template, action in zip(self.steps, actions):
            pattern, fresh = "", []
            for i, piece in enumerate(re.split(r"\{(\w+)\}", template)):  # literal, name, literal, ...
                if i % 2 == 0:
                    pattern += re.escape(piece)
                elif piece in bound:            # bound by an earlier step: must be the same text
                    pattern += re.escape(bound[piece])
                elif piece in fresh:            # repeated within this step
                    pattern += f"(?P={piece})"
                else:
                    pattern += f"(?P<{piece}>.+?)"
                    fresh.append(piece)
            m = re.fullmatch(pattern, action.strip(), re.IGNORECASE)
            if m is None:
                return None
            bound.update({name: m.group(name).lower() for name in fresh})
        return bound

    def code(self) -> str:
        """The macro as a code skill: one env.step per template step (run in the skill sandbox)."""
        params = ", ".join(["env", *self.inputs])
        body = "\n".join(f"    env.step({_fstring(s)})" for s in self.steps)
        doc = self.description.replace('"""', "'")
        return f'def {self.name}({params}):\n    """{doc}"""\n{body}\n'


def _fstring(template: str) -> str:
    parts = re.split(r"\{(\w+)\}", template)
    out = []
    for i, p in enumerate(parts):
        out.append(f"str({p})" if i % 2 else json.dumps(p))
    return " + ".join(x for x in out if x != '""') or '""'


def parse_macro(text: str) -> Macro | None:
    """A well-formed macro from the model's reply: identifier name, inputs that are identifiers, and steps
    whose placeholders are all inputs; None otherwise."""
    obj = parse_json(text, dict)
    if obj is None:
        return None
    try:
        name = str(obj["name"]).strip().lower()
        inputs = [str(x).strip() for x in obj.get("inputs", [])]
        steps = [str(x).strip() for x in obj["steps"] if str(x).strip()]
        desc = str(obj["description"]).strip()
    except (KeyError, TypeError):
        return None
    if not _IDENT.match(name) or not steps or not desc or not all(_IDENT.match(i) for i in inputs):
        return None
    used = {p for s in steps for p in re.findall(r"\{(\w+)\}", s)}
    if not used <= set(inputs) or any("{" in re.sub(r"\{\w+\}", "", s) or "}" in re.sub(r"\{\w+\}", "", s)
                                      for s in steps):
        return None
    return Macro(name, desc, [i for i in inputs if i in used] or inputs, str(obj.get("preconditions", "")).strip(),
                 steps)


def make_macro(llm, instruction: str, actions: list[str]) -> Macro | None:
    c = llm.chat([{"role": "user", "content": load("skillbook.papers.skillc", "macro").strip().format(
                      instruction=instruction, steps="\n".join(f"- {a}" for a in actions))}],
                 temperature=0.0, max_tokens=200)
    return parse_macro(c.text)


def macro_skill(macro: Macro, skill_id: str, source: dict):
    return Skill(id=skill_id, description=macro.description, body=macro.code(), format="code",
                 provenance={"induction_level": "credit", **source},
                 extra={"macro": asdict(macro), "credit_history": list(macro.credit)})




# -- the library -------------------------------------------------------------------------------------------
def add_macro(library, skill, tau_dup: float = 0.85) -> str:
    """Add a macro skill; a near-duplicate description (cosine ≥ tau_dup) merges into the existing skill,
    which keeps the higher-credit template and the union of credit histories. Returns 'added' | 'merged'."""
    hits = library.search(skill.description, k=1, threshold=tau_dup)
    if not hits:
        library.add(skill)
        return "added"
    old = hits[0][0]
    history = list(old.extra.get("credit_history", [])) + list(skill.extra.get("credit_history", []))
    if np.mean(skill.extra.get("credit_history") or [0]) > np.mean(old.extra.get("credit_history") or [0]):
        name = old.extra["macro"]["name"]
        old.body, old.extra["macro"] = skill.body.replace(f"def {skill.extra['macro']['name']}(", f"def {name}("), \
            {**skill.extra["macro"], "name": name}
    old.extra["credit_history"] = history
    library.log("merged", skill=old.id, merged=skill.id)
    return "merged"


__all__ = ["Macro", "parse_macro", "make_macro", "macro_skill", "add_macro"]
