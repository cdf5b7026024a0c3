"""The executor seam of `run_streams`: the same stream work on a Ray cluster instead of threads.

    run_streams(run_dir, streams, make_agent, env_options)                       # threads (the default)
    run_streams(..., executor=RayExecutor(address="auto", actors=32))            # Ray workers
    SKILLBOOK_EXECUTOR=ray SKILLBOOK_RAY_ADDRESS=auto   (what `python -m skillbook.book execute
                                                         --executor ray` sets for every chapter)

An executor starts a pool of *episode workers* (`EpisodeWorker`; on Ray, one actor each). A worker
owns its simulators (one `EnvPool`: one JVM per env, reused) and its LLM client: the agent factory
travels to it pickled, and the LLM inside arrives as its backend and options (`LLM.__reduce__`), so
each worker talks to the model servers itself. The unit of distribution is a stream — ordered
tasks sharing one memory; an independent condition's streams are single tasks. The driver
(`dispatch`) hands a stream's episodes to one worker, one at a time, and keeps the worker's agent
for the next one; only the driver writes: each finished episode comes back with the memory state
after it and the response-cache entries its model calls added, and the driver merges the entries
(checked as an import checks a file), appends the record and saves the memory state exactly as the
thread executor does. So resume, the settings fingerprint and "a crash costs one episode" are
unchanged: what is recorded is what finished.

What can go wrong, and what it costs:

* a worker (or its node) dies: the episode in flight is lost, logged in `errors.jsonl` as an
  infrastructure error, and re-run on another worker from the stream's saved memory state; a new
  worker takes the dead one's place;
* an episode runs past `episode_timeout_s`: it is cancelled (the agent stops before its next model
  call), logged as an infrastructure error and re-run; a worker that does not stop within
  `cancel_grace_s` (hung in a simulator or a server) is killed and replaced;
* as on threads, an episode that fails twice stops its stream, and the run ends with `IncompleteRun`
  after the other streams; a broken response cache (`CacheError`, also `ReplayMiss`) stops the run.

Deterministic serving (the LLM's `deterministic`, the default) keeps one episode in flight on one
worker, streams in order — the same requests in the same order as the thread executor, hence the
same records. A fleet is served concurrently (`--serving concurrent`): then as many streams run at
once as there are workers, and the response cache, not the server, makes the run replay.
"""
from __future__ import annotations

import json
import os
import pickle
import socket
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..envs import EnvPool
from ..llm import stop_all
from ..llm.cache import CacheError, ReplayMiss, ResponseCache, cache_key
from ..llm.client import set_worker_cache
from ..records import Episode
from .episode import attempt_episode, settings_of
from .store import settings_diff

EXECUTORS = ("threads", "ray")
ENV_EXECUTOR = "SKILLBOOK_EXECUTOR"
ENV_ADDRESS = "SKILLBOOK_RAY_ADDRESS"
ENV_ACTORS = "SKILLBOOK_RAY_ACTORS"
ENV_TIMEOUT = "SKILLBOOK_EPISODE_TIMEOUT"

RAY_MISSING = ("the Ray executor needs Ray, which is not installed: run `pip install -e '.[cluster]'` in the "
               "project's environment (on the driver and on every node of the cluster)")


class ExecutorError(ValueError):
    """An executor that cannot be used (unknown name, Ray missing, a cluster that cannot be reached)."""


def require_ray():
    try:
        import ray  # deferred: optional (the cluster extra) and large; only the Ray executor needs it
    except ImportError:
        raise ExecutorError(RAY_MISSING) from None
    return ray


