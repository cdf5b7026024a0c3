"""SkillRL's retrieval over a SkillBank (the third paper, §3.2).

For a task of category k, asked with its description d (at task level the instruction and the first
observation, `envs.task_query`), the prompt gets

    general skills S_g                                        always (`general=True`)
    task-specific skills of k:  embedding  those of S_k with cos(e_d, e_s) ≥ δ, best first, at most K
                                template   the first K of S_k (the public code's default mode)
    common mistakes             those learned from failures of k, and the general ones (`mistakes=True`)

e_s embeds "title. principle. when_to_apply" (`bank.retrieval_text`), as the public code does.

One difference from the public code's embedding mode, which ranks the task-specific skills of every
category together: here the candidates are S_k, the skills of the task's own category (the category is
the task's type, as template mode reads it). Measured on this book's committed bank with the real
TextWorldExpress test tasks (tests/test_skillrl.py): even with the task-level query and the full skill
text, a category without skills of its own (peckingorder: no training success to distil) is handed
another game's skills, at cosines above δ, because room descriptions resemble each other; the paper
organises S_k by category precisely so that a task gets its category's knowledge.

The bank is read-only here; it grows between validation rounds (`pipeline.evolution_round`).
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
        cat = context.get("task_type")
        out = [s for s in self.library if kind(s) == "general"] if self.general else []
        own = lambda s: kind(s) == "task_specific" and s.extra.get("category") == cat  # noqa: E731
        if self.mode == "template":
            out += [s for s in self.library if own(s)][: self.top_k]
        elif any(own(s) for s in self.library):
            out += [s for s, _ in self.library.search(query, k=self.top_k, threshold=self.delta, where=own)]
        if self.mistakes:
            out += [s for s in self.library if kind(s) == "mistake" and s.extra.get("category") in (None, cat)]
        return out

    def render(self, skills: list[Skill]) -> str:
        return render_bank(skills)

    def settings(self) -> dict:
        return {**super().settings(), "bank": content_hash(self.library.state()["skills"]),
                "mode": self.mode, "delta": self.delta, "top_k": self.top_k, "general": self.general,
                "mistakes": self.mistakes}


class RawTrajectoryMemory(MemoryPolicy):
    """The paper's ablation: the raw trajectories the skills were distilled from, in place of skills.

    `trajectories` maps a task category to rendered trajectories; the task's own category is shown, in
    order, up to `max_chars` (the same budget as the bank's block): a trajectory that does not fit whole
    is cut — its first steps and its outcome line kept — rather than left out, so a category whose runs
    are each longer than the budget still gets raw experience (`max_chars=None`: no budget)."""

    name = "raw-trajectories"

    def __init__(self, trajectories: dict[str, list[str]], max_chars: int | None = 2400):
        self.trajectories, self.max_chars = trajectories, max_chars

    def retrieve(self, query: str, context: dict) -> list[Skill]:
        texts = self.trajectories.get(context.get("task_type"), [])
        return [Skill(id=f"raw{i}", description="a past trajectory", body=t) for i, t in enumerate(texts)]

    def render(self, skills: list[Skill]) -> str:
        text = ""
        for s in skills:
            block = f"Past trajectory:\n{s.body.strip()}\n"
            if self.max_chars is not None and len(text) + len(block) > self.max_chars:
                text += _fit(block, self.max_chars - len(text))
                break
            text += block
        return text

    def settings(self) -> dict:
        return {**super().settings(), "trajectories": content_hash(self.trajectories),
                "max_chars": self.max_chars}


def _fit(block: str, n: int) -> str:
    """`block` (header line, step lines, outcome line) in at most `n` characters: the header, as many
    lines from the start as fit, a "…" line, the outcome line; "" when not even header and outcome fit."""
    lines = block.rstrip("\n").split("\n")
    head, tail = lines[:2], lines[-1]
    fixed = len("\n".join(head)) + len("\n  …\n") + len(tail) + 1
    if len(lines) < 4 or fixed > n:
        return ""
    kept, used = list(head), fixed
    for line in lines[2:-1]:
        if used + len(line) + 1 > n:
            break
        kept.append(line)
        used += len(line) + 1
    return "\n".join(kept + ["  …", tail]) + "\n"


__all__ = ["SkillBankMemory", "RawTrajectoryMemory", "MODES"]
