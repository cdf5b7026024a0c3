"""Task streams: ordered tasks solved in sequence with one shared memory, recorded as they end.

    streams = {"s0": ["twx/coin/test/0", "twx/coin/test/1", ...], ...}
    run_streams(run_dir, streams, make_agent, env_options, workers=1)

Every task id is checked and the run's settings are compared with what the directory recorded before
any model call. Streams run one after the other, or concurrently in worker threads when the model is
not asked to be deterministic (each worker with its own simulators) — or, with `executor` "ray" (or
SKILLBOOK_EXECUTOR=ray), on Ray workers that run the episodes while this process alone records them
(`run.distributed`). After each episode its record is
appended to the run's episode log and the stream's memory state is saved (`run.store`); a killed run
resumes from there, re-running only the episode that was in flight, whose model calls the response
cache answers.

Infrastructure errors — a simulator that died or hung, a model server that failed after its restart,
a code-skill sandbox that broke, any exception of ours — are not outcomes of the agent: the episode is
logged in `errors.jsonl`, retried once at once, and if it fails again its stream stops there (a
memory stream cannot skip a task) and the run ends with `IncompleteRun` after the other streams are
done; the next invocation retries it. They never enter the records that tables are computed from.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import cast

import pandas as pd
from tqdm.auto import tqdm

from ..agent import Agent
from ..envs import EnvPool, parse_task_id
from ..records import Episode
from .distributed import executor_from_env, parse_executor, run_distributed
from .episode import attempt_episode, settings_of  # noqa: F401 (settings_of: re-exported)
from .store import RecordError, RunDir


class IncompleteRun(RuntimeError):
    """Some episodes ended in infrastructure errors; run again to retry them (nothing else is re-run)."""


class Interrupted(KeyboardInterrupt):
    """The run was stopped (Ctrl-C, a Jupyter interrupt); what finished is recorded."""


def interruptible() -> None:
    """Let Ctrl-C and a background study's `stop` (SIGINT) end this process's runs within one step, however
    it was started. A shell starts a background command (`make ceiling-calibrate &`, `nohup … &`) with
    SIGINT ignored and Python keeps it ignored, so such a run could only be killed, losing its unsaved
    answers (the real case: a calibration started that way ignored SIGINT). Called by the command lines
    that run studies; a notebook's kernel keeps its own handler."""
    if threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def validate_streams(streams: dict[str, list[str]], env_options: dict | None = None) -> None:
    """Check every task id before any model call: unknown envs, types, splits or indices fail here."""
    if not isinstance(streams, dict) or not streams or not any(streams.values()):
        raise ValueError("no tasks to run: every stream is empty")
    with EnvPool(env_options) as envs:
        for name, ids in streams.items():
            if not isinstance(ids, (list, tuple)):
                raise ValueError(f"stream {name!r} must be a list of task ids, got {type(ids).__name__}")
            for task_id in ids:
                envs.for_task(task_id).task(task_id)


