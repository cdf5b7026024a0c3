"""The first paper's pipeline on the FAKE world and model (tests/fakes.py): the transfer stream and its
follow-ups (E.2, E.3, E.4, prompt ablation), reading them back, the placebo condition, final-outcome
labels for E.3, and pooling every run that retrieved skills with each episode once. Control flow only:
seconds, no simulator, no language model (the sentence embedder is real)."""
import re
from dataclasses import replace

import pandas as pd
import pytest

from fakes import FakeModel, FakeWorld
from skillbook.agent import Agent, AgentConfig
from skillbook.memory import PLACEBO_TEXTS
from skillbook.papers.breakdown import (
    CONDITIONS,
    DEFAULT_CONDITIONS,
    E3_HALVES,
    InducedMemory,
    TransferSettings,
    interleave,
    load_transfer,
    parse_conditions,
    run_transfer,
)
from skillbook.papers.breakdown.memory import label_from_episodes, outcome_of, source_outcome
from skillbook.papers.breakdown.utility import score_library
from skillbook.skills import Skill
from skillbook.skills.library import SkillLibrary

AGENT = AgentConfig(max_steps=6, max_subtask_steps=3, n_examples=0)   # count task 26 (goal 3) fails at subtask level


class TypedInducer(FakeModel):
    """FakeModel whose induced text skill depends on the task type, so a library holds one skill per type
    (FakeModel's one fixed skill would merge everything into one)."""

    def reply(self, messages):
        last = messages[-1]["content"]
        if "Write ONE reusable skill" in last and "Skill:" in last:
            if "Task: Make the counter" in last:
                return "Description: count up to the goal then say done\nSkill: 1. add one 2. compare 3. say done"
            return "Description: take the key and open the door\nSkill: 1. take key 2. open door 3. leave"
        return super().reply(messages)


def transfer_settings(conditions, n_tasks=2, seed=0):
    from skillbook.envs import sample_tasks
    stream = interleave(sample_tasks("fake/count,fake/fetch", "dev", n_tasks, seed=seed), seed=seed)
    return TransferSettings(stream=stream, conditions=list(conditions), agent=AGENT, env_options={},
                            prompt_level="L3", k=5, threshold=0.0, task_types="fake/count,fake/fetch",
                            split="dev", n_tasks=n_tasks, seed=seed, backend="fake:scripted")


def test_interleave_alternates_task_types_in_a_seeded_order():
    ids = [f"fake/count/dev/{i}" for i in range(3)] + [f"fake/fetch/dev/{i}" for i in range(2)]
    s = interleave(ids, seed=0)
    assert sorted(s) == sorted(ids)
    assert [t.split("/")[1] for t in s] == ["count", "fetch", "count", "fetch", "count"]
    assert interleave(ids, seed=0) == s
    assert {tuple(interleave(ids, seed=k)) for k in range(10)} != {tuple(s)}       # the seed orders within a type


def test_conditions_are_checked_by_name_before_any_model_time():
    assert parse_conditions("task-none, subtask-placebo") == ["task-none", "subtask-placebo"]
    assert set(DEFAULT_CONDITIONS) < set(CONDITIONS) and "subtask-placebo" not in DEFAULT_CONDITIONS
    with pytest.raises(ValueError, match="valid: task-none, task-text, .*subtask-placebo"):
        parse_conditions("subtask-txt")
    with pytest.raises(ValueError, match="valid:"):
        parse_conditions("")


def test_load_transfer_names_the_chapter_that_records_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="02_induction"):
        load_transfer(tmp_path / "transfer")


