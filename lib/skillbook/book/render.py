"""HTML views of recorded trajectories, for chapters and the static book.

`trajectory_browser` links a Dropdown to a Stack with `jslink`, which runs in the browser: the
browser works in the rendered book as well as in a live notebook (no kernel callback is needed).
"""
from __future__ import annotations

from html import escape

import ipywidgets as widgets

from ..records import Episode, Step

_CSS = ("<style>.sb-traj{font-size:0.85em;line-height:1.35}.sb-traj details{margin:0.3em 0 0.3em 0.8em}"
        ".sb-traj .bad{color:#a33}.sb-traj .act{font-family:monospace;font-weight:600}"
        ".sb-traj .obs{color:#444}.sb-traj .th{color:#666;font-style:italic}</style>")


def _step_html(i: int, s: Step) -> str:
    cls = "act" if s.valid else "act bad"
    thought = f"<div class='th'>{escape(s.thought)}</div>" if s.thought else ""
    cost = (f" <small>({s.call.prompt_tokens}+{s.call.completion_tokens} tok, {s.call.latency_s:.1f} s)</small>"
            if s.call else "")
    return (f"<li>{thought}<span class='{cls}'>&gt; {escape(s.action or '(no action)')}</span>{cost}"
            f"<div class='obs'>{escape(s.observation)}</div><small>score {s.score:.2f}</small></li>")


def episode_html(ep: Episode, open_subtasks: bool = False) -> str:
    """One episode: header, then each subtask (description, steps, summary) nested under it."""
    head = (f"<b>{escape(ep.task_id)}</b> — {ep.agent}-level agent, memory <code>{escape(ep.memory)}</code><br>"
            f"<i>{escape(ep.instruction)}</i><br>score <b>{ep.score:.2f}</b>, "
            f"{'success' if ep.success else 'no success'}, stop: {escape(ep.stop_reason)}, "
            f"{len(ep.steps)} steps, {len(ep.calls)} model calls, {ep.wall_s:.0f} s"
            + (f"<br><span class='bad'>error: {escape(ep.error)}</span>" if ep.error else ""))
    parts = []
    for sub in ep.subtasks:
        steps = "".join(_step_html(i, s) for i, s in enumerate(ep.steps[sub.start:sub.end], sub.start))
        label = ("Subtask " + str(sub.index + 1) + ": " + escape(sub.description)) if ep.agent == "subtask" else "Steps"
        summary = f"<div><b>Summary:</b> {escape(sub.summary)}</div>" if sub.summary else ""
        skills = (f"<div><small>retrieved skills: {', '.join(map(escape, sub.retrieved))}</small></div>"
                  if sub.retrieved else "")
        parts.append(f"<details{' open' if open_subtasks else ''}><summary>{label} "
                     f"<small>[{sub.end - sub.start} steps, {escape(sub.stop_reason)}]</small></summary>"
                     f"{skills}<ol start='{sub.start + 1}'>{steps}</ol>{summary}</details>")
    return f"{_CSS}<div class='sb-traj'>{head}{''.join(parts)}</div>"


def trajectory_browser(episodes: list[Episode], label=None):
    """A Dropdown over episodes showing each one's nested trajectory (works in static HTML too)."""
    label = label or (lambda e: f"{e.agent:8s} {e.task_id}  score {e.score:.2f}")
    pages = [widgets.HTML(episode_html(e)) for e in episodes]
    stack = widgets.Stack(pages, selected_index=0 if pages else None)
    pick = widgets.Dropdown(options=[(label(e), i) for i, e in enumerate(episodes)], description="episode",
                            layout=widgets.Layout(width="95%"))
    box = widgets.VBox([pick, stack])
    box.link = widgets.jslink((pick, "index"), (stack, "selected_index"))
    return box
