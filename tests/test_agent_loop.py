"""The agent loop's control flow on the FAKE world and model: the task-level retrieval query, the loop guard
for repeated code-skill calls, the end-of-episode hook; and (real simulator) examples that do not depend
on what ScienceWorld ran before."""
import pytest

from fakes import FakeModel, FakeWorld
from skillbook.agent import Agent, AgentConfig
from skillbook.memory import MemoryPolicy
from skillbook.skills import Skill


class Recorder(MemoryPolicy):
    """Remembers what it was asked and offers one code skill."""
    name = "recorder"

    def __init__(self, body="def idle(env):\n    env.step('look around')\n"):
        self.queries, self.finished, self.body = [], [], body

    def retrieve(self, query, context):
        self.queries.append(query)
        return [Skill("c1", "look around once", self.body, "code", extra={"function": "idle"})]

    def callable_code(self, name):
        return [self.body] if name == "idle" else None

    def finish(self, episode, context):
        self.finished.append((episode.task_id, episode.success))


def test_task_level_query_is_instruction_and_first_observation(fake_env):
    """TextWorldExpress instructions are one sentence per game: the query must tell tasks apart."""
    memory = Recorder()
    agent = Agent(FakeModel(), AgentConfig(max_steps=6, n_examples=0), memory)
    env = FakeWorld()
    eps = [agent.run(env, f"fake/count/dev/{i}") for i in range(2)]
    assert eps[0].instruction == eps[1].instruction
    q0, q1 = memory.queries
    assert q0 != q1 and q0.startswith(eps[0].instruction) and "Room 0." in q0 and "Room 1." in q1
    assert eps[0].subtasks[0].query == q0 and eps[0].subtasks[0].description == eps[0].instruction
    assert memory.finished == [("fake/count/dev/0", True), ("fake/count/dev/1", True)]


def test_subtask_level_query_is_the_subtask(fake_env):
    memory = Recorder()
    agent = Agent(FakeModel(), AgentConfig(level="subtask", max_steps=6, n_examples=0), memory)
    ep = agent.run(FakeWorld(), "fake/count/dev/0")
    assert memory.queries[0] == "finish the task" == ep.subtasks[0].query


def test_repeated_code_skill_calls_that_change_nothing_end_as_a_loop(fake_env):
    """The real case: a subtask-code episode called the same code skill 10 times (the stuck counter reset
    after every call)."""
    llm = FakeModel(policy=lambda obs: "call idle()")
    ep = Agent(llm, AgentConfig(max_steps=30, loop_patience=3, n_examples=0), Recorder()).run(
        FakeWorld(), "fake/count/dev/2")
    calls = [s for s in ep.steps if s.macro == "idle"]
    assert ep.stop_reason == "loop" and len(calls) == 4     # the first call, then 3 repeats that changed nothing


def test_a_code_skill_that_makes_progress_is_not_a_loop(fake_env):
    body = "def idle(env):\n    env.step('add one')\n"
    llm = FakeModel(policy=lambda obs: "call idle()" if obs.count("counter shows") < 4 else "say done")
    ep = Agent(llm, AgentConfig(max_steps=30, loop_patience=2, n_examples=0), Recorder(body)).run(
        FakeWorld(), "fake/count/dev/2")
    assert ep.stop_reason != "loop"


@pytest.mark.integration
def test_scienceworld_examples_do_not_depend_on_what_the_simulator_ran_before(small_llm):
    """The real case: the example gold path of sciworld/find-non-living-thing/train/0 named 'cupboard' after
    other tasks had been loaded and 'painting' in a fresh JVM, so replays of chapter 00 missed the cache."""
    from skillbook.agent.loop import _EXAMPLES
    from skillbook.envs import make_env
    env = make_env("sciworld")
    try:
        agent = Agent(small_llm, AgentConfig(max_steps=1))
        task = env.task("sciworld/find-non-living-thing/dev/1")
        _EXAMPLES.clear()
        fresh = agent._example_text(env, task)
        for t in ("sciworld/boil/dev/0", "sciworld/find-non-living-thing/train/0", "sciworld/melt/dev/0"):
            env.gold_actions(t)                      # move the simulator's random state on
        _EXAMPLES.clear()
        assert agent._example_text(env, task) == fresh
    finally:
        env.close()


