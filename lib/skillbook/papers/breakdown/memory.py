"""The first paper's memory: induce a skill from each (sub-)trajectory, retrieve by description.

The level is the agent's (it hands over whole trajectories or sub-trajectories); this policy fixes
the format (text | code), the induction prompt level (L1–L3), retrieval (top-k, threshold) and which
source outcomes it learns from (all, or only successes / failures for the E.3 check).
"""
from __future__ import annotations

from ...memory import MemoryPolicy, content_hash
from ...records import Trajectory
from ...skills.library import SkillLibrary
from ...skills.record import FORMATS, Skill
from .hygiene import add_with_hygiene, code_name, definitions
from .induction import InductionError, induce, prompt

SOURCES = ("all", "success", "failure")


class InducedMemory(MemoryPolicy):
    def __init__(self, llm, format: str = "text", prompt_level: str = "L3", k: int = 5, threshold: float = 0.3,
                 source: str = "all", library: SkillLibrary | None = None, frozen: bool = False,
                 min_steps: int = 1, show: bool = True):
        if format not in FORMATS:
            raise ValueError(f"unknown skill format {format!r}; valid: {', '.join(FORMATS)}")
        if source not in SOURCES:
            raise ValueError(f"unknown induction source {source!r}; valid: {', '.join(SOURCES)}")
        self.llm, self.format, self.prompt_level = llm, format, prompt_level
        self.k, self.threshold, self.source, self.frozen, self.min_steps = k, threshold, source, frozen, min_steps
        self.library = library if library is not None else SkillLibrary()
        self.show = show   # False: induce but never show skills (Assay's bare upstream agent)
        self.name = (f"{format}" + ("" if source == "all" else f"-{source}") + ("-frozen" if frozen else "")
                     + ("" if show else "-bare"))
        self.failures: list[dict] = []   # replies that were not usable skills

    def retrieve(self, query: str, context: dict) -> list[Skill]:
        if not self.show:
            return []
        hits = self.library.search(query, k=self.k, threshold=self.threshold)
        for skill, sim in hits:
            skill.stats["retrievals"] = skill.stats.get("retrievals", 0) + 1
            skill.stats.setdefault("retrieved_by", []).append(
                {"task_id": context.get("task_id"), "position": context.get("position"), "similarity": round(sim, 4)})
        return [s for s, _ in hits]

    def write(self, trajectory: Trajectory, context: dict) -> list[Skill]:
        if self.frozen or len(trajectory.steps) < self.min_steps:
            return []
        if self.source == "success" and not trajectory.success or self.source == "failure" and trajectory.success:
            return []
        try:
            skill, c = induce(self.llm, trajectory, self.format, self.prompt_level, self.library.new_id(self.format[0]))
        except InductionError as e:
            self.record_call("induction", e.completion)
            self.failures.append({"task_id": trajectory.task_id, "error": str(e)})
            self.library.log("rejected", task_id=trajectory.task_id, reason=str(e))
            return []
        self.record_call("induction", c)
        skill.created_at = context.get("position", 0)
        skill.provenance["stream_position"] = context.get("position", 0)
        kept, event = add_with_hygiene(self.library, skill, merge_bodies=self._merge)
        return [kept] if kept is not None else []

    def _merge(self, old: Skill, new: Skill) -> str:
        c = self.llm.chat([{"role": "user", "content": prompt("merge_text").format(a=old.body, b=new.body)}],
                          max_tokens=200, temperature=0.0)
        self.record_call("merge", c)
        return c.text.strip() or old.body

    def settings(self) -> dict:
        return {**super().settings(), "format": self.format, "prompt_level": self.prompt_level, "k": self.k,
                "threshold": self.threshold, "source": self.source, "frozen": self.frozen, "min_steps": self.min_steps,
                "show": self.show, "library": content_hash(self.library.state()["skills"]) if len(self.library) else "",
                "llm": self.llm.backend}

    def callable_code(self, name: str) -> list[str] | None:
        for s in self.library:
            if s.format == "code" and code_name(s) == name:
                return definitions(self.library, s)
        return None

    def state(self) -> dict:
        return {"library": self.library.state(), "failures": self.failures}

    def load_state(self, state: dict) -> None:
        if state:
            self.library.load_state(state.get("library", {}))
            self.failures = list(state.get("failures", []))


__all__ = ["InducedMemory"]
