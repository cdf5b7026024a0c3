"""Gold-trajectory libraries and the other-game placebo of issue 36, on the FAKE world and model (control
flow only: where spans are cut, what is induced from them, what the placebo shows)."""
import pytest

from fakes import FakeModel, FakeWorld
from skillbook.memory import MemoryPolicy
from skillbook.papers.breakdown.oracle import OtherGamePlacebo, gold_library, gold_trajectory, milestone_spans
from skillbook.skills import Skill
from skillbook.skills.library import SkillLibrary


def test_a_gold_trajectory_is_cut_where_the_benchmarks_score_rises(fake_env):
    env = FakeWorld()
    fetch = gold_trajectory(env, "fake/fetch/train/3")
    assert [s.action for s in fetch.steps] == ["take key", "open door"] and fetch.success
    spans = milestone_spans(fetch)
    assert [s.span for s in spans] == [(0, 1), (1, 2)]                 # score 0.5 after the key, 1.0 at the door
    assert [s.success for s in spans] == [False, True] and all(s.level == "task" for s in spans)
    count = milestone_spans(gold_trajectory(env, "fake/count/train/2"))  # one milestone: the end
    assert len(count) == 1 and [s.action for s in count[0].steps] == ["add one"] * 3 + ["say done"]


def test_a_gold_library_is_induced_from_train_games_with_the_papers_hygiene(fake_env):
    model = FakeModel()
    lib, calls = gold_library(model, ["fake/fetch/train/0", "fake/fetch/train/1"], prompts="v2")
    # the fake model gives every span the same description: four inductions, one skill, three merges
    assert len(lib) == 1 and [e["event"] for e in lib.events] == ["added", "merged", "merged", "merged"]
    assert [c.role for c in calls].count("induction") == 4
    skill = next(iter(lib))
    assert skill.provenance["source_task"] == "fake/fetch/train/0"
    assert all(p["task_success"] for p in [skill.provenance] + skill.provenance["merged_from"])
    assert "The record:" in model.calls[0][0]["content"]                # v2's induction prompt
    with pytest.raises(ValueError, match="TRAIN games only"):
        gold_library(model, ["fake/fetch/test/0"])


class _Fixed(MemoryPolicy):
    name = "fixed"

    def __init__(self, skills):
        self.skills = skills

    def retrieve(self, query, context):
        return self.skills


def test_the_placebo_shows_whole_other_game_skills_as_many_and_as_long_as_the_real_ones():
    real = [Skill("r1", "find the coin", " ".join(["w"] * 10), "text"),
            Skill("r2", "open the door", " ".join(["w"] * 40), "text")]
    pool = SkillLibrary()
    for i, n in enumerate((5, 12, 38, 80)):
        pool.add(Skill(f"p{i}", f"put item {i} away", " ".join([f"x{i}"] * n), "text"))
    placebo = OtherGamePlacebo(_Fixed(real), pool, "twc")
    shown = placebo.retrieve("find the coin", {"task_id": "twx/coin/test/0"})
    assert [s.id for s in shown] == ["placebo-p1", "placebo-p2"]        # nearest lengths, 12 ~ 10 and 38 ~ 40
    assert shown[0].body == pool.skills["p1"].body and shown[0].description == "put item 1 away"
    assert shown[0].provenance == {"placebo_for": "r1", "pool": "twc"}
    same = [_Fixed([real[0], real[0]])]                                  # one pool skill is never shown twice
    twice = OtherGamePlacebo(same[0], pool, "twc").retrieve("q", {"task_id": "t"})
    assert len({s.id for s in twice}) == 2
    assert placebo.retrieve("find the coin", {"task_id": "twx/coin/test/0"}) == shown   # deterministic
    with pytest.raises(ValueError, match="pool of other-game skills is empty"):
        OtherGamePlacebo(_Fixed(real), SkillLibrary(), "twc")
