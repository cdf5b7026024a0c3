"""Library health (issue 36): does retrieval choose? Checked on chapter 09's real records, where it did
not, and on a small constructed stream where it does."""
from pathlib import Path

from skillbook.papers.breakdown.health import health_along, health_summary, skill_table
from skillbook.papers.breakdown.pipeline import library_of
from skillbook.records import Episode, SubTrajectory
from skillbook.run import load_condition
from skillbook.skills import Skill
from skillbook.skills.library import SkillLibrary

STUDY = Path(__file__).resolve().parents[1] / "runs" / "study" / "streams" / "subtask-text"


def test_chapter_09s_library_collapsed_and_retrieval_never_chose():
    """The real case: 616 inductions, 5 skills, one holding 534 of the spans; with k = 5 every subtask
    after the library reached five skills got all of them, so no retrieval was a strict subset."""
    episodes = load_condition(STUDY).episodes
    h = health_summary(episodes, library_of(STUDY), k=5)
    assert h["skills"] == 5 and h["spans"] == 616
    assert h["largest_skill_spans_share"] > 0.85
    assert h["library_at_most_k_share"] == 1.0 and h["strict_subset_share"] < 0.01
    skills = skill_table(library_of(STUDY)).set_index("skill_id")
    assert skills.loc["t0001", "spans"] == 534 and skills.loc["t0001", "from_successful_span"] == 3
    assert skills.loc["t0001", "lines"] == 35           # "at most 6 numbered steps", merged 533 times


def _episode(position, retrieved, written):
    e = Episode(f"twx/coin/test/{position}", "twx", "coin", "test", "subtask", "text", position=position)
    e.subtasks = [SubTrajectory(i, f"sub {i}", 0, retrieved=r, written=w)
                  for i, (r, w) in enumerate(zip(retrieved, written))]
    return e


def test_a_library_larger_than_k_is_a_choice_and_the_counts_follow_the_stream():
    eps = [_episode(0, [[], []], [["a"], ["b"]]), _episode(1, [["a", "b"]], [["c"]]),
           _episode(2, [["c"], ["a", "b"]], [[], ["a"]])]
    along = health_along(eps, k=2)
    assert along.library_size.tolist() == [0, 1, 2, 3, 3]
    assert along.strict_subset.tolist() == [False, True, False, True, True]
    lib = SkillLibrary()
    lib.add(Skill("a", "d", "1. go 2. look", "text",
                  {"span_success": True, "merged_from": [{"span_success": False, "task_success": True}]}))
    t = skill_table(lib)
    assert t.loc[0, "spans"] == 2 and t.loc[0, "from_successful_span"] == 1 and t.loc[0, "words"] == 4
    h = health_summary(eps, lib, k=2)
    assert h["strict_subset_share"] == 0.75 and h["library_at_most_k_share"] == 0.5
