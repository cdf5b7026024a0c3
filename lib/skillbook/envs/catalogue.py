"""The task catalogue: every task of a benchmark with its type, split and a difficulty signal."""
from __future__ import annotations

import json

import pandas as pd
from tqdm.auto import tqdm

from ..io import atomic_write_json
from .base import SPLITS, Env, SimulatorError, Task

SAVE_EVERY = 50   # gold paths computed between two saves of the per-user cache


def catalogue(envs: list[Env], splits: tuple[str, ...] = SPLITS) -> pd.DataFrame:
    """One row per task: task_id, env, task_type, split, index, native_id (no simulator episode needed)."""
    rows = []
    for env in envs:
        for split in splits:
            for t in env.tasks(split):
                rows.append({"task_id": t.id, "env": t.env, "task_type": t.task_type, "split": t.split,
                             "index": t.index, "native_id": t.native_id})
    return pd.DataFrame(rows)


def split_table(cat: pd.DataFrame) -> pd.DataFrame:
    """Tasks per (env, task type) and split, as the chapters show it."""
    table = cat.pivot_table(index=["env", "task_type"], columns="split", values="task_id",
                            aggfunc="count", fill_value=0)
    return table.reindex(columns=[s for s in SPLITS if s in table.columns])


def _difficulty_file(env: Env):
    from ..io import cache_dir
    return cache_dir() / "splits" / f"{env._splits_file().stem}-gold-length.json"


def gold_lengths(env: Env, tasks: list[Task], progress: bool = True) -> dict[str, int]:
    """Length of the benchmark's gold action sequence per task: the difficulty signal.

    Computed once per task (ScienceWorld needs ~0.5 s per task to plan it) and kept on disk.
    """
    path = _difficulty_file(env)
    known = json.loads(path.read_text()) if path.exists() else {}
    todo = [t for t in tasks if t.id not in known]
    new = 0
    try:
        for t in tqdm(todo, desc=f"gold paths ({env.name})", disable=not progress or not todo):
            try:
                known[t.id] = len(env.gold_actions(t))
            except SimulatorError:   # a JVM that hung or died (a loaded machine): a fresh one tries again
                known[t.id] = len(env.gold_actions(t))
            new += 1
            if new % SAVE_EVERY == 0:
                atomic_write_json(path, known)
    finally:   # what was computed is kept even when a later task fails
        if new:
            atomic_write_json(path, known)
    return {t.id: known[t.id] for t in tasks}


def with_difficulty(cat: pd.DataFrame, envs: list[Env], progress: bool = True) -> pd.DataFrame:
    """Add `gold_length` (and tercile `difficulty` strata within each task type) to catalogue rows."""
    by_name = {e.name: e for e in envs}
    lengths = {}
    for name, part in cat.groupby("env"):
        env = by_name[name]
        lengths.update(gold_lengths(env, [env.task(i) for i in part["task_id"]], progress))
    out = cat.copy()
    out["gold_length"] = out["task_id"].map(lengths)
    return out
