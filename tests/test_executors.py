"""The executor seam (`run.distributed`): control flow of the driver and its episode workers on the FAKE
world and model, with workers in threads (`fakes.LocalExecutor`: the real EpisodeWorker and dispatch,
Ray's transport replaced). The same run through Ray itself: tests/test_ray.py (integration)."""
import gzip
import json
import sys
import time

import pytest

from fakes import FakeModel, LocalExecutor, solve
from skillbook.agent import AgentConfig
from skillbook.llm import LLM, ReplayMiss, ResponseCache
from skillbook.memory import NoMemory
from skillbook.papers.breakdown import InducedMemory
from skillbook.run import Condition, ExecutorError, IncompleteRun, RunDir, load_episodes, parse_executor, run_condition
from skillbook.run.distributed import ENV_EXECUTOR, executor_from_env

TASKS = [f"fake/count/dev/{i}" for i in range(4)]


def run(path, llm, tasks=TASKS, memory=NoMemory, stream=False, **kw):
    c = Condition("c", AgentConfig(max_steps=6, n_examples=0), memory, stream=stream)
    return run_condition(path, llm, c, tasks, **kw)


def records(path) -> list[dict]:
    """What a run recorded, without the wall-clock time of each episode."""
    return [{k: v for k, v in e.to_dict().items() if k != "wall_s"} for e in load_episodes(path)]


def memory_files(path) -> dict:
    return {p.name: json.loads(p.read_text()) for p in sorted((path / "memory").glob("*.json"))}


@pytest.mark.parametrize("deterministic", [True, False])
@pytest.mark.parametrize("stream", [False, True])
def test_workers_record_what_threads_record(tmp_path, fake_env, stream, deterministic):
    llm = FakeModel(deterministic=deterministic)
    memory = (lambda: InducedMemory(llm, "text")) if stream else NoMemory
    run(tmp_path / "threads", llm, memory=memory, stream=stream, workers=2)
    ex = LocalExecutor(actors=3)
    run(tmp_path / "workers", llm, memory=memory, stream=stream, workers=2, executor=ex)
    assert records(tmp_path / "workers") == records(tmp_path / "threads")
    assert memory_files(tmp_path / "workers") == memory_files(tmp_path / "threads")
    pool = ex.pools[0]
    assert pool.closed
    # deterministic serving: one worker, one episode in flight; otherwise one worker per stream (at most 3)
    assert pool.started == (1 if deterministic or stream else 3)
    session = json.loads((tmp_path / "workers" / "sessions.jsonl").read_text().splitlines()[-1])
    assert session["executor"] == "ray" and session["episodes_run"] == 4
    if stream:   # a stream stays with its worker, which keeps its agent: the state is sent only at the start
        assert [(w, given) for w, _, _, given in pool.submitted] == [(0, True)] + [(0, False)] * 3


def test_a_dead_worker_costs_the_episode_in_flight_which_runs_again_elsewhere(tmp_path, fake_env):
    llm = FakeModel()
    memory = lambda: InducedMemory(llm, "text")  # noqa: E731
    run(tmp_path / "threads", llm, memory=memory, stream=True)
    ex = LocalExecutor(die={("stream", 2): 1})
    run(tmp_path / "workers", llm, memory=memory, stream=True, executor=ex)
    assert records(tmp_path / "workers") == records(tmp_path / "threads")
    assert memory_files(tmp_path / "workers") == memory_files(tmp_path / "threads")
    errors = RunDir(tmp_path / "workers").errors()
    assert [(e["position"], e["attempt"]) for e in errors] == [(2, 1)] and "died" in errors[0]["error"]
    pool = ex.pools[0]
    assert pool.started == 2   # a new worker took the dead one's place, and got the saved memory state
    assert pool.submitted[-2:] == [(0, "stream", 2, True), (0, "stream", 3, False)]


def test_an_episode_that_kills_its_worker_twice_stops_only_its_stream(tmp_path, fake_env):
    llm = FakeModel(deterministic=False)
    ex = LocalExecutor(actors=2, die={("t0001", 0): 2})   # on both attempts
    with pytest.raises(IncompleteRun, match="fake/count/dev/1.*died"):
        run(tmp_path, llm, workers=2, executor=ex)
    assert [e.task_id for e in load_episodes(tmp_path)] == [TASKS[0], TASKS[2], TASKS[3]]
    assert [e["attempt"] for e in RunDir(tmp_path).errors()] == [1, 2]
    assert len(run(tmp_path, llm, workers=2, executor=LocalExecutor(actors=2)).episodes) == 4   # resumed