def run_streams(run_dir: str | Path, streams: dict[str, list[str]], make_agent: Callable[[], Agent],
                env_options: dict | None = None, workers: int = 1, progress: bool = True,
                desc: str = "tasks", mode: str = "stream", retries: int = 1, executor=None) -> pd.DataFrame:
    """Run (or resume) every stream; return one row per recorded episode of these streams.

    `executor`: None (SKILLBOOK_EXECUTOR, else threads), "threads", "ray", or an executor object such
    as `RayExecutor(address, actors)`; it decides where episodes run, never what is recorded."""
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise ValueError(f"workers must be a positive integer, got {workers!r}")
    if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
        raise ValueError(f"retries must be a non-negative integer, got {retries!r}")
    executor = executor_from_env() if executor is None else (
        parse_executor(executor) if isinstance(executor, str) else executor)
    validate_streams(streams, env_options)
    streams = {name: list(ids) for name, ids in streams.items()}
    probe = make_agent()  # agent parameters are checked here too, before any stream makes a model call
    if getattr(probe.llm, "deterministic", False):
        workers = 1   # one request in flight and one order of requests: a live re-run gives the same records
    store = RunDir(run_dir)
    used = sorted({parse_task_id(t)[0] for ids in streams.values() for t in ids})
    settings = settings_of(probe, env_options, mode, used)
    store.check_settings(settings)
    recorded = _recorded(store, streams)
    todo = {s: ids for s, ids in streams.items() if len(recorded[s]) < len(ids)}
    if not todo:   # a replay: read-only, nothing is locked, logged or written
        total = sum(len(v) for v in streams.values())
        # the finished bar a live run ends with, so that a replayed chapter reads as the live one did
        tqdm(total=total, initial=total, desc=desc, disable=not progress).close()
        return episodes_frame(load_episodes(run_dir, streams))
    with store:
        store.check_or_start(settings, streams)
        recorded = _recorded(store, streams)   # again, under the lock
        total = sum(len(v) for v in streams.values())
        done_before = sum(len(v) for v in recorded.values())
        bar = tqdm(total=total, initial=done_before, desc=desc, disable=not progress, smoothing=0)
        stop = threading.Event()
        failed: dict[str, str] = {}
        lock = threading.Lock()
        local = threading.local()
        pools: list[EnvPool] = []

        def pool() -> EnvPool:
            if not hasattr(local, "pool"):
                local.pool = EnvPool(env_options)
                with lock:
                    pools.append(local.pool)
            return local.pool

        def run_stream(stream: str, ids: list[str]) -> None:
            agent = make_agent()
            agent.stop = stop
            after, state = store.memory_state(stream)
            agent.memory.load_state(state)
            for position in range(len(recorded[stream]), len(ids)):
                if stop.is_set():
                    return
                ep = None
                for attempt in range(retries + 1):
                    ep = attempt_episode(agent, pool(), stream, position, ids[position])
                    if not ep.error:
                        break
                    store.log_error(stream=stream, position=position, task_id=ids[position], attempt=attempt + 1,
                                    error=ep.error)
                    agent = make_agent()   # a fresh memory object, reloaded from the last saved state
                    agent.stop = stop
                    agent.memory.load_state(store.memory_state(stream)[1])
                assert ep is not None          # retries >= 0 (checked above): the loop ran
                if ep.error:
                    with lock:
                        failed[stream] = f"{ids[position]}: {ep.error}"
                    return
                store.append_episode(ep)
                new_state = agent.memory.state()
                if new_state or after:
                    store.save_memory(stream, position + 1, new_state)
                    after = position + 1
                with lock:
                    bar.update(1)

        started, t0 = time.strftime("%Y-%m-%dT%H:%M:%S"), time.perf_counter()
        session: dict = {}
        try:
            if executor is not None:
                def recorded_one() -> None:
                    bar.update(1)
                lost, actors = run_distributed(executor, store, todo, recorded, make_agent, probe, env_options,
                                               settings, mode, workers, retries, recorded_one, envs=used)
                failed.update(lost)
                session = {"executor": "ray", "actors": actors}
            elif workers == 1:
                for s, ids in todo.items():
                    run_stream(s, ids)
            else:
                with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="stream") as ex:
                    futures = [ex.submit(run_stream, s, ids) for s, ids in todo.items()]
                    try:
                        for f in as_completed(futures):
                            f.result()
                    except BaseException:
                        stop.set()   # the other workers stop within one agent step
                        raise
        except KeyboardInterrupt:
            stop.set()
            raise Interrupted(f"stopped; finished episodes are recorded in {run_dir}, run again to resume") from None
        finally:
            bar.close()
            for p in pools:
                p.close()
            ran = sum(len(v) for v in _recorded(store, streams).values()) - done_before
            if ran:
                store.log_session({"started": started, "elapsed_s": round(time.perf_counter() - t0, 1),
                                   "workers": workers, "episodes_run": ran, "episodes_total": total,
                                   "execution": EXECUTION, **session})
    if failed:
        raise IncompleteRun(f"{len(failed)} stream(s) stopped at an infrastructure error (details in "
                            f"{Path(run_dir) / 'errors.jsonl'}); run again to retry them: "
                            + "; ".join(f"{s} at {e}" for s, e in sorted(failed.items())[:3]))
    episodes = load_episodes(run_dir, streams)
    if len(episodes) < total:   # no episode failed, so each must be recorded: fewer means records were lost
        raise RecordError(f"only {len(episodes)} of {total} episodes are recorded in {run_dir} after a run "
                          "in which none failed: records were lost (files removed from its episodes/ while "
                          "it ran, or a fault of the record store); do not use these results (a run again "
                          "runs the missing ones)")
    return episodes_frame(episodes)


def _recorded(store: RunDir, streams: dict[str, list[str]]) -> dict[str, list[dict]]:
    """Per stream, its recorded episodes in order: positions 0.. without gaps, only for the requested task
    ids, and for a memory stream only as far as its saved memory state goes."""
    got = store.episode_dicts()
    out = {}
    for s, ids in streams.items():
        limit = len(ids)
        if (store.path / "memory" / f"{s}.json").exists():
            limit = min(limit, store.memory_state(s)[0])
        eps = []
        for position in range(limit):
            d = got.get((s, position))
            if d is None or d.get("task_id") != ids[position]:
                break
            eps.append(d)
        out[s] = eps
    return out


