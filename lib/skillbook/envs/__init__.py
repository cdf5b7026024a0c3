"""Benchmarks behind one Env protocol: ScienceWorld and TextWorldExpress (offline, Java), τ²-bench."""
from __future__ import annotations

from .base import SPLITS, Conversational, Env, EnvError, SimulatorError, StepResult, Task, TaskIdError, parse_task_id
from .catalogue import catalogue, difficulty_key, gold_lengths, split_table, with_difficulty
from .jvm import JAVA_MISSING, require_java
from .pool import EnvPool
from .scienceworld import ScienceWorld
from .tasks import (
    TASK_TEXTS,
    parse_task_types,
    require_splits,
    sample_tasks,
    task_frame,
    task_query,
    task_text,
    task_texts,
)
from .tau2 import Tau2Bench
from .textworld_express import TextWorldExpress
from .units import openings, unit_counts, unit_name, units

# The one registry of benchmarks: a task id's first part names its entry (docs/HOWTO.md: how to add one).
ENVS: dict[str, type] = {"sciworld": ScienceWorld, "twx": TextWorldExpress, "tau2": Tau2Bench}


def register_env(name: str):
    """Class decorator: make an `Env` class the benchmark `name` (task ids `name/<type>/<split>/<index>`,
    `make_env`, `EnvPool`, every runner). The class states `name` itself, as the protocol asks."""
    if not isinstance(name, str) or not name.replace("_", "").isalnum() or name != name.lower():
        raise ValueError(f"an env name is lowercase letters, digits and '_' (it starts every task id), got {name!r}")

    def add(cls: type) -> type:
        if ENVS.get(name, cls) is not cls:
            raise ValueError(f"env {name!r} is registered already ({ENVS[name].__name__})")
        if getattr(cls, "name", name) != name:
            raise ValueError(f"{cls.__name__}.name is {cls.name!r}, registered as {name!r}")
        ENVS[name] = cls
        return cls
    return add


def make_env(name: str, **options) -> Env:
    """A new environment instance (one simulator, reused across episodes) by its short name."""
    if name not in ENVS:
        raise TaskIdError(f"unknown env {name!r}; valid envs: {', '.join(ENVS)}")
    return ENVS[name](**options)


def repeatable_gold_actions(env: Env, task_id: str) -> list[str]:
    """The task's gold actions, from a fresh simulator when `env`'s gold paths depend on what it ran
    before (so that a re-run draws the same path), else from `env` itself."""
    if not env.gold_depends_on_history:
        return env.gold_actions(task_id)
    fresh = make_env(env.name, **env.options)
    try:
        return fresh.gold_actions(task_id)
    finally:
        fresh.close()


def simulator_revisions(env_names) -> dict[str, int]:
    """The simulator revision of each named env whose simulator settings changed since the first book (a
    revision other than 1): part of a run's settings, so records made under an earlier revision are never
    resumed or replayed as this one's. Envs still at revision 1 are left out, so that their records keep
    the fingerprint they were made with."""
    return {n: ENVS[n].SIMULATOR_REVISION for n in sorted(set(env_names))
            if getattr(ENVS[n], "SIMULATOR_REVISION", 1) != 1}


def canonical_options(name: str, options: dict) -> dict:
    """An env's options in one spelling (equal settings compare equal when a run resumes)."""
    canonical = getattr(ENVS.get(name), "canonical_options", None)
    return canonical(dict(options)) if canonical else dict(options)


__all__ = ["repeatable_gold_actions", "units", "openings",
           "unit_counts", "unit_name", "SPLITS", "Conversational", "EnvPool",
           "TASK_TEXTS", "parse_task_types", "require_splits", "sample_tasks", "task_frame", "task_texts", "task_text",
           "task_query", "Env", "EnvError", "SimulatorError", "StepResult", "Task", "TaskIdError", "parse_task_id",
           "catalogue", "gold_lengths", "split_table", "with_difficulty", "difficulty_key", "JAVA_MISSING",
           "require_java", "ScienceWorld", "TextWorldExpress", "Tau2Bench", "ENVS", "register_env", "make_env",
           "canonical_options",
           "simulator_revisions"]
