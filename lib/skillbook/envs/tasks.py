"""Choosing tasks and describing them: task-type specs, seeded samples, difficulty, the text of a task."""
from __future__ import annotations

import random

import pandas as pd

from .base import TaskIdError, check_split
from .catalogue import with_difficulty
from .pool import EnvPool


def parse_task_types(spec: str | list[str]) -> list[tuple[str, str]]:
    """'twx/simonsays,sciworld/boil' -> [('twx', 'simonsays'), ('sciworld', 'boil')], checked."""
    from . import ENVS  # deferred: skillbook.envs imports this module
    items = [s.strip() for s in (spec.split(",") if isinstance(spec, str) else spec) if s.strip()]
    if not items:
        raise TaskIdError("no task types given; write them as '<env>/<task type>', e.g. 'twx/coin,sciworld/boil'")
    out = []
    for item in items:
        if item.count("/") != 1:
            raise TaskIdError(f"task type {item!r} must be written '<env>/<task type>', e.g. 'twx/coin'")
        env, tt = item.split("/")
        if env not in ENVS:
            raise TaskIdError(f"unknown env {env!r} in {item!r}; valid envs: {', '.join(ENVS)}")
        if tt not in ENVS[env].TASK_TYPES:
            raise TaskIdError(f"unknown {env} task type {tt!r}; valid: {', '.join(ENVS[env].TASK_TYPES)}")
        out.append((env, tt))
    return out


def sample_tasks(task_types: str | list[str], split: str, n: int, seed: int = 0,
                 env_options: dict | None = None) -> list[str]:
    """`n` task ids per task type from the official `split`, drawn with `seed` (same seed, same tasks)."""
    check_split(split)
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n_tasks must be a positive integer, got {n!r}")
    rng = random.Random(seed)
    ids = []
    with EnvPool(env_options) as envs:
        for env_name, tt in parse_task_types(task_types):
            count = len(envs.get(env_name).split_ids(tt, split))
            ids += [f"{env_name}/{tt}/{split}/{i}" for i in sorted(rng.sample(range(count), min(n, count)))]
    return ids


def task_frame(task_ids: list[str], env_options: dict | None = None) -> pd.DataFrame:
    """Task table with the gold-path length (the difficulty signal)."""
    rows = [dict(zip(("env", "task_type", "split", "index"), t.split("/")), task_id=t) for t in task_ids]
    cat = pd.DataFrame(rows)
    with EnvPool(env_options) as envs:
        return with_difficulty(cat, [envs.get(name) for name in cat["env"].unique()], progress=False)


TASK_TEXTS = ("instruction", "instruction+observation", "observation+instruction")


def task_text(instruction: str, observation: str, kind: str) -> str:
    """The text that stands for a task (see `task_texts`)."""
    ins, obs = instruction.strip(), observation.strip()
    return {"instruction": ins, "instruction+observation": ins + "\n" + obs,
            "observation+instruction": obs + "\n" + ins}[kind]


def task_query(env_name: str, instruction: str, observation: str) -> str:
    """What a task-level agent retrieves skills with: the task as its env names it (`Env.TASK_TEXT`)."""
    from . import ENVS  # deferred: skillbook.envs imports this module
    return task_text(instruction, observation, getattr(ENVS.get(env_name), "TASK_TEXT", "instruction+observation"))


def task_texts(task_ids: list[str], env_options: dict | None = None, kind: str = "instruction+observation",
               llm=None) -> dict[str, str]:
    """task id → the text that stands for the task when skills are compared with tasks.

    'instruction' is the goal sentence; 'instruction+observation' appends the first observation,
    which is where a TextWorldExpress task differs from the others of its game (its instruction is
    one fixed sentence per game); 'observation+instruction' puts the observation first (for τ²-bench,
    whose instruction is the long domain policy). `llm` plays τ²-bench's simulated user, whose first
    message is the first observation.
    """
    if kind not in TASK_TEXTS:
        raise ValueError(f"unknown task text {kind!r}; valid: {', '.join(TASK_TEXTS)}")
    out: dict[str, str] = {}
    with EnvPool(env_options, llm=llm) as envs:
        for t in dict.fromkeys(task_ids):
            env = envs.for_task(t)
            obs = env.reset(t)
            out[t] = task_text(env.instruction, obs, kind)
    return out


def require_splits(tasks: dict[str, list[str]], needed: tuple[str, ...], who: str) -> None:
    """Fail before any model call when a pipeline is missing one of the task sets it needs."""
    missing = [k for k in needed if not tasks.get(k)]
    if missing:
        raise ValueError(f"{who} needs {', '.join(needed)} tasks; missing: {missing}")


__all__ = ["parse_task_types", "sample_tasks", "task_frame", "task_texts", "TASK_TEXTS", "task_text", "task_query",
           "require_splits"]