@pytest.fixture(scope="module")
def transfer(tmp_path_factory):
    """The stream (4 tasks) under five conditions, then E.2, E.3, the prompt ablation and E.4."""
    mp = pytest.MonkeyPatch()
    from skillbook import envs
    mp.setitem(envs.ENVS, "fake", FakeWorld)
    run_dir = tmp_path_factory.mktemp("records") / "transfer"
    llm = TypedInducer()
    t = run_transfer(run_dir, llm,
                     transfer_settings(["task-none", "task-text", "subtask-none", "subtask-text", "subtask-placebo"]))
    heldout = t.heldout(1, seed=1)
    e2 = t.e2(llm, heldout)
    e3, sizes = t.e3(llm, heldout)
    ablation = t.prompt_ablation(llm, 2)
    texts = envs.task_texts(t.settings.stream + heldout)
    scores = pd.concat([score_library(lib, list(texts.values())).assign(condition=c)
                        for c, lib in t.libraries.items()], ignore_index=True)
    e4 = t.e4(llm, heldout, scores)
    yield {"t": t, "llm": llm, "run_dir": run_dir, "heldout": heldout, "e2": e2, "e3": e3, "sizes": sizes,
           "ablation": ablation, "e4": e4, "scores": scores, "texts": list(texts.values())}
    mp.undo()


def test_the_stream_runs_every_condition_and_reads_back_without_a_model_call(transfer, fake_env):
    t, llm, run_dir = transfer["t"], transfer["llm"], transfer["run_dir"]
    assert t.settings.stream == ["fake/count/dev/24", "fake/fetch/dev/2", "fake/count/dev/26", "fake/fetch/dev/16"]
    assert set(t.results) == {"task-none", "task-text", "subtask-none", "subtask-text", "subtask-placebo"}
    success = {c: [e.success for e in r.episodes] for c, r in t.results.items()}
    assert success["task-none"] == success["task-text"] == [True] * 4
    assert success["subtask-none"] == success["subtask-text"] == [True, True, False, True]
    assert set(t.df["format"]) == {"none", "text", "placebo"} and set(t.df["level"]) == {"task", "subtask"}
    assert t.memory_conditions == ["task-text", "subtask-text", "subtask-placebo"]
    assert t.skill_conditions == ["task-text", "subtask-text"]
    assert [len(lib) for lib in t.libraries.values()] == [2, 2, 2]      # one skill per task type
    assert t.run_dir == run_dir
    assert all((run_dir / c / "run.json").exists() for c in t.settings.conditions)   # the folder itself, no transfer/
    n = len(llm.calls)
    again = load_transfer(run_dir)
    assert again.settings == t.settings and again.run_dir == run_dir
    assert {c: [e.to_dict() for e in r.episodes] for c, r in again.results.items()} == \
        {c: [e.to_dict() for e in r.episodes] for c, r in t.results.items()}
    assert run_transfer(run_dir, llm, t.settings).settings == t.settings and len(llm.calls) == n   # a replay
    # experiment.json records the agent whole (as it fingerprints its runs), without the level each condition sets
    from skillbook.io import read_json
    recorded = read_json(run_dir / "experiment.json", "experiment settings")
    assert recorded["agent"] == {k: v for k, v in AGENT.record().items() if k != "level"}
    assert "level" not in recorded["agent"] and recorded["agent"]["max_subtask_steps"] == 3
    with pytest.raises(FileNotFoundError, match="the transfer run's own folder"):   # the root given: named
        load_transfer(run_dir.parent)


def test_followups_run_on_held_out_tasks_under_their_names(transfer):
    t, heldout = transfer["t"], transfer["heldout"]
    assert heldout and not set(heldout) & set(t.settings.stream)
    assert {t2.split("/")[1] for t2 in heldout} == {"count", "fetch"}
    assert set(transfer["e2"]) == {"task-none", "task+task-text-library", "task+subtask-text-library"}
    assert set(transfer["e3"]) == set(E3_HALVES) | {"subtask-none"}
    assert set(transfer["ablation"]) == {"L1", "L2"}
    assert all(len(r.episodes) == 2 for r in transfer["ablation"].values())
    assert set(transfer["e4"]) == {f"{lv}-{h}" for lv in ("task", "subtask") for h in ("none", "full", "high", "low")}
    for runs in ("e2", "e3", "e4"):
        assert all([e.task_id for e in r.episodes] == heldout for r in transfer[runs].values())
    assert all(e.agent == "task" for e in transfer["e2"]["task+subtask-text-library"].episodes)
    assert set(t.runs("e4")) == set(transfer["e4"])
    halves = t.e4_halves(transfer["scores"])["subtask"]
    assert len(halves["high"]) + len(halves["low"]) == len(halves["full"]) == len(t.libraries["subtask-text"])


