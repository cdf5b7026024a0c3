"""Library health: is the first paper's mechanism exercised at all? (chapter 09's figures; registered for
the second study, issue 36)

A skill library helps only if retrieval *chooses*: with k = 5 and a library of five skills, every query
gets the whole library and retrieval is no mechanism at all. Chapter 09's subtask-text library is the
real case: 616 writes became 5 skills, one merged from 534 spans (3 of them successful) into 35 lines,
and a strict subset was retrieved on 0.2% of the queries. The figures, per memory stream:

    skills, k         the final library's size against the number retrieved per query
    writes            every induction that shaped a final skill (its own and each merged into it)
    strict subset     the share of queries that got fewer skills than the library held: retrieval chose
                      (the library as it stood: skills first written at earlier stream positions; text
                      skills are never deleted)
    lines             median and longest skill body
    from successes    the share of those writes that came from a successful span

`health_along` gives the same per query, in stream order, for a plot along the stream.
"""
from __future__ import annotations

import numpy as np
import pandas as pd


def retrievals(episode) -> list[list[str]]:
    """The retrieved skill ids of each query an episode made (per subtask; the task level asks once)."""
    subs = [s.retrieved for s in episode.subtasks if s.retrieved]
    return subs or ([episode.retrieved] if episode.retrieved else [])


def writes(skill: dict) -> list[dict]:
    """Every write that shaped a final skill: its own provenance and each write merged into it."""
    prov = skill.get("provenance", {})
    return [prov] + list(prov.get("merged_from", []))


def health_along(episodes: list, k: int, skills: list[dict] | None = None) -> pd.DataFrame:
    """One row per query of one memory stream, in stream order: the library's size then (skills first
    written at earlier positions), how many skills were retrieved, and whether they were a strict subset.
    A placebo's ids (`placebo-<id>`) count as the skills they stand for. With the final library's
    `skills`, also `from_successes`: the share of the writes that shaped them made at earlier positions
    that came from a successful span (NaN before the first write). Skill length has no such column: a
    stream keeps only its final library."""
    shaped = sorted((int(w.get("stream_position", 0)), bool(w.get("span_success")))
                    for sk in (skills or []) for w in writes(sk))
    positions = np.array([p for p, _ in shaped], dtype=int)
    successes = np.cumsum([ok for _, ok in shaped])
    born: dict[str, int] = {}
    rows = []
    for e in episodes:
        size = len(born)
        before = int(np.searchsorted(positions, e.position))       # writes at positions < this one
        share = float(successes[before - 1] / before) if before else np.nan
        for ids in retrievals(e):
            shown = {i.removeprefix("placebo-") for i in ids}
            rows.append({"position": e.position, "task_id": e.task_id, "library_size": size,
                         "retrieved": len(shown), "k": k, "strict_subset": len(shown) < size,
                         "from_successes": share})
        for sid in e.written:
            born.setdefault(sid, e.position)
    return pd.DataFrame(rows, columns=["position", "task_id", "library_size", "retrieved", "k", "strict_subset",
                                       "from_successes"])


def stream_health(episodes: list, skills: list[dict], k: int) -> dict:
    """The library-health figures of one memory stream (`skills`: its final library's skill records)."""
    along = health_along(episodes, k)
    shaped = [w for sk in skills for w in writes(sk)]
    lines = [sk["body"].count("\n") + 1 for sk in skills]
    return {"skills": len(skills), "k": k, "writes": len(shaped), "retrievals": len(along),
            "strict subset": float(along.strict_subset.mean()) if len(along) else np.nan,
            "median lines": float(np.median(lines)) if lines else np.nan,
            "longest (lines)": max(lines, default=0),
            "writes from successes": float(np.mean([bool(w.get("span_success")) for w in shaped]))
            if shaped else np.nan}


def skill_table(skills: list[dict]) -> pd.DataFrame:
    """A final library, a row per skill: description, lines, characters, the writes merged into it and how
    many of them came from a successful span."""
    rows = [{"skill": sk["id"], "description": sk["description"], "lines": sk["body"].count("\n") + 1,
             "characters": len(sk["body"]), "writes": len(writes(sk)),
             "from successes": sum(bool(w.get("span_success")) for w in writes(sk))} for sk in skills]
    return pd.DataFrame(rows).set_index("skill") if rows else pd.DataFrame()