def test_an_episode_past_its_wall_clock_limit_is_cancelled_and_recorded_as_an_error(tmp_path, fake_env,
                                                                                     monkeypatch):
    import fakes
    llm = FakeModel()
    slow = {"on": True}

    def policy(observation):
        if "Room 1." in observation and slow["on"]:
            time.sleep(0.6)   # every step of the first attempt at task 1 is slow
        return solve(observation)
    llm.policy = policy
    cancel = fakes.LocalPool.cancel

    def cancel_then_fast(self, worker):
        slow["on"] = False    # the retry is fast
        cancel(self, worker)
    monkeypatch.setattr(fakes.LocalPool, "cancel", cancel_then_fast)
    r = run(tmp_path, llm, executor=LocalExecutor(episode_timeout_s=0.5))
    assert [e.task_id for e in r.episodes] == TASKS and all(e.success for e in r.episodes)
    errors = RunDir(tmp_path).errors()
    assert len(errors) == 1 and errors[0]["task_id"] == TASKS[1]
    assert "wall-clock limit of 0.5 s" in errors[0]["error"]


def test_a_worker_that_does_not_stop_is_replaced(tmp_path, fake_env):
    llm = FakeModel()
    hung = {"left": 1}

    def policy(observation):
        if "Room 0." in observation and hung["left"]:
            hung["left"] = 0
            time.sleep(4.0)   # one model call that hangs: the cancel would be seen only after it
        return solve(observation)
    llm.policy = policy
    ex = LocalExecutor(episode_timeout_s=0.3, cancel_grace_s=0.3)
    r = run(tmp_path, llm, executor=ex)
    assert [e.task_id for e in r.episodes] == TASKS
    errors = RunDir(tmp_path).errors()
    assert len(errors) == 1 and "killed and replaced" in errors[0]["error"]
    assert ex.pools[0].started == 2


def test_a_broken_cache_in_a_worker_stops_the_run(tmp_path, fake_env):
    class Missing(FakeModel):
        def chat(self, messages, **kw):
            raise ReplayMiss("not in the response cache")
    with pytest.raises(ReplayMiss, match="not in the response cache"):
        run(tmp_path, Missing(), executor=LocalExecutor())
    assert load_episodes(tmp_path) == [] and RunDir(tmp_path).errors() == []


def test_workers_with_other_settings_are_refused_before_any_model_call(tmp_path, fake_env, monkeypatch):
    from skillbook.run import distributed
    llm = FakeModel()
    hello = distributed.EpisodeWorker.hello

    def another_commit(self, env_options, mode, envs=()):   # what a node with other prompt files would record
        h = hello(self, env_options, mode, envs)
        h["settings"]["agent_code"]["prompts"] = "another"
        return h
    monkeypatch.setattr(distributed.EpisodeWorker, "hello", another_commit)
    with pytest.raises(ExecutorError, match=r"other settings \(agent_code.prompts\).*same commit"):
        run(tmp_path, llm, executor=LocalExecutor())
    assert llm.calls == [] and load_episodes(tmp_path) == []


def test_a_worker_with_another_simulator_revision_is_refused(tmp_path, fake_env, monkeypatch):
    """A node whose code still runs an env's earlier simulator (ScienceWorld before its JVM options) would
    record other episodes: the worker reports the revisions of its own code for the run's envs."""
    from skillbook.run import distributed
    llm = FakeModel()
    hello = distributed.EpisodeWorker.hello

    def older_simulator(self, env_options, mode, envs=()):
        assert list(envs) == ["fake"]                     # the envs of the run's tasks reach the worker
        h = hello(self, env_options, mode, envs)
        h["settings"].pop("simulators", None)
        return h
    monkeypatch.setattr(fake_env, "SIMULATOR_REVISION", 2, raising=False)
    monkeypatch.setattr(distributed.EpisodeWorker, "hello", older_simulator)
    with pytest.raises(ExecutorError, match=r"other settings \(simulators\).*same commit"):
        run(tmp_path, llm, executor=LocalExecutor())
    assert llm.calls == []


def test_a_replacement_worker_with_other_settings_stops_the_run_and_keeps_what_finished(tmp_path, fake_env,
                                                                                          monkeypatch):
    # A dead worker's replacement may start on another node, with another commit installed: it is vetted
    # as the first workers were, before it runs anything.
    from skillbook.run import distributed
    llm = FakeModel()
    hello, said = distributed.EpisodeWorker.hello, []

    def second_is_another_commit(self, env_options, mode, envs=()):
        h = hello(self, env_options, mode, envs)
        said.append(self)
        if len(set(map(id, said))) > 1:
            h["settings"]["agent_code"]["prompts"] = "another"
        return h
    monkeypatch.setattr(distributed.EpisodeWorker, "hello", second_is_another_commit)
    ex = LocalExecutor(die={("stream", 2): 1})
    with pytest.raises(ExecutorError, match=r"other settings \(agent_code.prompts\).*same commit"):
        run(tmp_path, llm, memory=lambda: InducedMemory(llm, "text"), stream=True, executor=ex)
    assert [e.task_id for e in load_episodes(tmp_path)] == TASKS[:2]   # the episodes before the death stay
    assert ex.pools[0].started == 2 and ex.pools[0].closed


