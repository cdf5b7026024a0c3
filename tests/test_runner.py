"""The runner: validation before any model call, append-only records, resume, settings fingerprint, the
run-directory lock, infrastructure errors retried and never counted, Ctrl-C. Control flow on the FAKE
world and model (tests/fakes.py); one real kill of a real run at the end."""
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from fakes import FakeModel, FakeWorld
from skillbook.agent import Agent, AgentConfig
from skillbook.envs import TaskIdError
from skillbook.llm import LLM
from skillbook.memory import NoMemory
from skillbook.papers.breakdown import InducedMemory
from skillbook.run import (
    Condition,
    IncompleteRun,
    RunDir,
    RunLocked,
    independent_streams,
    load_episodes,
    run_condition,
    run_streams,
)
from skillbook.skills.library import SkillLibrary

TASKS = [f"fake/count/dev/{i}" for i in range(4)]


def test_bad_task_ids_fail_before_any_model_call(tmp_path):
    llm = LLM("openai:http://127.0.0.1:9/v1#nothing-listens")  # any model call would fail loudly
    make = lambda: Agent(llm, AgentConfig())  # noqa: E731
    for bad, message in [("twx/coin/validation/0", "valid splits: train, dev, test"),
                         ("twx/coins/dev/0", "valid: cookingworld"),
                         ("alfworld/pick/dev/0", "valid envs: sciworld, twx, tau2"),
                         ("twx/coin/dev/5000", r"valid 0\.\.999")]:
        with pytest.raises(TaskIdError, match=message):
            run_streams(tmp_path, {"s": ["twx/coin/dev/0", bad]}, make, progress=False)
    with pytest.raises(ValueError, match="workers must be a positive integer"):
        run_streams(tmp_path, {"s": ["twx/coin/dev/0"]}, make, workers=0, progress=False)
    # the real case mypy found: with retries < 0 no attempt ran and the worker thread died on None.error
    with pytest.raises(ValueError, match="retries must be a non-negative integer"):
        run_streams(tmp_path, {"s": ["twx/coin/dev/0"]}, make, retries=-1, progress=False)
    with pytest.raises(ValueError, match="valid: task, subtask"):
        run_streams(tmp_path, {"s": ["twx/coin/dev/0"]}, lambda: Agent(llm, AgentConfig(level="flat")),
                    progress=False)
    assert llm.stats.calls == 0
    assert not list(tmp_path.iterdir())


def run(tmp_path, llm, tasks=TASKS, memory=NoMemory, stream=False, config=None, **kw):
    c = Condition("c", config or AgentConfig(max_steps=6, n_examples=0), memory, stream=stream)
    return run_condition(tmp_path, llm, c, tasks, **kw)


def test_records_are_append_only_and_a_replay_writes_nothing(tmp_path, fake_env, monkeypatch):
    from skillbook.run import store
    monkeypatch.setattr(store, "CHUNK", 3)
    llm = FakeModel()
    r = run(tmp_path, llm)
    assert [e.task_id for e in r.episodes] == TASKS and all(e.success for e in r.episodes)
    chunks = sorted((tmp_path / "episodes").glob("*.jsonl.gz"))
    assert [c.name for c in chunks] == ["000001.jsonl.gz"]              # 3 sealed, 1 open
    assert len((tmp_path / "episodes" / "open.jsonl").read_text().splitlines()) == 1
    before = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file()}
    calls = len(llm.calls)
    again = run(tmp_path, llm)                                          # a replay
    assert len(llm.calls) == calls and [e.to_dict() for e in again.episodes] == [e.to_dict() for e in r.episodes]
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file()} == before
    assert len((tmp_path / "sessions.jsonl").read_text().splitlines()) == 1


def test_a_replay_shows_the_progress_line_a_live_run_ends_with(tmp_path, fake_env, capsys):
    # A chapter replayed from its records must read as the live execution did: its progress bars (one line
    # each on the page, book/reading.py) are shown finished, not left out.
    run(tmp_path, FakeModel(), desc="count")
    live = capsys.readouterr().err
    run(tmp_path, FakeModel(), desc="count")
    replay = capsys.readouterr().err
    assert "count: 100%" in live and "4/4" in live
    assert "count: 100%" in replay and "4/4" in replay


def test_only_requested_tasks_and_only_recorded_files_are_returned(tmp_path, fake_env):
    llm = FakeModel()
    run(tmp_path, llm)
    (tmp_path / "episodes" / "t0001 (copy).jsonl").write_text("not a record\n")   # stray files are not read
    (tmp_path / "streams").mkdir()
    (tmp_path / "streams" / "t0001 (copy).json").write_text("{}")
    assert [e.task_id for e in run(tmp_path, llm, TASKS[:2]).episodes] == TASKS[:2]
    assert len(load_episodes(tmp_path)) == 4


