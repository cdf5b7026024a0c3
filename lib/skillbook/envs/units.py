"""The independent units of a set of tasks: which tasks are the same game.

A benchmark's task ids are not always distinct problems. TextWorldExpress generates a game from a seed,
and a small setting has few games: coin with two rooms and no distractors generates exactly 16 (the coin
in the kitchen or the pantry × the pantry in one of four directions × a dining table or not), so its
1,000 test seeds are 16 games, each repeated ~60 times. The agents are deterministic: on a repeated game
a no-memory agent repeats its outcome token for token, so 223 seeds of 16 games are 16 observations,
not 223. Every claim is tested over these units (`analysis.paired_difference(units=...)`).

What makes two tasks one unit, per benchmark:

    twx      the game the seed generated, read from the simulator itself: its instruction, first
             observation and valid actions, the game's gold path (its gold agent with a fixed walk
             seed, `TextWorldExpress.game_gold`, so that the same game gets the same path whichever
             seed made it), and the observation after every gold action (the rooms and objects a
             solution meets, not only the first text). Two seeds that agree on all of it are one game
             (the package's object tree, `getObjectTree`, is empty for these games, so it cannot be
             used).
    sciworld the variation: each variation of a ScienceWorld task is its own generated instance.
    tau2     the task: each τ²-bench task is its own scenario.

The unit of a TextWorldExpress task is computed once (one gold episode, a few milliseconds) and kept in
the per-user cache, keyed by the benchmark's version and game parameters.
"""
from __future__ import annotations

import hashlib
import json

import pandas as pd

from ..io import cache_dir
from .base import parse_task_id
from .catalogue import computed_once
from .pool import EnvPool

BY_STATE = ("twx",)          # benchmarks whose task ids can repeat a game; the others: one unit per task
# what one unit is called in a claims table's n column ("9 games", "6 variations", "1 task")
UNIT_NAMES = {"twx": "games", "sciworld": "variations", "tau2": "tasks"}
_SAVE_EVERY = 100


def _state(env, task_id: str) -> str:
    """A digest of what the simulator shows of one task's game (see the module docstring)."""
    obs = env.reset(task_id)
    first = {"instruction": env.instruction, "observation": obs, "valid": sorted(env.valid_actions())}
    # The package's own gold path is a random walk seeded from the clock: two calls on one game differ.
    gold = env.game_gold(task_id)
    env.reset(task_id)
    along = [env.step(a).observation for a in gold]
    blob = json.dumps({**first, "gold": gold, "along": along}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def _cache_file(env):
    return cache_dir() / "units" / f"{env.splits_file().stem}.json"


def units(task_ids, env_options: dict | None = None, progress: bool = True) -> pd.Series:
    """task id → its unit ('<env>/<task type>/<digest>' for a TextWorldExpress game, the task id itself
    elsewhere), in the order given (duplicates kept once). Units of different task types never coincide."""
    ids = list(dict.fromkeys(task_ids))
    out: dict[str, str] = {t: t for t in ids if parse_task_id(t)[0] not in BY_STATE}
    todo = [t for t in ids if t not in out]
    if todo:
        with EnvPool(env_options) as envs:
            for name in sorted({parse_task_id(t)[0] for t in todo}):
                env = envs.get(name)
                mine = [t for t in todo if parse_task_id(t)[0] == name]
                known = computed_once(_cache_file(env), mine, lambda t, env=env: _state(env, t),
                                      f"games ({name})", progress, save_every=_SAVE_EVERY)
                for t in mine:
                    env_name, tt, _, _ = parse_task_id(t)
                    out[t] = f"{env_name}/{tt}/{known[t]}"
    return pd.Series([out[t] for t in ids], index=pd.Index(ids, name="task_id"), name="unit")


def openings(task_ids, env_options: dict | None = None) -> pd.Series:
    """task id → the text its game opens on, '<env>/<task type>/opening-<digest>' (a digest of the
    instruction and the first observation), in the order given: a coarser grouping than `units`. Distinct
    games can open alike (the same first room, the coin elsewhere), and a deterministic agent plays their
    opening the same way, so their outcomes need not be independent; a check that clusters by opening
    asks whether a verdict over games survives that (chapter 11). Other benchmarks: the task id itself.
    Not cached: one reset per task, milliseconds each."""
    ids = list(dict.fromkeys(task_ids))
    out: dict[str, str] = {t: t for t in ids if parse_task_id(t)[0] not in BY_STATE}
    todo = [t for t in ids if t not in out]
    if todo:
        with EnvPool(env_options) as envs:
            for t in todo:
                env_name, tt, _, _ = parse_task_id(t)
                env = envs.get(env_name)
                obs = env.reset(t)
                blob = json.dumps([env.instruction, obs], ensure_ascii=False)
                out[t] = f"{env_name}/{tt}/opening-{hashlib.sha256(blob.encode('utf-8')).hexdigest()[:16]}"
    return pd.Series([out[t] for t in ids], index=pd.Index(ids, name="task_id"), name="opening")


def unit_name(task_ids) -> str:
    """What the units of these tasks are called (`UNIT_NAMES`): "games" for TextWorldExpress tasks,
    "variations" for ScienceWorld, "tasks" for τ²-bench; "units" when the tasks mix benchmarks."""
    names = {UNIT_NAMES.get(parse_task_id(t)[0], "tasks") for t in task_ids}
    return names.pop() if len(names) == 1 else "units"


def unit_counts(unit: pd.Series) -> pd.DataFrame:
    """Per unit: how many of the tasks are it, largest first (numbered 1.. in that order)."""
    counts = unit.value_counts()
    return pd.DataFrame({"unit": counts.index, "tasks": counts.to_numpy()},
                        index=pd.RangeIndex(1, len(counts) + 1, name="game"))
