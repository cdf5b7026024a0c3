"""SkillRL's bank layout, retrieval (routing by category, on the real embedder with real TextWorldExpress
task texts and on the book's committed bank), the raw-trajectory block, evolution trigger, failure
sampling and teacher JSON handling. The pipeline end to end: tests/test_skillrl_pipeline.py."""
import json
from pathlib import Path

import pytest

from fakes import ScriptedModel
from skillbook.agent.parsing import parse_json
from skillbook.papers.skillrl import RawTrajectoryMemory, SkillBankMemory
from skillbook.papers.skillrl.bank import BankFormatError, bank_from_json, bank_html, bank_to_json, kind, render_bank
from skillbook.papers.skillrl.pipeline import (
    StaleRecords,
    Teacher,
    check_retrieval,
    evolution_round,
    load_bank,
    render_run,
    sample_failures,
    triggered,
)
from skillbook.records import Episode, Step

ROOT = Path(__file__).resolve().parents[1]
# The first workshop run of chapter 07 (before the routing fix), frozen as test data: the real case.
COMMITTED = Path(__file__).parent / "data" / "skillrl_workshop"
TEXTS = json.loads((Path(__file__).parent / "data" / "twx_test_task_texts.json").read_text())

PUBLIC = {  # the public SkillRL layout (memory_data/alfworld/claude_style_skills.json), abridged
    "general_skills": [
        {"skill_id": "gen_001", "title": "Systematic Exploration",
         "principle": "Search every likely location once before revisiting.",
         "when_to_apply": "when the target object is not in view"},
        {"skill_id": "gen_002", "title": "Verify Before Acting",
         "principle": "Check the object's state before using it.",
         "when_to_apply": "before any state-changing action"}],
    "task_specific_skills": {
        "pick_and_place": [{"skill_id": "pic_001", "title": "Grab Then Go",
                            "principle": "Take the object first, then go to the receptacle.",
                            "when_to_apply": "tasks that move an object to a place"}],
        "heat": [{"skill_id": "hea_001", "title": "Microwave Heating",
                  "principle": "Use the microwave to heat food items.",
                  "when_to_apply": "tasks that heat an object"},
                 {"skill_id": "hea_002", "title": "Close The Door",
                  "principle": "Close the microwave before heating.",
                  "when_to_apply": "when heating with an appliance"}]},
    "common_mistakes": [{"mistake_id": "err_001", "description": "Placing the object before heating it",
                         "why_it_happens": "The goal names the destination first",
                         "how_to_avoid": "Finish the transformation first"}],
    "metadata": {"source": "claude", "total_memories_analyzed": 40,
                 "task_distribution": {"heat": {"success": 5, "failure": 3}}},
}


def test_public_bank_round_trips_field_for_field():
    lib, meta = bank_from_json(json.loads(json.dumps(PUBLIC)))
    assert [kind(s) for s in lib].count("task_specific") == 3 and lib.get("hea_002").extra["category"] == "heat"
    assert bank_to_json(lib, meta) == PUBLIC
    again, _ = bank_from_json(bank_to_json(lib, meta))
    assert [s.to_dict() for s in again] == [s.to_dict() for s in lib]


def test_malformed_banks_are_named():
    with pytest.raises(BankFormatError, match="missing or empty field"):
        bank_from_json({"general_skills": [{"skill_id": "gen_001", "title": "x"}]})
    with pytest.raises(BankFormatError, match="unknown SkillBank key"):
        bank_from_json({"skills": []})


def test_retrieval_always_includes_general_and_respects_delta_and_k():
    lib, _ = bank_from_json(PUBLIC)
    general = {"gen_001", "gen_002"}
    mem = SkillBankMemory(lib, delta=0.3, top_k=1, mistakes=False)
    query = "heat the potato in the microwave and put it on the table"
    got = [s.id for s in mem.retrieve(query, {"task_type": "heat"})]
    assert general <= set(got) and len(set(got) - general) == 1 and set(got) - general <= {"hea_001", "hea_002"}
    none_relevant = SkillBankMemory(lib, delta=0.99, top_k=6, mistakes=False)
    heat = {"task_type": "heat"}
    assert {s.id for s in none_relevant.retrieve("heat the potato", heat)} == general   # nothing clears δ
    tmpl = SkillBankMemory(lib, mode="template", top_k=6)
    got = {s.id for s in tmpl.retrieve("anything", {"task_type": "heat"})}
    assert got == general | {"hea_001", "hea_002", "err_001"}
    assert "[hea_001] Microwave Heating" in render_bank(tmpl.retrieve("x", {"task_type": "heat"}))
    with pytest.raises(ValueError, match="valid: embedding, template"):
        SkillBankMemory(lib, mode="oracle")


