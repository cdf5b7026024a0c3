"""SkillRL's pipeline end to end — collect → distil → validate/evolve → the test conditions → what each
prompt carried — and its resumption from records and bank files. Control flow on the FAKE world and
models (tests/fakes.py; the real embedder retrieves): seconds, no Java, no language model."""
import json
import shutil

import pytest

from fakes import FAKE_SKILLS, FakeTeacher, solve_count_only
from skillbook.agent import AgentConfig
from skillbook.papers.skillrl import CONDITIONS, SkillRLSettings, StaleRecords, bank_from_json, kind, run_skillrl

TASKS = {s: [f"fake/{t}/{s}/{i}" for t in ("count", "fetch") for i in (1, 2)] for s in ("train", "dev", "test")}


AGENT = AgentConfig(max_steps=4, n_examples=0)   # the task-level policy


def settings(**kw) -> SkillRLSettings:
    return SkillRLSettings(**{"tasks": TASKS, "agent": AGENT, "rounds": 2, "retrieval_delta": 0.3, "top_k": 6, **kw})


def skillrl(run_dir, agent_llm=None, teacher=None, **kw):
    agent_llm = agent_llm or FakeTeacher(policy=solve_count_only)
    teacher = teacher or FakeTeacher()
    return run_skillrl(run_dir, agent_llm, settings(**kw), teacher=teacher), agent_llm, teacher


def test_the_pipeline_distils_evolves_and_runs_every_condition(tmp_path, fake_env):
    run, agent_llm, teacher = skillrl(tmp_path)
    # collect: count solved, fetch never (the policy only looks around)
    assert {(e.task_type, e.success) for e in run.train_episodes} == {("count", True), ("fetch", False)}
    # distil: count's successes → count skills; fetch's failures → fetch mistakes; general skills
    round0 = json.loads((tmp_path / "bank" / "round0.json").read_text())
    assert set(round0) == {"general_skills", "task_specific_skills", "common_mistakes", "metadata"}
    assert [s["title"] for s in round0["task_specific_skills"]["count"]] == [s["title"] for s in FAKE_SKILLS["count"]]
    assert "fetch" not in round0["task_specific_skills"] and round0["general_skills"]
    assert [m["category"] for m in round0["common_mistakes"]] == ["fetch", "fetch"]
    assert round0["metadata"]["task_distribution"] == {"count": {"success": 2, "failure": 0},
                                                       "fetch": {"success": 0, "failure": 2}}
    assert teacher.teacher_prompts[:4] == ["specific", "general", "lesson", "lesson"]   # no teacher call failed
    # evolve: fetch (validation success 0 < δ) triggers, count (1.0) does not; the new skill is fetch's
    assert set(run.history.query("triggered").category) == {"fetch"}
    assert run.history.query("category == 'count'").success.tolist() == [1.0, 1.0]
    assert [(s.id, s.extra["category"]) for s in run.banks[1] if s.id.startswith("dyn_")] == [("dyn_001", "fetch")]
    assert len(run.banks[2]) == len(run.banks[1])                          # a repeated title is not added again
    for r in range(3):                                                     # each round's bank is its file
        saved, _ = bank_from_json(json.loads((tmp_path / "bank" / f"round{r}.json").read_text()))
        assert [s.to_dict() for s in saved] == [s.to_dict() for s in run.banks[r]]
    # the test conditions: every condition on every test task
    assert sorted(run.test.groupby("condition").size().items()) == sorted((c, 4) for c in CONDITIONS)
    eps = {(r.condition, r.task_id): r for r in run.test.itertuples()}
    assert all(eps[("none", t)].success == (t.split("/")[1] == "count") for t in TASKS["test"])
    # routing: a task gets its own category's skills and mistakes, never the other category's
    bank = {s.id: s for s in run.banks[-1]}
    from skillbook.run import load_episodes
    for e in load_episodes(tmp_path / "test" / "skillbank+evolution"):
        got = [bank[i] for i in e.retrieved]
        assert {s.extra["category"] for s in got if kind(s) != "general"} == {e.task_type}, e.task_id
        assert e.subtasks[0].query.startswith(e.instruction)              # asked with instruction + observation
    assert {i for e in load_episodes(tmp_path / "test" / "no-hierarchy") for i in e.retrieved} == \
        {s.id for s in run.banks[-1] if kind(s) == "task_specific"}
    # what each prompt carried
    p = run.prompts.set_index(["condition", "task_id"])
    assert (p.loc["none", "block_tokens"] == 0).all() and (p.loc["none", "block"] == "").all()
    assert (p.other_category == 0).all()
    assert p.loc[("skillbank+evolution", "fake/fetch/test/1"), "retrieved"] == \
        [s.id for s in run.banks[-1] if kind(s) == "general" or s.extra["category"] == "fetch"]
    for c in CONDITIONS[1:]:
        assert (p.loc[c, "block_tokens"] > 0).all(), c                    # every task got a block
    sb = p.loc["skillbank+evolution"]
    assert (sb.compression == sb.experience_count / sb.block_count).all() and (sb.experience_count > 0).all()
    raw = p.loc["raw-trajectories"]
    assert raw.block.str.startswith("Past trajectory:").all() and (raw.block.str.len() <= 2400).all()