def test_changed_settings_are_refused_even_when_everything_is_recorded(tmp_path, fake_env):
    """The real case: chapter 02's task-text re-run with k=1, threshold=0.99 accepted the old episodes."""
    llm = FakeModel()
    mem = lambda **kw: (lambda: InducedMemory(llm, "text", **kw))  # noqa: E731
    run(tmp_path, llm, TASKS[:2], memory=mem(k=5, threshold=0.3), stream=True)
    for changed, what in [(dict(memory=mem(k=1, threshold=0.99)), "memory.k, memory.threshold"),
                          (dict(memory=mem(k=5, threshold=0.3), config=AgentConfig(max_steps=7, n_examples=0)),
                           "agent.max_steps"),
                          (dict(memory=mem(k=5, threshold=0.3), stream=False), "mode")]:
        with pytest.raises(ValueError, match=f"recorded with other settings \\({what}\\)"):
            run(tmp_path, llm, TASKS[:2], **{"stream": True, **changed})
    # a frozen library is part of the settings by its content
    lib = SkillLibrary()
    with pytest.raises(ValueError, match="memory"):
        run(tmp_path, llm, TASKS[:2], memory=lambda: InducedMemory(llm, "text", library=lib, frozen=True), stream=True)


def test_a_stream_may_be_extended_but_not_changed(tmp_path, fake_env):
    llm = FakeModel()
    run(tmp_path, llm, TASKS[:2], memory=lambda: InducedMemory(llm, "text"), stream=True)
    n = len(llm.calls)
    r = run(tmp_path, llm, TASKS, memory=lambda: InducedMemory(llm, "text"), stream=True)
    assert [e.position for e in r.episodes] == [0, 1, 2, 3] and len(llm.calls) > n
    with pytest.raises(ValueError, match="recorded for other tasks"):
        run(tmp_path, llm, TASKS[::-1], memory=lambda: InducedMemory(llm, "text"), stream=True)


def test_memory_stream_resumes_with_the_memory_it_had(tmp_path, fake_env):
    llm = FakeModel()
    make = lambda: InducedMemory(llm, "text")  # noqa: E731
    full = run(tmp_path / "full", llm, TASKS, memory=make, stream=True)
    run(tmp_path / "part", llm, TASKS[:2], memory=make, stream=True)
    resumed = run(tmp_path / "part", llm, TASKS, memory=make, stream=True)
    strip = lambda eps: [{k: v for k, v in e.to_dict().items() if k != "wall_s"} for e in eps]  # noqa: E731
    assert strip(resumed.episodes) == strip(full.episodes)
    # a crash between appending an episode and saving the memory: the episode is re-run, not kept
    store = RunDir(tmp_path / "part")
    store.save_memory("stream", 3, store.memory_state("stream")[1])   # memory says 3 episodes, log has 4
    assert len(load_episodes(tmp_path / "part")) == 3


def test_infrastructure_errors_are_retried_logged_and_never_recorded(tmp_path, fake_env):
    FakeWorld.crash = {TASKS[1]: 0}                 # the simulator dies on every attempt of task 1
    llm = FakeModel()
    with pytest.raises(IncompleteRun, match="fake/count/dev/1"):
        run(tmp_path, llm)
    eps = load_episodes(tmp_path)
    assert [e.task_id for e in eps] == [TASKS[0], TASKS[2], TASKS[3]] and not any(e.error for e in eps)
    errors = RunDir(tmp_path).errors()
    assert [(e["task_id"], e["attempt"]) for e in errors] == [(TASKS[1], 1), (TASKS[1], 2)]
    FakeWorld.crash = {}                            # resume: only the failed task runs
    n = len(llm.calls)
    r = run(tmp_path, llm)
    assert [e.task_id for e in r.episodes] == TASKS and all(not e.error for e in r.episodes)
    assert 0 < len(llm.calls) - n < 20


def test_a_memory_stream_stops_at_an_infrastructure_error(tmp_path, fake_env):
    FakeWorld.crash = {TASKS[1]: 1}
    llm = FakeModel()
    with pytest.raises(IncompleteRun):
        run(tmp_path, llm, memory=lambda: InducedMemory(llm, "text"), stream=True)
    assert [e.task_id for e in load_episodes(tmp_path)] == [TASKS[0]]   # a stream cannot skip a task
    FakeWorld.crash = {}
    assert len(run(tmp_path, llm, memory=lambda: InducedMemory(llm, "text"), stream=True).episodes) == 4