def test_e3_splits_by_the_source_tasks_final_outcome(transfer):
    """The fetch skill comes from two successful tasks; the count skill from a success (task 24) and a
    failure (task 26, out of subtask budget): mixed, so in neither half."""
    t, sizes = transfer["t"], transfer["sizes"]
    assert sizes == {"from-successful-tasks": 1, "from-failed-tasks": 0, "mixed (left out)": 1,
                     "unknown (left out)": 0, "labelled from records": 0}
    halves, _ = t.e3_libraries()
    assert [s.description for s in halves["from-successful-tasks"]] == ["take the key and open the door"]
    skills = t.skills().set_index(["condition", "description_words"])
    sub = t.skills()[lambda d: d.condition == "subtask-text"].set_index("source_task")
    assert sub.loc["fake/count/dev/24", "outcome"] == "mixed" and sub.loc["fake/fetch/dev/2", "outcome"] == "success"
    assert sub["merged"].tolist() == [1, 1] and not t.skills()["labelled_from_records"].any()
    assert len(skills) == 6


def test_pooling_keeps_each_episode_once(transfer):
    """The real case: chapter 05 pooled E.2's task+task-text-library and E.4's task-full, the same
    agent with the same frozen library on the same tasks: the same episodes, counted twice."""
    t, heldout = transfer["t"], transfer["heldout"]
    names = [r.name for r in t.skill_runs(transfer["scores"])]
    assert names[:2] == ["task-text", "subtask-text"] and "e4/task-full" in names and "e4/task-high" in names
    assert "subtask-placebo" not in names and not any(n.endswith("none") for n in names)
    kept, dropped = t.retrieval_episodes(transfer["scores"])
    runs = {r.name for r, _ in kept}
    # e4/task-full repeats e2/task+task-text-library; the E.4 half that holds only the fetch skill repeats
    # e3/from-successful-tasks (the same frozen library at subtask level); and the fake model induced the
    # same two skills at both levels, so e2's task agent with the subtask library repeats it with its own
    assert "e2/task+task-text-library" in runs and "e4/task-full" not in runs
    assert ("e4/subtask-high" in runs) != ("e4/subtask-low" in runs) and "e3/from-successful-tasks" in runs
    assert [s.description for s in t.libraries["task-text"]] == [s.description for s in t.libraries["subtask-text"]]
    assert "e2/task+subtask-text-library" not in runs
    assert dropped == 3 * len(heldout)
    pooled, dropped2 = t.pooled_retrievals(transfer["scores"], transfer["texts"], tau=0.1)
    assert dropped2 == dropped and not pooled.empty and pooled["run"].isin(runs).all()
    assert {"utility", "specificity", "abstractness", "task_id", "success", "library"} <= set(pooled.columns)
    uses = t.skill_uses(transfer["scores"])
    assert set(uses["condition"]) <= set(t.skill_conditions) and not uses.duplicated().any()


# -- the placebo ------------------------------------------------------------------------------------------
def skills_block(first_message: str) -> str:
    return first_message.split("Your task:")[0]


def executor_first_messages(llm) -> list[str]:
    """The first user message of every executor conversation (FakeModel records the conversation list
    itself, once per call, so a conversation appears as often as it was called)."""
    convs = {id(m): m for m in llm.calls if m[0]["role"] == "system"}
    return [m[1]["content"] for m in convs.values()]


