"""How well can Assay's attribution find planted effects at a given K (masks), M (dev tasks) and f?

A simulation with known answers (issue 17), run through the project's own code — `sample_masks`,
`attribution_matrix`, `global_score`, `heterogeneity` and the restructuring decisions `split_candidates`
and `retire_candidates` — so what it measures is what the chapter's pipeline would decide.

The planted world. N skills of four kinds (exact shares, rounded):

    null           no effect anywhere                                   (the majority, 60%)
    helpful        +β on every task type                                (10%)
    harmful        −β on every task type                                (10%)
    heterogeneous  +β on some task types and −β on the others (both)    (the rest, 20%)

The M dev tasks cycle through `n_types` task types and each has its own base logit α_i ~ N(0, base_sd).
Trial k shows skill j when mask m_kj = 1 (Bernoulli f over every skill, as in the pipeline), and the
binary outcome is o_k(d_i) ~ Bernoulli(σ(α_i + Σ_j m_kj β_j,type(i))): a logistic model, so effects add on
the logit scale and a skill's effect in probability depends on what else is shown. The sign of the true
average effect of skill j on task i (its ATE, marginal over the other skills' masks) is the sign of β_j,type(i)
because σ is increasing.

What is measured, over `reps` independent libraries and draws:

    sign_recovery   over cells with a non-zero effect: share with sign(C[j, i]) = sign(β)  (0 counts as wrong)
    row_sign        over helpful and harmful skills: share with sign(Ĉ(j)) = their sign
    null_flagged    share of null skills with H ≥ τ_split (heterogeneous by Definition 1, before the cap)
    split_recall    share of heterogeneous skills split (H ≥ τ_split, among the `max_split` largest H)
    false_split     share of null skills split
    split_fdp       share of the splits that hit a skill that is not heterogeneous (NaN when nothing is split)
    null_retired    share of null skills retired (|Ĉ| < τ_retire): the retirements Assay wants
    false_retire    share of skills with an effect (helpful, harmful, heterogeneous not split) retired

Every split is taken as accepted (no dev gate: the gate needs runs), so a split skill is never retired.
Each number is a mean over reps of a share in [0, 1], so its Monte Carlo standard error is at most 0.5/√reps.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...analysis.report import pct
from ...analysis.stats import mean_t_test
from .attribution import attribution_matrix, global_score, heterogeneity, sample_masks
from .pipeline import AssaySettings, retire_candidates, split_candidates

KINDS = ("null", "helpful", "harmful", "heterogeneous")
METRICS = ("sign_recovery", "row_sign", "null_flagged", "split_recall", "false_split", "split_fdp", "null_retired",
           "false_retire")
GRID = {"K": (6, 12, 32, 64), "M": (3, 12, 30), "f": (0.2, 0.4)}


@dataclass(frozen=True)
class Planted:
    """A planted library: effects (N skills × task types, logit scale) and each skill's kind."""
    effects: np.ndarray
    kinds: tuple[str, ...]

    @property
    def ids(self) -> list[str]:
        return [f"s{j:03d}" for j in range(len(self.kinds))]


def kind_counts(n_skills: int, shares=(0.6, 0.1, 0.1, 0.2)) -> dict[str, int]:
    """How many skills of each kind: helpful, harmful, heterogeneous rounded from their shares, null the rest."""
    if n_skills < 1:
        raise ValueError(f"n_skills must be a positive integer, got {n_skills!r}")
    if len(shares) != len(KINDS) or min(shares) < 0 or not np.isclose(sum(shares), 1):
        raise ValueError(f"shares are four non-negative numbers for {', '.join(KINDS)} summing to 1, got {shares!r}")
    counts = {k: int(round(s * n_skills)) for k, s in zip(KINDS[1:], shares[1:])}
    while sum(counts.values()) > n_skills:                # rounding up can overshoot a tiny library
        counts[max(counts, key=counts.get)] -= 1
    return {"null": n_skills - sum(counts.values()), **counts}


def plant(n_skills: int, n_types: int, effect: float, rng: np.random.Generator,
          shares=(0.6, 0.1, 0.1, 0.2)) -> Planted:
    """A library with the kinds of `kind_counts`; a heterogeneous skill gets a random sign per task type
    with at least one + and one − (so it needs n_types ≥ 2)."""
    counts = kind_counts(n_skills, shares)
    if counts["heterogeneous"] and n_types < 2:
        raise ValueError(f"heterogeneous skills need at least 2 task types, got n_types={n_types!r}")
    rows, kinds = [], []
    for kind in KINDS:
        for _ in range(counts[kind]):
            if kind == "null":
                signs = np.zeros(n_types)
            elif kind == "helpful":
                signs = np.ones(n_types)
            elif kind == "harmful":
                signs = -np.ones(n_types)
            else:
                signs = np.where(np.arange(n_types) < rng.integers(1, n_types), 1.0, -1.0)
                rng.shuffle(signs)
            rows.append(effect * signs)
            kinds.append(kind)
    return Planted(np.array(rows).reshape(n_skills, n_types), tuple(kinds))


