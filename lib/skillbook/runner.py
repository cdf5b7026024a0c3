"""Task streams: ordered tasks solved in sequence with one shared memory, checkpointed after every task.

    streams = {"s0": ["twx/coin/test/0", "twx/coin/test/1", ...], ...}
    run_streams(run_dir, streams, make_agent, make_env, workers=2)

Independent streams run concurrently (up to `workers`, each worker thread with its own simulators),
sharing the model server's parallel slots. After each task a stream's file
`<run_dir>/streams/<stream>.json` is replaced atomically with all its episode records so far and
its memory state; a killed run resumes from there with no task lost or done twice (the task that
was in flight is re-run, its model calls answered by the response cache).
"""
from __future__ import annotations

import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Callable

import pandas as pd
from tqdm.auto import tqdm

from .agents import Agent
from .envs import Env, make_env, parse_task_id
from .io import atomic_write_json, atomic_write_text
from .records import Episode

STREAM_FORMAT = 1


def validate_streams(streams: dict[str, list[str]], env_options: dict | None = None) -> None:
    """Check every task id before any model call: unknown envs, types, splits or indices fail here."""
    if not streams or not any(streams.values()):
        raise ValueError("no tasks to run: every stream is empty")
    envs: dict[str, Env] = {}
    try:
        for name, ids in streams.items():
            if not isinstance(ids, (list, tuple)):
                raise ValueError(f"stream {name!r} must be a list of task ids, got {type(ids).__name__}")
            for task_id in ids:
                env_name = parse_task_id(task_id)[0]
                if env_name not in envs:
                    envs[env_name] = make_env(env_name, **(env_options or {}).get(env_name, {}))
                envs[env_name].task(task_id)
    finally:
        for e in envs.values():
            e.close()


class _Workers(threading.local):
    """One set of simulators per worker thread (a JVM is not shared between concurrent episodes)."""

    def __init__(self):
        self.envs: dict[str, Env] = {}


def run_streams(run_dir: str | Path, streams: dict[str, list[str]], make_agent: Callable[[], Agent],
                env_options: dict | None = None, workers: int = 1, progress: bool = True,
                desc: str = "tasks") -> pd.DataFrame:
    """Run (or resume) every stream; return one row per episode (see `Episode.row`)."""
    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive integer, got {workers!r}")
    validate_streams(streams, env_options)
    probe = make_agent()  # agent parameters are checked here too, before any stream makes a model call
    if getattr(probe.llm, "deterministic", False):
        workers = 1   # one request in flight and one order of requests: a live re-run gives the same records
    config = _fingerprint(probe, env_options)
    run_dir = Path(run_dir)
    (run_dir / "streams").mkdir(parents=True, exist_ok=True)
    local = _Workers()
    opened: list[Env] = []
    lock = threading.Lock()
    total = sum(len(v) for v in streams.values())
    done_before = sum(len(_load(run_dir, s)["episodes"]) for s in streams)
    bar = tqdm(total=total, initial=done_before, desc=desc, disable=not progress, smoothing=0)
    scores: list[float] = [e["score"] for s in streams for e in _load(run_dir, s)["episodes"]]

    def env_for(task_id: str) -> Env:
        name = parse_task_id(task_id)[0]
        if name not in local.envs:
            local.envs[name] = make_env(name, **(env_options or {}).get(name, {}))
            with lock:
                opened.append(local.envs[name])
        return local.envs[name]

    def run_one(stream: str, ids: list[str]) -> None:
        state = _load(run_dir, stream)
        if state["tasks"] and state["tasks"] != ids[: len(state["tasks"])]:
            raise ValueError(f"{run_dir}/streams/{stream}.json was recorded for other tasks; "
                             "use a new run directory (e.g. another profile name) or delete it")
        if state["tasks"] and state.get("config") != config:
            changed = sorted(k for k in set(config) | set(state.get("config") or {})
                             if config.get(k) != (state.get("config") or {}).get(k))
            raise ValueError(f"{run_dir}/streams/{stream}.json was recorded with other settings ({', '.join(changed)}); "
                             "resume only with the same settings, or use a new run directory (e.g. another profile name)")
        state["config"] = config
        agent = make_agent()
        agent.memory.load_state(state["memory"])
        for position in range(len(state["episodes"]), len(ids)):
            task_id = ids[position]
            try:
                env = env_for(task_id)
                if hasattr(env, "bind_llm"):
                    env.bind_llm(agent.llm)   # τ²-bench's simulated user runs on the agent's backend and cache
                ep = agent.run(env, task_id, stream=stream, position=position)
            except Exception as e:  # noqa: BLE001 — one task's crash must not end the run
                t = parse_task_id(task_id)
                ep = Episode(task_id=task_id, env=t[0], task_type=t[1], split=t[2], agent=agent.config.level,
                             memory=agent.memory.name, stream=stream, position=position,
                             error=f"{type(e).__name__}: {e}", stop_reason="error")
            state["episodes"].append(ep.to_dict())
            state["tasks"] = ids[: position + 1]
            state["memory"] = agent.memory.state()
            atomic_write_json(run_dir / "streams" / f"{stream}.json", state)
            with lock:
                scores.append(ep.score)
                bar.update(1)
                bar.set_postfix(score=f"{sum(scores) / len(scores):.2f}", refresh=False)

    started, t0 = time.strftime("%Y-%m-%dT%H:%M:%S"), time.perf_counter()
    try:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="stream") as pool:
            futures = [pool.submit(run_one, s, list(ids)) for s, ids in streams.items()]
            for f in as_completed(futures):
                f.result()
    finally:
        bar.close()
        for e in opened:
            e.close()
        _log_session(run_dir, started, time.perf_counter() - t0, workers, streams, done_before)
    episodes = load_episodes(run_dir)
    # the flat form for other tools: one JSON line per episode (the stream files stay the checkpoints)
    atomic_write_text(run_dir / "episodes.jsonl", "".join(json.dumps(e.to_dict()) + "\n" for e in episodes))
    return episodes_frame(episodes)