def test_a_two_action_cycle_that_changes_nothing_ends_as_a_loop(fake_env):
    """The real case (calibration, twx/twc/dev/1): 'open wardrobe', 'close wardrobe', … for 26 steps until
    the step budget; the guard only knew repeats of the same action."""
    cycle = iter(["take key", "look around"] * 20)
    llm = FakeModel(policy=lambda obs: next(cycle))
    ep = Agent(llm, AgentConfig(max_steps=30, loop_patience=3, n_examples=0)).run(FakeWorld(), "fake/fetch/dev/2")
    assert [s.action for s in ep.steps[:4]] == ["take key", "look around"] * 2
    assert ep.stop_reason == "loop" and len(ep.steps) == 5      # two new states, then three repeats


def test_repeating_an_action_that_makes_progress_is_not_stuck(fake_env):
    """'add one' three times in a row changes the counter each time: not a loop (the old rule counted
    any repeat of the previous action)."""
    ep = Agent(FakeModel(), AgentConfig(max_steps=10, loop_patience=2, n_examples=0)).run(
        FakeWorld(), "fake/count/dev/2")      # goal 3: add one ×3, say done
    assert ep.success and [s.action for s in ep.steps] == ["add one"] * 3 + ["say done"]


def test_an_invalid_action_is_answered_with_every_valid_action_when_they_are_few(fake_env):
    """The real case (calibration, twx/coin/dev/0): 'look in the kitchen cupboard' when only 'inventory',
    'look around' and 'take coin' were possible was answered 'Similar valid actions: look around'."""
    replies = iter(["look in the drawer", "add one", "say done"])
    llm = FakeModel(policy=lambda obs: next(replies))
    ep = Agent(llm, AgentConfig(max_steps=5, n_examples=0)).run(FakeWorld(), "fake/count/dev/0")
    assert ep.steps[0].observation == ("'look in the drawer' is not a valid action here. "
                                       "Valid actions: add one, look around, say done.")
    many = Agent(llm, AgentConfig(max_steps=1, n_examples=0, list_actions_max=2))
    replies = iter(["look in the drawer"])
    assert "Similar valid actions:" in many.run(FakeWorld(), "fake/count/dev/0").steps[0].observation


def test_prompt_version_v2_shows_the_example_before_the_skills_and_v1_as_recorded(fake_env):
    """Issue 35: v2's executor prompt opens with the example (the same for every subtask of a task) and
    then the skills (which change per subtask); v1 keeps the order chapters 01-09 recorded."""
    firsts = {}
    for version in ("v1", "v2"):
        model = FakeModel()
        agent = Agent(model, AgentConfig(level="subtask", max_steps=4, n_examples=0, prompts=version), Recorder())
        agent._example_text = lambda env, task: "EXAMPLE-TEXT"
        agent.run(FakeWorld(), "fake/count/dev/0")
        first = next(m for m in model.calls if m[0]["role"] == "system")[1]["content"]
        firsts[version] = first
    assert firsts["v1"].index("look around once") < firsts["v1"].index("EXAMPLE-TEXT")
    assert firsts["v2"].index("EXAMPLE-TEXT") < firsts["v2"].index("look around once")
    with pytest.raises(ValueError, match="unknown prompt version 'v9'; valid: v1, v2, v3"):
        AgentConfig(prompts="v9").validate()


