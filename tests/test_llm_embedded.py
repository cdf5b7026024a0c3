"""The real 0.5B model behind the embedded llama.cpp server."""
import os
import signal
import time

import pytest

from skillbook.llm import LLM, ResponseCache

SMALL_MODEL = "embedded:qwen2.5-coder-0.5b"

pytestmark = pytest.mark.integration

MESSAGES = [{"role": "system", "content": "Answer with one short sentence."},
            {"role": "user", "content": "What colour is the sky on a clear day?"}]


def test_completion_then_replay_from_cache_without_a_server(tmp_path):
    cache_path = tmp_path / "responses.sqlite"
    live = LLM(SMALL_MODEL, ResponseCache(cache_path))
    try:
        c = live.chat(MESSAGES, max_tokens=24)
        assert c.text.strip() and not c.cached
        assert c.prompt_tokens > 10 and 0 < c.completion_tokens <= 24 and c.latency_s > 0
        assert "blue" in c.text.lower()
    finally:
        live._server.stop()
    # A new process-equivalent: a fresh LLM over the same cache file never starts or calls a server.
    replay = LLM(SMALL_MODEL, ResponseCache(cache_path))
    r = replay.chat(MESSAGES, max_tokens=24)
    assert r.cached and r.text == c.text
    assert (r.prompt_tokens, r.completion_tokens, r.latency_s) == (c.prompt_tokens, c.completion_tokens, c.latency_s)
    assert replay._client is None and replay._server is None
    assert replay.cache.hits == 1 and replay.stats.live_calls == 0


def test_dead_server_is_restarted_once_and_the_call_succeeds(small_llm):
    small_llm.chat(MESSAGES, max_tokens=4)
    server = small_llm._server
    before = server.restarts
    os.kill(server.proc.pid, signal.SIGKILL)
    server.proc.wait()
    c = small_llm.chat([{"role": "user", "content": "Say one word."}], max_tokens=4)
    assert c.text.strip() and not c.cached
    assert server.restarts == before + 1 and server.alive()


def test_parallel_slots_answer_concurrent_requests(tmp_path):
    """Opt-in concurrency (deterministic=False): four slots, requests overlap."""
    from concurrent.futures import ThreadPoolExecutor
    small_llm = LLM(SMALL_MODEL, ResponseCache(tmp_path / "c.sqlite"), deterministic=False)
    prompts = [[{"role": "user", "content": f"Count from {i} to {i + 3}."}] for i in range(4)]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda m: small_llm.chat(m, max_tokens=16), prompts))
    assert all(o.text.strip() and not o.cached for o in outs)
    assert time.perf_counter() - t0 < sum(o.latency_s for o in outs)  # they overlapped


def test_deterministic_mode_has_one_slot_and_one_request_in_flight(small_llm, monkeypatch):
    import threading
    from concurrent.futures import ThreadPoolExecutor
    assert small_llm.deterministic
    live, state, guard = small_llm._live, {"now": 0, "max": 0}, threading.Lock()

    def counting(request, role=""):
        with guard:
            state["now"] += 1
            state["max"] = max(state["max"], state["now"])
        try:
            return live(request, role)
        finally:
            with guard:
                state["now"] -= 1

    monkeypatch.setattr(small_llm, "_live", counting)
    prompts = [[{"role": "user", "content": f"Count from {i} to {i + 2}. [{time.time_ns()}]"}] for i in range(3)]
    with ThreadPoolExecutor(3) as pool:
        outs = list(pool.map(lambda m: small_llm.chat(m, max_tokens=8), prompts))
    assert all(not o.cached for o in outs)
    assert state["max"] == 1
    assert small_llm._server.parallel == 1