def test_a_finished_run_replays_without_a_model_call_and_resumes_from_bank_files(tmp_path, fake_env):
    first, _, _ = skillrl(tmp_path)
    again, agent_llm, teacher = skillrl(tmp_path)
    assert not agent_llm.calls and not teacher.calls                      # everything came from records and files
    assert again.test.equals(first.test) and again.prompts.equals(first.prompts)
    # without the second validation round, its bank and the tests: round 1's bank is read, not distilled again
    for d in ("validation/round1", "test"):
        shutil.rmtree(tmp_path / d)
    (tmp_path / "bank" / "round2.json").unlink()
    resumed, agent_llm, teacher = skillrl(tmp_path)
    assert teacher.teacher_prompts == ["evolve"] and agent_llm.calls       # one evolution; the runs again
    assert [[s.to_dict() for s in b] for b in resumed.banks] == [[s.to_dict() for s in b] for b in first.banks]
    assert resumed.test.success.tolist() == first.test.success.tolist()


def test_bank_files_that_do_not_match_their_runs_are_refused(tmp_path, fake_env):
    skillrl(tmp_path)
    path = tmp_path / "bank" / "round1.json"
    bank = json.loads(path.read_text())
    bank["metadata"]["evolution"]["success"]["fetch"] = 0.5                # evolved from other validation runs
    path.write_text(json.dumps(bank))
    with pytest.raises(StaleRecords, match="round1.json was evolved from other validation runs"):
        skillrl(tmp_path)
    path = tmp_path / "bank" / "round0.json"
    bank = json.loads(path.read_text())
    bank["metadata"]["task_distribution"]["count"]["success"] = 1          # distilled from other training runs
    path.write_text(json.dumps(bank))
    with pytest.raises(StaleRecords, match="round0.json was distilled from other training runs"):
        skillrl(tmp_path)


def test_parameters_are_checked_before_any_run(tmp_path, fake_env):
    with pytest.raises(ValueError, match="valid: embedding, template"):
        skillrl(tmp_path, mode="oracle")
    with pytest.raises(ValueError, match="valid: none, skillbank"):
        skillrl(tmp_path, conditions=("none", "memory"))
    with pytest.raises(TypeError, match="AgentConfig"):
        skillrl(tmp_path, agent={"max_steps": 4, "n_examples": 0})
    with pytest.raises(ValueError, match="task-level agent"):
        skillrl(tmp_path, agent=AgentConfig(level="subtask", max_steps=4))
    with pytest.raises(ValueError, match="missing: \\['dev'\\]"):
        skillrl(tmp_path, tasks={**TASKS, "dev": []})
    with pytest.raises(ValueError, match="rounds must be a non-negative integer"):
        skillrl(tmp_path, rounds=-1)
    assert not (tmp_path / "collect").exists()


def test_a_folder_of_agent_skills_is_one_more_skillrl_test_condition(tmp_path, fake_env):
    # issue 39: chapter 07's `skills_folder` adds the test condition `skills`; it replays from its records
    folder = tmp_path / "skills" / "count-then-say-done"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text("---\nname: count-then-say-done\ndescription: Make the counter show the "
                                     "goal, then say done.\n---\n\nSay add one until the goal, then say done.\n")
    folder = str(tmp_path / "skills")
    run, agent_llm, _ = skillrl(tmp_path / "run", skills_folder=folder)
    assert list(dict.fromkeys(run.test.condition))[-1] == "skills"
    assert "skills" in set(run.prompts.condition)
    n = len(agent_llm.calls)
    skillrl(tmp_path / "run", agent_llm=agent_llm, skills_folder=folder)
    assert len(agent_llm.calls) == n


def test_the_teacher_is_the_policys_model_unless_another_is_given(tmp_path, fake_env):
    first, _, _ = skillrl(tmp_path / "two")
    one = FakeTeacher(policy=solve_count_only)
    run = run_skillrl(tmp_path / "one", one, settings())
    assert one.teacher_prompts[:4] == ["specific", "general", "lesson", "lesson"]   # it distilled the bank too
    assert [[s.to_dict() for s in b] for b in run.banks] == [[s.to_dict() for s in b] for b in first.banks]