def test_evolution_triggers_only_below_delta():
    assert triggered({"heat": 0.39, "cool": 0.4, "pick": 0.9}) == ["heat"]
    assert triggered({"heat": 0.5}, delta=0.6) == ["heat"] and triggered({}) == []


def ep(cat, i, score, success=False, steps=8):
    return Episode(task_id=f"twx/{cat}/dev/{i}", env="twx", task_type=cat, split="dev", agent="task", memory="x",
                   instruction=f"do {cat}", score=score, success=success,
                   steps=[Step("t", f"act {k}", "o" * 500, score) for k in range(steps)])


def test_failure_sampling_is_stratified_by_severity_and_capped():
    eps = [ep("heat", i, s) for i, s in enumerate([0.5, 0.1, 0.3, 0.0, 0.2, 0.4, 0.6])]
    eps += [ep("cool", i, s) for i, s in enumerate([0.2, 0.0])]
    eps += [ep("heat", 99, 1.0, success=True), ep("pick", 0, 0.0)]
    got = sample_failures(eps, ["heat", "cool"], max_analysed=5)
    assert [(e.task_type, e.score) for e in got] == [("cool", 0.0), ("heat", 0.0), ("cool", 0.2), ("heat", 0.1),
                                                     ("heat", 0.2)]
    assert len(sample_failures(eps, ["heat", "cool"])) == 9                  # fewer failures than the cap
    assert all(e.task_type != "pick" and not e.success for e in sample_failures(eps, ["heat", "cool"], 20))


def test_teacher_retries_once_then_skips_with_a_recorded_error():
    t = Teacher(ScriptedModel(["not json", '[{"title": "A"}]']))
    assert t.ask("p", list, "x") == [{"title": "A"}] and not t.errors
    t = Teacher(ScriptedModel(["not json", "still not json", "[]"]))
    assert t.ask("p", list, "general skills") is None
    assert t.errors == [{"what": "general skills", "reply": "not json", "retry": "still not json"}]
    assert len(t.llm.replies) == 1                                             # no third attempt
    assert parse_json('Here: {"a": 1} and [1, 2]', list) == [1, 2] and parse_json("{bad", dict) is None


def test_an_evolution_round_adds_dyn_skills_from_capped_last_steps():
    lib, _ = bank_from_json(PUBLIC)
    eps = [ep("heat", i, 0.0, steps=9) for i in range(12)] + [ep("cool", i, 1.0, success=True) for i in range(3)]
    reply = json.dumps([{"title": "Heat Before Placing", "principle": "p", "when_to_apply": "w", "category": "heat"},
                        {"title": "Systematic Exploration", "principle": "dup", "when_to_apply": "w"},
                        {"title": "Open First", "principle": "p2", "when_to_apply": "w2"}])
    llm = ScriptedModel([reply])
    out = evolution_round(Teacher(llm), lib, eps)
    assert out["triggered"] == ["heat"] and len(out["failures"]) == 10 and out["added"] == ["dyn_001", "dyn_002"]
    assert lib.get("dyn_001").extra["category"] == "heat" and lib.get("dyn_002").extra["category"] == "heat"
    prompt = llm.prompts[0]
    assert prompt.count("Task (heat)") == 5                                   # 5 failures in the prompt
    assert prompt.count("> act") == 5 * 5                                     # the last 5 steps of each
    assert "o" * 201 not in prompt and "o" * 200 in prompt                    # observations cut to 200 characters
    assert "Systematic Exploration" in prompt                                 # existing titles shown
    assert evolution_round(Teacher(ScriptedModel([])), lib, [ep("heat", 0, 1.0, success=True)])["added"] == []