def test_the_placebo_prompt_has_the_text_conditions_skills_shape_and_none_of_their_content(transfer, tmp_path,
                                                                                              fake_env):
    """Issue 13 §3: the placebo shows as many skills as the text memory would, each of the same length,
    in the same prompt slot, and none of what they say. The fake model acts the same whatever the
    skills say, so both streams see the same tasks, write the same libraries and retrieve alike."""
    text_llm, placebo_llm = TypedInducer(), TypedInducer()
    t_text = run_transfer(tmp_path / "text" / "transfer", text_llm, transfer_settings(["subtask-text"]))
    t_placebo = run_transfer(tmp_path / "placebo" / "transfer", placebo_llm, transfer_settings(["subtask-placebo"]))
    real, fake = t_text.results["subtask-text"].episodes, t_placebo.results["subtask-placebo"].episodes
    assert [len(sub.retrieved) for e in real for sub in e.subtasks] == \
        [len(sub.retrieved) for e in fake for sub in e.subtasks]
    assert sum(len(e.retrieved) for e in real) >= 3
    assert all(sid.startswith("placebo-") for e in fake for sid in e.retrieved)
    a, b = executor_first_messages(text_llm), executor_first_messages(placebo_llm)
    assert len(a) == len(b)
    shown = 0
    for ma, mb in zip(a, b):
        ba, bb = skills_block(ma), skills_block(mb)
        assert [len(line) for line in ba.split("\n")] == [len(line) for line in bb.split("\n")]
        assert ma[len(ba):] == mb[len(bb):]                          # everything else is the same
        if not ba:
            continue
        shown += 1
        header, *lines = ba.strip().split("\n")
        assert bb.startswith(header)
        content = [line for line in lines if len(line.strip()) > 8]
        assert content and not any(line in bb for line in content)
        words = set(re.findall(r"[a-z]{5,}", " ".join(lines).lower())) - set(
            re.findall(r"[a-z]{5,}", " ".join(p for pair in PLACEBO_TEXTS for p in pair).lower()))
        assert words and not any(w in bb.lower() for w in words)
    assert shown >= 3
    # the text memory's libraries are the same: the placebo's memory learned what the text memory learned
    assert [sk.description for sk in t_text.libraries["subtask-text"]] == \
        [sk.description for sk in t_placebo.libraries["subtask-placebo"]]


# -- final outcomes for E.3 ------------------------------------------------------------------------------
class TwoSubtasks(FakeModel):
    """The fetch task in two subtasks: 'take the key' (the task is not done when it ends), then 'open the
    door'. With `fail`, the count task is answered wrongly (the episode fails)."""

    def __init__(self, fail=False, **kw):
        super().__init__(policy=self.act, **kw)
        self.fail = fail

    def act(self, observation):
        from fakes import solve
        if self.fail and "Goal" in observation:
            return "say done"
        return solve(observation)

    def reply(self, messages):
        last = messages[-1]["content"]
        if "Subtask just worked on" in last:
            return "Summary: done" if "door opens" in last or "Done" in last or "Wrong" in last else "Summary: key"
        return super().reply(messages)


def test_skills_are_labelled_with_the_tasks_final_outcome_not_the_subtasks_end_state(fake_env):
    """The real case (issue 13): a skill's `source_success` was the state when its subtask ended, so a
    skill from the first subtask of a task that then succeeded counted as 'from a failure' in E.3."""
    memory = InducedMemory(TwoSubtasks(), "text", threshold=0.0)
    agent = Agent(memory.llm, AgentConfig(level="subtask", max_steps=6, max_subtask_steps=1, n_examples=0), memory)
    ep = agent.run(FakeWorld(), "fake/fetch/dev/0")
    assert ep.success and len(ep.subtasks) == 2
    (skill,) = memory.library                          # the second write merged into the first
    first, second = skill.provenance, skill.provenance["merged_from"][0]
    assert first["span_success"] is False and second["span_success"] is True
    assert first["task_success"] is True and second["task_success"] is True and first["task_score"] == 1.0
    assert outcome_of(skill) == "success"
    failing = InducedMemory(TwoSubtasks(fail=True), "text", threshold=0.0, library=memory.library)
    ep2 = Agent(failing.llm, AgentConfig(level="subtask", max_steps=6, max_subtask_steps=1, n_examples=0),
                failing).run(FakeWorld(), "fake/count/dev/0")
    assert not ep2.success and source_outcome(skill.provenance["merged_from"][-1]) is False
    assert outcome_of(skill) == "mixed"                 # sources of both outcomes: in neither E.3 half


