"""One chat interface for every backend: `LLM.chat(messages, **sampling) -> Completion`."""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import openai

from .backends import BACKEND_KINDS, DEFAULT_BACKEND, BackendSpec, parse_backend
from .cache import ReplayMiss, ResponseCache
from .servers import ServerError, _ChildServer, server_for


class LLMError(RuntimeError):
    """A model call that failed. `retryable`: the server failed (after retries and a restart), an
    infrastructure error the runner retries; not retryable: the server rejected the request itself
    (HTTP 4xx, e.g. a prompt longer than the context), which the same request would meet again."""

    def __init__(self, message: str, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


@dataclass
class Completion:
    text: str
    prompt_tokens: int
    completion_tokens: int
    latency_s: float          # of the call that produced the answer (a cache hit keeps the original)
    cached: bool = False
    finish_reason: str = ""
    model: str = ""
    temperature: float = 0.0
    seed: int | None = None
    max_tokens: int = 0
    # llama.cpp's own prompt/generation timings, when the server sends them
    server_timings: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# The slot of each role under `role_slots`; roles not named (SkillRL's, Assay's, SKILLC's prompts, the
# merge) share the last one. Roles that alternate within a subtask get their own so that none evicts
# another's prefix: the planner and summarizer run between the executor's subtasks, induction after them.
ROLE_SLOTS = {"planner": 0, "executor": 1, "summarizer": 2, "induction": 3}
SLOTS = 5


def slot_of(role: str) -> int:
    return ROLE_SLOTS.get(role, SLOTS - 1)


_RETRYABLE = (openai.APIConnectionError, openai.APITimeoutError, openai.InternalServerError,
              openai.RateLimitError)


class Fleet:
    """The servers of one `openai:` backend and how busy this process keeps each of them.

    A request goes to the server with the fewest requests in flight from this process (least
    outstanding requests); ties go round-robin from where the last choice left off, so that many
    processes that are each idle do not all start on the first server. A server that fails is marked
    down for `cooldown_s`: other requests avoid it meanwhile, and the failed request is retried at
    once on another server. The marks are hints: when every server is marked down, all are tried.
    Each process balances only its own requests (Ray workers do not coordinate), which spreads a
    fleet evenly when the workers are many and alike."""

    def __init__(self, urls: tuple[str, ...] | list[str], cooldown_s: float = 30.0) -> None:
        self.urls = list(urls)
        self.cooldown_s = cooldown_s
        self.outstanding = [0] * len(self.urls)
        self.served = [0] * len(self.urls)      # answers received from each server
        self.failures = [0] * len(self.urls)    # connection errors, timeouts and 5xx from each server
        self._down_until = [0.0] * len(self.urls)
        self._next = 0
        self._lock = threading.Lock()

    def acquire(self, exclude: set[int] | frozenset[int] = frozenset()) -> int | None:
        """The server for the next attempt (counted as in flight), or None when all are excluded."""
        with self._lock:
            n = len(self.urls)
            order = [(self._next + k) % n for k in range(n) if (self._next + k) % n not in exclude]
            if not order:
                return None
            now = time.monotonic()
            up = [i for i in order if self._down_until[i] <= now] or order
            i = min(up, key=lambda j: self.outstanding[j])   # min keeps the first of equals: round-robin
            self.outstanding[i] += 1
            self._next = (i + 1) % n
            return i

    def release(self, i: int, ok: bool | None) -> None:
        """The attempt on server i ended: answered (ok), failed (the server is marked down), or neither
        (None: e.g. the request was refused or interrupted, which says nothing about the server)."""
        with self._lock:
            self.outstanding[i] -= 1
            if ok:
                self.served[i] += 1
                self._down_until[i] = 0.0
            elif ok is False:
                self.failures[i] += 1
                self._down_until[i] = time.monotonic() + self.cooldown_s

    def describe(self) -> list[dict[str, str | int]]:
        with self._lock:
            return [{"url": u, "served": s, "failures": f} for u, s, f in zip(self.urls, self.served, self.failures)]


@dataclass
class CallStats:
    calls: int = 0
    live_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    live_seconds: float = 0.0
    model_seconds: float = 0.0  # recorded latency of every answer used, live or replayed
    errors: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, c: Completion, wall_s: float) -> None:
        with self._lock:
            self.calls += 1
            self.prompt_tokens += c.prompt_tokens
            self.completion_tokens += c.completion_tokens
            self.model_seconds += c.latency_s
            if not c.cached:
                self.live_calls += 1
                self.live_seconds += wall_s


