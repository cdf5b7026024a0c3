"""The whole task catalogue as text: every task of the benchmarks, named as chapter 05 names a task
(instruction + first observation), so that skills can be scored against thousands of tasks (§6.1).

A first observation needs a simulator reset, so each one is read once per machine and kept in the
per-user cache (`io.cache_dir()/catalogue/`), one file per game, keyed by the package version and the
game's parameters — the only options that change what a reset shows. A second call with the same tasks
starts no simulator at all (the split lists are cached on disk by the env already). Embeddings are cached
by text by the `Embedder`.

Only TextWorldExpress is catalogued. Its first observation is a function of the task (the same seed shows
the same text in a fresh JVM and in any order of resets; 160 resets of the eight games checked) and a reset
takes 1–20 ms, so the 24,000 tasks of its eight games take about two minutes. ScienceWorld is left out:
resetting the same variation again can list the objects of its first room in another order (3 of 12
repeated resets in one JVM; 14 of 72 across a fresh JVM and a reversed order, six task types, 'easy'
simplifications), so a cached text would not be the text an agent sees, and its 7,207 variations cost
0.2–0.9 s a reset. τ²-bench's first observation is the simulated user's first message, written by a model.
"""
from __future__ import annotations

import hashlib
from collections import defaultdict
from importlib.metadata import version

from tqdm.auto import tqdm

from ... import envs as benchmarks  # `benchmarks.ENVS`: the registry as it is when read (`register_env`)
from ...envs.base import SPLITS, check_split, parse_task_id
from ...envs.pool import EnvPool
from ...envs.tasks import TASK_TEXTS, parse_task_types, task_text
from ...io import atomic_write_json, cache_dir, read_json
from ...skills.embeddings import get_embedder
from .utility import scaling, task_sets

CATALOGUED = ("twx",)
LEFT_OUT = {
    "sciworld": "its first observation lists objects in an order that depends on the simulator's random state",
    "tau2": "its first observation is the simulated user's first message, written by a model",
}
_SAVE_EVERY = 1_000     # new first observations between two writes of a game's file


def catalogue_task_types(spec: str, stream: list[str]) -> tuple[list[str], dict[str, str]]:
    """Which task types make the catalogue: (['twx/coin', ...], {env: how many types were left out, why}).

    `spec` is "stream" (the task types of the stream's tasks), "all" (every task type of the stream's
    benchmarks) or a list '<env>/<type>,...'. Types of benchmarks that are not catalogued are left out,
    counted per benchmark with the reason.
    """
    if spec == "stream":
        types = list(dict.fromkeys("/".join(parse_task_id(t)[:2]) for t in stream))
    elif spec == "all":
        envs = dict.fromkeys(parse_task_id(t)[0] for t in stream)
        types = [f"{e}/{tt}" for e in envs for tt in benchmarks.ENVS[e].TASK_TYPES]
    else:
        types = [f"{e}/{tt}" for e, tt in parse_task_types(spec)]
    kept = [t for t in types if t.split("/")[0] in CATALOGUED]
    left: dict[str, list[str]] = defaultdict(list)
    for t in types:
        if t not in kept:
            left[t.split("/")[0]].append(t)
    return kept, {e: f"{len(ts)} task type(s) left out: {LEFT_OUT.get(e, 'not catalogued')}" for e, ts in left.items()}


