"""The SKILLC pipeline: collect the base agent's runs → credit every candidate of every success (judge
and replay) → macro skills from the highest-credit windows → test conditions (none, the transfer
experiment's subtask-level text skills when given, credit macros as one stream). Every stage resumes."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from ...agent import AgentConfig
from ...envs import EnvPool, require_splits
from ...io import atomic_write_json
from ...run import Condition, collect, run_condition
from ...skills.library import SkillLibrary
from ..breakdown import frozen
from .credit import KINDS, ablate, candidates, judge_credit, replay_score, window_candidates
from .macros import add_macro, macro_skill, make_macro
from .memory import CreditMemory


# -- the pipeline -------------------------------------------------------------------------------------------
@dataclass
class SkillCSettings:
    min_len: int = 1               # candidate windows: lengths min_len..max_len
    max_len: int = 3
    kinds: tuple = KINDS
    max_candidates: int = 12       # per successful trajectory (evenly spread over its candidates)
    judge_samples: int = 2
    credit_source: str = "judge"   # which credit makes macros: "judge" (the paper) or "replay" (ground truth)
    min_credit: float = 0.1
    n_macros: int = 4              # at most this many macros (highest credit first)
    k: int = 3                     # retrieval
    threshold: float = 0.3
    rerank: bool = False

    def validate(self) -> "SkillCSettings":
        if self.credit_source not in ("judge", "replay"):
            raise ValueError(f"unknown credit source {self.credit_source!r}; valid: judge, replay")
        window_candidates(0, self.min_len, self.max_len)
        candidates([], kinds=self.kinds)
        return self


def spread(items: list, n: int) -> list:
    """At most n items, evenly spaced (deterministic)."""
    if len(items) <= n:
        return list(items)
    idx = np.linspace(0, len(items) - 1, n).round().astype(int)
    return [items[i] for i in dict.fromkeys(idx)]


def credit_table(path, llm, env, episodes, settings: SkillCSettings, progress: bool = True):
    """Judge and replay credit of the candidates of every successful episode; one JSON line per candidate,
    appended as it is computed, so an interrupted run resumes."""
    path = Path(path)
    done = {}
    if path.exists():
        for line in path.read_text().splitlines():
            r = json.loads(line)
            done[(r["task_id"], r["candidate"])] = r
    todo = []
    for e in episodes:
        if not e.success or not e.steps:
            continue
        valid = [s for s in e.steps if s.valid]
        cands = spread(candidates(valid, settings.min_len, settings.max_len, settings.kinds), settings.max_candidates)
        todo += [(e, valid, c) for c in cands]
    rows = []
    originals: dict[str, float] = {}
    for e, valid, c in tqdm(todo, desc="credit", disable=not progress):
        key = (e.task_id, c.label)
        if key in done:
            rows.append(done[key])
            continue
        actions = [s.action for s in valid]
        if e.task_id not in originals:
            originals[e.task_id] = replay_score(env, e.task_id, actions)
        j = judge_credit(llm, e.instruction, actions, [s.observation for s in valid], e.success, c,
                         samples=settings.judge_samples)
        r = {"task_id": e.task_id, "task_type": e.task_type, "candidate": c.label, "kind": c.kind,
             "indices": list(c.indices), "actions": [actions[i] for i in c.indices],
             "replay_original": originals[e.task_id],
             "replay_credit": originals[e.task_id] - replay_score(env, e.task_id, ablate(actions, c)),
             "judge_credit": j["credit"], "p_orig": j["p_orig"], "p_ablated": j["p_ablated"], "unusable": j["unusable"]}
        with path.open("a") as fh:
            fh.write(json.dumps(r) + "\n")
        rows.append(r)
    return pd.DataFrame(rows)


def build_library(llm, credits, episodes, settings: SkillCSettings):
    """Macro skills from the highest-credit contiguous windows (≥ 2 actions), duplicates merged."""
    lib = SkillLibrary()
    by_task = {e.task_id: e for e in episodes}
    col = f"{settings.credit_source}_credit"
    pool = credits[(credits["kind"] == "window") & (credits["actions"].map(len) >= 2) & (credits[col] >= settings.min_credit)]
    pool = pool.sort_values([col, "task_id", "candidate"], ascending=[False, True, True])
    log = []
    for _, r in pool.iterrows():
        if len(lib) >= settings.n_macros:
            break
        macro = make_macro(llm, by_task[r.task_id].instruction, list(r.actions))
        if macro is None:
            log.append({"candidate": f"{r.task_id} {r.candidate}", "result": "unusable macro reply"})
            continue
        if macro.binding(list(r.actions)) is None:
            log.append({"candidate": f"{r.task_id} {r.candidate}", "result": "does not reproduce its window",
                        "macro": macro.name})
            continue
        macro.credit = [float(r[col])]
        what = add_macro(lib, macro_skill(macro, lib.new_id("m"), {"source_task": r.task_id, "candidate": r.candidate}))
        log.append({"candidate": f"{r.task_id} {r.candidate}", "result": what, "macro": macro.name})
    return lib, log




CONDITIONS = ("none", "subtask-text", "credit")


@dataclass
class SkillCRun:
    credits: object               # DataFrame: one row per candidate
    library: object               # the macro SkillLibrary
    build_log: list
    test: object                  # DataFrame: one row per test episode and condition
    train_episodes: list


def run_skillc(run_dir, llm, tasks: dict[str, list[str]], agent: dict, settings: SkillCSettings,
               env_options: dict | None = None, workers: int = 1, text_library=None, progress: bool = True) -> SkillCRun:
    """Collect → credit (judge and replay) → macros → test conditions (none, the transfer experiment's
    subtask-level text skills when given, credit macros as one stream). Every stage resumes."""
    settings.validate()
    require_splits(tasks, ("train", "test"), "run_skillc")
    run_dir = Path(run_dir)
    config = AgentConfig(level="task", **agent)
    train = collect(run_dir / "collect", llm, tasks["train"], config, env_options, workers)
    with EnvPool(env_options) as envs:
        credits = credit_table(run_dir / "credits.jsonl", llm, envs.for_task(tasks["train"][0]), train, settings,
                               progress)
    path = run_dir / "library.json"
    if path.exists():
        saved = json.loads(path.read_text())
        library, log = SkillLibrary().load_state(saved["library"]), saved["log"]
    else:
        library, log = build_library(llm, credits, train, settings) if len(credits) else (SkillLibrary(), [])
        atomic_write_json(path, {"library": library.state(), "log": log})
    conditions = [Condition("none", config)]
    if text_library is not None:
        conditions.append(Condition("subtask-text", config, frozen(llm, text_library, settings.k, settings.threshold)))
    conditions.append(Condition("credit", config, lambda: credit_memory(library, settings), stream=True))
    frames = [run_condition(run_dir / "test" / c.name, llm, c, tasks["test"], env_options, workers,
                            desc=f"test: {c.name}").frame for c in conditions]
    return SkillCRun(credits, library, log, pd.concat(frames, ignore_index=True), train)


def credit_memory(library, settings: SkillCSettings):
    """A CreditMemory over a copy of the macro library (its usage statistics change as the stream runs)."""
    return CreditMemory(library.filtered(lambda s: True), k=settings.k, threshold=settings.threshold,
                        rerank=settings.rerank)


__all__ = ["SkillCSettings", "spread", "credit_table", "build_library", "CONDITIONS", "SkillCRun", "run_skillc",
           "credit_memory"]