@dataclass(frozen=True)
class RayExecutor:
    """Run episodes on Ray actors. `address`: None joins the Ray this process already started (or
    starts a local one), "auto" the cluster this machine is part of (`ray start`), "ray://host:10001"
    a remote one through Ray Client. `actors`: episode workers (default: the call's `workers`)."""
    address: str | None = None
    actors: int | None = None
    episode_timeout_s: float = 3600.0
    cancel_grace_s: float = 60.0
    actor_cpus: float = 1.0     # one actor = one agent loop and its simulators' JVMs
    init_options: dict = field(default_factory=dict, compare=False)   # for a local ray.init (e.g. num_cpus)

    def __post_init__(self):
        if self.actors is not None and (not isinstance(self.actors, int) or isinstance(self.actors, bool)
                                        or self.actors < 1):
            raise ExecutorError(f"actors must be a positive integer, got {self.actors!r}")
        if not self.episode_timeout_s > 0 or not self.cancel_grace_s > 0:
            raise ExecutorError("episode_timeout_s and cancel_grace_s must be positive")

    def connect(self):
        """The `ray` module, joined to the cluster (once per process)."""
        ray = require_ray()
        if not ray.is_initialized():
            try:
                if self.address in (None, "", "local"):
                    ray.init(include_dashboard=False, **self.init_options)
                else:
                    ray.init(address=self.address)
            except Exception as e:   # noqa: BLE001 — say which cluster could not be joined, and how to start one
                raise ExecutorError(f"could not join the Ray cluster at {self.address or 'a new local one'}: "
                                    f"{type(e).__name__}: {e}. Start one with `ray start --head` (and "
                                    "`ray start --address <head>:6379` on the other nodes)") from e
        return ray

    def start(self, make_agent: Callable, env_options: dict | None, n: int, cache) -> RayPool:
        return RayPool(self, make_agent, env_options, n, cache)


def parse_executor(name: str | None, address: str | None = None, actors: int | None = None,
                   episode_timeout_s: float | None = None) -> RayExecutor | None:
    """None for threads, a RayExecutor for "ray"; an unknown name or a missing Ray is an ExecutorError."""
    name = (name or "threads").strip().lower()
    if name not in EXECUTORS:
        raise ExecutorError(f"unknown executor {name!r}; valid executors: {', '.join(EXECUTORS)}")
    if name == "threads":
        if address or actors:
            raise ExecutorError("a Ray address or a number of actors needs --executor ray")
        return None
    require_ray()
    timeout: dict[str, Any] = {"episode_timeout_s": float(episode_timeout_s)} if episode_timeout_s else {}
    return RayExecutor(address=address or None, actors=actors, **timeout)


def executor_from_env() -> RayExecutor | None:
    """The executor named by SKILLBOOK_EXECUTOR (set by `python -m skillbook.book execute --executor`)."""
    actors = os.environ.get(ENV_ACTORS)
    timeout = os.environ.get(ENV_TIMEOUT)
    try:
        return parse_executor(os.environ.get(ENV_EXECUTOR), os.environ.get(ENV_ADDRESS),
                              int(actors) if actors else None, float(timeout) if timeout else None)
    except ValueError as e:
        raise ExecutorError(f"{ENV_EXECUTOR}/{ENV_ADDRESS}/{ENV_ACTORS}/{ENV_TIMEOUT}: {e}") from e


# -- the worker -------------------------------------------------------------------------------------------
class ReadThroughCache(ResponseCache):
    """A worker's response cache: its own entries (handed to the driver after each episode) and, on a
    miss, the driver's cache (`lookup`), so that answers the run already paid for are not asked again."""

    def __init__(self, lookup: Callable[[str, dict], dict | None] | None = None):
        super().__init__()   # in memory: the worker's entries live until the driver has them
        self.lookup = lookup

    def get(self, model_identity: str, request: dict, count: bool = True) -> dict | None:
        hit = super().get(model_identity, request, count=False)
        if hit is None and self.lookup is not None:
            hit = self.lookup(model_identity, request)
            if hit is not None:
                self.put_known(model_identity, request, hit)   # the driver has it: not handed back
        with self._lock:
            if hit is None:
                self.misses += count
            else:
                self.hits += count
        return hit


