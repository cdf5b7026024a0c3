"""Both agents on short real episodes with the real 0.5B model, on each environment."""
import pytest

from skillbook.agent import Agent, AgentConfig
from skillbook.envs import make_env
from skillbook.records import Episode

pytestmark = pytest.mark.integration

TASKS = {"twx": "twx/simonsays/dev/0", "sciworld": "sciworld/find-non-living-thing/dev/1"}


@pytest.fixture(scope="module")
def envs():
    made = {name: make_env(name) for name in TASKS}
    yield made
    for e in made.values():
        e.close()


@pytest.mark.parametrize("env_name", sorted(TASKS))
def test_task_level_agent_runs_a_real_episode_within_its_budget(small_llm, envs, env_name):
    agent = Agent(small_llm, AgentConfig(level="task", max_steps=4))
    ep = agent.run(envs[env_name], TASKS[env_name])
    assert not ep.error, ep.error
    assert 1 <= len(ep.steps) <= 4
    assert len(ep.subtasks) == 1 and ep.subtasks[0].description == ep.instruction
    assert all(c.role == "executor" for c in ep.calls)
    assert ep.stop_reason in ("step_budget", "env_done", "loop")
    assert all(s.call is not None and s.call.prompt_tokens > 0 for s in ep.steps)
    cost = ep.cost()
    assert cost["llm_calls"] == len(ep.calls) >= len(ep.steps) and cost["dependency_1e9"] > 0
    assert Episode.from_dict(ep.to_dict()) == ep  # records round-trip


@pytest.mark.parametrize("env_name", sorted(TASKS))
def test_subtask_level_agent_plans_executes_and_summarizes(small_llm, envs, env_name):
    cfg = AgentConfig(level="subtask", max_steps=5, max_subtasks=2, max_subtask_steps=3)
    ep = Agent(small_llm, cfg).run(envs[env_name], TASKS[env_name])
    assert not ep.error, ep.error
    assert len(ep.steps) <= 5 and len(ep.subtasks) <= 2
    roles = [c.role for c in ep.calls]
    assert roles[0] == "planner"
    if ep.subtasks:
        assert "summarizer" in roles or ep.stop_reason == "env_done"
        for sub in ep.subtasks:
            assert sub.end - sub.start <= 3
            assert all(s.subtask == sub.index for s in ep.steps[sub.start:sub.end])
        assert ep.subtasks[0].summary or ep.stop_reason == "env_done"


def test_step_budget_is_enforced_even_when_every_reply_is_invalid(small_llm, envs):
    # loop_patience above the budget: only the budget can stop this episode
    cfg = AgentConfig(level="task", max_steps=3, loop_patience=10, n_examples=0)
    ep = Agent(small_llm, cfg).run(envs["twx"], "twx/cookingworld/dev/5")
    assert len(ep.steps) == 3 and ep.stop_reason in ("step_budget", "env_done")


def test_bad_agent_parameters_name_the_valid_choices(small_llm):
    with pytest.raises(ValueError, match="valid: task, subtask"):
        Agent(small_llm, AgentConfig(level="hierarchical"))
    with pytest.raises(ValueError, match="max_steps must be a positive integer"):
        Agent(small_llm, AgentConfig(max_steps=0))
