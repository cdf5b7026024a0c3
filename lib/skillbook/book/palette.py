"""One colour per condition across the book (issue 37: in chapter 09 the same condition changed colour
from one figure to the next, because each plot coloured its own hue levels in order).

`condition_colors(levels)` gives each condition name its fixed colour: the memory conditions of every
paper by what they are (no memory grey, the agent's own text skills blue, code green, placebos
orange, the second study's oracle purple), the task level lighter than the subtask level; an unknown
name gets a spare colour in the order it is first seen. Pass it as a seaborn `palette` or look colours
up in it.
"""
from __future__ import annotations

from collections.abc import Iterable

CONDITION_COLORS = {
    "none": "#7f7f7f", "subtask-none": "#7f7f7f", "task-none": "#bdbdbd",
    "self": "#1f77b4", "subtask-text": "#1f77b4", "task-text": "#9ecae1", "text": "#1f77b4",
    "subtask-code": "#2ca02c", "task-code": "#a1d99b", "code": "#2ca02c",
    "placebo": "#ff7f0e", "subtask-placebo": "#ff7f0e", "task-placebo": "#fdae6b",
    "oracle": "#9467bd",
}
SPARE = ("#d62728", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#393b79", "#637939", "#843c39")


def condition_colors(levels: Iterable[str]) -> dict[str, str]:
    """Condition name → colour for every level in `levels` (fixed ones first, spares for the rest)."""
    out, spare = {}, iter(SPARE * 4)
    for level in dict.fromkeys(str(x) for x in levels):
        out[level] = CONDITION_COLORS.get(level) or next(spare)
    return out
