"""One chat interface for every backend: `LLM.chat(messages, **sampling) -> Completion`."""
from __future__ import annotations

import os
import threading
import time
from dataclasses import asdict, dataclass, field

import openai

from .backends import DEFAULT_BACKEND, EMBEDDED_MODELS, BackendSpec, parse_backend
from .cache import ResponseCache
from .servers import ServerError, server_for


class LLMError(RuntimeError):
    """A model call that failed. `retryable`: the server failed (after retries and a restart), an
    infrastructure error the runner retries; not retryable: the server rejected the request itself
    (HTTP 4xx, e.g. a prompt longer than the context), which the same request would meet again."""

    def __init__(self, message: str, retryable: bool = True):
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
    server_timings: dict | None = None  # llama.cpp's own prompt/generation timings, when the server sends them

    def to_dict(self) -> dict:
        return asdict(self)


_RETRYABLE = (openai.APIConnectionError, openai.APITimeoutError, openai.InternalServerError,
              openai.RateLimitError)


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
                 deterministic: bool = True, **server_options):
        """`deterministic` (the default): one request in flight at a time and, for the embedded server,
        one slot, so that the same requests give the same answers on every live run. llama.cpp's greedy
        answers depend on how concurrent requests are batched (parallel slots, continuous batching):
        identical requests answered differently in 16 of 249 cases when served concurrently. On 2 cores
        concurrency bought nothing anyway (`make bench`); on a GPU server pass deterministic=False."""
        self.spec: BackendSpec = parse_backend(backend)
        self.deterministic = bool(deterministic)
        if self.deterministic and self.spec.kind == "embedded":
            server_options = {**server_options, "parallel": 1}
        self._in_flight = threading.Lock() if self.deterministic else None
        self.backend = str(self.spec)
        self.cache = cache if cache is not None else ResponseCache()
        self.seed = seed
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.stats = CallStats()
        self._server = None
        self._client: openai.OpenAI | None = None
        self._server_options = server_options
        if self.spec.kind == "embedded":
            # a merged policy is another model: its adapters' digest is part of the identity (and so of every
            # cache key and run fingerprint), never mixed with the base model's answers
            self.identity = "gguf-sha256:" + EMBEDDED_MODELS[self.spec.model].sha256 + (
                f"+{self.spec.adapter}" if self.spec.adapter else "")
        else:
            self.identity = f"{self.spec.kind}:{self.spec.model}"
        self._client_lock = threading.Lock()

    # -- connection -------------------------------------------------------------------------------
    def _connect(self) -> openai.OpenAI:
        with self._client_lock:
            if self._client is None:
                if self.spec.kind == "openai":
                    key = os.environ.get("SKILLBOOK_API_KEY") or os.environ.get("OPENAI_API_KEY") or "none"
                    base_url = self.spec.base_url
                else:
                    self._server = server_for(self.spec, **self._server_options)
                    base_url = self._server.ensure()
                    key = "none"
                # Retries are ours (with a server restart in between), not the client's.
                self._client = openai.OpenAI(base_url=base_url, api_key=key, timeout=self.timeout, max_retries=0)
            return self._client

    def warm_up(self) -> "LLM":
        """Start (or connect to) the server now rather than at the first call."""
        self._connect()
        return self

    # -- the call ---------------------------------------------------------------------------------
    def chat(self, messages: list[dict], *, temperature: float = 0.0, max_tokens: int = 256,
             seed: int | None = None, stop: list[str] | None = None, top_p: float | None = None) -> Completion:
        """One chat completion; `seed` defaults to the LLM's seed. Raises LLMError after the retries."""
        seed = self.seed if seed is None else seed
        request = {"messages": messages, "temperature": float(temperature), "max_tokens": int(max_tokens),
                   "seed": seed, "stop": list(stop) if stop else None, "top_p": top_p}
        t0 = time.perf_counter()
        hit = self.cache.get(self.identity, request)
        if hit is not None:
            c = Completion(cached=True, **hit)
            self.stats.add(c, time.perf_counter() - t0)
            return c
        if os.environ.get("SKILLBOOK_REPLAY_ONLY"):
            from .cache import ReplayMiss
            raise ReplayMiss(f"{self.backend}: SKILLBOOK_REPLAY_ONLY is set and this request is not in the "
                             "response cache (a replay that would need the model)")
        if self._in_flight is not None:
            with self._in_flight:
                # another thread may have asked the same request while this one waited
                hit = self.cache.get(self.identity, request, count=False)
                if hit is not None:
                    c = Completion(cached=True, **hit)
                    self.stats.add(c, time.perf_counter() - t0)
                    return c
                c = self._live(request)
        else:
            c = self._live(request)
        self.cache.put(self.identity, request, {k: v for k, v in c.to_dict().items() if k != "cached"})
        self.stats.add(c, c.latency_s)
        return c

    def _live(self, request: dict) -> Completion:
        kwargs = {k: v for k, v in request.items() if v is not None}
        restarted = False
        last: Exception | None = None
        for attempt in range(self.max_retries + 1):
            try:
                client = self._connect()
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
            except _RETRYABLE as e:
                last = e
            except ServerError as e:
                last = e
            except openai.APIStatusError as e:
                # 4xx: the request itself is wrong (e.g. longer than the context); retrying cannot help.
                self.stats.errors += 1
                raise LLMError(f"{self.backend}: request rejected (HTTP {e.status_code}), not retried: {e}",
                               retryable=False) from e
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

    def describe(self) -> dict:
        """What a chapter states about its model: backend, identity, cache hits, live time."""
        s = self.stats
        return {"backend": self.backend, "model_identity": self.identity, "deterministic": self.deterministic,
                "calls": s.calls,
                "live_calls": s.live_calls, "cache_hits": self.cache.hits, "cache_misses": self.cache.misses,
                "prompt_tokens": s.prompt_tokens, "completion_tokens": s.completion_tokens,
                "live_seconds": round(s.live_seconds, 1), "recorded_model_seconds": round(s.model_seconds, 1),
                "errors": s.errors}


_LLMS: dict[tuple, LLM] = {}


def get_llm(backend: str = DEFAULT_BACKEND, cache: ResponseCache | None = None, **options) -> LLM:
    """The process-wide LLM of a backend, cache and options (the server is shared by all of them)."""
    key = (str(parse_backend(backend)), id(cache), tuple(sorted(options.items())))
    if key not in _LLMS:
        _LLMS[key] = LLM(backend, cache, **options)
    return _LLMS[key]
