"""The SKILLC pipeline end to end on the FAKE world and model (control flow only, seconds, no Java, no
model): collect → credit → macros → test conditions, resume, and what the judge is shown."""
import json

import pytest

from fakes import FakeModel, two_fake_envs  # noqa: F401  (fixture)
from skillbook.agent import AgentConfig
from skillbook.papers.skillc import SkillCSettings, run_skillc
from skillbook.papers.skillc.credit import judge_id

TRAIN = [f"fake/{t}/train/{i}" for t in ("fetch", "count") for i in range(2)]
TEST = [f"fake/{t}/test/{i}" for t in ("fetch", "count") for i in range(2)]
AGENT = AgentConfig(max_steps=6, n_examples=0)   # the task-level agent
TASKS = {"train": TRAIN, "test": TEST}


def files(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*")
            if p.is_file() and p.name != ".lock"}


def test_collect_credit_macros_and_test_conditions_then_resume(tmp_path, fake_env):
    llm = FakeModel()
    s = SkillCSettings(max_candidates=6, judge_samples=1, n_macros=2, tasks=TASKS, agent=AGENT)
    run = run_skillc(tmp_path, llm, s, progress=False)
    # collect: the base agent solves every fake task
    assert [e.task_id for e in run.train_episodes] == TRAIN and all(e.success for e in run.train_episodes)
    # credit: every success's candidates, judge and replay, saturated replays marked
    c = run.credits
    assert set(c.task_id) == set(TRAIN) and c.groupby("task_id").size().le(6).all()
    assert c.judge_credit.eq(0.9 - 0.2).all() and c.judge.eq(judge_id("neutral", 1)).all()
    fetch = c[c.task_id == "fake/fetch/train/0"].set_index("candidate")
    assert fetch.loc["window:0", "replay_credit"] == 1.0 and not fetch.ends_episode.any()   # door stays shut
    count = c[c.task_id == "fake/count/train/1"].set_index("candidate")   # goal 2: add, add, say done
    # the second 'add one' replaced: the next action, 'say done', ends the episode at once with the wrong count
    assert count.loc["step:1", "ends_episode"] and count.loc["step:1", "replay_credit"] == 1.0
    # the first replaced: the episode fails too, but two actions later, at the decisive 'say done'
    assert not count.loc["window:0", "ends_episode"] and count.loc["window:0", "replay_credit"] == 1.0
    # what the judge was shown: both runs, neither outcome
    judged = [m[-1]["content"] for m in llm.calls if "p_a" in m[-1]["content"]]
    assert len(judged) == len(c)
    assert all("Run A:" in p and "Run B" in p and "The door opens" not in p and "Done." not in p for p in judged)
    # macros: the fetch window reproduces the model's template; the count windows do not
    assert [s.extra["macro"]["name"] for s in run.library] == ["take_and_open"]
    assert {r["result"] for r in run.build_log} >= {"added", "does not reproduce its window"}
    # test conditions: no memory and the credit macros (one stream), same tasks
    t = run.test
    assert t.groupby("condition").task_id.apply(sorted).to_dict() == {"none": sorted(TEST), "credit": sorted(TEST)}
    assert len(json.loads((tmp_path / "library.json").read_text())["library"]["skills"]) == 1
    # resume: no model call, no file changed
    before, calls = files(tmp_path), len(llm.calls)
    again = run_skillc(tmp_path, llm, s, progress=False)
    assert len(llm.calls) == calls and files(tmp_path) == before
    assert again.credits.equals(run.credits) and len(again.test) == len(t)


def test_credits_from_another_judge_or_a_stale_library_are_refused(tmp_path, fake_env):
    """The committed workshop credits.jsonl was written by the judge that was told run A's outcome: its
    lines carry no judge id and must not be mixed with the new judge's."""
    llm = FakeModel()
    tasks = {"train": TRAIN[:1], "test": TEST[:1]}
    s = SkillCSettings(max_candidates=3, judge_samples=1, n_macros=1, tasks=tasks, agent=AGENT)
    run_skillc(tmp_path, llm, s, progress=False)
    path = tmp_path / "credits.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    old = [{k: v for k, v in r.items() if k != "judge"} for r in lines]
    path.write_text("".join(json.dumps(r) + "\n" for r in old))
    with pytest.raises(ValueError, match="another judge"):
        run_skillc(tmp_path, llm, s, progress=False)
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    with pytest.raises(ValueError, match="library.json was built from other credits"):
        run_skillc(tmp_path, llm, SkillCSettings(max_candidates=3, judge_samples=1, n_macros=1, min_credit=0.8,
                                                 tasks=tasks, agent=AGENT), progress=False)


