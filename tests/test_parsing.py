"""Action parsing on a corpus of messy replies of the kind small models really write."""
import pytest

from skillbook.agent.parsing import match_action, parse_reply, suggestions

VALID = ["open door to kitchen", "go to kitchen", "take cookbook", "read cookbook", "move south",
         "open fridge", "take purple potato", "look around", "cook purple potato in oven"]

CORPUS = [
    ("Thought: I need to open the door.\nAction: open door to kitchen", "I need to open the door.",
     "open door to kitchen"),
    ("Action: open door to kitchen\nObservation: The door is now open.", "", "open door to kitchen"),
    ("open door to kitchen", "", "open door to kitchen"),
    ("> open door to kitchen", "", "open door to kitchen"),
    ("Action: `open door to kitchen`", "", "open door to kitchen"),
    ("Action: 1. take cookbook 2. read cookbook", "", "take cookbook"),
    ("Actions: take cookbook; read cookbook", "", "take cookbook"),
    ("Action: Take the cookbook.", "", "take cookbook"),
    ("**Thought:** find the recipe\n**Action:** take cookbook", "find the recipe", "take cookbook"),
    ("Thought: the recipe first Action: read cookbook", "the recipe first", "read cookbook"),
    ('{"thought": "go", "action": "move south"}', "go", "move south"),
    ("Action: take cookbook, then read it", "", "take cookbook"),
    ("Thought: cook it.\nAction: cook the purple potato in the oven", "cook it.", "cook purple potato in oven"),
    ("Thought: open it\nAction: open frige", "open it", "open fridge"),
    ("Thought: hmm\nAction 1: look around\nAction 2: move south", "hmm", "look around"),
    ("Thought:\nAction: 'take purple potato'", "", "take purple potato"),
    ("ACTION: MOVE SOUTH", "", "move south"),
]


@pytest.mark.parametrize("reply, thought, action", CORPUS, ids=[c[0][:30] for c in CORPUS])
def test_messy_replies_give_the_intended_valid_action(reply, thought, action):
    p = parse_reply(reply)
    assert p.thought == thought
    assert match_action(p.action, VALID) == action
    assert not p.finish


@pytest.mark.parametrize("reply", [
    "",
    "I think the best plan is to look for the recipe in the cookbook and then cook everything carefully.",
    "Thought: I am not sure what to do here, let me think about the kitchen and its many objects.",
])
def test_replies_without_an_action_are_reported_as_such(reply):
    p = parse_reply(reply)
    assert p.action == "" and match_action(p.action, VALID) is None


@pytest.mark.parametrize("reply", ["Action: subtask done", "Action: Done.", "Thought: all set\nAction: finish"])
def test_finish_signals(reply):
    assert parse_reply(reply).finish


def test_invalid_actions_do_not_match_and_get_suggestions():
    assert match_action("fly to the moon", VALID) is None
    assert match_action("take knife", VALID) is None  # close to 'take cookbook' in letters, not in meaning
    assert "take cookbook" in suggestions("take book", VALID)


def _recorded_prefixless():
    import json
    from pathlib import Path
    return json.loads((Path(__file__).parent / "data" / "prefixless_replies.json").read_text())


@pytest.mark.parametrize("case", _recorded_prefixless(), ids=lambda c: f"{c['task_id']}@{c['step']}")
def test_recorded_replies_without_prefix_take_the_first_valid_line(case):
    """Real replies from the workshop records (e.g. 'examine avocado\\nwiggle your toes' on
    twx/simonsays/test/864, which used to run the LAST line and lose the game at step 1)."""
    valid = case["valid_actions"]
    p = parse_reply(case["reply"], is_valid=lambda a: match_action(a, valid) is not None)
    action = match_action(p.action, valid)
    assert action is not None
    assert action == match_action(case["reply"].splitlines()[0], valid)
    if case["gold_action"] and match_action(case["reply"].splitlines()[0], valid) == case["gold_action"]:
        assert action == case["gold_action"]


def test_the_simonsays_reply_that_lost_the_game():
    valid = ["examine avocado", "wiggle your toes", "eat pea"]
    assert parse_reply("examine avocado\nwiggle your toes").action == "examine avocado"
    p = parse_reply("(End of example.)\nTake olive", is_valid=lambda a: match_action(a, ["take olive"]) is not None)
    assert p.action == "Take olive" and p.thought == "(End of example.)"
    assert match_action(parse_reply("examine avocado\nwiggle your toes", lambda a: a in valid).action,
                        valid) == "examine avocado"
