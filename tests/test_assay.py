"""Assay's restructuring gate, per-task masking and split parsing (control flow; the runs are in the chapter)."""

import numpy as np
import pytest

from fakes import ScriptedModel
from skillbook.agent import AgentConfig
from skillbook.papers.assay import AssayMemory, PerTaskMasking
from skillbook.papers.assay.pipeline import (
    AssaySettings,
    accept,
    assay_conditions,
    merge_clusters,
    parse_variants,
    restructure,
    retire_candidates,
    sign_flips,
    split_candidates,
)
from skillbook.papers.assay.templates import template_skills, with_templates
from skillbook.skills.library import SkillLibrary
from skillbook.skills.record import Skill

DEV = ["Simon says, 'touch cabbage'. Your task is to do exactly what Simon says.",
       "You are in the kitchen. You see a fridge and a counter. Pick up objects and put them away.",
       "You are in the pantry. You see an instructions book. Read and follow the instructions book."]


def library():
    lib = SkillLibrary()
    for sid, desc in (("t1", "Do exactly what Simon says"), ("t2", "Put objects in their usual places"),
                      ("t3", "Read the instructions book"), ("t4", "Read the instructions book first")):
        lib.add(Skill(sid, desc, "1. act"))
    return with_templates(lib, "twx")


def attribution(C):
    from skillbook.papers.assay.attribution import global_score, heterogeneity
    C = np.asarray(C, float)
    return {"skill_ids": ["t1", "t2", "t3", "t4"], "C": C, "global": global_score(C), "heterogeneity": heterogeneity(C)}


def test_templates_are_protected_and_prefixed():
    assert all(s.id.startswith("tpl-") for s in template_skills("tau2")) and len(template_skills("twx")) == 5
    with pytest.raises(ValueError, match="valid: twx, sciworld, tau2"):
        template_skills("alfworld")


def test_per_task_masking_suppresses_predicted_harm_keeps_templates_and_falls_back():
    lib = library()
    # t1 helps Simon-like tasks and hurts the others; t2 hurts everywhere; t3/t4 help the book task only
    C = [[0.8, -0.5, -0.5], [-0.4, -0.4, -0.4], [-0.2, -0.2, 0.7], [np.nan, np.nan, np.nan]]
    m = PerTaskMasking(np.array(C), ["t1", "t2", "t3", "t4"], DEV, temperature=0.05)
    kept, decision = m.keep(list(lib), "Simon says, 'eat apple'. Your task is to do exactly what Simon says.")
    ids = {s.id for s in kept}
    assert {s.id for s in template_skills("twx")} <= ids           # templates always kept
    assert "t1" in ids and "t2" not in ids and "t4" in ids           # NaN row: unknown effect, kept
    assert not decision["fallback"]
    # every real skill predicted harmful for this task → fall back to the whole library
    strict = PerTaskMasking(np.array(C), ["t1", "t2", "t3", "t4"], DEV, temperature=0.05, min_keep=3)
    kept, decision = strict.keep(list(lib), DEV[1])
    assert decision["fallback"] and len(kept) == len(lib)
    with pytest.raises(ValueError, match="4 skills × 3 dev tasks"):
        PerTaskMasking(np.zeros((2, 3)), ["t1", "t2", "t3", "t4"], DEV)


def test_assay_memory_shows_a_template_only_when_the_mask_includes_it():
    """Issue 13: a trial's mask decides for templates too; a library without a mask shows them all."""
    lib = library()
    tpl = [s.id for s in template_skills("twx")]
    mem = AssayMemory(lib, include={"t1"}, k=5, threshold=0.0)
    assert [s.id for s in mem.retrieve("Simon says touch the cabbage", {"task_id": "x"})] == ["t1"]
    mem = AssayMemory(lib, include={"t1", tpl[2]}, k=5, threshold=0.0)
    assert [s.id for s in mem.retrieve("Simon says touch the cabbage", {"task_id": "x"})] == [tpl[2], "t1"]
    got = [s.id for s in AssayMemory(lib, k=5, threshold=0.0).retrieve("Simon says", {"task_id": "x"})]
    assert got[:5] == tpl and len(got) == 9                           # templates first, then top-k


class GateStub:
    """Dev pass rates by step name (control flow of the gate; no model involved)."""

    def __init__(self, rates):
        self.rates, self.asked = rates, []

    def pass_rate(self, library, label):
        self.asked.append((label, sorted(s.id for s in library)))
        return self.rates[label]


SPLIT_REPLY = ('Sure: [{"description": "When Simon speaks, obey", "body": "1. do it"},'
               ' {"description": "When no one speaks, wait", "body": "1. look"}]')


def test_dev_gate_rejects_a_step_that_lowers_the_pass_rate():
    assert accept(0.5, 0.5) and accept(0.5, 0.6) and not accept(0.5, 0.4)
    lib = library()
    C = [[0.9, -0.6, 0.0], [0.01, 0.02, 0.0], [0.3, 0.3, 0.3], [0.2, 0.2, 0.2]]
    gate = GateStub({"original": 0.5, "split": 0.6, "retire": 0.4, "merge": 0.6})
    new, log = restructure(lib, attribution(C), DEV, ScriptedModel(then=SPLIT_REPLY), gate,
                           AssaySettings(tau_split=1.0, tau_retire=0.05, tau_merge=0.8))
    assert log.set_index("step")["accepted"].to_dict() == {"split": True, "retire": False, "merge": True}
    ids = {s.id for s in new}
    assert "t1" not in ids and sum(s.provenance.get("split_from") == "t1" for s in new) == 2  # split kept
    assert "t2" in ids                                                  # retire rejected by the gate
    assert ("t3" in ids) != ("t4" in ids)                               # near-duplicates merged: best Ĉ kept
    assert "t3" in ids                                                  # (Ĉ 0.3 > 0.2)
    assert all(s.id in ids for s in template_skills("twx"))             # templates never touched
    assert gate.asked[0][0] == "original"


