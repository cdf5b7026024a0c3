"""SKILLC: candidates, replay credit on real gold trajectories, macro expansion, judge reply parsing."""
from types import SimpleNamespace

import numpy as np
import pytest

from skillbook.envs import make_env
from skillbook.papers.skillc import CreditMemory
from skillbook.papers.skillc.credit import (Candidate, ablate, candidates, judge_credit, parse_probabilities,
                                           replay_credit, replay_score, window_candidates)
from skillbook.papers.skillc.macros import Macro, add_macro, macro_skill, parse_macro
from skillbook.papers.skillc.pipeline import spread
from skillbook.records import Step, Trajectory
from skillbook.skills.library import SkillLibrary
from skillbook.skills.sandbox import run

TWC = {"twc": "numLocations=1,numItemsToPutAway=1,includeDoors=0,limitInventorySize=0"}


def test_windows_cover_every_length_in_the_range():
    c = window_candidates(5, 1, 3)
    assert {len(x.indices) for x in c} == {1, 2, 3}
    assert len(c) == 5 + 4 + 3 and all(x.indices == tuple(range(x.indices[0], x.indices[-1] + 1)) for x in c)
    assert window_candidates(2, 3, 4) == []
    with pytest.raises(ValueError, match="min_len"):
        window_candidates(5, 0, 2)
    steps = [SimpleNamespace(action=a, observation=o, thought=t) for a, o, t in
             [("look around", "You see an apple and a fridge.", ""), ("take apple", "Taken.", "need it"),
              ("open fridge", "Opened.", ""), ("put apple in fridge", "Done.", "store it"), ("wait", "", "")]]
    got = candidates(steps, 2, 2)
    assert {x.kind for x in got} == {"window", "step", "dependency"}
    assert Candidate("dependency", (0, 1, 2, 3)) in got                     # apple and fridge link these steps
    assert [x.indices for x in got if x.kind == "step"] == [(1,), (3,)]    # steps with a thought
    assert spread(list(range(10)), 3) == [0, 4, 9] and spread([1, 2], 5) == [1, 2]


@pytest.fixture(scope="module")
def twx():
    env = make_env("twx", game_params=TWC)
    yield env
    env.close()


def test_replay_credit_is_positive_for_a_needed_step_and_zero_for_an_inert_one(twx):
    task = "twx/twc/train/0"
    gold = twx.gold_actions(task)
    assert replay_score(twx, task, gold) == 1.0
    needed = next(i for i, a in enumerate(gold) if a.startswith("put ") or a.startswith("insert "))
    assert replay_credit(twx, task, gold, Candidate("step", (needed,))) > 0
    padded = ["look around"] + gold
    assert replay_credit(twx, task, padded, Candidate("step", (0,))) == 0.0
    assert ablate(["a", "b", "c"], Candidate("window", (1, 2))) == ["a", "look around", "look around"]


def test_macro_expansion_issues_exactly_the_templates_commands():
    m = parse_macro('Here you go: {"name": "stash_item", "description": "Put an item away in a container", '
                    '"inputs": ["obj", "box"], "preconditions": "the item is in view", '
                    '"steps": ["take {obj}", "open {box}", "put {obj} in {box}"]}')
    assert m is not None and m.inputs == ["obj", "box"]
    issued = []

    def step(action):
        issued.append(action)
        return f"ok: {action}", False

    result = run([m.code()], ("stash_item", ["red apple", "fridge"]), step)
    assert not result.error, result.error
    assert issued == m.commands("red apple", "fridge") == ["take red apple", "open fridge", "put red apple in fridge"]


