"""A fleet of model servers behind one `openai:` backend: which server a request goes to, and where it goes
when a server fails. HTTP control flow against FAKE OpenAI-compatible servers (tests/fakes.py); the
same with two real llama.cpp servers: tests/test_ray.py (integration)."""
import threading
import time

import pytest

from skillbook.llm import LLM, BackendError, LLMError, parse_backend
from skillbook.llm.client import Fleet

HI = [{"role": "user", "content": "hi"}]


def fleet_backend(*servers) -> str:
    return "openai:" + ",".join(s.url for s in servers) + "#fake"


def test_a_fleet_is_one_backend_string():
    spec = parse_backend("openai:http://a:8000/v1/, http://b:8000/v1#Qwen/Qwen2.5-7B-Instruct")
    assert spec.base_urls == ("http://a:8000/v1", "http://b:8000/v1") and spec.model == "Qwen/Qwen2.5-7B-Instruct"
    assert str(spec) == "openai:http://a:8000/v1,http://b:8000/v1#Qwen/Qwen2.5-7B-Instruct"
    assert parse_backend("openai:http://a:8000/v1#m").base_urls == ("http://a:8000/v1",)
    with pytest.raises(BackendError, match="names a server twice"):
        parse_backend("openai:http://a/v1,http://a/v1#m")
    with pytest.raises(BackendError, match="'b:8000' is not an http"):
        parse_backend("openai:http://a/v1,b:8000#m")
    # the cache key names the model, not the servers: any server of the fleet answers the same request
    assert LLM("openai:http://a/v1,http://b/v1#m").identity == LLM("openai:http://c/v1#m").identity


def test_least_outstanding_requests_with_ties_taken_in_turn():
    f = Fleet(["a", "b", "c"])
    assert [f.acquire() for _ in range(3)] == [0, 1, 2]     # all idle: in turn, not all on the first
    f.release(1, ok=True)
    assert f.acquire() == 1                                  # the only server with nothing in flight
    f.release(0, ok=True)
    f.release(2, ok=True)
    assert f.acquire() == 2 and f.acquire() == 0             # ties again from where the last choice left off
    f.release(0, ok=False)                                   # a failure marks the server down for a while
    f.release(2, ok=True)
    f.release(1, ok=True)
    assert {f.acquire() for _ in range(4)} == {1, 2}
    assert f.acquire(exclude={0, 1, 2}) is None
    assert [(d["served"], d["failures"]) for d in f.describe()] == [(1, 1), (2, 0), (2, 0)]


def test_concurrent_requests_spread_over_the_fleet(fake_server_factory):
    a, b = fake_server_factory(delay_s=0.2), fake_server_factory(delay_s=0.2)
    llm = LLM(fleet_backend(a, b), deterministic=False)
    threads = [threading.Thread(target=llm.chat, args=([{"role": "user", "content": f"q{i}"}],)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert (a.requests, b.requests) == (3, 3)
    assert [s["served"] for s in llm.describe()["servers"]] == [3, 3]


def test_a_failing_server_sends_its_requests_to_another(fake_server_factory):
    bad, good = fake_server_factory(failures=10**6), fake_server_factory()
    llm = LLM(fleet_backend(bad, good), backoff_s=0.01)
    t0 = time.monotonic()
    c = llm.chat(HI)
    assert c.text == "fake answer" and (bad.requests, good.requests) == (1, 1)
    assert time.monotonic() - t0 < 1.0                       # moved at once, no back-off
    for i in range(3):                                       # the failed server is avoided while marked down
        llm.chat([{"role": "user", "content": f"again {i}"}])
    assert (bad.requests, good.requests) == (1, 4)


def test_a_dead_server_sends_its_requests_to_the_others(fake_server_factory):
    a, b = fake_server_factory(), fake_server_factory()
    llm = LLM(fleet_backend(a, b), deterministic=False)
    llm.chat([{"role": "user", "content": "before"}])
    a.close()                                                # the server process is gone: connection refused
    for i in range(4):
        llm.chat([{"role": "user", "content": f"after {i}"}])
    served = {s["url"]: s for s in llm.describe()["servers"]}
    assert served[b.url]["served"] >= 4 and served[a.url]["failures"] >= 1
    assert llm.stats.errors == 0


def test_when_every_server_fails_the_call_is_an_infrastructure_error(fake_server_factory):
    a, b = fake_server_factory(failures=10**6), fake_server_factory(failures=10**6)
    llm = LLM(fleet_backend(a, b), backoff_s=0.01, max_retries=1)
    with pytest.raises(LLMError, match="after 4 attempts on 2 servers") as e:
        llm.chat(HI)
    assert e.value.retryable and (a.requests, b.requests) == (2, 2)


def test_a_refused_request_is_not_sent_to_another_server(fake_server_factory):
    a, b = fake_server_factory(failures=10**6, status=400), fake_server_factory(failures=10**6, status=400)
    llm = LLM(fleet_backend(a, b), backoff_s=0.01)
    with pytest.raises(LLMError, match="HTTP 400") as e:
        llm.chat(HI)
    assert not e.value.retryable and a.requests + b.requests == 1