def test_model_server_failure_is_an_infrastructure_error(tmp_path, fake_env):
    llm = FakeModel(fail_on="Room 2.")
    with pytest.raises(IncompleteRun, match="fake server failure"):
        run(tmp_path, llm)
    assert [e.task_id for e in load_episodes(tmp_path)] == [TASKS[0], TASKS[1], TASKS[3]]


def test_a_second_process_on_the_same_run_directory_is_refused(tmp_path, fake_env):
    holder = RunDir(tmp_path).lock()
    try:
        script = ("import sys; from skillbook.run import RunDir, RunLocked\n"
                  "try:\n    RunDir(sys.argv[1]).lock()\nexcept RunLocked as e:\n    print(e)\n")
        out = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True).stdout
        assert f"pid {os.getpid()}" in out and "being run by" in out
        with pytest.raises(RunLocked):
            run(tmp_path, FakeModel())
    finally:
        holder.unlock()
    run(tmp_path, FakeModel())


def test_ctrl_c_stops_within_one_step_and_keeps_what_finished(tmp_path, fake_env):
    llm = FakeModel()
    seen = []

    def slow(observation):
        seen.append(1)
        if len(seen) == 5:
            os.kill(os.getpid(), signal.SIGINT)      # what Ctrl-C or a Jupyter interrupt does
            time.sleep(0.5)
        from fakes import solve
        return solve(observation)

    llm.policy = slow
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, llm)
    assert len(seen) == 5                            # no model call after the interrupt
    done = load_episodes(tmp_path)
    assert 1 <= len(done) < 4 and all(e.success for e in done)
    assert json.loads((tmp_path / "sessions.jsonl").read_text().splitlines()[-1])["episodes_run"] == len(done)
    llm.policy = __import__("fakes").solve
    assert len(run(tmp_path, llm).episodes) == 4


def test_worker_threads_stop_when_one_is_interrupted(tmp_path, fake_env):
    llm = FakeModel(deterministic=False)
    started = threading.Event()

    def policy(observation):
        started.set()
        raise KeyboardInterrupt
    llm.policy = policy
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, llm, workers=2)
    assert started.is_set() and load_episodes(tmp_path) == []


def test_independent_streams_one_task_each():
    s = independent_streams(["x/a/dev/0", "x/a/dev/1"])
    assert list(s.values()) == [["x/a/dev/0"], ["x/a/dev/1"]] and len(set(s)) == 2


def test_live_minutes_counts_overlapping_sessions_once():
    import pandas as pd

    from skillbook.run import live_minutes
    s = pd.DataFrame({"started": ["2026-01-01T10:00:00", "2026-01-01T10:05:00", "2026-01-01T11:00:00"],
                      "elapsed_s": [600, 600, 5], "episodes_run": [3, 2, 0]})
    assert live_minutes(s) == pytest.approx(15.0)  # 10:00 → 10:15; the replay at 11:00 ran nothing
    assert live_minutes(s.iloc[2:]) == 0.0
    later = pd.DataFrame({"started": ["2026-01-01T18:00:00"], "elapsed_s": [120], "episodes_run": [1],
                          "execution": ["p2"]})
    assert live_minutes(pd.concat([s, later], ignore_index=True)) == pytest.approx(17.0)


def test_sittings_and_stage_costs_of_a_chapters_runs(tmp_path, fake_env):
    # chapter 06 says what its runs cost per sitting (execution) and per stage
    from skillbook.run import sittings, stage_costs
    llm = FakeModel()
    run(tmp_path / "upstream" / "pass1", llm, tasks=TASKS[:2])
    run(tmp_path / "test" / "none", llm, tasks=TASKS)
    s = sittings(tmp_path)
    assert list(s.columns) == ["execution", "started", "live_min", "episodes"]
    assert s.episodes.sum() == 6 and len(s) == 1       # one process: one sitting
    c = stage_costs(tmp_path)
    assert sorted(c.index) == ["test", "upstream"] and c.loc["test", "episodes"] == 4
    assert (c.live_calls > 0).all() and (c.cached == 0).all()
    assert sittings(tmp_path / "nothing").empty


RUN_SCRIPT = """
import sys, time
from skillbook.agent import Agent, AgentConfig
from skillbook.llm import LLM, ResponseCache
from skillbook.run import run_streams
out, cache = sys.argv[1], sys.argv[2]
llm = LLM("embedded:qwen2.5-coder-0.5b", ResponseCache(cache))
streams = {"a": ["twx/simonsays/dev/0", "twx/simonsays/dev/1", "twx/simonsays/dev/2"],
           "b": ["twx/peckingorder/dev/0", "twx/peckingorder/dev/1"]}


class PacedAgent(Agent):  # replayed answers are fast; the pause gives the test time to kill mid-run
    def run(self, *a, **kw):
        ep = super().run(*a, **kw)
        time.sleep(float(sys.argv[3]))
        return ep


run_streams(out, streams, lambda: PacedAgent(llm, AgentConfig(max_steps=2, n_examples=0)), progress=False)
"""


