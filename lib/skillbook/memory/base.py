"""The two hooks every paper's method plugs into.

    retrieve(query, context) -> [Skill]   before the task (task level) or each subtask (subtask level)
    write(trajectory, context) -> [Skill] after the task or each subtask

`trajectory` is a dict: instruction, description (the subtask, or the instruction), level, steps
(thought, action, observation, score), score, success, task_id, task_type, span. State is saved with
every runner checkpoint (`state()` / `load_state()`), so a resumed stream has the same memory.
"""
from __future__ import annotations

from typing import Callable

from ..skills import Skill


class MemoryPolicy:
    name = "base"
    _calls: list | None = None

    def record_call(self, role: str, completion) -> None:
        """Remember a model call made by the policy (induction, merging), for the episode's costs."""
        from ..records import Call
        if self._calls is None:
            self._calls = []
        new = (completion.server_timings or {}).get("prompt_n")
        self._calls.append(Call(role, completion.prompt_tokens, completion.completion_tokens,
                                completion.latency_s, completion.cached, new))

    def pop_calls(self) -> list:
        calls, self._calls = self._calls or [], []
        return calls

    def callable_code(self, name: str) -> list[str] | None:
        """Definitions to load for calling code skill `name` (with its dependencies), or None."""
        return None

    def retrieve(self, query: str, context: dict) -> list[Skill]:
        return []

    def render(self, skills: list[Skill]) -> str:
        """The prompt block for retrieved skills (a policy with structured skills overrides it)."""
        from ..skills import render_skills
        return render_skills(skills)

    def write(self, trajectory: dict, context: dict) -> list[Skill]:
        return []

    def state(self) -> dict:
        return {}

    def load_state(self, state: dict) -> None:
        pass


class NoMemory(MemoryPolicy):
    """The baseline: nothing is written, nothing is retrieved."""
    name = "none"


MEMORY_POLICIES: dict[str, Callable[..., MemoryPolicy]] = {"none": NoMemory}


def register(name: str):
    def deco(cls):
        MEMORY_POLICIES[name] = cls
        return cls
    return deco


def make_memory(name: str, **options) -> MemoryPolicy:
    if name not in MEMORY_POLICIES:
        raise ValueError(f"unknown memory policy {name!r}; valid: {', '.join(MEMORY_POLICIES)}")
    return MEMORY_POLICIES[name](**options)