def parse_splits(splits: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    items = splits.split(",") if isinstance(splits, str) else list(splits)
    out = tuple(check_split(s.strip()) for s in items if s.strip())
    if not out:
        raise ValueError(f"no split given; valid splits: {', '.join(SPLITS)}")
    return out


def catalogue_task_ids(task_types: list[str] | str, splits=SPLITS, n: int = 0,
                       env_options: dict | None = None) -> list[str]:
    """Task ids of the catalogue: per task type and split the first `n` tasks of the official split
    (0: all of them), in type, split, index order. Split sizes come from the env's on-disk split lists."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ValueError(f"n must be a non-negative integer (0: every task), got {n!r}")
    ids = []
    with EnvPool(env_options) as envs:
        for env_name, tt in parse_task_types(task_types):
            for split in parse_splits(splits):
                count = len(envs.get(env_name).split_ids(tt, split))
                ids += [f"{env_name}/{tt}/{split}/{i}" for i in range(min(n, count) if n else count)]
    return ids


def _cache_file(env, task_type: str):
    """One file per game, its name keyed by the package version and the game's parameter string."""
    params = env.game_params.get(task_type, "")
    tag = hashlib.sha256(params.encode()).hexdigest()[:10]
    return cache_dir() / "catalogue" / f"{env.name}-{version(env._PACKAGE)}-{task_type}-{tag}.json", params


def _read(path) -> dict[str, list[str]]:
    return read_json(path, "catalogue cache")["tasks"] if path.exists() else {}


def _write(path, env, task_type: str, params: str, new: dict[str, list[str]]) -> None:
    # Merge with what is on disk now, so two processes filling one file lose nothing but time.
    tasks = {**_read(path), **new}
    atomic_write_json(path, {"env": env.name, "package": f"{env._PACKAGE} {version(env._PACKAGE)}",
                             "task_type": task_type, "game_params": params,
                             "tasks": dict(sorted(tasks.items()))})


def first_observations(task_ids: list[str], env_options: dict | None = None,
                       progress: bool = False) -> dict[str, tuple[str, str]]:
    """task id → (instruction, first observation), read from the per-user cache; only the tasks not
    cached yet are reset (and then cached). Raises ValueError for a benchmark that is not catalogued."""
    by_type: dict[tuple[str, str], list[str]] = defaultdict(list)
    for t in dict.fromkeys(task_ids):
        env_name, tt, _, _ = parse_task_id(t)
        if env_name not in CATALOGUED:
            why = LEFT_OUT.get(env_name, "not catalogued")
            raise ValueError(f"{t}: only {', '.join(CATALOGUED)} tasks can be catalogued ({env_name}: {why})")
        by_type[env_name, tt].append(t)
    out: dict[str, tuple[str, str]] = {}
    with EnvPool(env_options) as envs:
        for (env_name, tt), ids in by_type.items():
            env = envs.get(env_name)
            path, params = _cache_file(env, tt)
            known = _read(path)
            key = {t: t.split("/", 2)[2] for t in ids}           # '<split>/<index>'
            todo = [t for t in ids if key[t] not in known]
            new: dict[str, list[str]] = {}
            for t in tqdm(todo, desc=f"first observations ({env_name}/{tt})", disable=not progress or not todo):
                obs = env.reset(t)
                new[key[t]] = [env.instruction, obs]
                if len(new) % _SAVE_EVERY == 0:
                    _write(path, env, tt, params, new)
            if new:
                _write(path, env, tt, params, new)
                known.update(new)
            out.update({t: tuple(known[key[t]]) for t in ids})
    return {t: out[t] for t in dict.fromkeys(task_ids)}


def catalogue_texts(task_ids: list[str], env_options: dict | None = None, kind: str = "instruction+observation",
                    progress: bool = False) -> dict[str, str]:
    """task id → the text that stands for the task (`envs.task_texts`' kinds), from the cached first
    observations: the same text `task_texts` reads from a live reset."""
    if kind not in TASK_TEXTS:
        raise ValueError(f"unknown task text {kind!r}; valid: {', '.join(TASK_TEXTS)}")
    return {t: task_text(ins, obs, kind) for t, (ins, obs) in first_observations(task_ids, env_options,
                                                                                 progress).items()}


def catalogue_scaling(skills, stream_texts: list[str], types: str, splits: str, n: int, env_options: dict,
                      stream_ids: list[str], kind: str = "instruction+observation", sizes=(500, 2_000),
                      tau: float = 0.1, n_pairs: int = 10_000, seed: int = 0) -> dict:
    """Every skill scored against task sets of growing N up to the whole catalogue (`utility.task_sets`,
    `utility.scaling`): {"types", "left_out", "n_tasks", "n_texts", "set_sizes", "scaled"}. The
    catalogue's texts stay out of the chapter's vector record (`Embedder.unrecorded`): this result is
    what a chapter keeps instead (`Lab.stored`)."""
    cat_types, left_out = catalogue_task_types(types, stream_ids)
    ids = catalogue_task_ids(cat_types, splits, n, env_options)
    catalogue = catalogue_texts(ids, env_options, kind=kind)
    sets = task_sets(stream_texts, list(catalogue.values()), sizes, seed=seed)
    with get_embedder().unrecorded():
        scaled = scaling(skills, sets, tau=tau, n_pairs=n_pairs, seed=seed)
    return {"types": list(cat_types), "left_out": dict(left_out), "n_tasks": len(catalogue),
            "n_texts": len(set(catalogue.values())), "set_sizes": {k: len(v) for k, v in sets.items()},
            "scaled": scaled}


__all__ = ["CATALOGUED", "LEFT_OUT", "catalogue_task_types", "parse_splits", "catalogue_task_ids", "first_observations",
           "catalogue_texts", "catalogue_scaling"]
