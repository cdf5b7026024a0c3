"""The task catalogue: every task of a benchmark with its type, split and a difficulty signal."""
from __future__ import annotations

import json

import pandas as pd
from tqdm.auto import tqdm

from ..io import atomic_write_json, cache_dir
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
    return cache_dir() / "splits" / f"{env.splits_file().stem}-gold-length.json"


def computed_once(path, keys, compute, desc: str, progress: bool = True, save_every: int = SAVE_EVERY) -> dict:
    """key → compute(key), read from the JSON file `path` where known and computed (then kept there) for the
    rest: what a per-task fact of a simulator costs to find out once (a gold path, the game a seed makes).
    A JVM that hung or died gets one more try with a fresh one; what was computed is saved every
    `save_every` keys and kept even when a later key fails."""
    known = json.loads(path.read_text()) if path.exists() else {}
    todo = [k for k in dict.fromkeys(keys) if k not in known]
    new = 0
    try:
        for k in tqdm(todo, desc=desc, disable=not progress or not todo):
            try:
                known[k] = compute(k)
            except SimulatorError:   # a JVM that hung or died (a loaded machine): a fresh one tries again
                known[k] = compute(k)
            new += 1
            if new % save_every == 0:
                atomic_write_json(path, known)
    finally:   # what was computed is kept even when a later task fails
        if new:
            atomic_write_json(path, known)
    return known


def gold_lengths(env: Env, tasks: list[Task], progress: bool = True) -> dict[str, int]:
    """Length of the benchmark's gold action sequence per task: the difficulty signal.

    Computed once per task (ScienceWorld needs ~0.5 s per task to plan it) and kept on disk.
    """
    by_id = {t.id: t for t in tasks}
    known = computed_once(_difficulty_file(env), list(by_id), lambda i: len(env.gold_actions(by_id[i])),
                          f"gold paths ({env.name})", progress)
    return {t.id: known[t.id] for t in tasks}


def difficulty_key(cat: pd.DataFrame, envs: list[Env]) -> dict:
    """What `with_difficulty`'s result depends on: the tasks and each simulator's gold-path identity (the
    per-user cache's file name: benchmark, options, gold-path version). A chapter keeps the result under
    this key (`Lab.stored`), so a replay on a fresh machine plans no gold path."""
    return {"tasks": cat["task_id"].tolist(), "gold": sorted(_difficulty_file(e).name for e in envs)}


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