def test_evolution_rows_count_each_categorys_own_new_skills():
    # Real case: chapter 07's table showed a round's 3 new skills as 3 for every triggered category.
    from skillbook.papers.skillrl.pipeline import evolution_rows
    lib, _ = bank_from_json(PUBLIC)
    eps = [ep("heat", i, 0.0) for i in range(3)] + [ep("cool", i, 0.0) for i in range(3)]
    reply = json.dumps([{"title": "Heat Before Placing", "principle": "p", "when_to_apply": "w", "category": "heat"},
                        {"title": "Open First", "principle": "p2", "when_to_apply": "w2"}])
    info = evolution_round(Teacher(ScriptedModel([reply])), lib, eps)
    assert sorted(info["triggered"]) == ["cool", "heat"] and len(info["added"]) == 2
    rows = {r["category"]: r for r in evolution_rows(0, info, lib)}
    assert (rows["heat"]["added"], rows["heat"]["added_general"]) == (1, 1)
    assert (rows["cool"]["added"], rows["cool"]["added_general"]) == (0, 1)


# -- routing: each task gets its own category's skills (issue 13) -------------------------------------------
HAND = {  # a small bank in the public layout, written by hand for the three calibrated games
    "general_skills": [{"skill_id": "gen_001", "title": "Check Before Acting", "when_to_apply": "before every action",
                        "principle": "Read the observation and the valid actions before choosing one."}],
    "task_specific_skills": {
        "simonsays": [
            {"skill_id": "sim_001", "title": "Obey Only Simon", "when_to_apply": "a command in the Simon says game",
             "principle": "Carry out a command only when it starts with 'Simon says'."},
            {"skill_id": "sim_002", "title": "Repeat The Exact Action", "when_to_apply": "Simon says to touch or "
             "examine an object", "principle": "Type the action Simon names exactly, such as touch or examine it."}],
        "peckingorder": [
            {"skill_id": "pec_001", "title": "Read The Instructions Book", "when_to_apply": "the task is to follow "
             "the instructions book", "principle": "Take the instructions book and read it before anything else."},
            {"skill_id": "pec_002", "title": "Follow The Book In Order", "when_to_apply": "after reading the "
             "instructions book", "principle": "Do the book's steps in order, then read it again until the game "
             "is completed."}],
        "twc": [
            {"skill_id": "twc_001", "title": "Put Objects Where They Belong", "when_to_apply": "an object lies out "
             "of place in a room", "principle": "Pick up each misplaced object and place it in its usual location, "
             "clothes in the wardrobe or drawers, dishes in the cupboard."},
            {"skill_id": "twc_002", "title": "Open Containers First", "when_to_apply": "the usual location of an "
             "object is closed", "principle": "Open a closed wardrobe, drawer or machine before putting an object "
             "in it."}]},
    "common_mistakes": [
        {"mistake_id": "err_001", "category": "twc", "description": "Putting a wet shirt in the wardrobe",
         "why_it_happens": "Any container looks right", "how_to_avoid": "Dry clothes go in the wardrobe."},
        {"mistake_id": "err_002", "category": "peckingorder", "description": "Acting before reading the book",
         "why_it_happens": "The objects are in view", "how_to_avoid": "Read the instructions book first."},
        {"mistake_id": "err_003", "description": "Repeating an action that changed nothing",
         "why_it_happens": "The model loops", "how_to_avoid": "Try another valid action."}],
    "metadata": {},
}


def category(task_id: str) -> str:
    return task_id.split("/")[1]


def routed(memory, query: str, task_id: str) -> tuple[set, set, set]:
    """(general, task-specific with their categories, mistakes) that `memory` retrieves for a task."""
    got = memory.retrieve(query, {"task_type": category(task_id), "task_id": task_id})
    return ({s.id for s in got if kind(s) == "general"},
            {(s.id, s.extra["category"]) for s in got if kind(s) == "task_specific"},
            {s.id for s in got if kind(s) == "mistake"})


