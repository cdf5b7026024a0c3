"""The SKILLC pipeline: collect the base agent's runs → credit every candidate of every success (judge
and replay) → macro skills from the highest-credit windows → test conditions (none, the transfer
experiment's subtask-level text skills when given, credit macros as one stream). Every stage resumes."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from tqdm.auto import tqdm

from ...agent import AgentConfig
from ...envs import EnvPool, require_splits
from ...io import atomic_write_json
from ...memory import content_hash
from ...run import Condition, collect, run_condition
from ...skills.library import THRESHOLD, SkillLibrary
from .. import check_agent
from ..breakdown import frozen, imported_library, transfer_library
from .credit import KINDS, candidates, judge_credit, judge_id, replay, replay_ablation, spread, window_candidates
from .macros import add_macro, macro_skill, make_macro
from .memory import CreditMemory

# which credit makes macros: the judge's (the paper) or replay's (ground truth); the book's pre-flight
# checks chapter 08's `credit_source` against it (`book.parameters`)
CREDIT_SOURCES = ("judge", "replay")


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
    threshold: float = THRESHOLD
    rerank: bool = False
    # -- the run ----------------------------------------------------------------------------------------
    tasks: dict[str, list[str]] = field(default_factory=dict)   # {"train": [...], "test": [...]}
    agent: AgentConfig = field(default_factory=AgentConfig)     # the task-level agent
    env_options: dict = field(default_factory=dict)
    transfer_run: str = ""         # a transfer run's folder: its subtask-level text skills are a test condition
    skills_folder: str = ""        # Agent Skills (SKILL.md): one more test condition, `skills`

    def validate(self) -> SkillCSettings:
        if self.credit_source not in CREDIT_SOURCES:
            raise ValueError(f"unknown credit source {self.credit_source!r}; "
                             f"valid: {', '.join(CREDIT_SOURCES)}")
        window_candidates(0, self.min_len, self.max_len)
        candidates([], kinds=self.kinds)
        return self

    def validate_run(self) -> SkillCSettings:
        """The knobs and the run (splits, the agent) — before any model time."""
        self.validate()
        require_splits(self.tasks, ("train", "test"), "run_skillc")
        check_agent(self.agent, "task", "SKILLC")
        return self


def credit_table(path, llm, envs, episodes, settings: SkillCSettings, progress: bool = True):
    """Judge and replay credit of the candidates of every successful episode; one JSON line per candidate,
    appended as it is computed, so an interrupted run resumes. `envs` is an EnvPool (each episode is
    replayed in its own benchmark) or one env.

    Per candidate: replay credit with the neutral ablation (open loop), `ends_episode` when that ablation
    ended the episode at once (a saturated reference, `credit.replay_ablation`), judge credit (the judge
    sees both runs' actions, not their outcomes) and what the judge calls cost. Lines recorded with another
    judge (`judge_id`) are refused: the file would mix two judges."""
    path = Path(path)
    env_for = envs.for_task if hasattr(envs, "for_task") else (lambda task_id: envs)
    jid = judge_id("neutral", settings.judge_samples)
    done = {}
    if path.exists():
        for line in path.read_text().splitlines():
            r = json.loads(line)
            if r.get("judge") != jid:
                old = r.get("judge") or "none, the judge that was told run A's outcome"
                raise ValueError(f"{path} holds judge credit from another judge (id {old}; now {jid}); move the "
                                 "file away to recompute it, or use a new run directory")
            done[(r["task_id"], r["candidate"])] = r
    todo = []
    for e in episodes:
        if not e.success or not e.steps:
            continue
        valid = [s for s in e.steps if s.valid]
        cands = spread(candidates(valid, settings.min_len, settings.max_len, settings.kinds), settings.max_candidates)
        todo += [(e, valid, c) for c in cands]
    rows = []
    originals: dict[str, object] = {}
    for e, valid, c in tqdm(todo, desc="credit", disable=not progress):
        key = (e.task_id, c.label)
        if key in done:
            rows.append(done[key])
            continue
        env = env_for(e.task_id)
        actions = [s.action for s in valid]
        if e.task_id not in originals:
            originals[e.task_id] = replay(env, e.task_id, actions)
        base = originals[e.task_id]
        rep = replay_ablation(env, e.task_id, actions, c, base.score)
        j = judge_credit(llm, e.instruction, base.start, actions, c, samples=settings.judge_samples)
        r = {"task_id": e.task_id, "task_type": e.task_type, "candidate": c.label, "kind": c.kind,
             "indices": list(c.indices), "actions": [actions[i] for i in c.indices],
             "replay_original": base.score, "replay_credit": rep["credit"], "ends_episode": rep["ends_episode"],
             "replay_ended_at": rep["ended_at"], "judge_credit": j["credit"], "p_orig": j["p_orig"],
             "p_ablated": j["p_ablated"], "unusable": j["unusable"], "judge": j["judge"],
             "judge_prompt_tokens": j["prompt_tokens"], "judge_new_prompt_tokens": j["new_prompt_tokens"],
             "judge_completion_tokens": j["completion_tokens"], "judge_seconds": j["model_seconds"]}
        with path.open("a") as fh:
            fh.write(json.dumps(r) + "\n")
        rows.append(r)
    return pd.DataFrame(rows)


def build_library(llm, credits, episodes, settings: SkillCSettings):
    """Macro skills from the highest-credit contiguous windows (≥ 2 actions), duplicates merged."""
    lib = SkillLibrary()
    by_task = {e.task_id: e for e in episodes}
    col = f"{settings.credit_source}_credit"
    pool = credits[(credits["kind"] == "window") & (credits["actions"].map(len) >= 2)
                   & (credits[col] >= settings.min_credit)]
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




def library_source(credits, settings: SkillCSettings) -> str:
    """A digest of what a macro library is built from: the credits and the settings that choose windows."""
    col = f"{settings.credit_source}_credit"
    rows = [] if not len(credits) else credits[["task_id", "candidate", col]].astype(str).values.tolist()
    return content_hash({"credits": rows, "credit_source": settings.credit_source, "min_credit": settings.min_credit,
                         "n_macros": settings.n_macros})


CONDITIONS = ("none", "subtask-text", "skills", "credit")


@dataclass
class SkillCRun:
    credits: object               # DataFrame: one row per candidate
    library: object               # the macro SkillLibrary
    build_log: list
    test: object                  # DataFrame: one row per test episode and condition
    train_episodes: list


def run_skillc(run_dir: str | Path, llm, settings: SkillCSettings, *, workers: int = 1,
               progress: bool = True) -> SkillCRun:
    """Collect → credit (judge and replay) → macros → test conditions (none, the transfer run's
    subtask-level text skills when `settings.transfer_run` holds them, a folder of Agent Skills when
    `settings.skills_folder` names one, credit macros as one stream). Every stage resumes."""
    s = settings.validate_run()
    run_dir = Path(run_dir)
    tasks, env_options, config = s.tasks, s.env_options, s.agent
    text_library = transfer_library(s.transfer_run, "subtask-text") if s.transfer_run else None
    skills_library = imported_library(s.skills_folder) if s.skills_folder else None
    train = collect(run_dir / "collect", llm, tasks["train"], config, env_options, workers)
    with EnvPool(env_options) as envs:
        credits = credit_table(run_dir / "credits.jsonl", llm, envs, train, s, progress)
    path = run_dir / "library.json"
    source = library_source(credits, s)
    if path.exists():
        saved = json.loads(path.read_text())
        if saved.get("source") != source:
            raise ValueError(f"{path} was built from other credits or settings than these (the credits, "
                             "credit_source, min_credit or n_macros changed); move it away to "
                             "rebuild it, or use a new run directory")
        library, log = SkillLibrary().load_state(saved["library"]), saved["log"]
    else:
        library, log = build_library(llm, credits, train, s) if len(credits) else (SkillLibrary(), [])
        atomic_write_json(path, {"library": library.state(), "log": log, "source": source})
    conditions = [Condition("none", config)]
    if text_library is not None:
        conditions.append(Condition("subtask-text", config, frozen(llm, text_library, s.k, s.threshold)))
    if skills_library is not None:
        conditions.append(Condition("skills", config, frozen(llm, skills_library, s.k, s.threshold)))
    conditions.append(Condition("credit", config, lambda: credit_memory(library, s), stream=True))
    frames = [run_condition(run_dir / "test" / c.name, llm, c, tasks["test"], env_options, workers,
                            desc=f"test: {c.name}").frame for c in conditions]
    return SkillCRun(credits, library, log, pd.concat(frames, ignore_index=True), train)


def credit_memory(library, settings: SkillCSettings):
    """A CreditMemory over a copy of the macro library (its usage statistics change as the stream runs)."""
    return CreditMemory(library.filtered(lambda s: True), k=settings.k, threshold=settings.threshold,
                        rerank=settings.rerank)


__all__ = ["SkillCSettings", "spread", "credit_table", "build_library", "library_source", "CONDITIONS",
           "CREDIT_SOURCES", "SkillCRun", "run_skillc", "credit_memory"]
