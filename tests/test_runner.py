"""The task-stream runner: validation before any model call, checkpoints, resume after a real kill."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from skillbook.agents import Agent, AgentConfig
from skillbook.envs import TaskIdError
from skillbook.llm import LLM
from skillbook.runner import independent_streams, load_episodes, run_streams


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
    with pytest.raises(ValueError, match="valid: task, subtask"):
        run_streams(tmp_path, {"s": ["twx/coin/dev/0"]}, lambda: Agent(llm, AgentConfig(level="flat")),
                    progress=False)
    assert llm.stats.calls == 0
    assert not (tmp_path / "streams").exists() or not list((tmp_path / "streams").iterdir())


RUN_SCRIPT = """
import sys, time
from skillbook.agents import Agent, AgentConfig
from skillbook.llm import LLM, ResponseCache
from skillbook.runner import run_streams
out, cache = sys.argv[1], sys.argv[2]
llm = LLM("embedded:qwen2.5-coder-0.5b", ResponseCache(cache))
streams = {"a": ["twx/simonsays/dev/0", "twx/simonsays/dev/1", "twx/simonsays/dev/2"],
           "b": ["twx/peckingorder/dev/0", "twx/peckingorder/dev/1"]}


class PacedAgent(Agent):  # replayed answers are fast; the pause gives the test time to kill mid-run
    def run(self, *a, **kw):
        ep = super().run(*a, **kw)
        time.sleep(float(sys.argv[3]))
        return ep


run_streams(out, streams, lambda: PacedAgent(llm, AgentConfig(max_steps=4, n_examples=0)), workers=2,
            progress=False)
"""


def _records(run_dir):
    eps = sorted(load_episodes(run_dir), key=lambda e: (e.stream, e.position))
    out = []
    for e in eps:
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
    # uninterrupted run
    subprocess.run([sys.executable, str(script), str(tmp_path / "full"), str(cache), "0"], check=True)
    # the same run, killed (SIGKILL, no clean-up) once two tasks are checkpointed, then resumed
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path / "killed"), str(cache), "1.5"],
                            start_new_session=True)
    deadline = time.time() + 300
    while time.time() < deadline:
        done = sum(len(json.loads(p.read_text())["episodes"])
                   for p in (tmp_path / "killed" / "streams").glob("*.json")) if (tmp_path / "killed" / "streams").exists() else 0
        if done >= 2 or proc.poll() is not None:
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    partial = _records(tmp_path / "killed")
    assert 0 < len(partial) < 5, "the kill should land mid-run"
    subprocess.run([sys.executable, str(script), str(tmp_path / "killed"), str(cache), "0"], check=True)
    full, resumed = _records(tmp_path / "full"), _records(tmp_path / "killed")
    assert len(full) == 5
    assert [(r["stream"], r["position"]) for r in resumed] == [(r["stream"], r["position"]) for r in full]
    assert resumed == full


def test_independent_streams_one_task_each():
    s = independent_streams(["x/a/dev/0", "x/a/dev/1"])
    assert list(s.values()) == [["x/a/dev/0"], ["x/a/dev/1"]] and len(set(s)) == 2


def test_resuming_with_other_settings_is_refused(tmp_path):
    llm = LLM("openai:http://127.0.0.1:9/v1#nothing-listens")
    (tmp_path / "streams").mkdir()
    recorded = {"format": 1, "stream": "s", "tasks": ["twx/coin/dev/0"], "episodes": [], "memory": {},
                "config": {"agent": {"max_steps": 50}, "backend": llm.backend}}
    (tmp_path / "streams" / "s.json").write_text(json.dumps(recorded))
    with pytest.raises(ValueError, match="recorded with other settings .*agent"):
        run_streams(tmp_path, {"s": ["twx/coin/dev/0", "twx/coin/dev/1"]},
                    lambda: Agent(llm, AgentConfig(max_steps=5)), progress=False)
    assert llm.stats.calls == 0


def test_live_minutes_counts_overlapping_sessions_once():
    import pandas as pd
    from skillbook.runner import live_minutes
    s = pd.DataFrame({"started": ["2026-01-01T10:00:00", "2026-01-01T10:05:00", "2026-01-01T11:00:00"],
                      "elapsed_s": [600, 600, 5], "episodes_run": [3, 2, 0]})
    assert live_minutes(s) == pytest.approx(15.0)  # 10:00 → 10:15; the replay at 11:00 ran nothing
    assert live_minutes(s.iloc[2:]) == 0.0
    # a resume in another execution adds its own span, not the hours since the first
    later = pd.DataFrame({"started": ["2026-01-01T18:00:00"], "elapsed_s": [120], "episodes_run": [1],
                          "execution": ["p2"]})
    assert live_minutes(pd.concat([s, later], ignore_index=True)) == pytest.approx(17.0)