def _fingerprint(agent: Agent, env_options: dict | None) -> dict:
    """What must not change between a run and its resumption: agent config, model, seed, memory, envs."""
    from dataclasses import asdict

    from .envs import canonical_options
    envs = {name: canonical_options(name, opts) for name, opts in (env_options or {}).items()}
    return json.loads(json.dumps({"agent": asdict(agent.config), "backend": agent.llm.backend, "seed": agent.llm.seed,
                                  "memory": agent.memory.name, "env_options": envs}, sort_keys=True))


# Names this process in sessions.jsonl, so live time is measured per execution (see live_minutes).
EXECUTION = f"{os.getpid()}-{time.time_ns()}"


def _log_session(run_dir: Path, started: str, elapsed: float, workers: int, streams: dict, done_before: int) -> None:
    """Append how long this invocation took and how many episodes it ran (a resumed or replayed run adds a line)."""
    total = sum(len(_load(run_dir, s)["episodes"]) for s in streams)
    line = {"started": started, "elapsed_s": round(elapsed, 1), "workers": workers,
            "episodes_run": total - done_before, "episodes_total": total, "execution": EXECUTION}
    with open(run_dir / "sessions.jsonl", "a") as f:
        f.write(json.dumps(line) + "\n")


def run_sessions(run_dir: str | Path) -> pd.DataFrame:
    """The invocations of a run: when, how long, how many episodes existed before and after."""
    path = Path(run_dir) / "sessions.jsonl"
    return pd.read_json(path, lines=True) if path.exists() else pd.DataFrame()


def live_minutes(sessions: pd.DataFrame) -> float:
    """Wall-clock minutes that ran episodes: per execution (one process, e.g. one papermill run of a
    chapter), from its first to its last invocation that ran episodes — so the work between stages
    counts and overlaps count once —, summed over executions (a later resume adds its own span, not
    the hours in between). Sessions recorded before executions were named count as one execution."""
    live = sessions[sessions["episodes_run"] > 0] if len(sessions) else sessions
    if not len(live):
        return 0.0
    start = pd.to_datetime(live["started"])
    end = start + pd.to_timedelta(live["elapsed_s"], unit="s")
    execution = live["execution"].fillna("") if "execution" in live else pd.Series("", index=live.index)
    spans = pd.DataFrame({"start": start, "end": end, "execution": execution}).groupby("execution")
    return float(sum((g.end.max() - g.start.min()).total_seconds() for _, g in spans) / 60)


def _load(run_dir: Path, stream: str) -> dict:
    path = Path(run_dir) / "streams" / f"{stream}.json"
    if path.exists():
        state = json.loads(path.read_text())
        if state.get("format") != STREAM_FORMAT:
            raise ValueError(f"{path}: unknown record format {state.get('format')!r}")
        return state
    return {"format": STREAM_FORMAT, "stream": stream, "tasks": [], "episodes": [], "memory": {}}


def load_episodes(run_dir: str | Path) -> list[Episode]:
    """Every recorded episode under a run directory, in stream order."""
    out = []
    for path in sorted((Path(run_dir) / "streams").glob("*.json")):
        out += [Episode.from_dict(e) for e in json.loads(path.read_text())["episodes"]]
    return out


def episodes_frame(episodes: list[Episode]) -> pd.DataFrame:
    return pd.DataFrame([e.row() for e in episodes])


def independent_streams(task_ids: list[str], prefix: str = "t") -> dict[str, list[str]]:
    """Without memory every task is its own stream, so all of them may run concurrently."""
    return {f"{prefix}{i:04d}": [t] for i, t in enumerate(task_ids)}
