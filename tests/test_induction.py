"""Induction parses real model outputs of both formats and rejects broken ones without crashing."""
import dataclasses
import json
from pathlib import Path

import pytest

from skillbook.papers.breakdown.induction import (
    PROMPT_LEVELS,
    InductionError,
    induction_prompt,
    parse_code_skill,
    parse_text_skill,
)
from skillbook.records import Step, Trajectory

REPLIES = json.loads((Path(__file__).parent / "data" / "induction_replies.json").read_text())


@pytest.mark.parametrize("case", REPLIES, ids=[f"{c['format']}-{i}" for i, c in enumerate(REPLIES)])
def test_real_replies(case):
    parse = parse_code_skill if case["format"] == "code" else parse_text_skill
    if case["usable"]:
        parsed = parse(case["reply"])
        description, body = parsed[0], parsed[1]
        assert description and "Description" not in description and len(body.split()) >= 3
        if case["format"] == "code":
            assert body.lstrip().startswith("def ") and "env" in body.split("(", 1)[1].split(")")[0]
    else:
        with pytest.raises(InductionError):
            parse(case["reply"])


def test_fixture_has_usable_and_broken_replies_of_both_formats():
    kinds = {(c["format"], c["usable"]) for c in REPLIES}
    assert kinds == {("text", True), ("text", False), ("code", True), ("code", False)}


@pytest.mark.parametrize("reply, message", [
    ("Description: x\n```python\ndef a(env):\n    return 1\ndef b(env):\n    return 2\n```", "one function"),
    ("Description: x\n```python\ndef a(world, item):\n    return 1\n```", "`env` as its first parameter"),
    ("Description: x\n```python\ndef a(env:\n```", "does not define one function"),
    ("Description: x\nno code here", "no ```python block"),
])
def test_broken_code_skills_say_why(reply, message):
    with pytest.raises(InductionError, match=message):
        parse_code_skill(reply)


def test_prompt_levels_add_their_parts_and_both_levels_share_the_prompt():
    traj = Trajectory("twx/coin/dev/0", "coin", "twx", "Find the coin.", "Open the fridge", "subtask", (0, 1),
                      [Step("", "open fridge", "You open the fridge.", 0.0)], 1.0, True)
    l1, l2, l3 = (induction_prompt(traj, "text", lv) for lv in PROMPT_LEVELS)
    assert "Example of a good answer" not in l1 and "Rules:" not in l1
    assert "Example of a good answer" in l2 and "Rules:" not in l2
    assert "Example of a good answer" in l3 and "Rules:" in l3
    assert "Subtask: Open the fridge" in l3 and "> open fridge" in l3
    task_level = induction_prompt(dataclasses.replace(traj, level="task"), "text")
    assert task_level.replace("task in", "X").count("Subtask:") == 0
    assert task_level.split("\n\n")[2:] == l3.split("\n\n")[2:]  # same example, rules and format
    with pytest.raises(ValueError, match="valid: L1, L2, L3"):
        induction_prompt(traj, "text", "L4")


def test_prompt_version_v1_is_the_recorded_prompt_and_v2_puts_what_every_call_shares_first():
    """Issue 35: under v2 the instruction, example and rules (the same in every induction call of a run)
    open the prompt, so the server's prompt cache keeps them; the record follows and the answer format
    stays last. v1 is byte for byte the prompt chapters 01-09 recorded (their replays are cache lookups
    of these exact requests)."""
    def traj(sub, action):
        return Trajectory("twx/coin/dev/0", "coin", "twx", "Find the coin.", sub, "subtask", (0, 1),
                          [Step("", action, "Done.", 0.0)], 1.0, True)
    one = traj("Open the fridge", "open fridge")
    v1 = induction_prompt(one, "text")
    assert v1.startswith("Below is the record of an agent working on a subtask")
    assert v1.split("\n\n")[1].startswith("Task: Find the coin.")          # the record second, as recorded
    a, b = induction_prompt(one, "text", prompts="v2"), induction_prompt(traj("Go west", "move west"), "text",
                                                                         prompts="v2")
    shared = a.split("The record:")[0]
    assert b.startswith(shared) and "Example of a good answer" in shared and "Rules:" in shared
    assert a.split("\n\n")[-1] == v1.split("\n\n")[-1]
    assert a.split("\n\n")[-1].startswith("Answer in exactly this form")
    with pytest.raises(ValueError, match="valid: v1, v2, v3"):
        induction_prompt(one, "text", prompts="v9")


