"""Judge credit against replay credit on the benchmarks' own gold trajectories.

SKILLC credits the steps of successful runs. The benchmarks ship a successful run for every task — the
gold action sequence — so the judge can be checked against the environment on hundreds of candidate
windows without running an agent at all:

    gold_tasks      TRAIN task ids per task type, never the agent's example tasks (train/0, train/1)
    gold_study      per task: the gold trajectory (from a fresh simulator where gold paths depend on
                    history), replayed to check it succeeds; per window (`windows` per trajectory, evenly
                    spread over lengths and positions): open-loop replay credit under both ablations
                    (neutral action, deletion; free), judge credit with the neutral ablation (the paper's),
                    judge credit with the deletion on an evenly spread subset, and closed-loop credit (the
                    agent re-plans after the window; model calls) on another subset
    agreement       Spearman's ρ of two credits, overall and per group, with the cluster bootstrap over
                    trajectories (windows of one trajectory share its judge prefix and its world)
    calibration     mean of one column per bin of another (the judge against the environment)

Records (append-only JSON lines, resumable, refused under other settings — `run.RunDir`):
    <dir>/run.json  trajectories.jsonl  replays.jsonl  judge.jsonl  closed.jsonl
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from ...agent import AgentConfig
from ...analysis import bootstrap_ci, spearman_ci
from ...envs import (
    EnvPool,
    canonical_options,
    parse_task_id,
    parse_task_types,
    repeatable_gold_actions,
    simulator_revisions,
)
from ...llm.backends import backend_fingerprint
from ...run import RunDir
from .. import check_agent
from .credit import (
    ABLATIONS,
    NEUTRAL,
    Candidate,
    closed_loop_credit,
    judge_credit,
    judge_id,
    replay,
    replay_ablation,
    spread,
    window_candidates,
)

FILES = ("trajectories", "replays", "judge", "closed")


@dataclass
class GoldSettings:
    windows: int = 6               # candidate windows per gold trajectory (evenly spread over lengths, positions)
    min_len: int = 1               # window lengths min_len..max_len
    max_len: int = 3
    judge_samples: int = 1
    judged_deletions: int = 0      # windows also judged with the deletion ablation (evenly spread over all)
    closed_loop: int = 0           # windows also replayed closed loop (the agent re-plans; model calls)
    closed_slack: int = 3          # closed-loop agent steps beyond the window and the rest of the gold path
    neutral: str = NEUTRAL
    agent: AgentConfig = field(default_factory=AgentConfig)   # the closed-loop agent (task level)
    # -- the run ----------------------------------------------------------------------------------------
    task_ids: list[str] = field(default_factory=list)        # TRAIN tasks with gold paths (`gold_tasks`)
    env_options: dict = field(default_factory=dict)

    def validate(self) -> GoldSettings:
        window_candidates(0, self.min_len, self.max_len)
        for name in ("windows", "judge_samples"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        for name in ("judged_deletions", "closed_loop", "closed_slack"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 0:
                raise ValueError(f"{name} must be a non-negative integer, got {getattr(self, name)!r}")
        check_agent(self.agent, "task", "the gold study")
        return self


def gold_tasks(task_types, n: int, seed: int = 0, env_options: dict | None = None, skip: int = 2) -> list[str]:
    """`n` TRAIN task ids per task type, drawn with `seed`, never one of the first `skip` (the agent's
    example tasks are train/0 and train/1). A larger `n` extends the same draw."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    ids = []
    with EnvPool(env_options) as envs:
        for env_name, tt in parse_task_types(task_types):
            order = list(range(skip, len(envs.get(env_name).split_ids(tt, "train"))))
            random.Random(f"{seed}/{env_name}/{tt}").shuffle(order)
            ids += [f"{env_name}/{tt}/train/{i}" for i in order[:n]]
    return ids


