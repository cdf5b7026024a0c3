"""Assay's causal attribution by random masking (the second paper, §2.1–2.2).

K trials; in trial k each skill j is included independently with probability f (mask m_k). Every trial
runs the M dev tasks with only the included skills and records o_k(d_i) ∈ [0, 1]. Then

    C[j, i] = mean_{k: j ∈ m_k} o_k(d_i) − mean_{k: j ∉ m_k} o_k(d_i)

is an unbiased estimate of skill j's average effect on dev task i (the masks are independent of
everything else). Row statistics: the global score Ĉ(j) = mean_i C[j, i] and the heterogeneity
H(j) = max_i C[j, i] − min_i C[j, i]. For outcomes in [0, 1],

    Var(C[j, i]) ≤ ¼ (1/|M_j+| + 1/|M_j−|)

with |M_j±| the number of trials that include / exclude j.
"""
from __future__ import annotations

import numpy as np


def _check(masks, outcomes) -> tuple[np.ndarray, np.ndarray]:
    m = np.asarray(masks)
    o = np.asarray(outcomes, dtype=float)
    if m.ndim != 2 or o.ndim != 2:
        raise ValueError(f"masks must be K×N and outcomes K×M, got shapes {m.shape} and {o.shape}")
    if m.shape[0] != o.shape[0]:
        raise ValueError(f"masks and outcomes need the same number of trials K, got {m.shape[0]} and {o.shape[0]}")
    if m.dtype != bool and not np.isin(m, (0, 1)).all():
        raise ValueError("masks must be boolean (skill j included in trial k)")
    return m.astype(bool), o


def attribution_matrix(masks, outcomes) -> np.ndarray:
    """C (N skills × M dev tasks); NaN where a skill was in every trial or in none."""
    m, o = _check(masks, outcomes)
    n_in = m.sum(axis=0)                       # |M_j+| per skill
    n_out = m.shape[0] - n_in
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_in = (m.T.astype(float) @ o) / n_in[:, None]
        mean_out = ((~m).T.astype(float) @ o) / n_out[:, None]
    c = mean_in - mean_out
    c[(n_in == 0) | (n_out == 0)] = np.nan
    return c


def global_score(c) -> np.ndarray:
    """Ĉ(j): the mean effect of skill j over the dev tasks."""
    c = np.asarray(c, dtype=float)
    out = np.full(c.shape[0], np.nan)
    ok = ~np.isnan(c).all(axis=1)
    out[ok] = np.nanmean(c[ok], axis=1)
    return out


def heterogeneity(c) -> np.ndarray:
    """H(j) = max_i C[j, i] − min_i C[j, i]: how much the effect of skill j changes across dev tasks."""
    c = np.asarray(c, dtype=float)
    out = np.full(c.shape[0], np.nan)
    ok = ~np.isnan(c).all(axis=1)
    out[ok] = np.nanmax(c[ok], axis=1) - np.nanmin(c[ok], axis=1)
    return out


def variance_bound(masks) -> np.ndarray:
    """¼ (1/|M_j+| + 1/|M_j−|) per skill (inf where a skill was always in or always out)."""
    m = np.asarray(masks).astype(bool)
    n_in = m.sum(axis=0).astype(float)
    n_out = m.shape[0] - n_in
    with np.errstate(divide="ignore"):
        return 0.25 * (1 / n_in + 1 / n_out)


def expected_half_width(k: int, f: float, z: float = 1.96) -> float:
    """The 95% half-width z·sqrt(bound) of one C cell at the expected split |M+| = fK, |M−| = (1−f)K."""
    if k < 1 or not 0 < f < 1:
        raise ValueError(f"need K ≥ 1 and 0 < f < 1, got K={k!r}, f={f!r}")
    return float(z * np.sqrt(0.25 * (1 / (f * k) + 1 / ((1 - f) * k))))


def sample_masks(n_skills: int, k: int = 12, f: float = 0.4, seed: int = 0) -> np.ndarray:
    """K×N Bernoulli(f) masks over every skill (the paper's §2.1: all skills, templates included, take
    part in attribution; protection applies only downstream).

    A skill that every trial included or none did gets no estimate, so such columns are re-drawn (with
    the same generator, hence reproducibly) when K ≥ 2.
    """
    if k < 1 or not 0 < f < 1:
        raise ValueError(f"need K ≥ 1 and 0 < f < 1, got K={k!r}, f={f!r}")
    rng = np.random.default_rng(seed)
    m = rng.random((k, n_skills)) < f
    if k >= 2:
        for _ in range(100):
            bad = (m.sum(axis=0) == 0) | (m.sum(axis=0) == k)
            if not bad.any():
                break
            m[:, bad] = rng.random((k, int(bad.sum()))) < f
    return m


__all__ = ["attribution_matrix", "global_score", "heterogeneity", "variance_bound", "expected_half_width",
           "sample_masks"]