def _records(run_dir):
    out = []
    for e in sorted(load_episodes(run_dir), key=lambda e: (e.stream, e.position)):
        d = e.to_dict()
        d.pop("wall_s")  # wall time and whether an answer was replayed are bookkeeping, not results
        for c in d["calls"] + [s["call"] for s in d["steps"] if s["call"]]:
            c.pop("cached")
        out.append(d)
    return out


@pytest.mark.integration
def test_killed_run_resumes_to_the_same_records(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(RUN_SCRIPT)
    cache = tmp_path / "responses.sqlite"
    subprocess.run([sys.executable, str(script), str(tmp_path / "full"), str(cache), "0"], check=True)
    # the same run, killed (SIGKILL, no clean-up) once two episodes are recorded, then resumed
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path / "killed"), str(cache), "1.5"],
                            start_new_session=True)
    deadline = time.time() + 300
    while time.time() < deadline:
        if len(load_episodes(tmp_path / "killed")) >= 2 or proc.poll() is not None:
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    partial = _records(tmp_path / "killed")
    assert 0 < len(partial) < 5, "the kill should land mid-run"
    subprocess.run([sys.executable, str(script), str(tmp_path / "killed"), str(cache), "0"], check=True)
    full, resumed = _records(tmp_path / "full"), _records(tmp_path / "killed")
    assert len(full) == 5
    assert resumed == full


def test_records_of_an_earlier_agent_loop_are_refused(tmp_path, fake_env, monkeypatch):
    """The real case: the calibration's records were resumed after the loop guard changed (same settings,
    other behaviour); the loop's revision and prompt files are part of the fingerprint."""
    from skillbook.agent import loop
    llm = FakeModel()
    run(tmp_path, llm, TASKS[:2])
    monkeypatch.setattr(loop, "AGENT_REVISION", loop.AGENT_REVISION + 1)
    with pytest.raises(ValueError, match=r"other settings \(agent_code.revision\)"):
        run(tmp_path, llm, TASKS[:2])


def test_records_made_under_an_earlier_simulator_revision_are_refused(tmp_path, fake_env, monkeypatch):
    """The real case: ScienceWorld's object order depended on the JVM's history until its JVMs got
    `-XX:hashCode=2` (revision 2), which also changed gold paths; chapter 01's records made before it must
    not replay as the new simulator's. Envs still at revision 1 keep the fingerprint they had."""
    from skillbook.envs import simulator_revisions
    from skillbook.envs.scienceworld import ScienceWorld
    from skillbook.envs.textworld_express import TextWorldExpress
    assert ScienceWorld.SIMULATOR_REVISION == 2 and getattr(TextWorldExpress, "SIMULATOR_REVISION", 1) == 1
    assert simulator_revisions(["twx", "sciworld", "twx"]) == {"sciworld": 2}
    assert simulator_revisions(["twx", "tau2"]) == {}
    llm = FakeModel()
    run(tmp_path / "a", llm, TASKS[:2])
    assert "simulators" not in json.loads((tmp_path / "a" / "run.json").read_text())["settings"]
    monkeypatch.setattr(fake_env, "SIMULATOR_REVISION", 2, raising=False)
    with pytest.raises(ValueError, match=r"other settings \(simulators\)"):
        run(tmp_path / "a", llm, TASKS[:2])
    run(tmp_path / "b", llm, TASKS[:2])
    assert json.loads((tmp_path / "b" / "run.json").read_text())["settings"]["simulators"] == {"fake": 2}


@pytest.mark.parametrize("module", ["study", "ceiling"])
def test_a_study_started_with_sigint_ignored_still_stops_on_sigint(module, tmp_path):
    """A shell starts a background command with SIGINT ignored, and Python keeps it so: the real case, a
    calibration started with `&` could only be killed (its unsaved answers lost). The studies' command
    lines give SIGINT back its default, so `stop` and Ctrl-C end them within one step."""
    import subprocess
    import sys
    code = (f"import os, signal, time\nfrom skillbook.papers.breakdown import {module}\n"
            f"{module}.main(['status', '--profile', '{module}', '--runs-root', {str(tmp_path)!r}])\n"
            "os.kill(os.getpid(), signal.SIGINT)\ntime.sleep(5)\nprint('still running')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert "still running" not in r.stdout and "KeyboardInterrupt" in r.stderr, r.stdout[-500:] + r.stderr[-500:]
