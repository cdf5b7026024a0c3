"""What the agent and hygiene do with the sandbox's answers: a skill's failure is an observation and the steps
it took stay in the episode; without the jail tool, code skills are refused with a clear message and the
run goes on (text skills are untouched)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from skillbook.agent import Agent, AgentConfig
from skillbook.agent.parsing import parse_reply
from skillbook.llm import LLM
from skillbook.memory import MemoryPolicy
from skillbook.records import Call, Episode, SubTrajectory
from skillbook.skills import Skill, sandbox
from skillbook.papers.breakdown.hygiene import add_with_hygiene
from skillbook.skills.library import SkillLibrary


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
    text, done = agent._macro(env, ep, SubTrajectory(0, "cook", 0), parse_reply(f"Action: {action}"), "raw",
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