def _replicates(K: int, M: int, f: float, n_skills: int = 20, settings: AssaySettings | None = None,
                reps: int = 300, effect: float = 1.5, base_sd: float = 1.0, n_types: int = 3,
                shares=(0.6, 0.1, 0.1, 0.2), seed: int = 0):
    """The metrics of the module docstring, one dict per planted library (`reps` of them)."""
    settings = settings or AssaySettings()
    if not isinstance(K, int) or K < 2:
        raise ValueError(f"K must be an integer ≥ 2, got {K!r}")
    if not isinstance(M, int) or M < 1:
        raise ValueError(f"M (dev tasks) must be a positive integer, got {M!r}")
    if not 0 < f < 1:
        raise ValueError(f"f must be in (0, 1), got {f!r}")
    if reps < 1:
        raise ValueError(f"reps must be a positive integer, got {reps!r}")
    rng = np.random.default_rng([seed, K, M, int(round(f * 1000))])
    types = np.arange(M) % n_types
    for _ in range(reps):
        lib = plant(n_skills, n_types, effect, rng, shares)
        ids, kinds = lib.ids, np.array(lib.kinds)
        beta = lib.effects[:, types]                                     # N × M
        masks = sample_masks(n_skills, K, f, seed=int(rng.integers(2**32)))
        logits = rng.normal(0, base_sd, M)[None, :] + masks.astype(float) @ beta
        outcomes = (rng.random((K, M)) < 1 / (1 + np.exp(-logits))).astype(float)
        C = attribution_matrix(masks, outcomes)
        g, h = global_score(C), heterogeneity(C)
        split = set(split_candidates(ids, h, settings))
        retire = set(retire_candidates(ids, g, settings)) - split
        is_split = np.array([i in split for i in ids])
        is_retired = np.array([i in retire for i in ids])
        effective = beta != 0
        uniform = np.isin(kinds, ("helpful", "harmful"))
        het, null = kinds == "heterogeneous", kinds == "null"
        flagged = np.nan_to_num(h, nan=-np.inf) >= settings.tau_split
        yield {
            "sign_recovery": (np.mean(np.sign(np.nan_to_num(C[effective])) == np.sign(beta[effective]))
                              if effective.any() else np.nan),
            "row_sign": (np.mean(np.sign(np.nan_to_num(g[uniform])) == np.sign(lib.effects[uniform, 0]))
                         if uniform.any() else np.nan),
            "null_flagged": flagged[null].mean() if null.any() else np.nan,
            "split_recall": is_split[het].mean() if het.any() else np.nan,
            "false_split": is_split[null].mean() if null.any() else np.nan,
            "split_fdp": np.mean(~het[is_split]) if is_split.any() else np.nan,
            "null_retired": is_retired[null].mean() if null.any() else np.nan,
            "false_retire": is_retired[~null].mean() if (~null).any() else np.nan}


def simulate_cell(K: int, M: int, f: float, n_skills: int = 20, settings: AssaySettings | None = None,
                  reps: int = 300, effect: float = 1.5, base_sd: float = 1.0, n_types: int = 3,
                  shares=(0.6, 0.1, 0.1, 0.2), seed: int = 0) -> dict:
    """The metrics of the module docstring for one (K, M, f), averaged over `reps` planted libraries."""
    rows = list(_replicates(K, M, f, n_skills, settings, reps, effect, base_sd, n_types, shares, seed))
    sums = {m: [r[m] for r in rows] for m in METRICS}
    with np.errstate(all="ignore"):
        out = {m: float(np.nanmean(v)) if not np.isnan(v).all() else float("nan") for m, v in sums.items()}
    return {"K": K, "M": M, "f": f, "n_skills": n_skills, "reps": reps, "trials": K * M, **out}


def recovery_claim(K: int, M: int, f: float, **kw) -> dict:
    """Does the attribution at this design (K masks, M dev tasks, f) get the sign of a planted effect right
    more often than a coin? A claim result for `analysis.Claim`: per planted library, its share of
    effective cells with the right sign minus 1/2 (a cell left at 0 counts as wrong); estimate = the mean
    of that excess over libraries, with the 95% t interval and the one-sample t test over libraries
    (independent draws, a few hundred of them: the t test is valid and agrees with its interval).
    A first version put the exact sign test beside the mean's interval: on τ²-bench's design the interval
    excluded 0 while the sign test, a test of the median library, did not reject; and with shares on a few
    values, ties leave the sign test no interval of its own. `kw` as `simulate_cell` (the same draws).

    This checks the book's tools, not a claim of the paper: its unit is the planted library, and n (a
    parameter, `reps`) can be raised until any excess over 1/2 is "significant" — the claim goes in a
    claims table as `Claim(..., kind="check")`, which the closing chapter does not count with the papers'."""
    excess = np.array([r["sign_recovery"] for r in _replicates(K, M, f, **kw)], dtype=float) - 0.5
    t, test = mean_t_test(excess), "t test over planted libraries"
    n, mean = t["n"], t["mean"]
    base = {"estimate": mean, "n": n, "unit": "libraries", "test": test}
    if n < 2:
        return {**base, "p": float("nan")}
    if not t["sd"] > 0:     # every library the same: no sampling variation to test against
        return {**base, "ci_low": mean, "ci_high": mean, "p": 1.0 if mean == 0 else 0.0}
    return {**base, "ci_low": t["ci_low"], "ci_high": t["ci_high"], "p": t["p"]}


def simulate_grid(Ks=GRID["K"], Ms=GRID["M"], fs=GRID["f"], **kw) -> pd.DataFrame:
    """`simulate_cell` over K × M × f (issue 17's grid by default): one row per cell."""
    return pd.DataFrame([simulate_cell(K, M, f, **kw) for f in fs for K in Ks for M in Ms])


__all__ = ["KINDS", "METRICS", "GRID", "Planted", "kind_counts", "plant", "simulate_cell", "simulate_grid",
           "recovery_claim"]


def four_rates(cell) -> str:
    """A design cell of the planted simulation in words: its sign recovery, split recall, false split
    and null-flagged rates (chapter 06's comparison of K against M)."""
    return (f"sign recovery {pct(cell.sign_recovery)}, split recall {pct(cell.split_recall)}, false split "
            f"{pct(cell.false_split)}, null flagged {pct(cell.null_flagged)}")