def gold_windows(n_steps: int, k: int, min_len: int = 1, max_len: int = 3) -> list[Candidate]:
    """At most k windows of a trajectory of n_steps actions, evenly spread over lengths and positions."""
    return spread(window_candidates(n_steps, min_len, max_len), k)


# -- records ------------------------------------------------------------------------------------------------
def _read(path: Path, key) -> dict:
    out = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                out[key(r)] = r            # the last line of a key wins
    return out


def _append(path: Path, row: dict) -> None:
    with path.open("a") as fh:
        fh.write(json.dumps(row) + "\n")
        fh.flush()


def _key(r):
    return (r["task_id"], r["candidate"])


def _judge_key(r):
    return (r["task_id"], r["candidate"], r["how"])


@dataclass
class GoldStudy:
    trajectories: pd.DataFrame     # one row per task: its gold actions and their replayed score
    windows: pd.DataFrame          # one row per candidate window: every credit measured for it


def study_settings(llm, settings: GoldSettings, envs=()) -> dict:
    """What must not change between a gold study and its resumption (`envs`: those of its tasks)."""
    s = settings
    extra = {"simulators": sim} if (sim := simulator_revisions(envs)) else {}
    return json.loads(json.dumps({**extra,
        "judge": {h: judge_id(h, s.judge_samples, s.neutral) for h in ABLATIONS},
        "backend": backend_fingerprint(llm.backend),   # the model, not where it is served
        "seed": llm.seed, "neutral": s.neutral, "closed_slack": s.closed_slack,
        "agent": s.agent.record(),
        "env_options": {k: canonical_options(k, dict(v)) for k, v in s.env_options.items()}},
        sort_keys=True, default=str))


