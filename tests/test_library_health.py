"""Library health (chapter 09's figures, registered for issue 36): does retrieval choose? Checked on chapter
09's real records, where it did not, and on a small constructed stream where it does."""
from pathlib import Path

from skillbook.papers.breakdown.health import health_along, skill_table, stream_health
from skillbook.papers.breakdown.pipeline import library_of
from skillbook.records import Episode, Subtask
from skillbook.run import load_condition

STUDY = Path(__file__).resolve().parents[1] / "runs" / "study" / "streams" / "subtask-text"


def test_chapter_09s_library_collapsed_and_retrieval_almost_never_chose():
    """The real case: 616 writes, 5 skills, one of 534 writes (3 from successful spans) and 35 lines; with
    k = 5 a strict subset was retrieved on 0.2% of the queries."""
    skills = library_of(STUDY).state()["skills"]
    h = stream_health(load_condition(STUDY).episodes, skills, k=5)
    assert (h["skills"], h["writes"]) == (5, 616)
    assert 0 < h["strict subset"] < 0.01 and h["longest (lines)"] == 35
    t = skill_table(skills)
    assert (t.loc["t0001", "writes"], t.loc["t0001", "from successes"], t.loc["t0001", "lines"]) == (534, 3, 35)


def _episode(position, retrieved, written):
    e = Episode(f"twx/coin/test/{position}", "twx", "coin", "test", "subtask", "text", position=position)
    e.subtasks = [Subtask(i, f"sub {i}", 0, retrieved=r) for i, r in enumerate(retrieved)]
    e.written = written
    return e


def test_a_library_larger_than_k_is_a_choice_and_the_size_follows_the_stream():
    eps = [_episode(0, [[], []], ["a", "b"]), _episode(1, [["a", "b"]], ["c"]),
           _episode(2, [["c"], ["placebo-a", "placebo-b"]], ["a"])]
    along = health_along(eps, k=2)
    assert along.library_size.tolist() == [2, 3, 3]                    # queries with no hit are not counted
    assert along.strict_subset.tolist() == [False, True, True]
    skills = [{"id": "a", "description": "d", "body": "1. go\n2. look",
               "provenance": {"span_success": True, "merged_from": [{"span_success": False}]}}]
    h = stream_health(eps, skills, k=2)
    assert h["strict subset"] == 2 / 3 and h["writes"] == 2 and h["writes from successes"] == 0.5
    assert skill_table(skills).loc["a", "lines"] == 2
