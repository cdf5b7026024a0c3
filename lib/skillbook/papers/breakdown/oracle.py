"""Skill libraries induced from the benchmarks' own gold trajectories (issue 36's oracle and placebo).

The second study asks whether good skill content helps this agent at all. Its ceiling, *oracle*, is a
library induced with the first paper's own induction prompt and hygiene (`InducedMemory.write`: the
same prompt, the same merge at description cosine ≥ 0.85) — but from the gold trajectories of TRAIN
games instead of the agent's own past, once, before the test stream, then frozen. Its placebo draws
whole skills from a library induced the same way from the gold trajectories of *another* game: real,
well-formed skills about the wrong world, in the same prompt slot, as many as the agent's own memory
retrieved at that step and of the nearest length (`OtherGamePlacebo`).

A gold trajectory has no subtasks. Where it is cut is the benchmark's, not ours: a span ends at every
step where the benchmark's score rises (its own milestones: a TextWorldExpress coin game has one, at
the coin; a twc game one per item put away), and the last span at the end. Each span is induced at the
task level (`unit` "task" in the prompt): the record shows the task and the steps, with no planner's
subtask line to invent.
"""
from __future__ import annotations

import hashlib

from tqdm.auto import tqdm

from ...envs import EnvPool, repeatable_gold_actions
from ...memory import MemoryPolicy, ShownInstead, content_hash
from ...records import Step, Trajectory
from ...skills.library import SkillLibrary
from ...skills.record import Skill
from .memory import InducedMemory


def gold_trajectory(env, task_id: str) -> Trajectory:
    """The task's gold actions played in `env` (from a fresh simulator when gold paths depend on what
    ran before, so a re-run draws the same path), as one task-level trajectory."""
    actions = repeatable_gold_actions(env, task_id)
    env.reset(task_id)
    task = env.task(task_id)
    steps, success = [], False
    for action in actions:
        r = env.step(action)
        steps.append(Step("", action, r.observation, float(r.score)))
        success = bool(r.info.get("success", r.score >= 1.0))
        if r.done:
            break
    score = steps[-1].score if steps else 0.0
    return Trajectory(task_id, task.task_type, task.env, env.instruction, env.instruction, "task",
                      (0, len(steps)), steps, score, success)


def milestone_spans(trajectory: Trajectory) -> list[Trajectory]:
    """`trajectory` cut after every step where the benchmark's score rose (the last span ends with the
    trajectory). Each span keeps the task's instruction; its success is the state when it ended."""
    spans, start, best = [], 0, 0.0
    for i, step in enumerate(trajectory.steps):
        if step.score > best or i == len(trajectory.steps) - 1:
            best = max(best, step.score)
            last = i == len(trajectory.steps) - 1
            spans.append(Trajectory(
                trajectory.task_id, trajectory.task_type, trajectory.env, trajectory.instruction,
                trajectory.description, "task", (start, i + 1), trajectory.steps[start:i + 1], step.score,
                trajectory.success if last else False))
            start = i + 1
    return spans


def gold_library(llm, task_ids: list[str], env_options: dict | None = None, prompts: str = "v2",
                 progress: bool = False) -> tuple[SkillLibrary, list]:
    """A text-skill library induced from the gold trajectories of `task_ids` (TRAIN games), span by span
    in the given order, with the first paper's induction prompt and hygiene; and the model calls it made
    (for the cost table). Deterministic: the same tasks, model and prompts give the same library."""
    bad = [t for t in task_ids if t.split("/")[2:3] != ["train"]]
    if bad:
        raise ValueError(f"a gold library is induced from TRAIN games only, got {bad[:3]}")
    memory = InducedMemory(llm, "text", prompts=prompts)
    calls = []
    with EnvPool(env_options) as envs:
        ids = task_ids
        if progress:
            ids = tqdm(task_ids, desc="gold library", unit="game")
        for position, task_id in enumerate(ids):
            for span in milestone_spans(gold_trajectory(envs.for_task(task_id), task_id)):
                memory.write(span, {"position": position, "task_id": task_id})
                calls += memory.pop_calls()
            memory.finish(_Outcome(True, 1.0), {})
    return memory.library, calls


class _Outcome:
    """What `InducedMemory.finish` reads of an episode: a gold trajectory's final outcome."""
    def __init__(self, success: bool, score: float):
        self.success, self.score = success, score


class OtherGamePlacebo(ShownInstead):
    """The placebo of issue 36: the agent's own memory (`inner`) writes and retrieves as usual, but each
    skill it retrieves is shown as a whole skill from `pool` (a library about another game): as many as
    it retrieved, each the pool skill nearest in length (words) to the one it replaces, no skill twice
    in one prompt, ties broken by a hash of the task, the query and the slot so that the choice is deterministic."""

    def __init__(self, inner: MemoryPolicy, pool: SkillLibrary, pool_name: str):
        if len(pool) == 0:
            raise ValueError("the placebo's pool of other-game skills is empty")
        super().__init__(inner)
        self.pool, self.pool_name = list(pool), pool_name
        self.name = f"placebo-{pool_name}-{inner.name}"

    def retrieve(self, query: str, context: dict) -> list[Skill]:
        real = self.inner.retrieve(query, context)
        used: set[str] = set()
        out = []
        for i, s in enumerate(real):
            words = len(s.body.split())
            salt = f"{context.get('task_id', '')}/{query}/{i}"
            free = [p for p in self.pool if p.id not in used] or self.pool
            pick = min(free, key=lambda p: (abs(len(p.body.split()) - words),
                                            hashlib.sha256(f"{salt}/{p.id}".encode()).hexdigest()))
            used.add(pick.id)
            out.append(Skill(id=f"placebo-{pick.id}", description=pick.description, body=pick.body,
                             format="text", provenance={"placebo_for": s.id, "pool": self.pool_name}))
        return out

    def settings(self) -> dict:
        return {"class": "OtherGamePlacebo", "inner": self.inner.settings(), "pool": self.pool_name,
                "pool_skills": content_hash([s.to_dict() for s in self.pool])}
