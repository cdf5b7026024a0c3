"""Small building blocks chapters share: choosing tasks, running conditions, loading their records."""
from __future__ import annotations

import random
from pathlib import Path

import pandas as pd

from .agents import Agent, AgentConfig
from .envs import ENVS, TaskIdError, make_env, with_difficulty
from .envs.base import check_split
from .memory import MemoryPolicy, NoMemory
from .runner import episodes_frame, independent_streams, load_episodes, run_streams


def parse_task_types(spec: str | list[str]) -> list[tuple[str, str]]:
    """'twx/simonsays,sciworld/boil' -> [('twx', 'simonsays'), ('sciworld', 'boil')], checked."""
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
        if tt not in ENVS[env]._TASK_TYPES:
            raise TaskIdError(f"unknown {env} task type {tt!r}; valid: {', '.join(ENVS[env]._TASK_TYPES)}")
        out.append((env, tt))
    return out


def sample_tasks(task_types: str | list[str], split: str, n: int, seed: int = 0,
                 env_options: dict | None = None) -> list[str]:
    """`n` task ids per task type from the official `split`, drawn with `seed` (same seed, same tasks)."""
    check_split(split)
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n_tasks must be a positive integer, got {n!r}")
    rng = random.Random(seed)
    ids = []
    envs = {}
    try:
        for env_name, tt in parse_task_types(task_types):
            if env_name not in envs:
                envs[env_name] = make_env(env_name, **(env_options or {}).get(env_name, {}))
            count = len(envs[env_name].split_ids(tt, split))
            ids += [f"{env_name}/{tt}/{split}/{i}" for i in sorted(rng.sample(range(count), min(n, count)))]
    finally:
        for e in envs.values():
            e.close()
    return ids


def task_frame(task_ids: list[str], env_options: dict | None = None) -> pd.DataFrame:
    """Task table with the gold-path length (the difficulty signal)."""
    rows = [dict(zip(("env", "task_type", "split", "index"), t.split("/")), task_id=t) for t in task_ids]
    cat = pd.DataFrame(rows)
    envs = [make_env(name, **(env_options or {}).get(name, {})) for name in cat["env"].unique()]
    try:
        return with_difficulty(cat, envs, progress=False)
    finally:
        for e in envs:
            e.close()


def run_condition(run_dir: Path, llm, task_ids: list[str], config: AgentConfig,
                  memory_factory=NoMemory, env_options: dict | None = None, workers: int = 1,
                  stream: bool = False, desc: str = "") -> pd.DataFrame:
    """Run one condition (agent config × memory policy) on the tasks; resume if records exist.

    Without memory every task is its own stream (they may run concurrently); with `stream=True` the
    tasks form one ordered stream sharing the memory.
    """
    streams = {"stream": list(task_ids)} if stream else independent_streams(task_ids)
    make_agent = lambda: Agent(llm, config, memory_factory())  # noqa: E731
    return run_streams(run_dir, streams, make_agent, env_options=env_options, workers=workers,
                       desc=desc or Path(run_dir).name)


TASK_TEXTS = ("instruction", "instruction+observation", "observation+instruction")


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
    envs: dict[str, object] = {}
    try:
        for t in dict.fromkeys(task_ids):
            name = t.split("/")[0]
            if name not in envs:
                envs[name] = make_env(name, **(env_options or {}).get(name, {}))
            if llm is not None and hasattr(envs[name], "bind_llm"):
                envs[name].bind_llm(llm)
            obs = envs[name].reset(t).strip()
            ins = envs[name].instruction.strip()
            out[t] = {"instruction": ins, "instruction+observation": ins + "\n" + obs,
                      "observation+instruction": obs + "\n" + ins}[kind]
    finally:
        for e in envs.values():
            e.close()
    return out


def require_splits(tasks: dict[str, list[str]], needed: tuple[str, ...], who: str) -> None:
    """Fail before any model call when a pipeline is missing one of the task sets it needs."""
    missing = [k for k in needed if not tasks.get(k)]
    if missing:
        raise ValueError(f"{who} needs {', '.join(needed)} tasks; missing: {missing}")


def collect(run_dir: Path, llm, task_ids: list[str], config: AgentConfig, env_options: dict | None = None,
            workers: int = 1) -> list:
    """The base agent (no memory) on `task_ids`, recorded under `run_dir` (resumable); its episodes."""
    run_condition(run_dir, llm, task_ids, config, NoMemory, env_options=env_options, workers=workers,
                  desc="collect (base agent)")
    return load_episodes(run_dir)


def load_condition(run_dir: Path):
    eps = load_episodes(run_dir)
    return eps, episodes_frame(eps)


__all__ = ["parse_task_types", "sample_tasks", "task_frame", "run_condition", "load_condition", "task_texts", "TASK_TEXTS", "require_splits", "collect", "MemoryPolicy"]
