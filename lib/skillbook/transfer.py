"""The first paper's controlled comparison: {task, subtask} × {none, text, code} on one ordered task stream.

Each memory condition solves the stream in order with one shared, growing skill library (skills
written after each task or subtask, retrieved before); each is compared, task by task, with the
no-memory agent of its own level. Conditions run concurrently (up to `workers`), each in its own
run directory `<run_dir>/<condition>/`, checkpointed after every task.
"""
from __future__ import annotations

import json
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd

from .agents import Agent, AgentConfig
from .memory import InducedMemory, NoMemory
from .runner import episodes_frame, independent_streams, load_episodes, run_streams
from .skills.library import SkillLibrary

CONDITIONS = ("task-none", "task-text", "task-code", "subtask-none", "subtask-text", "subtask-code")


def parse_conditions(spec: str | list[str]) -> list[str]:
    items = [c.strip() for c in (spec.split(",") if isinstance(spec, str) else spec) if c.strip()]
    bad = [c for c in items if c not in CONDITIONS]
    if bad or not items:
        raise ValueError(f"unknown condition(s) {bad}; valid: {', '.join(CONDITIONS)}")
    return items


def interleave(task_ids: list[str], seed: int = 0) -> list[str]:
    """A stream that alternates task types (seeded order within each type), so later tasks of a type
    come after earlier ones of every type: the setting in which skills can transfer."""
    by_type: dict[str, list[str]] = {}
    for t in task_ids:
        by_type.setdefault("/".join(t.split("/")[:2]), []).append(t)
    rng = random.Random(seed)
    for ids in by_type.values():
        rng.shuffle(ids)
    out = []
    for i in range(max(len(v) for v in by_type.values())):
        for key in sorted(by_type):
            if i < len(by_type[key]):
                out.append(by_type[key][i])
    return out


def memory_for(condition: str, llm, prompt_level: str = "L3", k: int = 5, threshold: float = 0.3,
               source: str = "all", library: SkillLibrary | None = None, frozen: bool = False):
    fmt = condition.split("-")[1]
    if fmt == "none":
        return NoMemory()
    return InducedMemory(llm, format=fmt, prompt_level=prompt_level, k=k, threshold=threshold, source=source,
                         library=library, frozen=frozen)


def run_conditions(run_dir: Path, llm, stream: list[str], conditions: list[str], agent: dict,
                   env_options: dict | None = None, workers: int = 1, **memory) -> dict[str, pd.DataFrame]:
    """Run (or resume) each condition on the stream; returns one episode table per condition."""
    conditions = parse_conditions(conditions)
    run_dir = Path(run_dir)

    def one(condition: str) -> pd.DataFrame:
        level = condition.split("-")[0]
        config = AgentConfig(level=level, **agent)
        make = lambda: Agent(llm, config, memory_for(condition, llm, **memory))  # noqa: E731
        streams = independent_streams(stream) if condition.endswith("none") else {"stream": list(stream)}
        return run_streams(run_dir / condition, streams, make, env_options=env_options, workers=1,
                           desc=condition).assign(condition=condition)

    if getattr(llm, "deterministic", False):
        workers = 1   # conditions one after the other: the order of requests, and so every answer, is fixed
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="condition") as pool:
        return dict(zip(conditions, pool.map(one, conditions)))


def final_library(condition_dir: Path) -> SkillLibrary:
    """The skill library a memory condition ended with (from its last checkpoint)."""
    path = Path(condition_dir) / "streams" / "stream.json"
    state = json.loads(path.read_text())["memory"]
    return SkillLibrary().load_state(state.get("library", {}))


def load_conditions(run_dir: Path, conditions: list[str]) -> tuple[dict, pd.DataFrame]:
    episodes = {c: load_episodes(Path(run_dir) / c) for c in conditions}
    df = pd.concat([episodes_frame(e).assign(condition=c) for c, e in episodes.items()], ignore_index=True)
    df["level"] = df["condition"].str.split("-").str[0]
    df["format"] = df["condition"].str.split("-").str[1]
    return episodes, df


def save_experiment(run_dir: Path, **spec) -> None:
    """Record what defines the transfer run (stream, conditions, settings) for the chapters that read it."""
    from .io import atomic_write_json
    atomic_write_json(Path(run_dir) / "experiment.json", spec, indent=1)


def load_experiment(run_dir: Path) -> dict:
    path = Path(run_dir) / "experiment.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: execute chapter 02_induction (which runs the transfer "
                                "stream) with this profile first")
    return json.loads(path.read_text())
