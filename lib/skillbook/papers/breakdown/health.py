"""Library health: is the first paper's mechanism exercised at all? (issue 36)

A skill library helps only if retrieval *chooses*: with k = 5 and a library of five skills, every query
gets the whole library and retrieval is no mechanism at all. Chapter 09's subtask-text library is the
real case: 616 inductions became 5 skills, one merged from 533 spans, so from the fifth task on every
subtask saw the same five skills. The figures here, along a stream and at its end, say whether that
happened:

    library size      skills in the library when a subtask retrieved (text skills are never deleted, so
                      the ids written by earlier subtasks of the stream are the library)
    retrieved         how many skills the subtask got, against k
    strict subset     the subtask got fewer skills than the library held: retrieval chose
    skill length      words of each final skill body
    merged spans      how many induced spans each skill absorbed, and how many of them came from a
                      successful span (`span_success`) or a successful task (`task_success`)
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ...skills.library import SkillLibrary


def health_along(episodes: list, k: int) -> pd.DataFrame:
    """One row per retrieval (subtask) of one memory stream, in stream order: the library's size then,
    how many skills were retrieved, and whether they were a strict subset of the library."""
    seen: set[str] = set()
    rows = []
    for e in sorted(episodes, key=lambda e: e.position):
        for sub in e.subtasks:
            size = len(seen)
            rows.append({"position": e.position, "task_id": e.task_id, "subtask": sub.index,
                         "library_size": size, "retrieved": len(sub.retrieved), "k": k,
                         "strict_subset": bool(size) and len(sub.retrieved) < size})
            seen.update(sub.written)
    return pd.DataFrame(rows, columns=["position", "task_id", "subtask", "library_size", "retrieved", "k",
                                       "strict_subset"])


def skill_table(library: SkillLibrary) -> pd.DataFrame:
    """One row per skill of a final library: its length and the spans merged into it (with the source
    outcomes of its own span and of those merged in)."""
    rows = []
    for s in library:
        spans = [s.provenance] + list(s.provenance.get("merged_from", []))
        rows.append({"skill_id": s.id, "description": s.description, "words": len(s.body.split()),
                     "lines": s.body.count("\n") + 1, "spans": len(spans),
                     "from_successful_span": sum(bool(p.get("span_success")) for p in spans),
                     "from_successful_task": sum(bool(p.get("task_success")) for p in spans)})
    return pd.DataFrame(rows, columns=["skill_id", "description", "words", "lines", "spans",
                                       "from_successful_span", "from_successful_task"])


def health_summary(episodes: list, library: SkillLibrary, k: int) -> dict:
    """The registered library-health figures of one stream."""
    along, skills = health_along(episodes, k), skill_table(library)
    asked = along[along.library_size > 0]
    spans = int(skills.spans.sum()) if len(skills) else 0
    return {"skills": len(library), "k": k, "retrievals": len(along),
            "strict_subset_share": float(asked.strict_subset.mean()) if len(asked) else np.nan,
            "library_at_most_k_share": float((asked.library_size <= k).mean()) if len(asked) else np.nan,
            "median_words": float(skills.words.median()) if len(skills) else np.nan,
            "largest_skill_spans_share": float(skills.spans.max() / spans) if spans else np.nan,
            "spans": spans,
            "spans_from_successful_span": float(skills.from_successful_span.sum() / spans) if spans else np.nan,
            "spans_from_successful_task": float(skills.from_successful_task.sum() / spans) if spans else np.nan}
