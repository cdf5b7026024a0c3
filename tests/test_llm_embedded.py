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


def test_parallel_slots_answer_concurrent_requests(small_llm):
    from concurrent.futures import ThreadPoolExecutor
    prompts = [[{"role": "user", "content": f"Count from {i} to {i + 3}."}] for i in range(4)]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda m: small_llm.chat(m, max_tokens=16), prompts))
    assert all(o.text.strip() and not o.cached for o in outs)
    assert time.perf_counter() - t0 < sum(o.latency_s for o in outs)  # they overlapped
