"""SkillRL's bank layout, retrieval, evolution trigger, failure sampling and teacher JSON handling."""
import json
from types import SimpleNamespace

import pytest

from skillbook.papers.skillrl import SkillBankMemory
from skillbook.records import Episode, Step
from skillbook.agent.parsing import parse_json
from skillbook.papers.skillrl.pipeline import Teacher, evolution_round, sample_failures, triggered
from skillbook.papers.skillrl.bank import BankFormatError, bank_from_json, bank_to_json, kind, render_bank

PUBLIC = {  # the public SkillRL layout (memory_data/alfworld/claude_style_skills.json), abridged
    "general_skills": [
        {"skill_id": "gen_001", "title": "Systematic Exploration", "principle": "Search every likely location once before revisiting.",
         "when_to_apply": "when the target object is not in view"},
        {"skill_id": "gen_002", "title": "Verify Before Acting", "principle": "Check the object's state before using it.",
         "when_to_apply": "before any state-changing action"}],
    "task_specific_skills": {
        "pick_and_place": [{"skill_id": "pic_001", "title": "Grab Then Go", "principle": "Take the object first, then go to the receptacle.",
                            "when_to_apply": "tasks that move an object to a place"}],
        "heat": [{"skill_id": "hea_001", "title": "Microwave Heating", "principle": "Use the microwave to heat food items.",
                  "when_to_apply": "tasks that heat an object"},
                 {"skill_id": "hea_002", "title": "Close The Door", "principle": "Close the microwave before heating.",
                  "when_to_apply": "when heating with an appliance"}]},
    "common_mistakes": [{"mistake_id": "err_001", "description": "Placing the object before heating it",
                         "why_it_happens": "The goal names the destination first", "how_to_avoid": "Finish the transformation first"}],
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
    got = [s.id for s in mem.retrieve("heat the potato in the microwave and put it on the table", {})]
    assert general <= set(got) and len(set(got) - general) == 1 and set(got) - general <= {"hea_001", "hea_002"}
    none_relevant = SkillBankMemory(lib, delta=0.99, top_k=6, mistakes=False)
    assert {s.id for s in none_relevant.retrieve("heat the potato", {})} == general      # nothing clears δ
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
    assert [(e.task_type, e.score) for e in got] == [("cool", 0.0), ("heat", 0.0), ("cool", 0.2), ("heat", 0.1), ("heat", 0.2)]
    assert len(sample_failures(eps, ["heat", "cool"])) == 9                  # fewer failures than the cap
    assert all(e.task_type != "pick" and not e.success for e in sample_failures(eps, ["heat", "cool"], 20))


class FakeTeacherLLM:
    """A FAKE model for control-flow tests: replays canned replies and records the prompts it saw."""

    def __init__(self, replies):
        self.replies, self.prompts = list(replies), []

    def chat(self, messages, **kw):
        self.prompts.append(messages[-1]["content"] if len(messages) == 1 else messages[0]["content"])
        return SimpleNamespace(text=self.replies.pop(0))


def test_teacher_retries_once_then_skips_with_a_recorded_error():
    t = Teacher(FakeTeacherLLM(["not json", '[{"title": "A"}]']))
    assert t.ask("p", list, "x") == [{"title": "A"}] and not t.errors
    t = Teacher(FakeTeacherLLM(["not json", "still not json", "[]"]))
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
    llm = FakeTeacherLLM([reply])
    out = evolution_round(Teacher(llm), lib, eps)
    assert out["triggered"] == ["heat"] and len(out["failures"]) == 10 and out["added"] == ["dyn_001", "dyn_002"]
    assert lib.get("dyn_001").extra["category"] == "heat" and lib.get("dyn_002").extra["category"] == "heat"
    prompt = llm.prompts[0]
    assert prompt.count("Task (heat)") == 5                                   # 5 failures in the prompt
    assert prompt.count("> act") == 5 * 5                                     # the last 5 steps of each
    assert "o" * 201 not in prompt and "o" * 200 in prompt                    # observations cut to 200 characters
    assert "Systematic Exploration" in prompt                                 # existing titles shown
    assert evolution_round(Teacher(FakeTeacherLLM([])), lib, [ep("heat", 0, 1.0, success=True)])["added"] == []
