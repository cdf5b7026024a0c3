"""The Skill record. One type serves all four papers; paper-specific fields live in `extra`."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

FORMATS = ("text", "code")


@dataclass
class Skill:
    id: str
    description: str              # the only text that is embedded for retrieval
    body: str                     # workflow notes (text) or a Python function (code)
    format: str = "text"
    provenance: dict = field(default_factory=dict)   # source task, span, induction/prompt level, source success
    stats: dict = field(default_factory=lambda: {"retrievals": 0, "uses": 0, "successes": 0})
    created_at: int = 0           # position in the task stream when it was written
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.format not in FORMATS:
            raise ValueError(f"unknown skill format {self.format!r}; valid: {', '.join(FORMATS)}")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Skill:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown or "id" not in d:
            raise ValueError(f"not a skill record: {'unknown field(s) ' + str(unknown) if unknown else 'no id'}; "
                             f"fields: {', '.join(sorted(known))}")
        return cls(**d)


def render_skills(skills: list[Skill], max_chars: int = 2400) -> str:
    """The block of retrieved skills that goes into a prompt (bounded, so prompts stay short)."""
    if not skills:
        return ""
    parts, used = [], 0
    for s in skills:
        text = f"- {s.description}\n{s.body.strip()}\n"
        if used + len(text) > max_chars:
            break
        parts.append(text)
        used += len(text)
    return "Skills from earlier tasks (use them if they fit):\n" + "".join(parts)
