"""Trajectory views built from records (no model needed: the episode is a hand-made record)."""
from skillbook.book.render import episode_html, trajectory_browser
from skillbook.records import Call, Episode, Step, Subtask


def _episode(task_id="twx/coin/dev/0", score=1.0):
    call = Call("executor", 100, 10, 1.5)
    steps = [Step("look first", "look around", "You are in the kitchen.", 0.0, "", True, 0, call),
             Step("", "fly", "'fly' is not a valid action here.", 0.0, "", False, 0, call),
             Step("take it", "take coin", "You take the coin <b>.", 1.0, "", True, 1, call)]
    subs = [Subtask(0, "Find the coin", 0, 2, "Looked around.", "step_budget", ["s1"]),
            Subtask(1, "Take the coin", 2, 3, "Took the coin.", "env_done")]
    return Episode(task_id, "twx", "coin", "dev", "subtask", "none", "Find the coin and take it.",
                   steps=steps, subtasks=subs, calls=[call] * 5, score=score, success=score == 1.0,
                   stop_reason="env_done")


def test_episode_html_nests_steps_under_their_subtasks_and_escapes_text():
    html = episode_html(_episode())
    assert html.index("Subtask 1: Find the coin") < html.index("look around") < html.index("Subtask 2: Take the coin")
    assert html.index("Subtask 2: Take the coin") < html.index("take coin")
    assert "Summary:</b> Looked around." in html and "retrieved skills: s1" in html
    assert "&lt;b&gt;" in html and "<b>." not in html  # observations are escaped
    assert "class='act bad'" in html  # the invalid step is marked


def test_browser_links_dropdown_to_pages_in_the_browser():
    import ipywidgets as widgets
    eps = [_episode("twx/coin/dev/0"), _episode("twx/coin/dev/1", 0.0)]
    box = trajectory_browser(eps)
    pick, stack = box.children
    assert isinstance(stack, widgets.Stack) and len(stack.children) == 2
    assert [o[1] for o in pick.options] == [0, 1] and "twx/coin/dev/1" in pick.options[1][0]
    assert box.link.source == (pick, "index") and box.link.target == (stack, "selected_index")