class LLM:
    """A chat model behind one backend string, with retries, timeouts and the response cache.

    Every request goes through `cache` (an in-memory one when none is given), so an identical
    request is answered once per cache; `temperature`, `seed` and `max_tokens` are part of the key
    and are recorded with each Completion.
    """

    def __init__(self, backend: str = DEFAULT_BACKEND, cache: ResponseCache | None = None, *,
                 seed: int = 0, timeout: float = 300.0, max_retries: int = 3, backoff_s: float = 1.0,
                 deterministic: bool = True, role_slots: bool = False, **server_options: Any) -> None:
        """`deterministic` (the default): one request in flight at a time and, for the embedded server,
        one slot, so that the same requests give the same answers on every live run. llama.cpp's greedy
        answers depend on how concurrent requests are batched (parallel slots, continuous batching):
        identical requests answered differently in 16 of 249 cases when served concurrently. On 2 cores
        concurrency bought nothing anyway (`make bench`); on a GPU server pass deterministic=False.

        `role_slots` (embedded server, deterministic): one llama.cpp slot per role (`ROLE_SLOTS`), so each
        role's prompt prefix stays cached while the others run (with one slot, a planner call evicts the
        executor's 500-token prefix and the next executor call evaluates it again). Still one request
        in flight. Measured and rejected as the default (runs/bench/serving-role_slots_1.json, two dev
        coin games live from empty caches): 0.84x the speed and the records differ, because llama.cpp's
        answers depend on which prefix a slot reuses (a reused KV prefix is not bit-equal to a fresh
        evaluation), so a serving-only change it is not. Kept as an option for speed studies."""
        self.spec: BackendSpec = parse_backend(backend)
        self.deterministic = bool(deterministic)
        # what this LLM is made of, so that another process can make the same one (__reduce__)
        self._settings: dict[str, Any] = {"seed": seed, "timeout": timeout, "max_retries": max_retries,
                                          "backoff_s": backoff_s, "deterministic": self.deterministic,
                                          **server_options}
        kind = BACKEND_KINDS[self.spec.kind]
        self.role_slots = bool(role_slots) and self.deterministic and kind.slots
        if role_slots:
            self._settings["role_slots"] = True
        if self.deterministic and kind.slots:
            server_options = {**server_options, "parallel": SLOTS if self.role_slots else 1}
        self._in_flight = threading.Lock() if self.deterministic else None
        self.backend = str(self.spec)
        self.cache = cache if cache is not None else ResponseCache()
        self.seed = seed
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.stats = CallStats()
        self._server: _ChildServer | None = None
        self._client: openai.OpenAI | None = None
        self._server_options = server_options
        self.fleet = Fleet(self.spec.base_urls) if kind.fleet else None
        self._fleet_clients: dict[int, openai.OpenAI] = {}
        self.identity = kind.identity(self.spec)     # what answers, never where it is served
        self._serves_here = kind.server is not None
        self._client_lock = threading.Lock()

    # -- connection -------------------------------------------------------------------------------
    def _connect(self) -> openai.OpenAI:
        with self._client_lock:
            if self._client is None:
                if not self._serves_here:
                    key = os.environ.get("SKILLBOOK_API_KEY") or os.environ.get("OPENAI_API_KEY") or "none"
                    base_url = self.spec.base_url
                else:
                    self._server = server_for(self.spec, **self._server_options)
                    base_url = self._server.ensure()
                    key = "none"
                # Retries are ours (with a server restart in between), not the client's.
                self._client = openai.OpenAI(base_url=base_url, api_key=key, timeout=self.timeout, max_retries=0)
            return self._client

    def _fleet_client(self, i: int) -> openai.OpenAI:
        assert self.fleet is not None   # called by _live_fleet only, for an openai backend (fleet set in __init__)
        with self._client_lock:
            if i not in self._fleet_clients:
                key = os.environ.get("SKILLBOOK_API_KEY") or os.environ.get("OPENAI_API_KEY") or "none"
                # Retries are ours (on another server of the fleet), not the client's.
                self._fleet_clients[i] = openai.OpenAI(base_url=self.fleet.urls[i], api_key=key,
                                                       timeout=self.timeout, max_retries=0)
            return self._fleet_clients[i]

    def warm_up(self) -> LLM:
        """Start (or connect to) the server now rather than at the first call."""
        if self.fleet is None:
            self._connect()
        return self

    def __reduce__(self) -> tuple[Callable[[str, dict[str, Any]], LLM], tuple[str, dict[str, Any]]]:
        """An LLM travels to another process (a Ray worker) as its backend and options — a server
        connection, a lock or a SQLite handle cannot travel — and is that process's LLM of the same
        backend and options there (`get_llm`), answering from that process's worker cache
        (`worker_cache`), whose new entries the runner sends back to the driver's cache."""
        return (_llm_in_this_process, (self.backend, dict(self._settings)))

    # -- the call ---------------------------------------------------------------------------------
    def chat(self, messages: list[dict[str, str]], *, temperature: float = 0.0, max_tokens: int = 256,
             seed: int | None = None, stop: list[str] | None = None, top_p: float | None = None,
             role: str = "") -> Completion:
        """One chat completion; `seed` defaults to the LLM's seed. Raises LLMError after the retries.
        `role` (planner, executor, …) picks the server slot under `role_slots`; it is not part of the
        request, so it never changes a cache key or an answer."""
        seed = self.seed if seed is None else seed
        request: dict[str, Any] = {"messages": messages, "temperature": float(temperature),
                                   "max_tokens": int(max_tokens), "seed": seed,
                                   "stop": list(stop) if stop else None, "top_p": top_p}
        t0 = time.perf_counter()
        hit = self.cache.get(self.identity, request)
        if hit is not None:
            c = Completion(cached=True, **hit)
            self.stats.add(c, time.perf_counter() - t0)
            return c
        if os.environ.get("SKILLBOOK_REPLAY_ONLY"):
            raise ReplayMiss(f"{self.backend}: SKILLBOOK_REPLAY_ONLY is set and this request is not in the "
                             "response cache (a replay that would need the model)")
        if getattr(self.cache, "read_only", False):
            # refused before the model is asked: its answer could not be kept, so the time would be lost
            raise ReplayMiss(f"{self.backend}: this request is not in the response cache, whose records are "
                             "read-only (a replay that would need the model); copy the records to a folder "
                             "you may write to run it live")
        if self._in_flight is not None:
            with self._in_flight:
                # another thread may have asked the same request while this one waited
                hit = self.cache.get(self.identity, request, count=False)
                if hit is not None:
                    c = Completion(cached=True, **hit)
                    self.stats.add(c, time.perf_counter() - t0)
                    return c
                c = self._live(request, role)
        else:
            c = self._live(request, role)
        self.cache.put(self.identity, request, {k: v for k, v in c.to_dict().items() if k != "cached"})
        self.stats.add(c, c.latency_s)
        return c

    def _completion(self, client: openai.OpenAI, request: dict[str, Any], role: str = "") -> Completion:
        kwargs = {k: v for k, v in request.items() if v is not None}
        if self.role_slots:
            kwargs["extra_body"] = {"id_slot": slot_of(role)}
        t0 = time.perf_counter()
        r = client.chat.completions.create(model=self.spec.model, **kwargs)
        latency = time.perf_counter() - t0
        choice = r.choices[0]
        timings = (r.model_extra or {}).get("timings")
        return Completion(
            text=choice.message.content or "",
            prompt_tokens=r.usage.prompt_tokens if r.usage else 0,
            completion_tokens=r.usage.completion_tokens if r.usage else 0,
            latency_s=latency, cached=False, finish_reason=choice.finish_reason or "",
            model=self.backend, temperature=request["temperature"], seed=request["seed"],
            max_tokens=request["max_tokens"], server_timings=timings)

    def _rejected(self, e: openai.APIStatusError) -> LLMError:
        # 4xx: the request itself is wrong (e.g. longer than the context); retrying cannot help.
        self.stats.errors += 1
        return LLMError(f"{self.backend}: request rejected (HTTP {e.status_code}), not retried: {e}", retryable=False)

    def _live_fleet(self, request: dict[str, Any]) -> Completion:
        """One request to an `openai:` backend: each round tries the servers, least busy first, until one
        answers; a failing server is marked down (`Fleet`) and the request moves to the next one at once.
        Between rounds (every server failed) the client backs off exponentially, as for one server."""
        assert self.fleet is not None   # _live calls this only when there is one (set once, in __init__)
        last: Exception | None = None
        tried_servers = 0
        for attempt in range(self.max_retries + 1):
            tried: set[int] = set()
            while (i := self.fleet.acquire(tried)) is not None:
                tried.add(i)
                try:
                    c = self._completion(self._fleet_client(i), request)
                except _RETRYABLE as e:
                    self.fleet.release(i, ok=False)
                    last, tried_servers = e, tried_servers + 1
                    continue
                except openai.APIStatusError as e:
                    self.fleet.release(i, ok=None)   # the server is up: it refused this request
                    raise self._rejected(e) from e
                except BaseException:
                    self.fleet.release(i, ok=None)
                    raise
                self.fleet.release(i, ok=True)
                return c
            if attempt < self.max_retries:
                time.sleep(self.backoff_s * 2 ** attempt)
        self.stats.errors += 1
        where = f"{len(self.fleet.urls)} servers" if len(self.fleet.urls) > 1 else "the server"
        raise LLMError(f"{self.backend}: model call failed after {tried_servers} attempts on {where} "
                       f"({self.max_retries + 1} rounds): {type(last).__name__}: {last}") from last

    def _live(self, request: dict[str, Any], role: str = "") -> Completion:
        if self.fleet is not None:
            return self._live_fleet(request)
        restarted = False
        last: Exception | None = None
        for attempt in range(self.max_retries + 1):
            try:
                return self._completion(self._connect(), request, role)
            except _RETRYABLE as e:
                last = e
            except ServerError as e:
                last = e
            except openai.APIStatusError as e:
                raise self._rejected(e) from e
            # A dead local server is restarted once per call, then the call is retried.
            if self._server is not None and not restarted and not self._server.alive():
                try:
                    base_url = self._server.restart()
                    with self._client_lock:
                        self._client = openai.OpenAI(base_url=base_url, api_key="none",
                                                     timeout=self.timeout, max_retries=0)
                    restarted = True
                    continue
                except ServerError as e:
                    last = e
                    break
            if attempt < self.max_retries:
                time.sleep(self.backoff_s * 2 ** attempt)
        self.stats.errors += 1
        raise LLMError(f"{self.backend}: model call failed after {self.max_retries + 1} attempts"
                       f"{' and a server restart' if restarted else ''}: {type(last).__name__}: {last}") from last

    def describe(self) -> dict[str, Any]:
        """What a chapter states about its model: backend, identity, cache hits, live time."""
        s = self.stats
        return {"backend": self.backend, "model_identity": self.identity, "deterministic": self.deterministic,
                "calls": s.calls,
                "live_calls": s.live_calls, "cache_hits": self.cache.hits, "cache_misses": self.cache.misses,
                "prompt_tokens": s.prompt_tokens, "completion_tokens": s.completion_tokens,
                "live_seconds": round(s.live_seconds, 1), "recorded_model_seconds": round(s.model_seconds, 1),
                "errors": s.errors, **({"servers": self.fleet.describe()} if self.fleet else {})}


