"""τ²-bench adapter: official splits, actions, and the package's own evaluator on gold and empty runs."""

import pytest

from fakes import ScriptedModel
from skillbook.envs import TaskIdError, make_env
from skillbook.envs.tau2 import DEV_EVERY


def ScriptedUserLLM(lines=("I need help with an order of mine.",)):
    """The simulated user says its lines, then stops (a FAKE model, for control flow only)."""
    return ScriptedModel(lines, then="Thanks. ###STOP###")


@pytest.fixture(scope="module")
def env():
    e = make_env("tau2")
    yield e
    e.close()


def test_splits_are_official_and_disjoint(env):
    import os
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from tau2.registry import registry
    official = registry.get_task_splits_loader("retail")()
    train, dev, test = (set(env.split_ids("retail", s)) for s in ("train", "dev", "test"))
    assert test == set(official["test"]) and len(test) == 40
    assert train | dev == set(official["train"]) and not train & dev and not (train | dev) & test
    assert len(dev) == len(official["train"]) // DEV_EVERY
    assert env.task("tau2/retail/test/0").native_id == int(official["test"][0])


def test_bad_task_ids_name_the_valid_choices(env):
    with pytest.raises(TaskIdError, match="valid: retail, airline"):
        env.task("tau2/telecom/test/0")
    with pytest.raises(TaskIdError, match=r"tasks 0\.\.39"):
        env.task("tau2/retail/test/40")
    with pytest.raises(TaskIdError, match="valid splits"):
        env.task("tau2/retail/valid/0")


def test_actions_parse_to_tool_calls_or_messages(env):
    env.bind_llm(ScriptedUserLLM())
    env.reset("tau2/retail/train/0")
    assert env.match_action('get_order_details({"order_id": "#W1"})') == 'get_order_details({"order_id": "#W1"})'
    assert env.match_action("respond: Hello; how can I help?") == "respond Hello; how can I help?"
    assert env.match_action('get_order_details({"order_id": ') is None       # broken JSON
    assert env.match_action('launch_rockets({"n": 1})') is None              # not a tool of this domain
    r = env.step('get_order_details({"order_id": "#nope"})')
    assert not r.done and r.observation.startswith("Tool result: Error")
    assert any(f.startswith("find_user_id_by_email(") for f in env.action_templates())


def test_replayed_gold_trajectory_scores_one_and_an_empty_one_zero(env):
    task = "tau2/retail/train/0"
    env.bind_llm(ScriptedUserLLM())
    obs = env.reset(task)
    assert obs.startswith("User: ")
    gold = env.gold_actions(task)
    for action in gold[:-1]:
        r = env.step(action)
        assert not r.done
    r = env.step(gold[-1])            # the closing message; the scripted user then stops
    assert r.done and r.score == 1.0 and r.info["success"]
    assert len(env.conversation()) >= 2 * len(gold)

    env.bind_llm(ScriptedUserLLM())
    env.reset(task)
    r = env.step("respond I cannot help with that.")
    assert r.done and r.score == 0.0


@pytest.mark.integration
def test_the_simulated_user_runs_on_the_real_model(tmp_path):
    """Reset asks the real (smoke) model to play the user; its call is recorded with role 'user'."""
    from skillbook.agent import Agent, AgentConfig
    from skillbook.book import load_profile
    from skillbook.llm import ResponseCache, get_llm
    llm = get_llm(load_profile("smoke")["backend"], ResponseCache(tmp_path / "c.sqlite"))
    env = make_env("tau2")
    try:
        env.bind_llm(llm)
        ep = Agent(llm, AgentConfig(max_steps=1, max_tokens=60)).run(env, "tau2/retail/dev/0")
    finally:
        env.close()
    assert not ep.error, ep.error
    assert [c.role for c in ep.calls][0] == "user" and ep.row()["user_calls"] >= 1
    assert len(ep.steps) == 1 and ep.transcript and ep.transcript[0]["content"].startswith("Hi!")


def test_user_talk_counts_openings_echoes_and_identical_conversations():
    """Chapter 06's reading of the simulated user (moved from the chapter into the library): a user that
    opens the same way and then repeats the agent carries nothing of its task."""
    from types import SimpleNamespace

    from skillbook.envs.tau2 import user_talk

    def ep(task, transcript):
        return SimpleNamespace(task_id=f"tau2/retail/test/{task}", transcript=transcript)
    echo = [{"role": "assistant", "content": "Hi! How can I help you today?"},
            {"role": "user", "content": "I need help."},
            {"role": "assistant", "content": "Could you give me your order id?"},
            {"role": "user", "content": "could you give me your order id?"}]
    asked = [{"role": "assistant", "content": "Hi! How can I help you today?"},
             {"role": "user", "content": "I need help."},
             {"role": "assistant", "content": "Which order?"},
             {"role": "user", "content": "Order #W123, please cancel it."}]
    talk = user_talk([("test/none", ep(0, echo)), ("test/full", ep(1, echo)), ("test/global", ep(0, asked))])
    assert talk["episodes"] == 3 and talk["openings"] == {"I need help."}
    assert (talk["later"], talk["echoes"]) == (3, 2)
    assert talk["groups"] == [["test/none (test/0)", "test/full (test/1)"]]