# Names this process in sessions.jsonl, so live time is measured per execution (see live_minutes).
EXECUTION = f"{os.getpid()}-{time.time_ns()}"


def run_sessions(run_dir: str | Path) -> pd.DataFrame:
    """The invocations of a run that ran episodes: when, how long, how many."""
    path = Path(run_dir) / "sessions.jsonl"
    return pd.read_json(path, lines=True) if path.exists() and path.stat().st_size else pd.DataFrame()


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


def sittings(root: str | Path) -> pd.DataFrame:
    """Per execution (a sitting: one process that ran episodes) of every run directory under `root`: when
    it started, its live minutes (`live_minutes`) and the episodes it ran. What else loaded the machine is
    not recorded: a chapter that knows it says so beside the execution id."""
    paths = sorted(Path(root).rglob("sessions.jsonl"))
    frames = [run_sessions(p.parent) for p in paths]
    ses = pd.concat([f for f in frames if len(f)], ignore_index=True) if any(len(f) for f in frames) else None
    if ses is None:
        return pd.DataFrame(columns=["execution", "started", "live_min", "episodes"])
    ses["execution"] = ses["execution"].fillna("") if "execution" in ses else ""
    rows = [{"execution": x, "started": pd.to_datetime(g.started).min(), "live_min": live_minutes(g),
             "episodes": int(g.episodes_run.sum())} for x, g in ses.groupby("execution", sort=False)]
    return pd.DataFrame(rows).sort_values("started", ignore_index=True)


def stage_costs(root: str | Path) -> pd.DataFrame:
    """Per stage (the first folder below `root` that holds run directories, e.g. upstream, masks, test):
    the episodes that made at least one live model call, their wall seconds (min, median, max), their live
    calls and the model seconds per live call; episodes answered wholly from the response cache (a prompt
    asked earlier in the run) are counted apart, as `cached`."""
    root, rows = Path(root), []
    for p in sorted(root.rglob("run.json")):
        stage = p.parent.relative_to(root).parts[0] if p.parent != root else "."
        for e in load_episodes(p.parent):
            live = [c for c in e.calls if not c.cached]
            rows.append({"stage": stage, "wall_s": e.wall_s, "cached": bool(e.calls) and not live,
                         "live_calls": len(live), "model_s": sum(c.latency_s for c in live)})
    df = pd.DataFrame(rows, columns=["stage", "wall_s", "cached", "live_calls", "model_s"])
    ran = df[~df.cached.astype(bool)]
    out = ran.groupby("stage", sort=False).agg(
        episodes=("wall_s", "size"), min_s=("wall_s", "min"), median_s=("wall_s", "median"),
        max_s=("wall_s", "max"), live_calls=("live_calls", "sum"), model_s=("model_s", "sum"))
    out["cached"] = df[df.cached.astype(bool)].groupby("stage").size().reindex(out.index, fill_value=0)
    out["s_per_live_call"] = out.model_s / out.live_calls.where(out.live_calls > 0)
    return out.drop(columns="model_s")


def load_episodes(run_dir: str | Path, streams: dict[str, list[str]] | list[str] | None = None) -> list[Episode]:
    """The recorded episodes of a run directory, stream by stream in order: of the given streams (a
    mapping to their task ids, or names), else of every stream in its manifest."""
    store = RunDir(run_dir)
    m = store.manifest()
    if m is None:
        return []
    if streams is None:
        streams = cast(dict[str, list[str]], m["streams"])
    elif not isinstance(streams, dict):
        streams = {s: m["streams"].get(s, []) for s in streams}
    return [Episode.from_dict(d) for eps in _recorded(store, streams).values() for d in eps]


def final_memory(run_dir: str | Path, stream: str = "stream") -> dict:
    """The memory state a stream ended with (e.g. its skill library), {} when it has none."""
    return RunDir(run_dir).memory_state(stream)[1]


def episodes_frame(episodes: list[Episode]) -> pd.DataFrame:
    return pd.DataFrame([e.row() for e in episodes])


def independent_streams(task_ids: list[str], prefix: str = "t") -> dict[str, list[str]]:
    """Without memory every task is its own stream, so all of them may run concurrently."""
    return {f"{prefix}{i:04d}": [t] for i, t in enumerate(task_ids)}