def test_templates_take_part_in_C_but_are_never_split_or_retired():
    """Issue 13: C now has template rows; a template with the largest H and Ĉ = 0 stays untouched."""
    lib = library()
    tpl = [s.id for s in template_skills("twx")]
    ids = ["t1", "t2", "t3", "t4"] + tpl
    C = np.array([[0.9, -0.6, 0.0], [0.3, 0.3, 0.3], [0.3, 0.3, 0.3], [0.2, 0.2, 0.2]]
                 + [[1.0, -1.0, 0.0]] + [[0.0, 0.01, -0.01]] * 4)
    from skillbook.papers.assay.attribution import global_score, heterogeneity
    a = {"skill_ids": ids, "C": C, "global": global_score(C), "heterogeneity": heterogeneity(C)}
    settings = AssaySettings(tau_split=1.0, tau_retire=0.05, tau_merge=0.99, max_split=1)
    assert split_candidates(ids, a["heterogeneity"], settings) == ["t1"]     # not tpl-look (H = 2.0)
    assert retire_candidates(ids, a["global"], settings) == []              # not the four Ĉ = 0 templates
    gate = GateStub({"original": 0.5, "split": 0.6, "retire": 0.6, "merge": 0.6})
    new, log = restructure(lib, a, DEV, ScriptedModel(then=SPLIT_REPLY), gate, settings)
    assert set(tpl) <= {s.id for s in new} and not any(set(c) & set(tpl) for c in log["changed"])
    # the global filter drops skills with Ĉ < 0, never a template
    C[4] = [-1.0, -1.0, -1.0]
    a = {"skill_ids": ids, "C": C, "global": global_score(C), "heterogeneity": heterogeneity(C)}
    glob = assay_conditions(AgentConfig(), lib, lib, a, DEV, settings, conditions=["global"])[0].memory()
    assert set(tpl) <= glob.include


def test_steps_without_candidates_run_no_gate():
    lib = library()
    C = np.zeros((4, 3))
    gate = GateStub({"original": 0.5})
    new, log = restructure(lib, attribution(C) | {"global": np.full(4, 0.5)}, DEV, ScriptedModel(then=SPLIT_REPLY),
                           gate, AssaySettings(tau_split=1.0, tau_retire=0.05, tau_merge=0.99))
    assert list(log["note"]) == ["no candidates"] * 3 and [a for a, _ in gate.asked] == ["original"]
    assert len(new) == len(lib)


def test_split_replies_are_parsed_or_refused():
    good = parse_variants('```json\n[{"description": "When A", "body": "x"}, '
                          '{"description": "When B", "body": "y"}]\n```')
    assert [v["description"] for v in good] == ["When A", "When B"]
    assert parse_variants("no json here") is None
    assert parse_variants('[{"description": "only one", "body": "x"}]') is None
    assert parse_variants('[{"description": "", "body": "x"}, {"description": "B", "body": "y"}]') is None
    assert parse_variants('[{"description": "A", "body": "x"}, {"description": "B"') is None


def test_conditions_and_sign_flips():
    lib = library()
    a = attribution([[0.5, -0.5, 0.0], [0.1, 0.2, 0.0], [-0.3, -0.1, -0.2], [np.nan, np.nan, np.nan]])
    assert sign_flips(a) == ["t1"] and sign_flips(a, margin=0.6) == []
    config = AgentConfig()
    conds = assay_conditions(config, lib, lib, a, DEV, AssaySettings())
    assert [c.name for c in conds] == ["none", "full", "global", "restructured", "restructured+masking", "full+masking"]
    glob = conds[2].memory()
    assert glob.include == {"t1", "t2", "t4"} | {s.id for s in template_skills("twx")}   # Ĉ(t3) < 0 dropped
    with pytest.raises(ValueError, match="valid: none, full"):
        assay_conditions(config, lib, lib, a, DEV, AssaySettings(), conditions=["oracle"])
    with pytest.raises(ValueError, match="valid: score, success"):
        AssaySettings(outcome="reward").validate()
    assert merge_clusters(lib, ["t3", "t4", "t1"], 0.8) == [["t3", "t4"], ["t1"]]


def test_templates_come_first_and_the_library_keeps_its_records_and_id_counter():
    """`with_templates` (through `SkillLibrary.with_first`, no longer reaching into the library's private
    fields): templates first, then the induced skills (the same records), and new ids continue where the
    induced library's left off."""
    lib = SkillLibrary()
    for d in ("pick up the key", "open the door"):
        lib.add(Skill(id=lib.new_id(), description=d, body="…"))
    out = with_templates(lib, "twx")
    ids = [s.id for s in out]
    assert ids[:5] == [s.id for s in template_skills("twx")] and ids[5:] == [s.id for s in lib]
    assert out.get(ids[5]) is lib.get(ids[5])
    assert out.new_id() == lib.new_id()
