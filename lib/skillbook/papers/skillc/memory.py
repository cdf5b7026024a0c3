"""SKILLC's memory: macro skills made from credited steps (see `skillbook.skillc`)."""
from __future__ import annotations

import numpy as np

from ...memory import MemoryPolicy, content_hash
from ...records import Trajectory
from ...skills.library import THRESHOLD, SkillLibrary


class CreditMemory(MemoryPolicy):
    """Macro skills retrieved by description; each keeps its credit history, how often it was called
    and how often the task then succeeded; unused or unhelpful macros are retired as the stream goes.

    Re-ranking (optional): the top `k` hits ordered by similarity × (0.5 + mean credit)."""

    def __init__(self, library: SkillLibrary, k: int = 3, threshold: float = THRESHOLD, rerank: bool = False,
                 retire_window: int | None = None, retire_below: float = 0.2, min_uses: int = 3):
        self.library, self.k, self.threshold, self.rerank = library, k, threshold, rerank
        self.retire_window, self.retire_below, self.min_uses = retire_window, retire_below, min_uses
        self.name = "credit" + ("-rerank" if rerank else "")
        self.seen_tasks = 0
        self.retired: list[dict] = []

    def retrieve(self, query: str, context: dict):
        hits = self.library.search(query, k=self.k * (2 if self.rerank else 1), threshold=self.threshold)
        if self.rerank:
            hits.sort(key=lambda h: -h[1] * (0.5 + float(np.mean(h[0].extra.get("credit_history") or [0.0]))))
        return [s for s, _ in hits[: self.k]]

    def render(self, skills) -> str:
        if not skills:
            return ""
        lines = ["Macro actions (each runs several steps; write: Action: call <name>(<arguments>)):"]
        for s in skills:
            m = s.extra["macro"]
            lines.append(f"- {m['name']}({', '.join(m['inputs'])}): {m['description']} "
                         f"[when: {m['preconditions'] or 'any time'}; runs: {'; '.join(m['steps'])}]")
        return "\n".join(lines) + "\n"

    def callable_code(self, name: str):
        for s in self.library:
            if s.extra.get("macro", {}).get("name") == name:
                return [s.body]
        return None

    def write(self, trajectory: Trajectory, context: dict):
        """Usage statistics (a macro's calls and the task's outcome after them) and retirement."""
        self.seen_tasks += 1
        called = {st.macro for st in trajectory.steps if st.macro}
        for s in self.library:
            name = s.extra.get("macro", {}).get("name")
            if name in called:
                s.stats["uses"] = s.stats.get("uses", 0) + 1
                s.stats["successes"] = s.stats.get("successes", 0) + int(bool(trajectory.success))
        for s in list(self.library):
            uses = s.stats.get("uses", 0)
            idle = self.retire_window is not None and uses == 0 and self.seen_tasks >= self.retire_window
            poor = uses >= self.min_uses and s.stats.get("successes", 0) / uses < self.retire_below
            if idle or poor:
                self.library.remove(s.id)
                self.retired.append({"skill": s.id, "after_tasks": self.seen_tasks,
                                     "reason": "unused" if idle else "low success"})
        return []

    def settings(self) -> dict:
        return {**super().settings(), "library": content_hash(self.library.state()["skills"]),
                "k": self.k, "threshold": self.threshold, "rerank": self.rerank, "retire_window": self.retire_window,
                "retire_below": self.retire_below, "min_uses": self.min_uses}

    def state(self) -> dict:
        return {"library": self.library.state(), "seen_tasks": self.seen_tasks, "retired": self.retired}

    def load_state(self, state: dict) -> None:
        if state:
            self.library.load_state(state.get("library", {}))
            self.seen_tasks = state.get("seen_tasks", 0)
            self.retired = list(state.get("retired", []))


__all__ = ["CreditMemory"]
