"""Induction parses real model outputs of both formats and rejects broken ones without crashing."""
import dataclasses
import json
from pathlib import Path

import pytest

from skillbook.papers.breakdown.induction import (PROMPT_LEVELS, InductionError, induction_prompt, parse_code_skill,
                                                  parse_text_skill)
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
