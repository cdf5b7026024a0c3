"""What a run records: every step, every model call, every subtask of every episode.

Everything an analysis needs is here, so no analysis ever re-runs an agent. Records are plain
dataclasses that round-trip through JSON (`to_dict` / `Episode.from_dict`). A `Trajectory` is the one
form in which a (sub-)trajectory is handed to memory policies and rendered into prompts.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

import numpy as np

from .text import cut, cut_middle


def dependency(prompt_tokens, completion_tokens) -> float:
    """The first paper's *dependency* cost: each call is charged for the attention work its output tokens
    do over everything before them, Σ_{t=1..o} (p + t) ≈ (2p + o)·o / 2 token² per call with p prompt and o
    output tokens; summed over calls, in units of 1e9 token²."""
    p = np.asarray(prompt_tokens, dtype=float)
    o = np.asarray(completion_tokens, dtype=float)
    if p.shape != o.shape:
        raise ValueError(f"prompt_tokens and completion_tokens differ in shape: {p.shape} vs {o.shape}")
    if (p < 0).any() or (o < 0).any():
        raise ValueError("token counts must be non-negative")
    return float(((2 * p + o) * o / 2).sum() / 1e9)


@dataclass
class Call:
    """One model call: who made it (executor, planner, summarizer, induction, …) and what it cost."""
    role: str
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    cached: bool = False
    new_prompt_tokens: int | None = None  # tokens the server actually prefilled (the rest came from its prompt cache)


@dataclass
class Step:
    thought: str
    action: str            # the action sent to the environment (after matching), or what the model wrote
    observation: str
    score: float
    raw: str = ""          # the model's reply as written
    valid: bool = True     # False: unparsable or not a valid action (the environment was not called)
    subtask: int = 0
    call: Call | None = None
    macro: str = ""        # the code skill that issued this step, if any


@dataclass
class Subtask:
    """One subtask of an episode: what it was about, its span of the episode's steps, what memory gave and
    took (a task-level episode has one, the instruction itself)."""
    index: int
    description: str
    start: int                    # steps[start:end] of the episode
    end: int = 0
    summary: str = ""
    stop_reason: str = ""         # subtask_done | env_done | step_budget | loop | error
    retrieved: list[str] = field(default_factory=list)
    written: list[str] = field(default_factory=list)
    query: str = ""               # what memory was asked with (records before it existed: the description)


@dataclass
class Episode:
    task_id: str
    env: str
    task_type: str
    split: str
    agent: str                    # task | subtask
    memory: str                   # the memory policy's name
    instruction: str = ""
    stream: str = ""
    position: int = 0             # index of the task within its stream
    seed: int = 0
    steps: list[Step] = field(default_factory=list)
    subtasks: list[Subtask] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    score: float = 0.0
    success: bool = False
    stop_reason: str = ""
    error: str = ""
    retrieved: list[str] = field(default_factory=list)
    written: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    config: dict = field(default_factory=dict)
    transcript: list[dict] = field(default_factory=list)   # the full conversation, for conversational benchmarks
    note: str = ""                # why an episode ended early when that is not in stop_reason alone

    # -- costs (the first paper's §4.4 and appendix D) ---------------------------------------------
    def cost(self) -> dict:
        """The agent's costs. Calls with role 'user' are the environment's (τ²-bench's simulated user) and
        are counted apart."""
        agent = [c for c in self.calls if c.role != "user"]
        p = [c.prompt_tokens for c in agent]
        o = [c.completion_tokens for c in agent]
        return {"llm_calls": len(agent), "prompt_tokens": sum(p), "completion_tokens": sum(o),
                "model_s": sum(c.latency_s for c in agent), "dependency_1e9": dependency(p, o),
                "steps": len(self.steps), "invalid_steps": sum(not s.valid for s in self.steps),
                "user_calls": len(self.calls) - len(agent)}

    def row(self) -> dict:
        """One flat row per episode, for pandas."""
        r = {k: getattr(self, k) for k in ("task_id", "env", "task_type", "split", "agent", "memory", "stream",
                                           "position", "seed", "score", "success", "stop_reason", "error",
                                           "wall_s")}
        r.update(self.cost())
        r["subtasks"] = len(self.subtasks)
        r["n_retrieved"] = len(self.retrieved)
        r["n_written"] = len(self.written)
        return r

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Episode:
        d = dict(d)
        d["calls"] = [Call(**c) for c in d.get("calls", [])]
        d["steps"] = [Step(**{**s, "call": Call(**s["call"]) if s.get("call") else None}) for s in d.get("steps", [])]
        d["subtasks"] = [Subtask(**s) for s in d.get("subtasks", [])]
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


@dataclass
class Trajectory:
    """A span of an episode as memory policies receive it: the whole task (task level) or one subtask.

    `description` is what the span was about (the instruction, or the subtask); `success`/`score` are
    the episode's state when the span ended (for a subtask: not the task's final outcome)."""
    task_id: str
    task_type: str
    env: str
    instruction: str
    description: str
    level: str                     # task | subtask
    span: tuple[int, int]          # steps[span[0]:span[1]] of the episode
    steps: list[Step]
    score: float
    success: bool
    summary: str = ""

    @classmethod
    def of(cls, ep: Episode, sub: Subtask | None = None, level: str = "task") -> Trajectory:
        span = (sub.start, sub.end) if sub is not None else (0, len(ep.steps))
        return cls(ep.task_id, ep.task_type, ep.env, ep.instruction,
                   sub.description if sub is not None else ep.instruction, level, span,
                   list(ep.steps[span[0]:span[1]]), ep.score, ep.success, sub.summary if sub is not None else "")


def render_steps(steps: list[Step], obs_chars: int = 160, mark: str = "", middle: bool = False) -> str:
    """The one text form of steps in prompts: '> action' and the observation, indented, one pair per step;
    observations cut at their end, or in their middle (`text.cut_middle`)."""
    if middle:
        return "\n".join(f"> {s.action}\n  {cut_middle(s.observation, obs_chars)}" for s in steps)
    return "\n".join(f"> {s.action}\n  {cut(s.observation, obs_chars, mark)}" for s in steps)
