"""A retrieved code skill runs as one macro action: its commands become recorded steps on a real env.

No model is involved: the agent's macro path is driven directly with a parsed reply.
"""
import pytest

from skillbook.agent import Agent, AgentConfig
from skillbook.agent.parsing import parse_reply
from skillbook.envs import make_env
from skillbook.llm import LLM
from skillbook.papers.breakdown import InducedMemory
from skillbook.records import Call, Episode, Subtask
from skillbook.skills import Skill
from skillbook.skills.library import SkillLibrary

pytestmark = pytest.mark.integration

SIMON = "twx/simonsays/dev/0"


@pytest.fixture()
def setting():
    env = make_env("twx")
    gold = env.gold_actions(SIMON)
    env.reset(SIMON)
    lib = SkillLibrary()
    body = ("def obey(env, first, second):\n    env.step(first)\n    env.step('dance wildly')\n"
            "    return env.step(second)\n")
    lib.add(Skill("c0001", "do what Simon says twice", body, "code", extra={"function": "obey"}))
    memory = InducedMemory(LLM("openai:http://127.0.0.1:9/v1#unused"), "code", library=lib, frozen=True)
    agent = Agent(memory.llm, AgentConfig(max_steps=10), memory)
    ep = Episode(SIMON, "twx", "simonsays", "dev", "task", memory.name, steps=[])
    sub = Subtask(0, "obey", 0)
    yield env, gold, agent, ep, sub
    env.close()


def test_macro_expands_into_exactly_the_skills_commands(setting):
    env, gold, agent, ep, sub = setting
    parsed = parse_reply(f"Thought: use the skill\nAction: call obey({gold[0]!r}, {gold[1]!r})")
    text, done = agent._macro(env, ep, sub, parsed, "raw reply", Call("executor", 1, 1, 0.1), budget=10)
    assert [s.action for s in ep.steps] == [gold[0], "dance wildly", gold[1]]
    assert [s.valid for s in ep.steps] == [True, False, True]  # the invalid command never reached the env
    assert all(s.macro == "obey" for s in ep.steps) and ep.steps[0].call is not None and ep.steps[1].call is None
    assert ep.score > 0 and not done
    assert text.startswith("Observation: skill obey ran 3 actions")


def test_macro_budget_and_unknown_skills(setting):
    env, gold, agent, ep, sub = setting
    text, _ = agent._macro(env, ep, sub, parse_reply(f"Action: call obey({gold[0]!r}, {gold[1]!r})"), "", None,
                           budget=2)
    assert len(ep.steps) == 2 and "stopped: more than 2 commands" in text
    text, _ = agent._macro(env, ep, sub, parse_reply("Action: call fly('x')"), "", None, budget=5)
    assert "no code skill named 'fly'" in text and not ep.steps[-1].valid
    text, _ = agent._macro(env, ep, sub, parse_reply("Action: call obey(__import__('os'))"), "", None, budget=5)
    assert "literals" in text