@pytest.mark.usefixtures("two_fake_envs")
def test_each_run_is_replayed_in_its_own_benchmark(tmp_path):
    """Credit replays used to run every episode in the env of the first training task: a second benchmark's
    episodes were replayed in the wrong simulator."""
    llm = FakeModel()
    tasks = {"train": ["fake/fetch/train/0", "fake2/fetch/train/1"], "test": ["fake/fetch/test/0"]}
    run = run_skillc(tmp_path, llm, SkillCSettings(max_candidates=2, judge_samples=1, tasks=tasks, agent=AGENT),
                     progress=False)
    assert set(run.credits.task_id) == set(tasks["train"]) and run.credits.replay_original.eq(1.0).all()


def test_a_folder_of_agent_skills_is_one_more_test_condition(tmp_path, fake_env):
    # issue 39: the imported-skills condition from chapter 08's parameters (`skills_folder`)
    folder = tmp_path / "skills" / "take-the-key-first"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text("---\nname: take-the-key-first\ndescription: Take the key, then open "
                                     "the locked door.\n---\n\n1. take key\n2. open door\n")
    llm = FakeModel()
    s = SkillCSettings(max_candidates=6, judge_samples=1, n_macros=2, threshold=0.0, tasks=TASKS, agent=AGENT,
                       skills_folder=str(tmp_path / "skills"))
    run = run_skillc(tmp_path / "run", llm, s, progress=False)
    assert list(dict.fromkeys(run.test.condition)) == ["none", "skills", "credit"]
    shown = [m["content"] for messages in llm.calls for m in messages if "1. take key\n2. open door" in m["content"]]
    assert shown, "the imported skill never reached a prompt"


def test_a_transfer_runs_subtask_text_library_is_one_more_test_condition(tmp_path, fake_env):
    """`transfer_run` is the transfer run's own folder (chapter 08 reads chapter 02's `transfer/`): its
    final subtask-level text library, frozen, is the test condition `subtask-text`."""
    from skillbook.papers.breakdown import TransferSettings, run_transfer, transfer_library
    stream = ["fake/count/dev/0", "fake/fetch/dev/0"]
    t = run_transfer(tmp_path / "records" / "transfer", FakeModel(),
                     TransferSettings(stream=stream, conditions=["subtask-text"], agent=AGENT, env_options={},
                                      prompt_level="L3", k=5, threshold=0.0, task_types="fake/count,fake/fetch",
                                      split="dev", n_tasks=1, seed=0, backend="fake:scripted"))
    library = transfer_library(tmp_path / "records" / "transfer")
    assert library is not None and len(library)
    assert [s.id for s in library] == [s.id for s in t.libraries["subtask-text"]]
    assert transfer_library(tmp_path / "records") is None                 # the root is not the run's folder
    llm = FakeModel()
    s = SkillCSettings(max_candidates=2, judge_samples=1, n_macros=1, threshold=0.0, tasks=TASKS, agent=AGENT,
                       transfer_run=str(tmp_path / "records" / "transfer"))
    run = run_skillc(tmp_path / "run", llm, s, progress=False)
    assert list(dict.fromkeys(run.test.condition)) == ["none", "subtask-text", "credit"]
    assert (tmp_path / "run" / "test" / "subtask-text" / "run.json").exists()


def test_the_run_is_refused_before_any_model_call(tmp_path, fake_env):
    llm = FakeModel()
    with pytest.raises(TypeError, match="AgentConfig"):
        run_skillc(tmp_path, llm, SkillCSettings(tasks=TASKS, agent={"max_steps": 6}), progress=False)
    with pytest.raises(ValueError, match="task-level agent"):
        run_skillc(tmp_path, llm, SkillCSettings(tasks=TASKS, agent=AgentConfig(level="subtask")), progress=False)
    with pytest.raises(ValueError, match="missing: \\['test'\\]"):
        run_skillc(tmp_path, llm, SkillCSettings(tasks={"train": TRAIN}, agent=AGENT), progress=False)
    assert llm.calls == [] and not list(tmp_path.iterdir())