def test_prompt_version_v3_summarizes_in_the_executors_conversation(fake_env):
    """Issue 35, second round: under v3 the summarizer is one more turn of the executor's conversation (so
    the server has its prefix already); v2 keeps its separate summarizer prompt. Both keep the executor's
    two-line reply (thought, action) and the planner's own prompt."""
    calls = {}
    for version in ("v2", "v3"):
        model = FakeModel()
        # one step per subtask, so that a second planner call follows the first summary
        agent = Agent(model, AgentConfig(level="subtask", max_steps=6, max_subtask_steps=1, n_examples=0,
                                         prompts=version))
        ep = agent.run(FakeWorld(), "fake/count/dev/2")
        assert ep.subtasks[0].summary == "done" and ep.stop_reason == "planner_done"
        calls[version] = model.calls
    summarizer = next(m for m in calls["v3"] if "has ended" in m[-1]["content"])
    executor = [m for m in calls["v3"][:calls["v3"].index(summarizer)] if m[0]["role"] == "system"][-1]
    assert "Thought: <at most 12 words>" in summarizer[0]["content"]
    # the whole executor conversation, its last reply included, then the observation and the question
    assert summarizer[:len(executor)] == executor and summarizer[len(executor)]["role"] == "assistant"
    assert summarizer[-1]["content"].startswith("Observation: The counter shows 1.\n\nThe subtask")
    assert summarizer[-1]["content"].endswith('Reply with one line "Summary: <text>".')
    assert 'The subtask "finish the task" has ended.' in summarizer[-1]["content"]
    assert any("Subtask just worked on" in m[-1]["content"] for m in calls["v2"])
    assert not any("has ended" in m[-1]["content"] for m in calls["v2"])
    assert "at most 12 words" in next(m for m in calls["v2"] if m[0]["role"] == "system")[0]["content"]
    assert sum("break a task" in m[-1]["content"] for m in calls["v3"]) == 2   # the planner: its own prompt


def test_prompt_versions_form_a_chain(fake_env):
    """A version holds only what it changes against the one before: v3 reads v2's executor_first."""
    from skillbook.prompts import at_least, has, load, version_files
    assert load("skillbook.agent", "executor_first", "v3") == load("skillbook.agent", "executor_first", "v2")
    assert load("skillbook.agent", "executor_system", "v3") == load("skillbook.agent", "executor_system", "v1")
    assert set(version_files("skillbook.agent", "v3")) == {"executor_first.txt", "summarizer_turn.txt"}
    assert version_files("skillbook.agent", "v2") == {"executor_first.txt": load("skillbook.agent",
                                                                                 "executor_first", "v2")}
    assert has("skillbook.agent", "summarizer_turn", "v3") and not has("skillbook.agent", "summarizer_turn", "v2")
    assert not has("skillbook.agent", "planner_turn", "v3")
    assert at_least("v3", "v2") and not at_least("v1", "v2")


def test_records_made_before_prompt_versions_keep_their_fingerprint(fake_env):
    """The real case: every committed record (chapters 01-09) was signed with settings that had no prompt
    version. At v1 the settings are those same settings (no new key anywhere), so the records stay valid;
    v2 names itself and its prompt files, in the agent's settings and in its memory's."""
    from skillbook.papers.breakdown.memory import InducedMemory
    from skillbook.run.streams import settings_of
    model = FakeModel()
    v1 = settings_of(Agent(model, AgentConfig(), InducedMemory(model)), {}, "stream")
    assert "prompts" not in v1["agent"] and set(v1["agent_code"]) == {"revision", "prompts"}
    assert "prompts" not in v1["memory"] and "prompts" not in Agent(model).run(FakeWorld(), "fake/count/dev/0").config
    v2 = settings_of(Agent(model, AgentConfig(prompts="v2"), InducedMemory(model, prompts="v2")), {}, "stream")
    assert v2["agent"]["prompts"] == v2["memory"]["prompts"] == "v2"
    assert v2["agent_code"]["prompts_v2"] and v2["memory"]["prompt_files"]
    assert {k: v for k, v in v2["agent"].items() if k != "prompts"} == v1["agent"]
