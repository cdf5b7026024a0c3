"""What the agent and hygiene do with the sandbox's answers: a skill's failure is an observation and the steps
it took stay in the episode; without the jail tool, code skills are refused with a clear message and the
run goes on (text skills are untouched); a jail that fails to start (bwrap failed after its probe) is an
infrastructure error: the episode is retried, no skill is deleted."""
from __future__ import annotations

import dataclasses
import shutil
import tempfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from fakes import FakeCoder, FakeModel, FakeWorld
from skillbook.agent import Agent, AgentConfig
from skillbook.agent.parsing import parse_reply
from skillbook.llm import LLM
from skillbook.memory import MemoryPolicy
from skillbook.papers.breakdown import InducedMemory
from skillbook.papers.breakdown.hygiene import add_with_hygiene
from skillbook.records import Call, Episode, Subtask
from skillbook.run import Condition, IncompleteRun, RunDir, load_episodes, run_condition
from skillbook.skills import Skill, sandbox
from skillbook.skills.library import SkillLibrary

pytest.register_assert_rewrite("sandbox_harness")
pytest_plugins = ["sandbox_harness"]   # the `runner` fixture


class Kitchen:
    """A tiny deterministic environment: 'open fridge' then 'take milk' wins."""

    def __init__(self):
        self.done_actions = []

    def valid_actions(self):
        return ["look", "open fridge", "take milk"]

    def step(self, action):
        self.done_actions.append(action)
        win = self.done_actions[-2:] == ["open fridge", "take milk"]
        return SimpleNamespace(observation=f"You {action}.", score=1.0 if win else 0.0, done=win,
                               info={"success": win})


class Skills(MemoryPolicy):
    name = "stub"

    def __init__(self, code: dict[str, str]):
        self.code = code

    def callable_code(self, name):
        return [self.code[name]] if name in self.code else None


def macro(code: dict[str, str], action: str):
    env, agent = Kitchen(), Agent(LLM("openai:http://127.0.0.1:9/v1#unused"), AgentConfig(max_steps=10), Skills(code))
    ep = Episode("kitchen/0", "fake", "kitchen", "dev", "task", "stub", steps=[])
    text, done = agent._macro(env, ep, Subtask(0, "cook", 0), parse_reply(f"Action: {action}"), "raw",
                              Call("executor", 1, 1, 0.1), budget=10)
    return env, ep, text, done


ROGUE = ("def rogue(env):\n    import sys, time\n    env.step('open fridge')\n"
         "    sys.stdout.write('[\"cmd\"]\\n')\n    sys.stdout.flush()\n    time.sleep(30)\n")


def test_a_protocol_breaking_skill_keeps_its_step_and_reports_the_error():
    env, ep, text, done = macro({"rogue": ROGUE}, "call rogue()")
    assert env.done_actions == ["open fridge"] and [s.action for s in ep.steps] == ["open fridge"]
    assert ep.steps[0].macro == "rogue" and ep.steps[0].valid and not done
    assert "skill rogue ran 1 actions and stopped:" in text and "protocol" in text


def test_a_skill_that_wins_ends_the_episode():
    code = "def fetch(env):\n    env.step('open fridge')\n    env.step('take milk')\n    env.step('look')\n"
    env, ep, text, done = macro({"fetch": code}, "call fetch()")
    assert done and env.done_actions == ["open fridge", "take milk"] and ep.score == 1.0


@pytest.fixture()
def no_jail(monkeypatch):
    """bwrap is not installed."""
    monkeypatch.setattr(sandbox, "find_bwrap", lambda: None)


def test_without_bwrap_code_skills_refuse_to_run_with_a_clear_message(no_jail):
    for attempt in (lambda: sandbox.run(["def f(env):\n    pass\n"], ("f", []), lambda a: ("", False)),
                    lambda: sandbox.load_check(["def f(env):\n    pass\n"])):
        with pytest.raises(sandbox.JailUnavailable, match="apt-get install bubblewrap"):
            attempt()


def test_a_broken_bwrap_is_reported_as_unavailable(monkeypatch):
    monkeypatch.setattr(sandbox, "find_bwrap", lambda: "/bin/false")
    with pytest.raises(sandbox.JailUnavailable, match="cannot start"):
        sandbox.run(["def f(env):\n    pass\n"], ("f", []), lambda a: ("", False))
    assert "cannot start" in sandbox.jail_status()


def test_without_bwrap_the_agent_refuses_the_call_and_goes_on(no_jail):
    env, ep, text, done = macro({"fetch": "def fetch(env):\n    env.step('open fridge')\n"}, "call fetch()")
    assert env.done_actions == [] and not done
    assert "apt-get install bubblewrap" in text and len(ep.steps) == 1 and not ep.steps[0].valid


class Embedder:
    def embed(self, texts):
        vec = lambda t: np.eye(3, dtype=np.float32)[len(t) % 3]  # noqa: E731
        return vec(texts) if isinstance(texts, str) else np.stack([vec(t) for t in texts])


def test_without_bwrap_hygiene_deletes_the_unchecked_code_skill_and_keeps_text_skills(no_jail):
    lib = SkillLibrary(Embedder())
    kept, event = add_with_hygiene(lib, Skill("c1", "fetch milk", "def fetch(env):\n    env.step('x')\n", "code"))
    assert kept is None and event == "deleted" and "c1" not in lib
    assert "bubblewrap" in lib.events[-1]["reason"]
    kept, event = add_with_hygiene(lib, Skill("t1", "fetch milk", "1. open fridge", "text"))
    assert event == "added" and "t1" in lib