def test_v3_induction_record_keeps_the_coin_at_the_end_of_a_room():
    """The real case (chapter 11's coin calibration): the gold step before 'take coin' showed the pantry cut
    at 160 characters, 'You also see a co…', so no induced skill could say where the coin was."""
    pantry = ("You are in the pantry. In one part of the room you see a folding chair, that has nothing on it. "
              "There is also a shelf, that has nothing on it. You also see a coin. To the West you see the kitchen.")
    t = Trajectory("twx/coin/train/3", "coin", "twx", "Find the coin.", "", "task", (0, 2),
                   [Step("", "move east", pantry, 0.0), Step("", "take coin", "You take the coin.", 1.0)], 1.0, True)
    v2, v3 = induction_prompt(t, "text", prompts="v2"), induction_prompt(t, "text", prompts="v3")
    assert "You also see a coin" not in v2 and "You also see a coin. To the West you see the kitchen." in v3
    assert "You are in the pantry." in v3
    # everything but the record is the same as v2's (v3 changes no induction file)
    assert v3.split("The record:")[0] == v2.split("The record:")[0]
    assert v3.split("\n\n")[-1] == v2.split("\n\n")[-1]




class _Recorder:
    """A fake model (control flow only) that keeps the keyword arguments of each call."""
    def __init__(self, reply):
        self.reply, self.kwargs = reply, []

    def chat(self, messages, **kw):
        from skillbook.llm import Completion
        self.kwargs.append(kw)
        return Completion(self.reply, 10, 5, 0.0)


def test_under_v2_a_text_skill_reply_ends_before_a_seventh_step_and_v1_has_no_stop():
    """The real case: 29% of the book's induction replies and 53% of its merge replies listed more than
    the six steps the prompt allows, a loop ('1. look around 2. move west 3. look around …') to the
    token cap. Under v2, text induction and the merge stop where a seventh step would begin; code skills
    have no such stop, and v1 (the recorded requests) none at all."""
    from skillbook.papers.breakdown.induction import SIX_STEPS, induce
    from skillbook.papers.breakdown.memory import InducedMemory
    from skillbook.skills.record import Skill
    traj = Trajectory("twx/coin/dev/0", "coin", "twx", "Find the coin.", "Go west", "subtask", (0, 1),
                      [Step("", "move west", "Done.", 0.0)], 1.0, True)
    code_reply = "Description: Move.\n```python\ndef go(env):\n    return env.step('move west')\n```"
    for version, text_stop in (("v1", None), ("v2", SIX_STEPS)):
        text = _Recorder("Description: Move west.\nSkill:\n1. move west\n2. look around\nCaveats: none")
        induce(text, traj, "text", prompts=version)
        assert text.kwargs[0]["stop"] == text_stop and text.kwargs[0]["role"] == "induction"
        code = _Recorder(code_reply)
        induce(code, traj, "code", prompts=version)
        assert code.kwargs[0]["stop"] is None
        merge = _Recorder("1. move west\n2. look around")
        memory = InducedMemory(merge, prompts=version)
        memory.record_call = lambda role, c: None
        memory._merge(Skill("a", "d", "1. x", "text", {}), Skill("b", "d", "1. y", "text", {}))
        assert merge.kwargs[0]["stop"] == text_stop and merge.kwargs[0]["role"] == "merge"
    assert SIX_STEPS == ["\n7."]