def test_mistakes_keep_their_category_in_the_public_layout_and_foreign_ones_are_general():
    lib, _ = bank_from_json(HAND)
    assert [s.extra["category"] for s in lib if kind(s) == "mistake"] == ["twc", "peckingorder", None]
    assert bank_to_json(lib) == HAND                                            # written back field for field
    assert "category" not in json.dumps(bank_to_json(bank_from_json(PUBLIC)[0])["common_mistakes"])
    with pytest.raises(BankFormatError, match=r"common_mistakes\[0\]: 'category' must be a category name"):
        bank_from_json({"common_mistakes": [{**HAND["common_mistakes"][0], "category": 3}]})


@pytest.mark.parametrize("mode", ["embedding", "template"])
def test_each_real_test_task_retrieves_its_own_categorys_skills_from_a_hand_built_bank(mode):
    """The real case: the task-level query (instruction + first observation) of real TextWorldExpress test
    tasks, the real embedder, δ = 0.3 and K = 6 as in chapter 07."""
    lib, _ = bank_from_json(HAND)
    memory = SkillBankMemory(lib, mode=mode, delta=0.3, top_k=6)
    for task_id, query in TEXTS["texts"].items():
        general, specific, mistakes = routed(memory, query, task_id)
        assert general == {"gen_001"}, task_id
        assert specific and {c for _, c in specific} == {category(task_id)}, (task_id, specific)
        own = {"twc": {"err_001"}, "peckingorder": {"err_002"}}.get(category(task_id), set())
        assert mistakes == own | {"err_003"}, task_id                     # its category's and the general ones
    bare = SkillBankMemory(lib, mode=mode, general=False, mistakes=False)
    assert {s.extra["category"] for s in bare.retrieve(TEXTS["texts"]["twx/twc/test/41"], {"task_type": "twc"})} \
        == {"twc"}


def test_the_committed_bank_routes_every_real_test_task_to_its_own_category():
    """Issue 13's real case: chapter 07's committed bank (round 2: simonsays and twc skills, none for
    peckingorder, whose training runs all failed) with the real test tasks' task-level queries."""
    lib, _ = load_bank(COMMITTED / "bank" / "round2.json")
    embedding = SkillBankMemory(lib, delta=0.3, top_k=6)
    template = SkillBankMemory(lib, mode="template", top_k=6)
    for task_id, query in TEXTS["texts"].items():
        cat = category(task_id)
        for memory in (embedding, template):
            general, specific, mistakes = routed(memory, query, task_id)
            assert general == {"gen_001", "gen_002", "gen_003", "gen_004"}
            assert {c for _, c in specific} <= {cat}, (task_id, specific)          # never another game's
            assert mistakes == {f"err_00{i}" for i in range(1, 6)}                   # written without categories
        if cat == "peckingorder":
            assert not routed(embedding, query, task_id)[1]
            # why the candidates are the task's own category's: ranked across categories, as the public
            # code's embedding mode does, every peckingorder task would be shown twc skills above δ
            across = lib.search(query, k=6, threshold=0.3, where=lambda s: kind(s) == "task_specific")
            assert across and {s.extra["category"] for s, _ in across} == {"twc"}, task_id
        else:
            # the embedded text ("title. principle. when_to_apply") alone ranks the task's own category first
            # among all task-specific skills; with "title: when_to_apply" twc skills came first for simonsays
            best, _ = lib.search(query, k=1, threshold=-1.0, where=lambda s: kind(s) == "task_specific")[0]
            assert best.extra["category"] == cat, (task_id, best.id)
    # chapter 07's own test tasks at its δ = 0.3
    for t in ("twx/simonsays/test/394", "twx/simonsays/test/864"):
        assert routed(embedding, TEXTS["texts"][t], t)[1] == {("sim_001", "simonsays")}
    for t in ("twx/twc/test/41", "twx/twc/test/430"):
        assert {i for i, _ in routed(embedding, TEXTS["texts"][t], t)[1]} >= {"dyn_001", "twc_001"}


@pytest.mark.integration
def test_the_task_text_fixture_is_what_the_simulator_says():
    from skillbook.envs import sample_tasks, task_texts
    ids = [t for s in TEXTS["samples"]
           for t in sample_tasks(TEXTS["task_types"], "test", s["n"], seed=s["seed"], env_options=TEXTS["env_options"])]
    assert list(dict.fromkeys(ids)) == list(TEXTS["texts"])
    assert task_texts(list(TEXTS["texts"]), TEXTS["env_options"]) == TEXTS["texts"]