def test_the_skills_table_counts_writes_an_end_of_span_label_would_misfile(tmp_path, fake_env):
    from skillbook.papers.breakdown import Transfer
    s = transfer_settings(["subtask-text"])
    s.agent = replace(AGENT, max_subtask_steps=1)
    t = run_transfer(tmp_path / "transfer", TwoSubtasks(), s)
    assert isinstance(t, Transfer)
    fetch = [e for e in t.episodes["subtask-text"] if "fetch" in e.task_id]
    assert all(e.success and len(e.subtasks) == 2 for e in fetch)
    skills = t.skills()
    # each solved fetch task wrote once after 'take key' (task not done yet) and once after 'open door'
    assert skills["solved_after_failed_span"].sum() == len(fetch)
    assert skills["task_success"].notna().all() and not skills["labelled_from_records"].any()


def test_old_libraries_are_labelled_from_the_stream_records_never_from_source_success():
    from skillbook.records import Episode
    old = [Skill("s1", "a", "1. x y z", provenance={"source_task": "t/a/dev/0", "source_success": False}),
           Skill("s2", "b", "1. x y z", provenance={"source_task": "t/a/dev/1", "source_success": False,
                                                    "merged_from": [{"source_task": "t/a/dev/2",
                                                                     "source_success": True}]})]
    lib = SkillLibrary()
    for s in old:
        lib.add(s)
    with pytest.raises(ValueError, match="label_from_episodes"):
        outcome_of(lib.get("s1"))
    episodes = [Episode(f"t/a/dev/{i}", "t", "a", "dev", "subtask", "text", success=ok)
                for i, ok in enumerate([True, True, True])]
    assert label_from_episodes(lib, episodes) == 3
    assert outcome_of(lib.get("s1")) == "success" and outcome_of(lib.get("s2")) == "success"
    assert label_from_episodes(lib, episodes) == 0       # labelled once


def test_findings_sentences_say_what_the_claims_table_says():
    """Chapter findings are written from the claims table: estimate, interval, n, test, verdict — and a
    descriptive row says what was observed without a verdict."""
    from skillbook.analysis import Claim, claims_table
    from skillbook.analysis.report import claim_list, tally
    t = claims_table([
        Claim("memory helps", "+1.9 pp", +1, True, {"difference": -0.25, "ci_low": -0.5, "ci_high": 0.1, "p": 0.3,
                                                     "mde": 0.6, "n_tasks": 9}),
        Claim("no outcome varied", "rise", +1, False, {"estimate": float("nan"), "p": float("nan"), "n": 18,
                                                        "n_clusters": 4}, note="every episode failed",
              unit="episodes"),
        Claim("density", "higher", +1, False, {"estimate": 0.1}, note="one stream each"),
        Claim("utility ranks alike on two task sets", "—", +1, False, {"estimate": 0.6, "p": 0.001, "n": 32},
              unit="skills", kind="check")])
    primary, secondary = claim_list(t, "primary"), claim_list(t, "secondary")
    assert primary == ("* *memory helps* (paper: +1.9 pp): −0.25 [−0.50, +0.10], n = 9; p = 0.30 — "
                       "**not resolved (MDE ±0.60)**.")
    # n as the claims table's n column gives it: its units and clusters
    assert "n = 18 episodes (4 clusters); no test" in secondary and "(every episode failed)" in secondary
    assert "*density* (paper: higher): +0.10; one stream each — descriptive, no test." in secondary
    assert tally(t, "primary") == "0 of 1 supported, 0 contradicted, 1 not resolved"
    assert tally(t, "secondary").endswith("1 descriptive (not tested)")
    # a check of the book's tools is neither listed nor counted with the papers' claims, but on its own
    assert "utility ranks alike" not in secondary and tally(t, "secondary").startswith("0 of 2 supported")
    assert tally(t, "secondary", kind="check") == "1 of 1 supported, 0 contradicted, 0 not resolved"
    assert claim_list(t, kind="check") == ("* *utility ranks alike on two task sets* (paper: —): +0.60, "
                                         "n = 32 skills; p = 0.001, Holm-adjusted = 0.001 — **supported**.")