# -- issue 33: a jail that fails to start is an infrastructure error, not the skill's ----------------------

@pytest.fixture()
def fake_bwrap():
    """A program that fails the way bwrap does when the process limit is reached (world-executable, so that
    the unprivileged runner can run it too)."""
    d = Path(tempfile.mkdtemp(prefix="skillbook-fake-bwrap-", dir="/tmp"))
    path = d / "bwrap"
    path.write_text("#!/bin/sh\n"
                    "echo 'bwrap: Creating new namespace failed: Resource temporarily unavailable' >&2\n"
                    "exit 1\n")
    d.chmod(0o755)
    path.chmod(0o755)
    yield str(path)
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture()
def failing_jail(monkeypatch, fake_bwrap):
    """The jail passed its probe; then bwrap fails to start, until `jail.broken = False`."""
    real = sandbox.jail()
    state = SimpleNamespace(broken=True)
    monkeypatch.setattr(sandbox, "jail",
                        lambda: dataclasses.replace(real, bwrap=fake_bwrap) if state.broken else real)
    return state


def test_a_jail_that_does_not_start_raises_an_infrastructure_error(failing_jail):
    for attempt in (lambda: sandbox.run(["def f(env):\n    pass\n"], ("f", []), lambda a: ("", False)),
                    lambda: sandbox.load_check(["def f(env):\n    pass\n"])):
        with pytest.raises(sandbox.JailStartError, match="Resource temporarily unavailable") as e:
            attempt()
        assert e.value.infrastructure and not isinstance(e.value, sandbox.JailUnavailable)


@pytest.mark.parametrize("break_it", ["bwrap", "nproc"])
def test_a_jail_start_failure_is_infrastructure_for_every_caller(runner, fake_bwrap, break_it):
    """Also as an unprivileged user, and with the real cause: the process limit (RLIMIT_NPROC binds only
    an unprivileged user)."""
    if break_it == "nproc" and runner.uid == 0:
        pytest.skip("RLIMIT_NPROC does not bind root")
    broken = {"bwrap": fake_bwrap} if break_it == "bwrap" else {"nproc": 0}
    r = runner({"mode": "load_check", "definitions": ["def f(env):\n    pass\n"], "broken_jail": broken})
    assert r.get("raised", "").startswith("JailStartError: ") and r["infrastructure"], r


GRAB = "def grab(env):\n    return env.step('take milk')\n"
FETCH = "def fetch(env):\n    env.step('open fridge')\n    return grab(env)\n"


def test_hygiene_deletes_no_skill_when_the_jail_does_not_start(failing_jail):
    """The real case: bwrap failed after the probe, load_check reported it as the skill's error, and hygiene
    deleted a correct skill and the skills that call it."""
    lib = SkillLibrary(Embedder())
    failing_jail.broken = False
    assert add_with_hygiene(lib, Skill("c1", "take the milk", GRAB, "code"))[1] == "added"
    assert add_with_hygiene(lib, Skill("c2", "fetch milk from the fridge", FETCH, "code"))[1] == "added"
    failing_jail.broken = True
    # a new version of grab (an overwrite), and a new skill whose description duplicates none (Embedder)
    new_version = Skill("c3", "grab the milk", GRAB.replace("take milk", "take the milk"), "code")
    new_skill = Skill("c4", "look once", "def look(env):\n    return env.step('look')\n", "code")
    for new in (new_version, new_skill):
        with pytest.raises(sandbox.JailStartError):
            add_with_hygiene(lib, new)
    assert "c1" in lib and "c2" in lib
    assert not [e for e in lib.events if e["event"] == "deleted"], lib.events


def test_an_episode_whose_jail_does_not_start_is_an_infrastructure_error(failing_jail, fake_env):
    code = {"fetch": "def fetch(env):\n    env.step('add one')\n"}
    llm = FakeModel(policy=lambda obs: "call fetch()")
    ep = Agent(llm, AgentConfig(max_steps=4, n_examples=0), Skills(code)).run(FakeWorld(), "fake/count/dev/0")
    assert ep.stop_reason == "error" and ep.error.startswith("JailStartError: ") and ep.steps == [], ep


def test_the_runner_retries_an_episode_whose_jail_did_not_start(failing_jail, fake_env, tmp_path):
    """End to end on a code-skill stream: the load check of the first episode's skill cannot start a jail, so
    the episode is logged as an infrastructure error and not recorded; the resumed run records it, and the
    skill is in the library."""
    llm = FakeCoder()
    condition = Condition("c", AgentConfig(max_steps=6, n_examples=0), lambda: InducedMemory(llm, "code"),
                          stream=True)
    tasks = ["fake/fetch/dev/0", "fake/fetch/dev/1"]
    with pytest.raises(IncompleteRun, match="JailStartError"):
        run_condition(tmp_path, llm, condition, tasks)
    errors = RunDir(tmp_path).errors()
    assert load_episodes(tmp_path) == [] and errors and all("JailStartError" in e["error"] for e in errors)
    failing_jail.broken = False
    eps = run_condition(tmp_path, llm, condition, tasks).episodes
    assert [e.task_id for e in eps] == tasks and not any(e.error for e in eps)
    state = RunDir(tmp_path).memory_state("stream")[1]
    assert state["library"]["skills"] and not any(e["event"] == "deleted" for e in state["library"]["events"])