def test_records_made_with_another_retrieval_are_refused():
    """The real case: chapter 07's committed test records were made before the task-level query (their
    recorded query is empty) and their run.json, converted from the first record format, fingerprints only
    the memory's name — a replay with the new retrieval would have shown them as its results."""
    from skillbook.run import load_episodes
    lib, _ = load_bank(COMMITTED / "bank" / "round2.json")
    episodes = load_episodes(COMMITTED / "test" / "skillbank+evolution")
    memory = SkillBankMemory(lib, delta=0.3, top_k=6)
    with pytest.raises(StaleRecords, match="simonsays/test/394 was recorded without the query"):
        check_retrieval(episodes, memory, "test/skillbank+evolution")
    for e in episodes:     # with their real queries: what they retrieved differs (issue 13: no sim_* skill)
        e.subtasks[0].query = TEXTS["texts"][e.task_id]
    with pytest.raises(StaleRecords, match=r"simonsays/test/394 was recorded retrieving \[[^]]*'err_005'\] .*"
                                           r"retrieves \[.*'sim_001'.*another retrieval"):
        check_retrieval(episodes, memory, "test/skillbank+evolution")
    ep = episodes[0]                                                           # a record that matches passes
    ep.subtasks[0].retrieved = [s.id for s in memory.retrieve(ep.subtasks[0].query, {"task_type": ep.task_type})]
    check_retrieval([ep], memory, "x")
    # the raw-trajectory records retrieved the same ids, but their twc prompts were empty (see below):
    # without a recorded query they are refused as well; the no-memory records replay
    raw = RawTrajectoryMemory({})
    with pytest.raises(StaleRecords, match="without the query"):
        check_retrieval(load_episodes(COMMITTED / "test" / "raw-trajectories"), raw, "test/raw-trajectories")
    from skillbook.memory import NoMemory
    check_retrieval(load_episodes(COMMITTED / "test" / "none"), NoMemory(), "test/none")


def test_a_raw_trajectory_longer_than_the_budget_is_cut_not_dropped():
    """The real case: every twc training run of chapter 07 renders to more than the 2,400-character budget,
    so the raw-trajectory condition showed twc tasks nothing (an empty block: the no-memory prompt)."""
    from skillbook.run import load_episodes
    raw = {}
    for e in load_episodes(COMMITTED / "collect"):
        raw.setdefault(e.task_type, []).append(render_run(e))
    assert len(raw["twc"][0]) > 2400
    memory = RawTrajectoryMemory(raw)
    for cat in raw:
        block = memory.render(memory.retrieve("", {"task_type": cat}))
        assert 0 < len(block) <= 2400 and block.startswith("Past trajectory:\nTask (")
        assert block.rstrip().splitlines()[-1].startswith("Outcome:")            # how the cut run ended
    twc = memory.render(memory.retrieve("", {"task_type": "twc"}))
    assert "\n  …\n" in twc and twc.count("Past trajectory:") == 1
    whole = RawTrajectoryMemory(raw, max_chars=None)
    assert whole.render(whole.retrieve("", {"task_type": "twc"})).count("Past trajectory:") == 3
    assert memory.render(memory.retrieve("", {"task_type": "coin"})) == ""       # no runs of the category


def test_the_bank_view_has_one_section_per_level_and_escapes_text():
    lib, _ = bank_from_json({**HAND, "general_skills": [{**HAND["general_skills"][0], "title": "A <b> & c"}]})
    html = bank_html(lib)
    assert html.count("<details>") == 1 + 3 + 3                                # general; 3 categories; mistakes
    assert "Task-specific skills: twc (2)" in html and "Common mistakes: general (1)" in html
    assert html.index("Common mistakes: peckingorder") < html.index("Common mistakes: general")
    assert "A &lt;b&gt; &amp; c" in html and "<b>" not in html
    assert all(html.count(f">{s.id}<") == 1 for s in lib)