def test_executor_names_and_a_missing_ray_are_explained(monkeypatch):
    with pytest.raises(ExecutorError, match="unknown executor 'dask'; valid executors: threads, ray"):
        parse_executor("dask")
    with pytest.raises(ExecutorError, match="needs --executor ray"):
        parse_executor("threads", address="auto")
    assert parse_executor("threads") is None and parse_executor(None) is None
    monkeypatch.setitem(sys.modules, "ray", None)   # import ray fails, as without the extra
    with pytest.raises(ExecutorError, match=r"pip install -e '\.\[cluster\]'"):
        parse_executor("ray", address="auto")
    monkeypatch.setenv(ENV_EXECUTOR, "rayy")
    with pytest.raises(ExecutorError, match="valid executors: threads, ray"):
        executor_from_env()


def test_an_agent_factory_that_cannot_travel_is_refused_before_any_model_call(tmp_path, fake_env):
    pytest.importorskip("ray")
    from skillbook.run import RayExecutor
    llm = FakeModel(deterministic=False)   # holds a lock and a SQLite handle: it cannot be pickled
    with pytest.raises(ExecutorError, match="cannot be sent to Ray workers"):
        run(tmp_path, llm, executor=RayExecutor(address="ray://127.0.0.1:9"))
    assert llm.calls == [] and load_episodes(tmp_path) == []


# -- the response cache between workers and the driver ----------------------------------------------------
def test_worker_answers_reach_the_driver_cache_and_the_run_replays(tmp_path, fake_env, fake_server_factory):
    """The real LLM client against a fake OpenAI-compatible server, its agent factory pickled as Ray sends
    it: each worker answers from its own cache and hands new entries to the driver, which saves them."""
    server = fake_server_factory(answer="Thought: go\nAction: say done")
    cache = ResponseCache.for_run(tmp_path)
    llm = LLM(server.backend, cache)
    ex = LocalExecutor(pickle=True)
    r = run(tmp_path / "run", llm, tasks=TASKS[:2], executor=ex)
    assert [e.task_id for e in r.episodes] == TASKS[:2]
    asked = server.requests
    assert asked > 0 and llm.stats.live_calls == 0   # the driver's own client asked nothing
    assert len(cache) == asked                       # every worker answer reached the driver's cache
    path = cache.save()
    assert path is not None and sum(1 for _ in gzip.open(path)) == asked
    # the run replays: threads, the driver's cache, no server
    server.close()
    again = run(tmp_path / "replay", llm, tasks=TASKS[:2])
    played = lambda eps: [(e.task_id, [(s.raw, s.observation) for s in e.steps], e.score) for e in eps]  # noqa: E731
    assert played(again.episodes) == played(r.episodes) and llm.stats.live_calls == 0
    assert all(c.cached for e in again.episodes for c in e.calls)


def test_worker_cache_misses_are_answered_from_the_driver_cache(tmp_path):
    from skillbook.run.distributed import ReadThroughCache
    driver = ResponseCache()
    request = {"messages": [{"role": "user", "content": "hi"}], "temperature": 0.0}
    driver.put("m", request, {"text": "hello"})
    worker = ReadThroughCache(lambda identity, req: driver.get(identity, req))
    assert worker.get("m", request) == {"text": "hello"} and worker.hits == 1
    worker.put("m", {**request, "seed": 1}, {"text": "new"})
    lines = worker.take_new_lines()
    assert [json.loads(x)["response"] for x in lines] == [{"text": "new"}]   # the driver's entry is not handed back
    assert worker.take_new_lines() == []
    assert driver.merge_lines(lines, source="worker") == 1 and len(driver) == 2


def test_merged_entries_are_checked_as_on_import(tmp_path):
    from skillbook.llm import CacheFormatError
    worker = ResponseCache()
    worker.put("m", {"q": 1}, {"text": "a"})
    worker.put("m", {"q": 2}, {"text": "b"})
    lines = worker.take_new_lines()
    forged = json.loads(lines[1])
    forged["response"] = {"text": "edited"}
    driver = ResponseCache()
    with pytest.raises(CacheFormatError, match="worker 7:2: response_sha256 .* does not match"):
        driver.merge_lines([lines[0], json.dumps(forged)], source="worker 7")
    assert len(driver) == 0   # all or nothing
    unsigned = {k: v for k, v in json.loads(lines[0]).items() if k != "response_sha256"}
    with pytest.raises(CacheFormatError, match="no 'response_sha256'"):
        driver.merge_lines([json.dumps(unsigned)], source="worker 7")


