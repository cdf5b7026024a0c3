"""A fleet of model servers behind one `openai:` backend: which server a request goes to, and where it goes
when a server fails. HTTP control flow against FAKE OpenAI-compatible servers (tests/fakes.py); the
same with two real llama.cpp servers: tests/test_ray.py (integration)."""
import threading

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


def test_a_failing_server_sends_its_requests_to_another(fake_server_factory, monkeypatch):
    bad, good = fake_server_factory(failures=10**6), fake_server_factory()
    llm = LLM(fleet_backend(bad, good), backoff_s=0.01)
    # "at once" is asserted as "no back-off sleep", not as wall time (which a loaded machine stretches:
    # this test failed at 3.5 s beside a running benchmark)
    import skillbook.llm.client as client
    slept = []
    monkeypatch.setattr(client.time, "sleep", lambda s: slept.append(s))
    c = llm.chat(HI)
    monkeypatch.undo()
    assert c.text == "fake answer" and (bad.requests, good.requests) == (1, 1)
    assert not [s for s in slept if s > 0]                  # moved at once, no back-off
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


def test_a_run_resumes_and_replays_when_only_the_servers_address_changed(tmp_path, fake_env,
                                                                           fake_server_factory):
    """Issue 33, item 9: the same model served on a new port, or by a fleet that grew, was refused as
    'recorded with other settings (backend)': the run's fingerprint held the servers' URLs."""
    from skillbook.agent import AgentConfig
    from skillbook.llm import ResponseCache
    from skillbook.run import Condition, run_condition
    a, b, c = fake_server_factory(), fake_server_factory(), fake_server_factory()
    condition = Condition("task", AgentConfig(level="task", max_steps=2))
    one, two = ["fake/count/test/0"], ["fake/count/test/0", "fake/count/test/1"]
    cache = ResponseCache(tmp_path / "cache.sqlite")
    run_condition(tmp_path / "run", LLM(a.backend, cache), condition, one, {}, 1)
    assert a.requests > 0
    # the same model on another port: the run is extended, only the new task asks the model
    run_condition(tmp_path / "run", LLM(b.backend, cache), condition, two, {}, 1)
    assert b.requests > 0
    # a fleet that grew: a replay from the records and the cache, no request
    grown = LLM(fleet_backend(a, b, c), cache)
    served = a.requests + b.requests + c.requests
    assert len(run_condition(tmp_path / "run", grown, condition, two, {}, 1).episodes) == 2
    assert grown.stats.live_calls == 0 and a.requests + b.requests + c.requests == served
    # another model is another run
    with pytest.raises(ValueError, match=r"other settings \(backend\)"):
        run_condition(tmp_path / "run", LLM(f"openai:{a.url}#other", cache), condition, two, {}, 1)


@pytest.mark.parametrize("where", ["openai:http://10.0.0.1:8000/v1#m",
                                   "openai:http://10.0.0.2:9000/v1,http://10.0.0.3:9000/v1#m"])
def test_every_fingerprint_names_the_model_not_where_it_is_served(where):
    """The run settings (`settings_of`: backend, the inducing memory's model, τ²-bench's user model) and the
    gold study's settings name an `openai:` backend by the cache identity, `openai:<model>`."""
    from skillbook.agent import Agent, AgentConfig
    from skillbook.llm import backend_fingerprint
    from skillbook.papers.breakdown.memory import InducedMemory
    from skillbook.papers.skillc.gold import GoldSettings, study_settings
    from skillbook.run.streams import settings_of
    llm = LLM(where)
    agent = Agent(llm, AgentConfig(level="task"), InducedMemory(llm))
    s = settings_of(agent, {"tau2": {"user_backend": where}}, "stream")
    assert backend_fingerprint(where) == llm.identity == "openai:m"
    assert s["backend"] == s["memory"]["llm"] == s["env_options"]["tau2"]["user_backend"] == "openai:m"
    assert study_settings(llm, GoldSettings())["backend"] == "openai:m"
    assert backend_fingerprint("openai:http://10.0.0.1:8000/v1#other") == "openai:other"


@pytest.mark.parametrize("backend", ["embedded:qwen2.5-coder-1.5b",
                                     "embedded:qwen2.5-coder-0.5b+lora-599b5f1cba2d3136",
                                     "vllm:Qwen/Qwen2.5-7B-Instruct",
                                     "vllm:Qwen/Qwen2.5-7B-Instruct+lora-0123456789abcdef", "fake:scripted"])
def test_backends_that_name_no_address_keep_their_fingerprint(backend):
    from skillbook.llm import backend_fingerprint
    assert backend_fingerprint(backend) == backend


def _backends_in(settings) -> list[str]:
    """Every backend string a recorded fingerprint holds (backend, a memory's model, a τ² user model)."""
    out = []
    if isinstance(settings, dict):
        for k, v in settings.items():
            if k in ("backend", "llm", "user_backend") and isinstance(v, str) and v:
                out.append(v)
            out += _backends_in(v)
    return out


def test_the_committed_records_keep_their_fingerprints():
    """Every committed run must replay: no backend string in a committed fingerprint changes its spelling."""
    import json
    from pathlib import Path

    from skillbook.llm import backend_fingerprint
    manifests = sorted((Path(__file__).parents[1] / "runs").rglob("run.json"))
    assert manifests
    found = [b for p in manifests for b in _backends_in(json.loads(p.read_text())["settings"])]
    assert found and all(backend_fingerprint(b) == b for b in found)
