"""Retrieval as it happened and as it would with other settings, from records and final libraries.

Similarities are recomputed from the recorded queries and the skills' descriptions: embeddings are
deterministic, so this reproduces what the agent saw for every skill still in the final library (for a
code skill overwritten later, the description of the version it had then, `hygiene.description_at`).
The query is `Subtask.query`: at task level the instruction and the first observation, at
subtask level the subtask. Records made before queries were recorded have none; their query was the
instruction or the subtask description, which is used instead (`query_recorded` says which). Skills
deleted later by hygiene (code that failed to load), and versions of code skills recorded under ids of
their own before overwrites kept the id, have no description left and are counted as `missing`.
"""
from __future__ import annotations

from html import escape

import ipywidgets as widgets
import numpy as np
import pandas as pd

from ...skills.embeddings import cosines, get_embedder
from ...skills.library import THRESHOLD, TOP_K, SkillLibrary
from .hygiene import description_at


def retrieval_events(episodes: dict[str, list], libraries: dict[str, SkillLibrary]) -> pd.DataFrame:
    """One row per (query, retrieved skill) of every memory condition; queries without hits get one row."""
    emb = get_embedder()
    rows = []
    for cond, eps in episodes.items():
        lib = libraries.get(cond)
        if lib is None:
            continue
        for e in eps:
            for sub in e.subtasks:
                query = sub.query or sub.description
                q = emb.embed(query)
                base = {"condition": cond, "task_id": e.task_id, "task_type": e.task_type, "position": e.position,
                        "subtask": sub.index, "query": query, "query_recorded": bool(sub.query),
                        "success": e.success}
                if not sub.retrieved:
                    rows.append({**base, "rank": None, "skill_id": None, "similarity": np.nan,
                                 "same_type": None, "missing": False})
                for rank, sid in enumerate(sub.retrieved, 1):
                    s = lib.skills.get(sid)
                    sim = float(cosines(emb.embed(description_at(s, e.position)), q)) if s else np.nan
                    src = (s.provenance.get("source_task", "") if s else "")
                    rows.append({**base, "rank": rank, "skill_id": sid, "similarity": sim,
                                 "same_type": ("/".join(src.split("/")[:2]) == "/".join(e.task_id.split("/")[:2]))
                                 if s else None,
                                 "missing": s is None})
    return pd.DataFrame(rows)


def threshold_sweep(library: SkillLibrary, queries: list[str], thresholds=(0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7),
                    ks=(1, 3, 5, 10)) -> pd.DataFrame:
    """Mean number of skills retrieved per query for each (threshold, k), on a fixed library."""
    if len(library) == 0 or not queries:
        return pd.DataFrame(columns=["threshold", "k", "mean_retrieved"])
    m, _ = library.matrix()
    sims = cosines(get_embedder().embed(list(queries)), m)      # (queries, skills)
    sims = -np.sort(-sims, axis=1)
    rows = []
    for t in thresholds:
        above = (sims >= t).sum(axis=1)
        for k in ks:
            rows.append({"threshold": t, "k": k, "mean_retrieved": float(np.minimum(above, k).mean())})
    return pd.DataFrame(rows)


def query_explorer(libraries: dict[str, SkillLibrary], queries: list[str], k: int = TOP_K,
                   threshold: float = THRESHOLD):
    """A widget: pick a recorded query (works in the static book) or type one (needs a live kernel)."""

    def table(lib: SkillLibrary, query: str) -> str:
        hits = lib.search(query, k=k, threshold=0.0)
        rows = "".join(f"<tr style='opacity:{1 if sim >= threshold else 0.45}'><td>{sim:.3f}</td>"
                       f"<td>{escape(s.id)}</td><td>{escape(s.description)}</td></tr>" for s, sim in hits)
        return (f"<p><b>{escape(query)}</b> <small>(faded: below the threshold {threshold})</small></p>"
                f"<table><tr><th>cosine</th><th>skill</th><th>description</th></tr>{rows}</table>")

    cond = list(libraries)
    pages = [widgets.HTML("".join(f"<h4>{escape(c)}</h4>" + table(libraries[c], q) for c in cond)) for q in queries]
    stack = widgets.Stack(pages, selected_index=0 if pages else None)
    pick = widgets.Dropdown(options=[(q[:90], i) for i, q in enumerate(queries)], description="query",
                            layout=widgets.Layout(width="95%"))
    link = widgets.jslink((pick, "index"), (stack, "selected_index"))
    typed = widgets.Text(placeholder="type a query (live notebook only) and press Enter",
                         layout=widgets.Layout(width="95%"))
    out = widgets.HTML()

    def on_submit(change):
        out.value = "".join(f"<h4>{escape(c)}</h4>" + table(libraries[c], change.value) for c in cond)

    typed.observe(on_submit, names="value")
    box = widgets.VBox([pick, stack, typed, out])
    box.link = link
    return box