# -- the one command -------------------------------------------------------------------------------------------
def test_the_book_command_refuses_a_wrong_executor_before_running_anything(monkeypatch):
    from skillbook import book
    from skillbook.book import execution
    ran = []
    monkeypatch.setattr(execution, "_execute_plans", lambda *a, **kw: ran.append(dict(__import__("os").environ)))
    with pytest.raises(SystemExit, match="unknown executor 'dask'; valid executors: threads, ray"):
        book.main(["execute", "--profile", "smoke", "--executor", "dask"])
    with pytest.raises(SystemExit, match="unknown serving mode 'fast'; valid: deterministic, concurrent"):
        book.main(["execute", "--profile", "smoke", "--serving", "fast"])
    with pytest.raises(SystemExit, match="needs --executor ray"):
        book.main(["execute", "--profile", "smoke", "--actors", "4"])
    with monkeypatch.context() as m:
        m.setitem(sys.modules, "ray", None)   # as without the `cluster` extra
        with pytest.raises(SystemExit, match=r"pip install -e '\.\[cluster\]'"):
            book.main(["execute", "--profile", "smoke", "--executor", "ray"])
    assert ran == []
    pytest.importorskip("ray")
    monkeypatch.delenv("SKILLBOOK_EXECUTOR", raising=False)
    book.main(["execute", "--profile", "smoke", "--chapters", "01_agents", "--executor", "ray", "--actors", "4"])
    assert {k: ran[0][k] for k in ran[0] if k.startswith("SKILLBOOK_") and k != "SKILLBOOK_CACHE"} == {
        "SKILLBOOK_EXECUTOR": "ray", "SKILLBOOK_RAY_ADDRESS": "", "SKILLBOOK_RAY_ACTORS": "4",
        "SKILLBOOK_EPISODE_TIMEOUT": "3600", "SKILLBOOK_SERVING": "concurrent"}
    assert "SKILLBOOK_EXECUTOR" not in __import__("os").environ   # only the chapters' kernels see it
    assert isinstance(executor_from_env(), type(None))


def test_concurrent_serving_is_what_the_lab_asks_for(tmp_path, monkeypatch):
    from skillbook.book import Lab
    monkeypatch.setenv("SKILLBOOK_SERVING", "concurrent")
    lab = Lab("x", runs_root=str(tmp_path), backend="openai:http://127.0.0.1:9/v1,http://127.0.0.1:10/v1#m")
    assert lab.llm.deterministic is False and len(lab.llm.fleet.urls) == 2
    monkeypatch.delenv("SKILLBOOK_SERVING")
    assert Lab("y", runs_root=str(tmp_path), backend="openai:http://127.0.0.1:9/v1#m").llm.deterministic


def test_ctrl_c_in_the_driver_stops_the_workers_and_keeps_what_finished(tmp_path, fake_env):
    import os
    import signal

    from skillbook.run import Interrupted
    llm = FakeModel(deterministic=False)
    seen = []

    def policy(observation):
        seen.append(1)
        if len(seen) == 6:
            os.kill(os.getpid(), signal.SIGINT)   # what Ctrl-C does: the driver waits in the pool
            time.sleep(0.5)
        return solve(observation)
    llm.policy = policy
    ex = LocalExecutor(actors=2)
    with pytest.raises(Interrupted):
        run(tmp_path, llm, workers=2, executor=ex)
    assert ex.pools[0].closed
    done = load_episodes(tmp_path)
    assert len(done) < 4 and all(e.success and not e.error for e in done)
    llm.policy = solve
    assert len(run(tmp_path, llm, workers=2, executor=LocalExecutor(actors=2)).episodes) == 4


def test_what_travels_to_a_worker_is_rebuilt_there():
    import pickle

    from skillbook.llm.client import worker_cache
    from skillbook.skills.embeddings import get_embedder
    assert pickle.loads(pickle.dumps(get_embedder())) is get_embedder()   # the worker's own embedder
    llm = LLM("openai:http://a/v1,http://b/v1#m", ResponseCache(), seed=3, deterministic=False, max_retries=5)
    there = pickle.loads(pickle.dumps(llm))
    assert there is not llm and there.cache is worker_cache()
    assert (there.backend, there.seed, there.deterministic, there.max_retries) == (llm.backend, 3, False, 5)
