"""A condition — an agent configuration, a memory policy, independent tasks or one ordered stream — and
the one function that runs it (resuming from its records) and loads what it recorded.

    c = Condition("subtask-text", AgentConfig(level="subtask"), lambda: InducedMemory(llm, "text"), stream=True)
    result = run_condition(run_dir / c.name, llm, c, task_ids, env_options)
    result.episodes, result.frame          # the Episode records, one row per episode (with `condition`)

Every paper's experiment is a list of conditions run through `run_conditions`; its chapter loads them
back with `load_condition(s)`.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..agent import Agent, AgentConfig
from ..memory import MemoryPolicy, NoMemory
from ..records import Episode
from .streams import episodes_frame, independent_streams, load_episodes, run_streams


@dataclass(frozen=True)
class Condition:
    name: str
    agent: AgentConfig
    memory: Callable[[], MemoryPolicy] = NoMemory   # a factory: each stream gets its own policy object
    stream: bool = False    # True: the tasks form one ordered stream sharing the memory; False: independent tasks
    label: str = ""         # what tables call it (default: the name)

    def streams(self, task_ids: list[str]) -> dict[str, list[str]]:
        return {"stream": list(task_ids)} if self.stream else independent_streams(task_ids)


@dataclass
class Result:
    """What a condition recorded: its episodes and one row per episode (column `condition` added)."""
    condition: str
    episodes: list[Episode] = field(default_factory=list)

    @property
    def frame(self) -> pd.DataFrame:
        return episodes_frame(self.episodes).assign(condition=self.condition)


def run_condition(run_dir: str | Path, llm, condition: Condition, task_ids: list[str],
                  env_options: dict | None = None, workers: int = 1, desc: str = "", executor=None) -> Result:
    """Run (or resume) one condition on the tasks in `run_dir`; its recorded episodes. `executor`: where
    episodes run (`run_streams`; default SKILLBOOK_EXECUTOR, else threads)."""
    streams = condition.streams(task_ids)
    make = lambda: Agent(llm, condition.agent, condition.memory())  # noqa: E731
    run_streams(run_dir, streams, make, env_options=env_options, workers=workers,
                desc=desc or condition.label or condition.name, mode="stream" if condition.stream else "independent",
                executor=executor)
    return Result(condition.label or condition.name, load_episodes(run_dir, streams))


def run_conditions(run_dir: str | Path, llm, conditions: list[Condition], task_ids: list[str],
                   env_options: dict | None = None, workers: int = 1, prefix: str = "",
                   executor=None) -> dict[str, Result]:
    """Each condition in `<run_dir>/<name>/`, one after the other; name → Result."""
    run_dir = Path(run_dir)
    return {c.name: run_condition(run_dir / c.name, llm, c, task_ids, env_options, workers,
                                  desc=f"{prefix}{c.label or c.name}", executor=executor) for c in conditions}


def load_condition(run_dir: str | Path, name: str | None = None) -> Result:
    """What a condition directory recorded (every stream of its manifest), without running anything."""
    return Result(name or Path(run_dir).name, load_episodes(run_dir))


def frame(results: dict[str, Result] | list[Result]) -> pd.DataFrame:
    """One table of the episodes of several conditions (column `condition`)."""
    values = results.values() if isinstance(results, dict) else results
    return pd.concat([r.frame for r in values], ignore_index=True)


def collect(run_dir: str | Path, llm, task_ids: list[str], config: AgentConfig, env_options: dict | None = None,
            workers: int = 1) -> list[Episode]:
    """The base agent (no memory) on `task_ids`, recorded under `run_dir` (resumable); its episodes."""
    return run_condition(run_dir, llm, Condition("collect", config), task_ids, env_options, workers,
                         desc="collect (base agent)").episodes


__all__ = ["Condition", "Result", "run_condition", "run_conditions", "load_condition", "frame", "collect"]
