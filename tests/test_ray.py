"""The Ray executor and a fleet of model servers, for real, on this machine: a local Ray (two CPUs), the
embedded 0.5B model, TextWorldExpress. A few two-step episodes: 4.5 min in all on 2 busy cores.

* the same small run through Ray and through threads gives the same records (deterministic serving);
* killing the actor mid-episode costs that episode only: it is logged and re-run on a new actor;
* a fleet of two llama.cpp server processes receives the requests of one run, and when one is killed
  its requests move to the other.
"""
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ray = pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")

from skillbook.agent import AgentConfig  # noqa: E402
from skillbook.llm import LLM, ResponseCache  # noqa: E402
from skillbook.run import Condition, RayExecutor, RunDir, load_episodes, run_condition  # noqa: E402

MODEL = "embedded:qwen2.5-coder-0.5b"
ENV = {"twx": {"game_params": {"twc": {"numLocations": 1, "numItemsToPutAway": 1}}}}
TASKS = ["twx/twc/dev/0", "twx/twc/dev/1", "twx/twc/dev/2"]


@pytest.fixture(scope="module")
def local_ray():
    import skillbook
    lib = str(Path(skillbook.__file__).resolve().parents[1])   # the workers import this very library
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": lib, "HF_HUB_OFFLINE": "1"}})
    yield
    ray.shutdown()


def played(run_dir) -> list:
    """What a run recorded, without its clock: task, (action, raw reply) per step, outcome, error."""
    return [[e.task_id, [(s.action, s.raw) for s in e.steps], e.score, e.success, e.error]
            for e in load_episodes(run_dir)]


def condition(max_steps=2):
    return Condition("none", AgentConfig(max_steps=max_steps, n_examples=0))


def test_ray_records_what_threads_record(tmp_path, local_ray):
    t0 = time.monotonic()
    threads = LLM(MODEL, ResponseCache(tmp_path / "threads.sqlite"))
    run_condition(tmp_path / "threads", threads, condition(), TASKS[:2], ENV)
    threads._server.stop()
    on_ray = LLM(MODEL, ResponseCache(tmp_path / "ray.sqlite"))
    run_condition(tmp_path / "ray", on_ray, condition(), TASKS[:2], ENV, workers=2, executor=RayExecutor())
    records = played(tmp_path / "ray")
    assert len(records) == 2 and all(steps and not error for _, steps, _, _, error in records)
    assert records == played(tmp_path / "threads")
    # the actor's answers reached the driver's cache: this run now replays without a model
    live = sum(not c.cached for e in load_episodes(tmp_path / "ray") for c in e.calls)
    assert on_ray.stats.live_calls == 0 and len(on_ray.cache) == live > 0
    session = json.loads((tmp_path / "ray" / "sessions.jsonl").read_text().splitlines()[-1])
    assert session["executor"] == "ray" and session["actors"] == 1   # deterministic: one episode in flight
    print(f"\n[measured] threads then Ray, 2 episodes each: {time.monotonic() - t0:.0f} s")


def _episode_workers() -> list:
    """The actor processes of this test's local Ray (descendants of this process, nobody else's)."""
    return [p for p in psutil.Process().children(recursive=True)
            if "EpisodeWorker" in " ".join(_cmdline(p))]


def _cmdline(p) -> list[str]:
    try:
        return p.cmdline() + [p.name()]
    except psutil.Error:
        return []


def test_a_killed_actor_costs_only_the_episode_in_flight(tmp_path, local_ray):
    t0 = time.monotonic()
    run_dir = tmp_path / "run"
    killed: list[int] = []

    def kill_during_the_second_episode():
        log = run_dir / "episodes" / "open.jsonl"
        while not (log.exists() and log.read_text().count("\n") >= 1):
            time.sleep(0.2)
        time.sleep(1.0)   # the second episode is in flight
        for p in _episode_workers():
            killed.append(p.pid)
            p.kill()

    watcher = threading.Thread(target=kill_during_the_second_episode, daemon=True)
    watcher.start()
    llm = LLM(MODEL, ResponseCache(tmp_path / "ray.sqlite"))
    run_condition(run_dir, llm, condition(), TASKS, ENV, executor=RayExecutor())
    watcher.join(timeout=5)
    assert killed
    eps = load_episodes(run_dir)
    assert [e.task_id for e in eps] == TASKS and not any(e.error for e in eps)
    errors = RunDir(run_dir).errors()
    assert [(e["position"], e["task_id"]) for e in errors] == [(0, TASKS[1])] and "died" in errors[0]["error"]
    # the first episode was recorded once and kept; only the one in flight ran again
    lines = [json.loads(x) for x in (run_dir / "episodes" / "open.jsonl").read_text().splitlines()]
    assert [d["task_id"] for d in lines] == TASKS
    print(f"\n[measured] 3 episodes on Ray with one actor killed: {time.monotonic() - t0:.0f} s")


@pytest.fixture
def two_servers():
    """Two llama.cpp server processes serving the 0.5B model, as a fleet of OpenAI-compatible servers."""
    from skillbook.llm.modelfiles import gguf_path
    gguf = gguf_path("qwen2.5-coder-0.5b")
    procs = []
    for _ in range(2):
        p = subprocess.Popen([sys.executable, "-m", "skillbook.llm.server", "--gguf", str(gguf),
                              "--alias", "qwen2.5-coder-0.5b", "--parallel", "1", "--threads", "1"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        procs.append(p)
    urls = [json.loads(p.stdout.readline())["address"].rstrip("/") + "/v1" for p in procs]
    yield procs, urls
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


def test_a_fleet_receives_one_run_and_a_killed_server_sends_its_requests_to_the_other(tmp_path, two_servers):
    t0 = time.monotonic()
    procs, urls = two_servers
    llm = LLM(f"openai:{','.join(urls)}#qwen2.5-coder-0.5b", ResponseCache(tmp_path / "c.sqlite"),
              deterministic=False, backoff_s=0.5)
    first = run_condition(tmp_path / "before", llm, condition(2), TASKS[:2], ENV, workers=2)
    before = {s["url"]: s["served"] for s in llm.describe()["servers"]}
    assert all(before[u] > 0 for u in urls), before   # both servers answered this run
    procs[0].kill()                                   # a server process dies
    procs[0].wait()
    after_run = run_condition(tmp_path / "after", llm, condition(2), TASKS[1:3], ENV, workers=2)
    after = {s["url"]: s for s in llm.describe()["servers"]}
    assert after[urls[0]]["served"] == before[urls[0]] and after[urls[0]]["failures"] >= 1
    assert after[urls[1]]["served"] > before[urls[1]]
    assert not any(e.error for e in first.episodes + after_run.episodes) and llm.stats.errors == 0
    print(f"\n[measured] a fleet of two servers, one killed: {time.monotonic() - t0:.0f} s")