class EpisodeWorker:
    """Runs episodes for the driver and writes nothing: returns each episode, the memory state after it
    and the new response-cache entries. `make_agent` is the factory, or its cloudpickled bytes (Ray):
    unpickled after the worker cache is in place, so the LLMs it holds answer from that cache."""

    def __init__(self, make_agent, env_options: dict | None = None, lookup=None):
        self.cache = ReadThroughCache(lookup)
        set_worker_cache(self.cache)
        if isinstance(make_agent, bytes):
            make_agent = pickle.loads(make_agent)   # cloudpickle's output; its LLMs become this process's
        self.make_agent = make_agent
        self.pool = EnvPool(env_options)
        self.agents: dict[str, Any] = {}
        self._stop: threading.Event | None = None

    def hello(self, env_options: dict | None, mode: str, envs=()) -> dict:
        """Where this worker runs and the settings its agent would record (compared with the driver's);
        `envs`: the envs the run's tasks use (their simulator revisions are this worker's code's)."""
        return {"host": socket.gethostname(), "pid": os.getpid(),
                "settings": settings_of(self.make_agent(), env_options, mode, envs)}

    def run(self, stream: str, position: int, task_id: str, state: dict | None, keep: bool) -> dict:
        """One episode. `state` None: go on with the agent kept for `stream` (its memory where the last
        episode left it); otherwise a new agent whose memory loads `state`. `keep`: the stream goes on here."""
        agent = self.agents.pop(stream, None) if state is None else None
        if agent is None:
            agent = self.make_agent()
            agent.memory.load_state(state or {})
        self._stop = agent.stop = threading.Event()
        try:
            ep = attempt_episode(agent, self.pool, stream, position, task_id)
        except CacheError as e:
            return {"cache_error": type(e).__name__, "message": str(e)}
        except KeyboardInterrupt:   # cancelled (past its wall-clock limit, or the driver stopped)
            return {"cancelled": True, "responses": self.cache.take_new_lines()}
        finally:
            self._stop = None
        out = {"episode": ep.to_dict(), "memory": None if ep.error else agent.memory.state(),
               "responses": self.cache.take_new_lines()}
        if keep and not ep.error:
            self.agents[stream] = agent
        return out

    def cancel(self) -> None:
        """Stop the episode in flight before its next model call (called while `run` runs)."""
        stop = self._stop
        if stop is not None:
            stop.set()

    def close(self) -> None:
        self.pool.close()
        stop_all()


class _CacheReader:
    """Answers workers' cache misses from the driver's SQLite file (read-only; the driver keeps writing)."""

    def __init__(self, path: str):
        self.db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)

    def get(self, model_identity: str, request: dict) -> dict | None:
        row = self.db.execute("SELECT response FROM responses WHERE key=?",
                              (cache_key(model_identity, request),)).fetchone()
        return json.loads(row[0]) if row else None