_LLMS: dict[tuple[str, int, tuple[tuple[str, Any], ...]], LLM] = {}
_WORKER_CACHE: ResponseCache | None = None
_WORKER_LOCK = threading.Lock()


def worker_cache() -> ResponseCache:
    """The response cache of the LLMs that arrived in this process from another one (an in-memory one
    unless a worker set its own with `set_worker_cache`)."""
    global _WORKER_CACHE
    with _WORKER_LOCK:
        if _WORKER_CACHE is None:
            _WORKER_CACHE = ResponseCache()
        return _WORKER_CACHE


def set_worker_cache(cache: ResponseCache) -> None:
    global _WORKER_CACHE
    with _WORKER_LOCK:
        _WORKER_CACHE = cache


def _llm_in_this_process(backend: str, settings: dict[str, Any]) -> LLM:
    return get_llm(backend, worker_cache(), **settings)


def get_llm(backend: str = DEFAULT_BACKEND, cache: ResponseCache | None = None, **options: Any) -> LLM:
    """The process-wide LLM of a backend, cache and options (the server is shared by all of them)."""
    key = (str(parse_backend(backend)), id(cache), tuple(sorted(options.items())))
    if key not in _LLMS:
        _LLMS[key] = LLM(backend, cache, **options)
    return _LLMS[key]