def gold_study(run_dir: str | Path, llm, settings: GoldSettings, *, progress: bool = True) -> GoldStudy:
    """Trajectories → open-loop replays (both ablations) → judge (neutral on every window, deletion on a
    subset) → closed-loop replays (a subset); each stage appends its records as it goes and resumes."""
    settings.validate()
    task_ids, env_options = settings.task_ids, settings.env_options
    if not task_ids:
        raise ValueError("the gold study needs `task_ids`: TRAIN tasks with gold paths (`gold_tasks`)")
    store, run_dir = RunDir(run_dir), Path(run_dir)
    fp = study_settings(llm, settings, {parse_task_id(t)[0] for t in task_ids})
    store.check_settings(fp)
    streams: dict[str, list[str]] = {}
    for t in task_ids:
        env, tt, _, _ = parse_task_id(t)
        streams.setdefault(f"{env}/{tt}", []).append(t)
    paths = {f: run_dir / f"{f}.jsonl" for f in FILES}

    def load():
        return (_read(paths["trajectories"], lambda r: r["task_id"]), _read(paths["replays"], _key),
                _read(paths["judge"], _judge_key), _read(paths["closed"], _key))

    def plan(trajs):
        wins = [(t, c) for t in task_ids if t in trajs and trajs[t]["score"] >= 1.0
                for c in gold_windows(len(trajs[t]["actions"]), settings.windows, settings.min_len, settings.max_len)]
        return wins, set(spread(wins, settings.judged_deletions)), spread(wins, settings.closed_loop)

    def todo(recs):
        trajs, reps, judged, closed = recs
        if any(t not in trajs for t in task_ids):
            return True
        wins, deleted, closed_wins = plan(trajs)
        return (any((t, c.label) not in reps for t, c in wins)
                or any((t, c.label, "neutral") not in judged for t, c in wins)
                or any((t, c.label, "delete") not in judged for t, c in deleted)
                or any((t, c.label) not in closed for t, c in closed_wins))

    if todo(load()):
        with store, EnvPool(env_options) as envs:
            store.check_or_start(fp, streams)
            trajs, reps, judged, closed = load()
            for t in tqdm([t for t in task_ids if t not in trajs], desc="gold trajectories", disable=not progress):
                row = _trajectory(envs, t)
                _append(paths["trajectories"], row)
                trajs[t] = row
            wins, deleted, closed_wins = plan(trajs)
            for t, c in tqdm([w for w in wins if (w[0], w[1].label) not in reps], desc="replays",
                             disable=not progress):
                tr = trajs[t]
                row = {"task_id": t, "candidate": c.label, **{
                    h: replay_ablation(envs.for_task(t), t, tr["actions"], c, tr["score"], h, settings.neutral)
                    for h in ABLATIONS}}
                _append(paths["replays"], row)
                reps[(t, c.label)] = row
            # one trajectory after the other, its windows in order, deletion right after neutral: the
            # server's prompt cache then holds everything up to the end of run A
            calls = [(t, c, h) for t, c in wins for h in ABLATIONS
                     if (h == "neutral" or (t, c) in deleted) and (t, c.label, h) not in judged]
            for t, c, h in tqdm(calls, desc="judge", disable=not progress):
                tr = trajs[t]
                j = judge_credit(llm, tr["instruction"], tr["start"], tr["actions"], c, settings.judge_samples, h,
                                 settings.neutral)
                row = {"task_id": t, "candidate": c.label, "how": h, **j}
                _append(paths["judge"], row)
                judged[(t, c.label, h)] = row
            config = settings.agent
            for t, c in tqdm([w for w in closed_wins if (w[0], w[1].label) not in closed], desc="closed loop",
                             disable=not progress):
                tr = trajs[t]
                row = {"task_id": t, "candidate": c.label, **closed_loop_credit(
                    llm, envs.for_task(t), t, tr["actions"], c, settings.closed_slack, settings.neutral,
                    "neutral", config)}
                _append(paths["closed"], row)
                closed[(t, c.label)] = row
    trajs, reps, judged, closed = load()
    wins, deleted, closed_wins = plan(trajs)
    # only what this plan asked for: records of a larger earlier plan (more deletions judged, more windows
    # replayed closed loop) stay on disk, for a later plan that extends again, but are not reported
    planned_closed = {(t, c.label) for t, c in closed_wins}
    planned_deleted = {(t, c.label) for t, c in deleted}
    judged = {k: r for k, r in judged.items() if k[2] == "neutral" or k[:2] in planned_deleted}
    closed = {k: r for k, r in closed.items() if k in planned_closed}
    return GoldStudy(_trajectory_frame(trajs, task_ids), _window_frame(wins, trajs, reps, judged, closed))


def _trajectory(envs: EnvPool, task_id: str) -> dict:
    """The task's gold actions (from a fresh simulator when its gold paths depend on what ran before, so
    that a re-run draws the same path), replayed in the pool's simulator: their score and the start."""
    env = envs.for_task(task_id)
    actions = repeatable_gold_actions(env, task_id)
    r = replay(env, task_id, actions)
    env_name, tt, _, _ = parse_task_id(task_id)
    return {"task_id": task_id, "env": env_name, "task_type": tt, "instruction": env.instruction, "start": r.start,
            "actions": list(actions), "score": r.score, "ended_at": r.ended_at}


def _trajectory_frame(trajs: dict, task_ids: list[str]) -> pd.DataFrame:
    rows = [{**trajs[t], "n_steps": len(trajs[t]["actions"])} for t in task_ids if t in trajs]
    return pd.DataFrame(rows, columns=["task_id", "env", "task_type", "instruction", "start", "actions", "n_steps",
                                       "score", "ended_at"])