# -- the Ray pool -------------------------------------------------------------------------------------------
class RayPool:
    """Episode workers as Ray actors. `submit` returns an object ref; `wait` says which finished and how:
    ("ok", result), ("died", why) for an actor or node that died, ("error", why) for an exception of ours."""

    def __init__(self, executor: RayExecutor, make_agent, env_options, n: int, cache):
        ray = require_ray()
        try:
            payload = ray.cloudpickle.dumps(make_agent)
        except Exception as e:   # noqa: BLE001 — name what could not be pickled, before any model time
            raise ExecutorError(f"this run's agent factory cannot be sent to Ray workers ({type(e).__name__}: "
                                f"{e}); everything its memory policy holds must be picklable") from e
        self.ray = executor.connect()
        self.reader = None
        path = getattr(cache, "path", ":memory:")
        if path and path != ":memory:":
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # deferred: ray (require_ray)
            here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
            self.reader = ray.remote(_CacheReader).options(num_cpus=0, scheduling_strategy=here).remote(path)
        lookup = None
        if self.reader is not None:
            reader = self.reader
            lookup = lambda identity, request: ray.get(reader.get.remote(identity, request))  # noqa: E731
        # max_concurrency=2: `cancel` must run while `run` does
        self._actor = ray.remote(EpisodeWorker).options(max_concurrency=2, num_cpus=executor.actor_cpus,
                                                         max_restarts=0)
        self._args = (payload, env_options, lookup)
        self.workers = [self._actor.remote(*self._args) for _ in range(n)]

    def hello(self, env_options, mode, workers=None, timeout_s: float = 900.0, envs=()) -> list[dict]:
        refs = [w.hello.remote(env_options, mode, envs) for w in (self.workers if workers is None else workers)]
        try:
            return self.ray.get(refs, timeout=timeout_s)
        except Exception as e:   # noqa: BLE001
            raise ExecutorError(f"Ray workers did not start: {type(e).__name__}: {e}") from e

    def submit(self, worker, stream, position, task_id, state, keep):
        return worker.run.remote(stream, position, task_id, state, keep)

    def wait(self, handles: list, timeout: float) -> list[tuple[Any, tuple[str, Any]]]:
        from ray import exceptions as rx  # deferred: ray (require_ray)
        if not handles:
            return []
        done, rest = self.ray.wait(handles, num_returns=1, timeout=timeout)
        if done and rest:
            done += self.ray.wait(rest, num_returns=len(rest), timeout=0)[0]
        out = []
        for ref in done:
            try:
                out.append((ref, ("ok", self.ray.get(ref))))
            except (rx.RayActorError, rx.WorkerCrashedError, rx.NodeDiedError, rx.ObjectLostError) as e:
                out.append((ref, ("died", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")))
            except rx.RayTaskError as e:
                out.append((ref, ("error", f"{type(e.cause).__name__}: {e.cause}")))
        return out

    def cancel(self, worker) -> None:
        worker.cancel.remote()

    def replace(self, worker):
        """Kill `worker` (if it still lives) and start another in its place."""
        self.ray.kill(worker, no_restart=True)
        new = self._actor.remote(*self._args)
        self.workers = [new if w is worker else w for w in self.workers]
        return new

    def close(self) -> None:
        try:
            self.ray.get([w.close.remote() for w in self.workers], timeout=30)
        except Exception:   # noqa: BLE001 — a dead or hung worker: killed below anyway
            pass
        for w in self.workers:
            self.ray.kill(w, no_restart=True)
        if self.reader is not None:
            self.ray.kill(self.reader, no_restart=True)


# -- the driver -----------------------------------------------------------------------------------------------
@dataclass
class _Job:
    worker: Any
    stream: str
    position: int
    started: float
    cancelled_at: float | None = None


def dispatch(pool, store, todo: dict[str, list[str]], recorded: dict[str, list], *, cache, retries: int,
             serial: bool, timeout_s: float, grace_s: float, on_episode: Callable[[], None],
             poll_s: float = 1.0, check: Callable[[Any], None] | None = None) -> dict[str, str]:
    """Run the streams' remaining episodes on `pool`'s workers; record each as it ends (the only writer).
    `check(worker)` vets each replacement worker as the first ones were vetted (it raises to stop the run).
    Returns the streams that stopped at an infrastructure error (stream → task: error)."""
    failed: dict[str, str] = {}
    nxt = {s: len(recorded[s]) for s in todo}
    after = {s: store.memory_state(s)[0] for s in todo}   # episodes the saved memory state includes
    attempts = {s: 0 for s in todo}                        # failed attempts at the stream's next episode
    holder: dict[str, Any] = {}                            # the worker that kept the stream's agent
    ready = deque(todo)                                    # streams waiting for a worker, in order
    idle = deque(pool.workers)
    running: dict[Any, _Job] = {}

    def submit(worker, s: str) -> None:
        position = nxt[s]
        state = None if holder.pop(s, None) is worker else store.memory_state(s)[1]
        h = pool.submit(worker, s, position, todo[s][position], state, position + 1 < len(todo[s]))
        running[h] = _Job(worker, s, position, time.monotonic())

    def infrastructure_error(job: _Job, error: str) -> None:
        s = job.stream
        attempts[s] += 1
        store.log_error(stream=s, position=job.position, task_id=todo[s][job.position], attempt=attempts[s],
                        error=error)
        holder.pop(s, None)
        if attempts[s] > retries:
            failed[s] = f"{todo[s][job.position]}: {error}"
        else:
            ready.appendleft(s)   # retried at once, as a thread retries, from the saved memory state

    def new_worker(old) -> None:
        new = pool.replace(old)
        if check is not None:   # it may start on another node, with another commit installed
            check(new)
        idle.append(new)

    def merge(result: dict, job: _Job) -> None:
        lines = result.get("responses") or []
        if lines and cache is not None and hasattr(cache, "merge_lines"):
            cache.merge_lines(lines, source=f"worker entries for {job.stream}#{job.position}")

    while ready or running:
        while idle and ready and not (serial and running):
            submit(idle.popleft(), ready.popleft())
        for h, (kind, value) in pool.wait(list(running), poll_s):
            job = running.pop(h)
            if kind != "ok":
                infrastructure_error(job, f"the worker running it {'died' if kind == 'died' else 'failed'}: "
                                          f"{value}")
                new_worker(job.worker)
                continue
            if "cache_error" in value:
                raise (ReplayMiss if value["cache_error"] == "ReplayMiss" else CacheError)(value["message"])
            merge(value, job)
            if value.get("cancelled"):
                infrastructure_error(job, f"cancelled: the episode ran past its wall-clock limit of "
                                          f"{timeout_s:g} s")
                idle.append(job.worker)
                continue
            ep = Episode.from_dict(value["episode"])
            s = job.stream
            if ep.error:
                infrastructure_error(job, ep.error)
                idle.append(job.worker)
                continue
            store.append_episode(ep)
            state = value["memory"]
            if state or after[s]:
                store.save_memory(s, job.position + 1, state)
                after[s] = job.position + 1
            attempts[s] = 0
            nxt[s] += 1
            on_episode()
            if nxt[s] < len(todo[s]):
                holder[s] = job.worker
                submit(job.worker, s)    # the stream goes on where its agent is
            else:
                idle.append(job.worker)
        now = time.monotonic()
        for h, job in list(running.items()):
            if job.cancelled_at is None and now - job.started > timeout_s:
                pool.cancel(job.worker)
                job.cancelled_at = now
            elif job.cancelled_at is not None and now - job.cancelled_at > grace_s:
                # it did not stop at a model call within the grace period (hung in a simulator or a server)
                del running[h]
                infrastructure_error(job, f"cancelled: the episode ran past its wall-clock limit of "
                                          f"{timeout_s:g} s and its worker did not stop within {grace_s:g} s "
                                          "(killed and replaced)")
                new_worker(job.worker)
    return failed


def run_distributed(executor, store, todo, recorded, make_agent, probe, env_options, settings: dict, mode: str,
                    workers: int, retries: int, on_episode: Callable[[], None],
                    envs=()) -> tuple[dict[str, str], int]:
    """`run_streams`' work on an executor's pool: (failed streams, number of workers). `envs`: the envs
    the run's tasks use, as in `settings`."""
    serial = bool(getattr(probe.llm, "deterministic", False))
    n = 1 if serial else max(1, min(executor.actors or workers, len(todo)))
    cache = getattr(probe.llm, "cache", None)
    pool = executor.start(make_agent, env_options, n, cache)

    def vet(workers=None) -> None:
        """Every worker, the first ones and each replacement, must record this driver's settings."""
        for hello in pool.hello(env_options, mode, workers, envs=envs):
            if hello["settings"] != settings:
                raise ExecutorError(f"the worker on {hello['host']} (pid {hello['pid']}) would record other settings "
                                    f"({', '.join(settings_diff(settings, hello['settings']))}) than this driver: "
                                    "install the same commit of skillbook on every node")
    try:
        vet()
        failed = dispatch(pool, store, todo, recorded, cache=cache, retries=retries, serial=serial,
                          timeout_s=executor.episode_timeout_s, grace_s=executor.cancel_grace_s,
                          on_episode=on_episode, check=lambda w: vet([w]))
    except BaseException:
        for w in list(pool.workers):
            try:
                pool.cancel(w)   # the episodes in flight stop within one agent step
            except Exception:   # noqa: BLE001
                pass
        raise
    finally:
        pool.close()
    return failed, n