def test_a_macro_is_kept_only_if_it_reproduces_its_window():
    m = Macro("stash", "d", ["obj", "box"], "", ["take {obj}", "open {box}", "put {obj} in {box}"])
    assert m.binding(["take Red Apple", "open fridge", "put red apple in fridge"]) == {"obj": "red apple", "box": "fridge"}
    assert m.binding(["take red apple", "open fridge", "put pear in fridge"]) is None  # one input, two values
    assert m.binding(["take red apple", "open fridge"]) is None                          # a step lost
    invented = Macro("x", "d", ["grape"], "", ["take grape", "replace grape with {grape}"])
    assert invented.binding(["take grape", "take peach"]) is None                        # a made-up action
    assert Macro("x", "d", [], "", ["take banana", "slice banana"]).binding(["take banana", "slice banana"]) == {}
    # a name bound by an earlier step fixes how a later step splits
    two = Macro("x", "d", ["a", "b"], "", ["take {a}", "put {a} {b}"])
    assert two.binding(["take red apple", "put red apple in fridge"]) == {"a": "red apple", "b": "in fridge"}
    assert Macro("x", "d", ["a"], "", ["give {a} to {a}"]).binding(["give x to y"]) is None


def test_malformed_macro_replies_are_refused():
    assert parse_macro("no json") is None
    assert parse_macro('{"name": "Bad Name", "description": "d", "inputs": [], "steps": ["look"]}') is None
    assert parse_macro('{"name": "ok", "description": "d", "inputs": ["a"], "steps": ["take {b}"]}') is None
    assert parse_macro('{"name": "ok", "description": "d", "inputs": ["a"], "steps": ["take {a"]}') is None
    assert parse_macro('{"name": "ok", "description": "d", "inputs": ["a"], "steps": []}') is None


class FakeJudgeLLM:
    """A FAKE model for a parsing test: canned judge replies, some malformed."""

    def __init__(self, replies):
        self.replies = list(replies)

    def chat(self, messages, **kw):
        return SimpleNamespace(text=self.replies.pop(0))


def test_judge_parsing_survives_malformed_replies():
    assert parse_probabilities('```json\n{"p_a": 0.9, "p_b": 0.25}\n```') == (0.9, 0.25)
    assert parse_probabilities("Run A: 0.8. Run B: 0.3") == (0.8, 0.3)
    assert parse_probabilities('{"p_a": "high", "p_b": 2}') is None
    assert parse_probabilities("I cannot tell.") is None
    c = Candidate("window", (1,))
    j = judge_credit(FakeJudgeLLM(['{"p_a": 0.9, "p_b": 0.3}', "no idea", "A 0.7 B 0.5"]), "task", ["a", "b"], ["x", "y"],
                     True, c, samples=3)
    assert j["unusable"] == 1 and j["credit"] == pytest.approx((0.9 + 0.7) / 2 - (0.3 + 0.5) / 2)
    j = judge_credit(FakeJudgeLLM(["?", "??"]), "task", ["a"], ["x"], True, c, samples=2)
    assert np.isnan(j["credit"]) and j["unusable"] == 2


def trajectory(steps, success):
    return Trajectory("twx/twc/test/0", "twc", "twx", "", "", "task", (0, len(steps)), steps, float(success), success)


def test_credit_memory_tracks_use_merges_duplicates_and_retires():
    lib = SkillLibrary()
    m1 = Macro("stash_item", "Put an item away in a container", ["obj"], "", ["take {obj}"], credit=[0.5])
    m2 = Macro("store_thing", "Put an item away in a container.", ["obj"], "", ["take {obj}", "look"], credit=[0.9])
    assert add_macro(lib, macro_skill(m1, "m0001", {})) == "added"
    assert add_macro(lib, macro_skill(m2, "m0002", {})) == "merged"
    s = lib.get("m0001")
    assert len(lib) == 1 and s.extra["credit_history"] == [0.5, 0.9] and s.extra["macro"]["steps"] == ["take {obj}", "look"]
    assert "def stash_item(" in s.body                                       # the kept skill keeps its name
    mem = CreditMemory(lib, k=3, threshold=0.0, retire_window=2)
    assert mem.callable_code("stash_item") == [s.body] and mem.callable_code("nope") is None
    mem.write(trajectory([Step("", "take x", "", 0.0, macro="stash_item")], True), {})
    assert s.stats["uses"] == 1 and s.stats["successes"] == 1
    lib.add(macro_skill(Macro("idle", "Never used macro", [], "", ["look"]), "m0003", {}))
    mem.write(trajectory([], False), {})
    assert "m0003" not in lib and "m0001" in lib and mem.retired[0]["reason"] == "unused"