def _window_frame(wins, trajs, reps, judged, closed) -> pd.DataFrame:
    rows = []
    for t, c in wins:
        tr, key = trajs[t], (t, c.label)
        row = {"task_id": t, "env": tr["env"], "task_type": tr["task_type"], "candidate": c.label,
               "start_index": c.indices[0], "length": len(c.indices), "n_steps": len(tr["actions"]),
               "actions": [tr["actions"][i] for i in c.indices], "replay_original": tr["score"]}
        for h in ABLATIONS:
            r = reps.get(key, {}).get(h, {})
            row.update({f"replay_{h}": r.get("credit", np.nan), f"replay_{h}_score": r.get("score", np.nan),
                        f"ends_{h}": r.get("ends_episode", np.nan)})
            j = judged.get((*key, h), {})
            row.update({f"judge_{h}": j.get("credit", np.nan), f"p_orig_{h}": j.get("p_orig", np.nan),
                        f"p_ablated_{h}": j.get("p_ablated", np.nan), f"unusable_{h}": j.get("unusable", np.nan),
                        f"judge_{h}_calls": j.get("calls", 0),
                        f"judge_{h}_prompt_tokens": j.get("prompt_tokens", np.nan),
                        f"judge_{h}_new_prompt_tokens": j.get("new_prompt_tokens", np.nan),
                        f"judge_{h}_completion_tokens": j.get("completion_tokens", np.nan),
                        f"judge_{h}_seconds": j.get("model_seconds", np.nan)})
        cl = closed.get(key, {})
        row.update({"closed_credit": cl.get("credit", np.nan), "closed_budget": cl.get("budget", np.nan),
                    "closed_intact_score": cl.get("intact_score", np.nan),
                    "closed_ablated_score": cl.get("ablated_score", np.nan),
                    "closed_calls": cl.get("intact_calls", 0) + cl.get("ablated_calls", 0),
                    "closed_seconds": cl.get("intact_model_seconds", 0.0) + cl.get("ablated_model_seconds", 0.0),
                    "closed_errors": int(bool(cl.get("intact_error"))) + int(bool(cl.get("ablated_error")))})
        rows.append(row)
    return pd.DataFrame(rows)


# -- analysis -----------------------------------------------------------------------------------------------
def agreement(df: pd.DataFrame, x: str, y: str, by: str | None = None, groups: str = "task_id",
              where: str | None = None, seed: int = 0, n_boot: int = 10_000) -> pd.DataFrame:
    """Spearman's ρ of columns x and y over all rows and (with `by`) per group, each with the cluster
    bootstrap over `groups` (whole trajectories resampled). `where` names a boolean column that keeps rows
    (e.g. the windows whose ablation did not end the episode). One row per subset: subset, n, n_clusters,
    rho, ci_low, ci_high, p, mde (what `spearman_ci` returns)."""
    d = df if where is None else df[df[where].astype(bool)]
    parts = [("all", d)] + (list(d.groupby(by, sort=True)) if by else [])
    rows = []
    for name, g in parts:
        r = spearman_ci(g[x], g[y], groups=g[groups], seed=seed, n_boot=n_boot)
        rows.append({"subset": name, "x": x, "y": y, **r})
    return pd.DataFrame(rows)


def calibration(df: pd.DataFrame, x: str, y: str, edges=(-1.0, -0.6, -0.2, 0.2, 0.6, 1.0),
                seed: int = 0) -> pd.DataFrame:
    """Mean of y per bin of x (bins closed on the right, the first also on the left): bin, n, x_mean,
    y_mean and its percentile-bootstrap interval. A calibrated judge has y_mean ≈ x_mean in every bin."""
    d = df[[x, y]].dropna()
    bins = pd.cut(d[x], list(edges), include_lowest=True)
    rows = []
    for b, g in d.groupby(bins, observed=True):
        mean, lo, hi = bootstrap_ci(g[y], seed=seed)
        rows.append({"bin": str(b), "n": len(g), "x_mean": float(g[x].mean()), "y_mean": mean, "ci_low": lo,
                     "ci_high": hi})
    return pd.DataFrame(rows, columns=["bin", "n", "x_mean", "y_mean", "ci_low", "ci_high"])


__all__ = ["GoldSettings", "gold_tasks", "gold_windows", "GoldStudy", "study_settings", "gold_study", "agreement",
           "calibration"]
