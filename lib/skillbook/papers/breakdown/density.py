"""Transfer density (the first paper's §6.3): how often skills really travel along the task stream.

Cut the stream into n time bins (50 in the paper; fewer when the stream is shorter). r_ij = 1 when a
skill induced by a task in bin i is retrieved by a task in a later bin j. Then

    D = Σ_{i<j} r_ij / C(n, 2)          (1: every earlier bin feeds every later bin; 0: no reuse)

Everything is read from episode records: a skill is born at the first stream position whose episode
wrote it (a merge, and a code overwrite, keep the older skill's id, hence its birth), and used wherever
an episode retrieved it. Skills are counted per identity: `identity` (`hygiene.identities(library)`)
maps the ids that code overwrites got in records made before overwrites kept the id.
"""
from __future__ import annotations

from math import comb

import numpy as np
import pandas as pd

N_BINS = 50


def transfer_density(reuse) -> float:
    """Σ_{i<j} r_ij / C(n_bins, 2) of an n_bins × n_bins boolean matrix (entries on or below the diagonal
    are ignored: they are not transfer to a later bin)."""
    r = np.asarray(reuse)
    if r.ndim != 2 or r.shape[0] != r.shape[1]:
        raise ValueError(f"reuse must be a square n_bins × n_bins matrix, got shape {r.shape}")
    n = r.shape[0]
    if n < 2:
        raise ValueError("transfer density needs at least two time bins")
    return float(np.triu(r.astype(bool), k=1).sum() / comb(n, 2))


def bin_of(position: int, n_positions: int, n_bins: int) -> int:
    """The time bin of a stream position: n_bins equal-width bins over positions 0 .. n_positions-1."""
    return min(n_bins - 1, position * n_bins // n_positions)


def _ids(ids, identity: dict[str, str] | None) -> list[str]:
    identity = identity or {}
    return list(dict.fromkeys(identity.get(i, i) for i in ids))


def skill_births(episodes, identity: dict[str, str] | None = None) -> dict[str, int]:
    """skill (identity) → the stream position of the first episode that wrote it."""
    born: dict[str, int] = {}
    for e in sorted(episodes, key=lambda e: e.position):
        for sid in _ids(e.written, identity):
            born.setdefault(sid, e.position)
    return born


def reuse_events(episodes, identity: dict[str, str] | None = None) -> pd.DataFrame:
    """One row per (episode, distinct skill it retrieved) with the skill's birth and use positions."""
    born = skill_births(episodes, identity)
    rows = [{"skill_id": sid, "format": e.memory.split("-")[0], "task_id": e.task_id, "born": born.get(sid),
             "used": e.position, "success": e.success}
            for e in episodes for sid in _ids(e.retrieved, identity)]
    return pd.DataFrame(rows, columns=["skill_id", "format", "task_id", "born", "used", "success"])


def reuse_matrix(episodes, n_bins: int = N_BINS, n_positions: int | None = None,
                 identity: dict[str, str] | None = None) -> np.ndarray:
    """The boolean r_ij of one stream's episodes (default 50 bins, fewer when the stream is shorter)."""
    if n_bins < 2:
        raise ValueError(f"n_bins must be at least 2, got {n_bins!r}")
    n_positions = n_positions or (max((e.position for e in episodes), default=-1) + 1)
    n = min(n_bins, n_positions)
    if n < 2:
        raise ValueError(f"a stream of {n_positions} task(s) has no later bin to transfer to")
    r = np.zeros((n, n), dtype=bool)
    ev = reuse_events(episodes, identity).dropna(subset=["born"])
    for born, used in zip(ev["born"].astype(int), ev["used"]):
        i, j = bin_of(born, n_positions, n), bin_of(used, n_positions, n)
        if i < j:
            r[i, j] = True
    return r


def reuse_frequency(episodes, identity: dict[str, str] | None = None) -> pd.DataFrame:
    """Per skill (identity) written in the stream: its birth, how many times it was written (a merge or
    an overwrite writes it again) and how many later tasks retrieved it (0 for skills never reused)."""
    born = skill_births(episodes, identity)
    ident = identity or {}
    writes = pd.Series([ident.get(i, i) for e in episodes for i in e.written], dtype=object).value_counts()
    ev = reuse_events(episodes, identity)
    later = ev[ev["born"].notna() & (ev["used"] > ev["born"])]
    counts = later.groupby("skill_id")["task_id"].nunique()
    return pd.DataFrame({"skill_id": list(born), "born": list(born.values()),
                         "writes": [int(writes.get(s, 0)) for s in born],
                         "later_tasks": [int(counts.get(s, 0)) for s in born]})


__all__ = ["N_BINS", "transfer_density", "bin_of", "skill_births", "reuse_events", "reuse_matrix", "reuse_frequency"]
