"""SkillRL's retrieval over a SkillBank (the third paper, §3.2).

General skills are always in the prompt. Task-specific skills are retrieved by cosine between the task
description and the skill's description: those with similarity ≥ δ, best first, at most K (the paper's
K = 6). In `template` mode the category is read off the task type instead (all of that category's
skills, at most K). Common mistakes are shown too (`mistakes=True`). The bank is read-only here; it
grows between validation rounds (`skillrl.evolve`), not while tasks run.
"""
from __future__ import annotations

from ...memory import MemoryPolicy, content_hash
from ...skills.library import SkillLibrary
from ...skills.record import Skill
from .bank import kind, render_bank

MODES = ("embedding", "template")


class SkillBankMemory(MemoryPolicy):
    def __init__(self, library: SkillLibrary, mode: str = "embedding", delta: float = 0.4, top_k: int = 6,
                 general: bool = True, mistakes: bool = True, label: str = ""):
        if mode not in MODES:
            raise ValueError(f"unknown SkillBank retrieval mode {mode!r}; valid: {', '.join(MODES)}")
        if not isinstance(top_k, int) or top_k < 1:
            raise ValueError(f"top_k must be a positive integer, got {top_k!r}")
        self.library, self.mode, self.delta, self.top_k = library, mode, delta, top_k
        self.general, self.mistakes = general, mistakes
        self.name = "skillbank" + (f"-{label}" if label else "")

    def retrieve(self, query: str, context: dict) -> list[Skill]:
        out = [s for s in self.library if kind(s) == "general"] if self.general else []
        if self.mode == "template":
            cat = context.get("task_type")
            out += [s for s in self.library if kind(s) == "task_specific" and s.extra.get("category") == cat][: self.top_k]
        else:
            hits = self.library.search(query, k=self.top_k, threshold=self.delta, where=lambda s: kind(s) == "task_specific")
            out += [s for s, _ in hits]
        if self.mistakes:
            out += [s for s in self.library if kind(s) == "mistake"]
        return out

    def render(self, skills: list[Skill]) -> str:
        return render_bank(skills)

    def settings(self) -> dict:
        return {**super().settings(), "bank": content_hash(self.library.state()["skills"]),
                "mode": self.mode, "delta": self.delta, "top_k": self.top_k, "general": self.general,
                "mistakes": self.mistakes}


class RawTrajectoryMemory(MemoryPolicy):
    """The paper's ablation: the raw trajectories the skills were distilled from, in place of skills.

    `trajectories` maps a task category to rendered trajectories; the task's own category is shown
    (up to `max_chars`), so the prompt carries the same experience, uncompressed."""

    name = "raw-trajectories"

    def __init__(self, trajectories: dict[str, list[str]], max_chars: int = 2400):
        self.trajectories, self.max_chars = trajectories, max_chars

    def retrieve(self, query: str, context: dict) -> list[Skill]:
        texts = self.trajectories.get(context.get("task_type"), [])
        return [Skill(id=f"raw{i}", description="a past trajectory", body=t) for i, t in enumerate(texts)]

    def render(self, skills: list[Skill]) -> str:
        text, used = "", 0
        for s in skills:
            block = f"Past trajectory:\n{s.body.strip()}\n"
            if used + len(block) > self.max_chars:
                break
            text, used = text + block, used + len(block)
        return text

    def settings(self) -> dict:
        return {**super().settings(), "trajectories": content_hash(self.trajectories),
                "max_chars": self.max_chars}


__all__ = ["SkillBankMemory", "RawTrajectoryMemory", "MODES"]