def test_followups_replay_in_a_new_process_after_running_live_in_one(transfer, fake_env):
    """The real case (smoke run of chapter 04, replayed): E.2 ran live and its frozen memories counted their
    retrievals in the stream's library object; E.3, copied from that object afterwards, fingerprinted the
    counts, so replaying E.3 later — E.2 then a replay, counting nothing — was refused as 'recorded with
    other settings (memory.library)'. Frozen memories get their own copy; the stream's library is never
    changed by a follow-up."""
    t = transfer["t"]
    before = {c: [s.to_dict() for s in lib] for c, lib in t.libraries.items()}
    t.e2(transfer["llm"], transfer["heldout"])
    assert {c: [s.to_dict() for s in lib] for c, lib in t.libraries.items()} == before
    again = load_transfer(transfer["run_dir"])                     # a new reader: what a new process sees
    n = len(transfer["llm"].calls)
    again.e2(transfer["llm"], transfer["heldout"])
    again.e3(transfer["llm"], transfer["heldout"])
    again.e4(transfer["llm"], transfer["heldout"], transfer["scores"])
    assert len(transfer["llm"].calls) == n                      # all replays, none refused


def test_the_prompt_ablation_runs_the_levels_the_main_run_did_not_use(tmp_path, fake_env):
    """The real case (workshop exercise 04.1 after 02.1 set prompt_level=L2): the ablation always ran L1 and
    L2 and chapter 04 labelled the main run 'L3', so 'L2' repeated the main run call for call (every answer
    from the cache) and no L3 prompt ran at all."""
    llm = TypedInducer()
    t = run_transfer(tmp_path / "transfer", llm,
                     replace(transfer_settings(["subtask-none", "subtask-text"]), prompt_level="L2"))
    ablation = t.prompt_ablation(llm, 2)
    assert set(ablation) == {"L1", "L3"}
    from skillbook.papers.breakdown.pipeline import library_of
    written = library_of(t.run_dir / "ablation" / "L3")
    assert len(written) and {s.provenance["prompt_level"] for s in written} == {"L3"}
    assert set(t.prompt_ablation(llm, 2)) == {"L1", "L3"}       # recorded: read back, not run again


def test_a_replay_over_an_older_experiment_record_writes_nothing(transfer, fake_env):
    """experiment.json written before issue 38 held only the agent fields the chapter set (the committed
    workshop record: max_steps, max_subtasks, max_subtask_steps). A replay with the same settings must
    leave it byte for byte, also when the records are read-only (a USB kit, a share)."""
    import json
    import os
    import stat

    t, llm, run_dir = transfer["t"], transfer["llm"], transfer["run_dir"]
    path = run_dir / "experiment.json"
    saved = path.read_bytes()
    old = t.settings.record()
    old["agent"] = {k: v for k, v in old["agent"].items() if k in ("max_steps", "max_subtask_steps", "n_examples")}
    older = json.dumps(old, indent=1).encode()
    path.write_bytes(older)
    os.chmod(path, stat.S_IRUSR)
    os.chmod(run_dir, stat.S_IRUSR | stat.S_IXUSR)
    try:
        n = len(llm.calls)
        again = run_transfer(run_dir, llm, t.settings)
        assert again.settings == t.settings and len(llm.calls) == n and path.read_bytes() == older
    finally:
        os.chmod(run_dir, stat.S_IRWXU)
        os.chmod(path, stat.S_IRUSR | stat.S_IWUSR)
        path.write_bytes(saved)
