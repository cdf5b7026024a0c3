"""Statistics for the chapters' comparisons, valid at the small n the book runs at.

Units. A task is the unit of every paired comparison: a condition's outcomes on one task are averaged
first (`paired_difference`), so repeated episodes of a task never count as independent evidence. Tasks
that are the same game (`envs.units`: a TextWorldExpress setting with few games repeats them across seeds)
are not independent either: with `units=` the test moves to the games (`sign_flip_test`, exact over the
game totals) and the claims table's n counts games. Where
episodes are the rows (a regression over episodes, a correlation over skills from a few runs), the
interval is clustered on the unit that ties rows together (`cluster_slope`, `spearman_ci(groups=...)`),
and `dedupe_episodes` removes rows recorded twice.

Which interval, which test (formulas in each docstring):

* one proportion (0/1 metric): Wilson score interval (`wilson_interval`, used by `summarize`);
* a continuous mean: percentile bootstrap over tasks (`bootstrap_ci`, used by `summarize`);
* paired 0/1 outcomes: Newcombe's hybrid score interval for the paired difference (his method 10) and
  the exact McNemar test (`newcombe_paired_ci`, `exact_mcnemar_p`, used by `paired_difference`);
* paired continuous outcomes: Student-t interval of the mean difference (`mean_t_test`) and the exact
  sign test;
* a slope over clustered rows: OLS with a cluster-robust (CR1 or CR2) variance, t with G − 1 df;
* a rank correlation over clustered rows: Spearman's ρ with a cluster (whole-group) bootstrap;
* paired outcomes on repeated games: the exact sign-flip test of the games' totals and the interval that
  inverts it (`sign_flip_test`, used by `paired_difference(units=...)`);
* several claims: Holm's step-down adjustment (`holm`, used by `claims.claims_table`).

Power. `mde_paired_binary` is the smallest difference the exact McNemar test detects with 80% power,
computed exactly; `mde_paired_binary_connor` is Connor's (1987) normal approximation of the same;
`halfwidth_paired_binary` / `n_for_halfwidth` size a study by the expected width of its interval.
"""
from __future__ import annotations

import functools
import math
from typing import Any, cast

import numpy as np
import pandas as pd
from scipy import stats as _st
from scipy.optimize import brentq
from scipy.special import gammaln, xlogy

# ---------------------------------------------------------------------------------------------------------
# small helpers

def _z(ci: float) -> float:
    """Two-sided normal quantile for a `ci` interval (1.959964 for 0.95)."""
    return float(_st.norm.ppf(1 - (1 - ci) / 2))


def _is_binary(values) -> bool:
    """True when every non-missing value is 0 or 1 (bool included)."""
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    return bool(np.isin(v, (0.0, 1.0)).all())


def _boot_p(boots: np.ndarray, null: float = 0.0) -> float:
    """Two-sided percentile-bootstrap p-value of H0: θ = `null`: twice the smaller share of bootstrap
    replicates on either side of `null`, each share taken as (count + 1)/(B + 1) so it is never 0.
    p < α exactly when the equal-tailed (1 − α) percentile interval excludes `null` (up to the +1)."""
    b = boots[~np.isnan(boots)]
    if len(b) == 0:
        return float("nan")
    lo = (np.sum(b <= null) + 1) / (len(b) + 1)
    hi = (np.sum(b >= null) + 1) / (len(b) + 1)
    return float(min(1.0, 2 * min(lo, hi)))


# ---------------------------------------------------------------------------------------------------------
# one proportion, one mean

def wilson_interval(k, n, ci: float = 0.95):
    """Wilson score interval for a binomial proportion k/n (no continuity correction); arrays broadcast.

    With p̂ = k/n and z the two-sided normal quantile (1.96 for 95%), the limits are the two roots in p of
    |p̂ − p| = z·√(p(1 − p)/n):

        centre = (p̂ + z²/2n) / (1 + z²/n),   half = z/(1 + z²/n) · √(p̂(1 − p̂)/n + z²/4n²)

    (Wilson 1927; Newcombe 1998, Stat Med 17:857, method 3). Unlike the Wald or the bootstrap interval it
    does not collapse to a point at k = 0 or k = n (0 of 9 gives [0, 0.299]). NaN for n = 0.
    """
    k, n = np.asarray(k, dtype=float), np.asarray(n, dtype=float)
    z = _z(ci)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = k / n
        denom = 1 + z * z / n
        centre = (p + z * z / (2 * n)) / denom
        half = z / denom * np.sqrt(np.clip(p * (1 - p) / n + z * z / (4 * n * n), 0, None))
    # The exact limits at k = 0 and k = n are 0 and 1; in floating point centre − half can land a few
    # ulps above p̂ (0 of 9 gave 2.8e-17), and a plot's yerr = p̂ − lo then goes negative. The interval
    # always contains p̂, so clamp to it.
    lo, hi = np.clip(np.fmin(centre - half, p), 0, 1), np.clip(np.fmax(centre + half, p), 0, 1)
    if lo.ndim == 0:
        return float(lo), float(hi)
    return lo, hi


def bootstrap_ci(values, n_boot: int = 10_000, ci: float = 0.95, seed: int = 0) -> tuple[float, float, float]:
    """(mean, low, high) of the mean of `values` by the percentile bootstrap (NaNs dropped).

    Use it for continuous metrics at moderate n; for a 0/1 metric use `wilson_interval` (the bootstrap
    of an all-0 or all-1 sample is the point [0, 0] or [1, 1])."""
    x = np.asarray(values, dtype=float)
    x = x[~np.isnan(x)]
    if len(x) == 0:
        return (float("nan"),) * 3
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), size=(n_boot, len(x)))].mean(axis=1)
    alpha = (1 - ci) / 2
    return float(x.mean()), float(np.quantile(means, alpha)), float(np.quantile(means, 1 - alpha))


def summarize(df: pd.DataFrame, by: list[str] | str, metric: str = "success", ci: float = 0.95, **kw) -> pd.DataFrame:
    """n, mean and 95% interval of `metric` per group.

    The interval is the Wilson score interval (`wilson_interval`) when the whole `metric` column is 0/1,
    otherwise the percentile bootstrap over rows (`bootstrap_ci`; `kw` such as `seed`, `n_boot` go to
    it). Every group of one table gets the same kind of interval. `n` counts the non-missing values the
    mean is over. Rows are taken as independent units: summarize per task (or dedupe) first when a task
    has several episodes.
    """
    by = [by] if isinstance(by, str) else list(by)
    binary = _is_binary(df[metric].astype(float))
    rows = []
    for key, g in df.groupby(by, sort=True):
        v = g[metric].astype(float).to_numpy()
        v = v[~np.isnan(v)]
        if binary:
            mean = float(v.mean()) if len(v) else float("nan")
            lo, hi = wilson_interval(v.sum(), len(v), ci) if len(v) else (float("nan"),) * 2
        else:
            mean, lo, hi = bootstrap_ci(v, ci=ci, **kw)
        rows.append({**dict(zip(by, key if isinstance(key, tuple) else (key,))),
                     "n": len(v), metric: mean, "ci_low": lo, "ci_high": hi})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------------------
# paired comparisons

def exact_mcnemar_p(only_a: int, only_b: int) -> float:
    """Exact two-sided McNemar test: given D = only_a + only_b discordant pairs, only_b ~ Bin(D, ½) under
    H0 (no difference), and

        p = min(1, 2 · P(Bin(D, ½) ≤ min(only_a, only_b)))

    (the binomial is symmetric, so this equals the 'sum of outcomes as unlikely' p-value). p = 1 when there
    is no discordant pair. Example: 4 discordant pairs all one way give p = 2 · (½)⁴ = 0.125.
    """
    d = int(only_a) + int(only_b)
    if d == 0:
        return 1.0
    return float(min(1.0, 2 * _st.binom.cdf(min(int(only_a), int(only_b)), d, 0.5)))


def sign_test_p(differences) -> float:
    """Exact two-sided sign test of paired differences: zeros (ties) and NaNs dropped, then the exact
    McNemar formula on the counts of negative and positive differences (for 0/1 outcomes the two tests
    are the same test). 1 when no difference is non-zero."""
    d = np.asarray(differences, dtype=float)
    d = d[~np.isnan(d)]
    return exact_mcnemar_p(int((d < 0).sum()), int((d > 0).sum()))


def mean_t_test(values, ci: float = 0.95, null: float = 0.0) -> dict:
    """Student's one-sample t for a mean: n (NaNs dropped), mean, sd (n − 1), the interval
    mean ± t(n−1, 1 − (1−ci)/2) · sd/√n, and the two-sided p of H0: mean = `null`. Interval and p are NaN
    when n < 2 or every value is the same: a zero-width interval would claim a certainty the data do not
    give, and the caller says why (`paired_difference` adds a note, `recovery_claim` its own rule)."""
    x = np.asarray(values, dtype=float).ravel()
    x = x[~np.isnan(x)]
    n = len(x)
    mean = float(x.mean()) if n else float("nan")
    sd = float(x.std(ddof=1)) if n >= 2 else float("nan")
    out = {"n": n, "mean": mean, "sd": sd, "ci_low": float("nan"), "ci_high": float("nan"), "p": float("nan")}
    if n >= 2 and sd > 0:
        se = sd / math.sqrt(n)
        half = float(_st.t.ppf(1 - (1 - ci) / 2, n - 1)) * se
        out.update(ci_low=mean - half, ci_high=mean + half,
                   p=float(2 * _st.t.sf(abs(mean - null) / se, n - 1)))
    return out


def newcombe_paired_ci(n11, n10, n01, n00, ci: float = 0.95, phi: str = "corrected"):
    """Newcombe's hybrid score interval for the difference of two paired proportions (Newcombe 1998,
    Stat Med 17:2635, method 10). Arrays broadcast; returns (θ̂, low, high).

    Table: n11 both succeed, n10 only the first succeeds, n01 only the second, n00 neither; n the total.
    θ = p1 − p2 with p̂1 = (n11 + n10)/n, p̂2 = (n11 + n01)/n, so θ̂ = (n10 − n01)/n. With (l1, u1), (l2, u2)
    the Wilson score limits (no continuity correction) for p̂1 and p̂2:

        low  = θ̂ − √( (p̂1 − l1)² − 2φ (p̂1 − l1)(u2 − p̂2) + (u2 − p̂2)² )
        high = θ̂ + √( (u1 − p̂1)² − 2φ (u1 − p̂1)(p̂2 − l2) + (p̂2 − l2)² )

    φ estimates the correlation between the two members of a pair, from A = n11·n00 − n10·n01 and the
    margins M = (n11 + n10)(n01 + n00)(n11 + n01)(n10 + n00):

        φ = max(A − n/2, 0)/√M when A > 0,   φ = A/√M when A ≤ 0,   φ = 0 when M = 0

    (`phi="corrected"`, Newcombe's method 10; `phi="plain"` uses A/√M throughout, `phi="none"` sets φ = 0,
    the independent-samples square-and-add interval). Checked against published values (tests/test_stats.py):
    Newcombe's worked example (20, 12, 2, 16) → 0.0562 to 0.3292 for method 10 and 0.0618 to 0.3242 with the
    plain φ (his method 8), as reproduced in the ratesci package's tests; Bentur et al.'s (1, 1, 7, 12) →
    −0.507 to −0.026 (Fagerland, Lydersen & Laake 2014, Stat Med 33:2850); Cavo et al.'s (59, 6, 16, 80) →
    −0.1186 to −0.0046 (Fagerland et al.'s book, contingencytables package).

    At small n the interval and the exact McNemar test can disagree: 4 discordant pairs of 9, all one
    way, give exact p = 0.125 but a Newcombe interval that excludes 0 (e.g. [0.015, 0.698]). The interval
    is an approximate (score-based) one; decide claims by the exact test.
    """
    n11, n10, n01, n00 = (np.asarray(v, dtype=float) for v in (n11, n10, n01, n00))
    n = n11 + n10 + n01 + n00
    with np.errstate(invalid="ignore", divide="ignore"):
        p1, p2 = (n11 + n10) / n, (n11 + n01) / n
        l1, u1 = wilson_interval(n11 + n10, n, ci)
        l2, u2 = wilson_interval(n11 + n01, n, ci)
        a = n11 * n00 - n10 * n01
        m = (n11 + n10) * (n01 + n00) * (n11 + n01) * (n10 + n00)
        if phi == "corrected":
            num = np.where(a > 0, np.maximum(a - n / 2, 0), a)
        elif phi == "plain":
            num = a
        elif phi == "none":
            num = np.zeros_like(a)
        else:
            raise ValueError(f"phi must be 'corrected', 'plain' or 'none', got {phi!r}")
        r = np.where(m > 0, num / np.sqrt(np.where(m > 0, m, 1)), 0.0)
        theta = p1 - p2
        dl = np.sqrt(np.clip((p1 - l1) ** 2 - 2 * r * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2, 0, None))
        du = np.sqrt(np.clip((u1 - p1) ** 2 - 2 * r * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2, 0, None))
    low, high = theta - dl, theta + du
    if np.ndim(low) == 0:
        return float(theta), float(low), float(high)
    return theta, low, high


# ---------------------------------------------------------------------------------------------------------
# clustered units: the exact sign-flip test over units

SIGN_FLIP_EXACT_MAX = 16      # units up to which every sign pattern is enumerated (2^16 = 65,536)
SIGN_FLIP_DRAWS = 50_000      # random sign patterns beyond that (one fixed seed, shared by test and interval)


def _sign_patterns(g: int) -> tuple[np.ndarray, bool]:
    """(patterns × g matrix of ±1, exact?): all 2^g patterns up to SIGN_FLIP_EXACT_MAX units, else
    SIGN_FLIP_DRAWS seeded random ones with the identity pattern first (so the observed statistic is
    always among them and p is never 0)."""
    if g <= SIGN_FLIP_EXACT_MAX:
        bits = (np.arange(2 ** g)[:, None] >> np.arange(g)[None, :]) & 1
        return 1.0 - 2.0 * bits, True
    rng = np.random.default_rng(0)
    signs = rng.choice([-1.0, 1.0], size=(SIGN_FLIP_DRAWS, g))
    signs[0] = 1.0
    return signs, False


def sign_flip_test(totals, sizes=None, ci: float = 0.95, null: float = 0.0,
                   bounds: tuple[float, float] = (-math.inf, math.inf)) -> dict:
    """The exact sign-flip (randomisation) test over independent units, and the interval that inverts it.

    totals: per unit g, the sum T_g of its tasks' paired differences; sizes: its number of tasks n_g (1
    each when omitted: then T_g is one value per unit). The estimate is the mean over tasks,
    θ̂ = Σ T_g / Σ n_g. Under H0: θ = `null`, each unit's centred total T_g − n_g·null is as likely to
    have either sign (the units are independent and nothing favours a direction), so
    S = |Σ_g ±(T_g − n_g·null)| is compared with its value under every one of the 2^G sign patterns:
    p = share of patterns with S* ≥ S (exact; beyond SIGN_FLIP_EXACT_MAX units a fixed random sample of
    SIGN_FLIP_DRAWS patterns). No normality and no large-G approximation: valid for the 16 games of a
    TextWorldExpress setting. The interval is every θ the test does not reject at 1 − ci (bisection on
    each side of θ̂, inside the range of the per-unit means T_g/n_g); with G units the smallest
    attainable p is 2/2^G, so 5 units can never reject at 0.05 — and then no θ at all is rejected: the
    interval is the whole line, or `bounds` (the parameter's own range, which holds every unit mean, e.g.
    (−1, 1) for a difference of success rates), never the range of the unit means.
    Returns n (units), n_tasks, estimate, p, ci_low, ci_high, exact (enumerated, not sampled).
    """
    t = np.asarray(totals, dtype=float).ravel()
    m = np.ones_like(t) if sizes is None else np.asarray(sizes, dtype=float).ravel()
    keep = ~np.isnan(t) & (m > 0)
    t, m = t[keep], m[keep]
    g = len(t)
    out = {"n": g, "n_tasks": int(m.sum()), "estimate": float(t.sum() / m.sum()) if g else float("nan"),
           "p": float("nan"), "ci_low": float("nan"), "ci_high": float("nan"), "exact": g <= SIGN_FLIP_EXACT_MAX}
    if g == 0:
        return out
    signs, exact = _sign_patterns(g)
    tol = 1e-9 * max(1.0, float(np.abs(t).sum()))

    def p_at(theta: float) -> float:
        d = t - m * theta
        # sampled: the identity pattern is draw 0, so this is the usual (1 + count)/(1 + B) of the others
        return float((np.abs(signs @ d) >= abs(d.sum()) - tol).mean())

    out["p"] = min(1.0, p_at(null))
    per_unit = t / m
    est, lo_edge, hi_edge = out["estimate"], float(per_unit.min()), float(per_unit.max())
    alpha = 1 - ci
    # beyond the range of the unit means every centred total has one sign, so p is its floor there
    # (2/2^G when exact): above alpha the test rejects no θ at all and the interval is all of `bounds`
    if p_at(lo_edge - 1.0) > alpha:
        out.update(ci_low=bounds[0], ci_high=bounds[1])
        return out
    if lo_edge == hi_edge:
        out.update(ci_low=lo_edge, ci_high=hi_edge)
        return out

    def bound(inside: float, outside: float) -> float:
        # p is 1 at θ̂ (the centred totals sum to 0) and falls towards the range's edges
        if p_at(outside) > alpha:
            return outside
        for _ in range(40):
            mid = (inside + outside) / 2
            inside, outside = (mid, outside) if p_at(mid) > alpha else (inside, mid)
        return inside
    out.update(ci_low=bound(est, lo_edge), ci_high=bound(est, hi_edge))
    return out


def _clustered_difference(wide: pd.DataFrame, a: str, b: str, units: pd.Series, unit: str, ci: float,
                          alpha: float, power: float) -> dict:
    """The paired difference when several tasks share a unit (`paired_difference` with `units`). The
    estimate stays the mean over tasks (what a per-task analysis reports); its test and interval are the
    exact sign-flip over the units' totals (`sign_flip_test`), and its MDE that of a t test on G − 1
    degrees of freedom with the cluster-robust standard error
    se = √( G/(G−1) · Σ_g (T_g − n_g θ̂)² ) / n (an approximation for the sign-flip test)."""
    of = units.reindex(wide.index).to_numpy()
    d = wide[b] - wide[a]
    totals, sizes = d.groupby(of).sum(), d.groupby(of).size()
    r = sign_flip_test(totals.to_numpy(float), sizes.to_numpy(float), ci)
    g, n, est = r["n"], r["n_tasks"], r["estimate"]
    resid = totals.to_numpy(float) - sizes.to_numpy(float) * est
    se = math.sqrt(g / (g - 1) * float((resid ** 2).sum())) / n if g >= 2 else float("nan")
    mde = float((_st.t.ppf(1 - alpha / 2, g - 1) + _st.t.ppf(power, g - 1)) * se) if se > 0 else float("nan")
    out = {"n_units": g, "unit": unit, "difference": est, "ci_low": r["ci_low"], "ci_high": r["ci_high"],
           "p": r["p"], "units_plus": int((totals > 0).sum()), "units_minus": int((totals < 0).sum()),
           "test": f"{'exact' if r['exact'] else 'sampled'} sign-flip over {unit}",
           "ci_method": f"inverted sign-flip test over {unit}", "mde": mde}
    if not se > 0:
        out["note"] = (f"every one of the {g} {unit} has the same mean difference: no spread, so no MDE"
                       if g >= 2 else f"{g} {unit[:-1] if unit.endswith('s') else unit}: no test")
    return out


def _pairs_table(wide: pd.DataFrame, a: str, b: str) -> tuple[int, int, int, int]:
    """The 2×2 table of paired 0/1 outcomes: only_a (a succeeds, b fails), only_b, both, neither."""
    only_a = int(((wide[a] == 1) & (wide[b] == 0)).sum())
    only_b = int(((wide[a] == 0) & (wide[b] == 1)).sum())
    both = int(((wide[a] == 1) & (wide[b] == 1)).sum())
    return only_a, only_b, both, len(wide) - only_a - only_b - both


def paired_difference(df: pd.DataFrame, condition: str, a: str, b: str, metric: str = "success",
                      key: str = "task_id", ci: float = 0.95, alpha: float = 0.05, power: float = 0.8,
                      mde_discordance: float | None = None, seed: int | None = None,
                      n_boot: int | None = None, units: pd.Series | dict | None = None,
                      unit: str = "games") -> dict:
    """metric(b) − metric(a) over the tasks both conditions ran: estimate, interval, exact test, MDE.

    A task is the unit: a condition's rows of one task are averaged first, and only tasks with a value
    for both conditions count (`n_tasks`).

    `units` (task → independent unit, e.g. `envs.units`: the game a TextWorldExpress seed generates)
    names what is independent. When every task is its own unit nothing changes but the labels (`n_units`,
    `unit`). When some tasks share a unit, tasks are not independent draws (a deterministic agent repeats
    its outcome on a repeated game), so the test moves to the units: p is the exact sign-flip test over
    the G units with its
    interval (`sign_flip_test` on the units' totals; the estimate is still the mean over tasks, the
    estimand a per-task analysis names); `n_tasks` counts tasks, `n_units` units, and the claims table's
    n is the units. A 0/1 metric's 2×2 table of the tasks (`only_a`, …) is kept as a description; it is
    not what is tested.

    0/1 metric (every per-task value 0 or 1): a 2×2 table of the pairs, `only_a` (a succeeds, b fails),
    `only_b`, `both`, `neither`.
      * difference = (only_b − only_a)/n, the difference of the two success proportions;
      * interval: Newcombe's hybrid score interval, method 10 (`newcombe_paired_ci`, b as the first member);
      * p = exact McNemar, min(1, 2·P(Bin(only_a + only_b, ½) ≤ min(only_a, only_b))), 1 with no discordant
        pair (`exact_mcnemar_p`; also under the old name `mcnemar_p`);
      * mde: smallest |δ| the exact McNemar test detects at this n with `power` at level `alpha`
        (`mde_paired_binary` with `at_least_delta=True`), the discordance rate ψ being the observed one,
        (only_a + only_b)/n, or `mde_discordance` when given, and never less than δ itself (an effect δ
        needs at least a share δ of discordant pairs). `mde_discordance` records the ψ used.
    Any other metric:
      * difference = mean of d_i = metric_b − metric_a;
      * interval: Student t, mean(d) ± t(n−1, 1 − (1−ci)/2) · sd(d)/√n (sd with n − 1); NaN when n < 2 or
        when every d_i is the same (a zero-width interval would claim certainty the data do not give);
      * p = exact sign test on the non-zero d_i (`sign_test_p`), which is the McNemar test above when the
        metric is 0/1;
      * mde: smallest |Δ| the paired t-test detects (noncentral t, `mde_paired_t`) with sd(d) as the true
        sd; an approximation for the sign test, which is less powerful than t for near-normal differences.

    `seed` and `n_boot` are accepted for compatibility with the bootstrap version and ignored.
    Returns a dict: a, b, metric, n_tasks, mean_a, mean_b, difference, ci_low, ci_high, p, test,
    ci_method, mde, and for a 0/1 metric only_a, only_b, both, neither, mcnemar_p, mde_discordance.
    """
    del seed, n_boot
    wide = df.pivot_table(index=key, columns=condition, values=metric, aggfunc="mean")
    missing = [c for c in (a, b) if c not in wide.columns]
    if missing:
        raise ValueError(f"condition(s) {missing} not in column {condition!r}; present: {list(wide.columns)}")
    wide = wide[[a, b]].astype(float).dropna()
    n = len(wide)
    diff = (wide[b] - wide[a]).to_numpy(dtype=float)
    out: dict[str, Any] = {"a": a, "b": b, "metric": metric, "n_tasks": n,
                           "mean_a": float(wide[a].mean()) if n else float("nan"),
                           "mean_b": float(wide[b].mean()) if n else float("nan")}
    if units is not None:
        unit_of = pd.Series(units)
        unknown = [t for t in wide.index if t not in unit_of.index]
        if unknown:
            raise ValueError(f"units: no unit for {len(unknown)} {key}(s), e.g. {unknown[:3]}")
        out.update(n_units=int(unit_of.reindex(wide.index).nunique()), unit=unit)
        if out["n_units"] < n:
            out.update(_clustered_difference(wide, a, b, unit_of, unit, ci, alpha, power))
            if _is_binary(wide.to_numpy().ravel()):     # the tasks' 2×2 table, as a description only
                out.update(zip(("only_a", "only_b", "both", "neither"), _pairs_table(wide, a, b)))
            return out
    if _is_binary(wide.to_numpy().ravel()):
        only_a, only_b, both, neither = _pairs_table(wide, a, b)
        theta, lo, hi = newcombe_paired_ci(both, only_b, only_a, neither, ci) if n else (float("nan"),) * 3
        p = exact_mcnemar_p(only_a, only_b)
        psi = mde_discordance if mde_discordance is not None else ((only_a + only_b) / n if n else float("nan"))
        mde = mde_paired_binary(n, psi, alpha, power, at_least_delta=True) if n else float("inf")
        out.update({"difference": theta, "ci_low": lo, "ci_high": hi, "only_a": only_a, "only_b": only_b,
                    "both": both, "neither": neither, "mcnemar_p": p, "p": p, "test": "exact McNemar",
                    "ci_method": "Newcombe hybrid score (method 10)", "mde": mde, "mde_discordance": psi})
        return out
    t = mean_t_test(diff, ci)
    mean, sd, lo, hi = t["mean"], t["sd"], t["ci_low"], t["ci_high"]
    if np.isnan(lo):
        # Say why there is no interval, so a claims table shows the reason next to "MDE n/a".
        out["note"] = (f"{n} task{'s' * (n != 1)} with both conditions: no interval" if n < 2 else
                       f"the {metric} difference is {mean:+g} on every one of the {n} tasks: no spread, "
                       "so no interval or MDE")
    out.update({"difference": mean, "ci_low": lo, "ci_high": hi, "p": sign_test_p(diff), "test": "exact sign test",
                "ci_method": "Student t", "mde": mde_paired_t(n, sd, alpha, power) if sd > 0 else float("nan")})
    return out


# ---------------------------------------------------------------------------------------------------------
# power, minimum detectable effects, planning

@functools.lru_cache(maxsize=256)
def _mcnemar_critical(n_max: int, alpha: float) -> np.ndarray:
    """For D = 0 … n_max discordant pairs: the largest k with 2·P(Bin(D, ½) ≤ k) ≤ alpha (−1 when none), so
    the exact McNemar test (`exact_mcnemar_p`) rejects at `alpha` iff min(wins, D − wins) ≤ k_D."""
    d = np.arange(n_max + 1)
    k0 = _st.binom.ppf(alpha / 2, d, 0.5)          # smallest k with P(≤ k) ≥ alpha/2
    k0 = np.nan_to_num(k0, nan=-1).astype(int)
    k = np.where(2 * _st.binom.cdf(k0, d, 0.5) <= alpha * (1 + 1e-12), k0, k0 - 1)
    k = np.minimum(k, (d - 1) // 2)                # the two tails never overlap
    k.setflags(write=False)
    return k


def power_paired_binary(n: int, delta: float, discordance: float, alpha: float = 0.05) -> float:
    """Exact power of the two-sided exact McNemar test at level `alpha` with n pairs, true difference
    δ = P(only b) − P(only a) and discordance ψ = P(only a) + P(only b) (|δ| ≤ ψ ≤ 1):

        D ~ Bin(n, ψ) discordant pairs; given D, wins of b ~ Bin(D, q), q = (ψ + δ)/(2ψ);
        power = Σ_D P(D) · P(min(wins, D − wins) ≤ k_D | D),  k_D from `_mcnemar_critical`.
    """
    n, psi, delta = int(n), float(discordance), abs(float(delta))
    if n <= 0 or psi <= 0:
        return 0.0
    if not (0 <= delta <= psi * (1 + 1e-12) and psi <= 1):
        raise ValueError(f"need 0 ≤ |δ| ≤ ψ ≤ 1, got δ = {delta}, ψ = {psi}")
    q = min(1.0, (psi + delta) / (2 * psi))
    d = np.arange(n + 1)
    k = _mcnemar_critical(n, float(alpha))
    reject = np.where(k >= 0, _st.binom.cdf(k, d, q) + _st.binom.sf(d - k - 1, d, q), 0.0)
    return float(np.sum(_st.binom.pmf(d, n, psi) * reject))


def mde_paired_binary(n: int, discordance: float, alpha: float = 0.05, power: float = 0.8,
                      at_least_delta: bool = False) -> float:
    """Minimum detectable effect of the exact McNemar test: the smallest |δ| whose exact power
    (`power_paired_binary`) at n pairs and discordance ψ = `discordance` reaches `power`.

    The search runs over δ ∈ (0, ψ] (δ cannot exceed ψ); inf when even δ = ψ is not detectable (e.g. any
    ψ at n ≤ 5: five pairs all one way give p = 0.0625). Power rises with δ at fixed ψ (the rejection
    region is symmetric), so the root is unique.

    `at_least_delta=True` lets ψ grow with the effect: power is evaluated at ψ(δ) = max(`discordance`, δ)
    and the search runs over δ ∈ (0, 1]. This is how `paired_difference` reports the MDE of an observed
    table: ψ is the observed discordance, except that an effect larger than the observed discordance
    comes with at least that much discordance. (With no discordant pair observed the MDE is then the
    δ at which δ·n pairs, all one way, would be detected 80% of the time.)
    """
    n = int(n)
    psi = float(discordance)
    if n <= 0 or np.isnan(psi):
        return float("inf") if n <= 0 else float("nan")
    if not 0 <= psi <= 1:
        raise ValueError(f"discordance must be in [0, 1], got {psi}")

    def pw(dl: float) -> float:
        return power_paired_binary(n, dl, max(psi, dl) if at_least_delta else psi, alpha)

    top = 1.0 if at_least_delta else psi
    if top <= 0 or pw(top) < power:
        return float("inf")
    return float(brentq(lambda dl: pw(dl) - power, 1e-12, top, xtol=1e-7))


def mde_paired_binary_connor(n: int, discordance: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """Connor's (1987, Biometrics 43:207) normal approximation to the McNemar test's sample size,

        n = ( z_{1−α/2} √ψ + z_{power} √(ψ − δ²) )² / δ²,

    solved for δ at the given n (inf when no δ ≤ ψ satisfies it). For comparison with the exact
    `mde_paired_binary`, which it underestimates at small n."""
    psi = float(discordance)
    if n <= 0 or psi <= 0:
        return float("inf")
    za, zb = _st.norm.ppf(1 - alpha / 2), _st.norm.ppf(power)
    f = lambda dl: za * math.sqrt(psi) + zb * math.sqrt(max(psi - dl * dl, 0.0)) - dl * math.sqrt(n)  # noqa: E731
    if f(psi) > 0:
        return float("inf")
    return float(brentq(f, 1e-12, psi, xtol=1e-10))


def mde_paired_t(n: int, sd: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """Smallest |Δ| a two-sided paired t-test of n differences with standard deviation `sd` detects with
    `power`: Δ = d·sd where d solves P(|T| > t_{n−1, 1−α/2}) = power, T ~ noncentral t(n − 1, d√n).
    NaN when n < 2 or sd is not positive."""
    if n < 2 or not sd > 0:
        return float("nan")
    df = n - 1
    tc = _st.t.ppf(1 - alpha / 2, df)

    def pw(d: float) -> float:
        nc = d * math.sqrt(n)
        upper = _st.nct.sf(tc, df, nc)
        upper = 1 - _st.nct.cdf(tc, df, nc) if np.isnan(upper) else upper
        return float(upper + np.nan_to_num(_st.nct.cdf(-tc, df, nc), nan=0.0))   # lower tail: tiny, may underflow

    hi = 1.0
    while pw(hi) < power:
        hi *= 2
        if hi > 1e6:
            return float("inf")
    return float(brentq(lambda d: pw(d) - power, 1e-9, hi, xtol=1e-10)) * sd


def mde_from_ci(ci_low: float, ci_high: float, ci: float = 0.95, alpha: float = 0.05, power: float = 0.8,
                df: float | None = None) -> float:
    """Approximate MDE of an estimate known only through its interval: se ≈ (high − low)/(2 q_{ci}), and
    MDE ≈ (q_{1−α/2} + q_{power}) · se, with q normal quantiles (t quantiles with `df` when given). At
    95%/80% this is 1.43 × the interval's half-width. NaN when the interval is missing."""
    if ci_low is None or ci_high is None or np.isnan(ci_low) or np.isnan(ci_high):
        return float("nan")
    q = (lambda p: _st.t.ppf(p, df)) if df else _st.norm.ppf
    se = (ci_high - ci_low) / (2 * q(1 - (1 - ci) / 2))
    return float((q(1 - alpha / 2) + q(power)) * se)


def _paired_cells(discordance: float, delta: float, p_a: float) -> tuple[float, float, float, float]:
    """Cell probabilities (both, only b, only a, neither) from ψ, δ = p_b − p_a and p_a."""
    only_b, only_a = (discordance + delta) / 2, (discordance - delta) / 2
    both = p_a - only_a
    cells = (both, only_b, only_a, 1 - both - only_b - only_a)
    if min(cells) < -1e-12:
        raise ValueError(f"no paired table has ψ = {discordance}, δ = {delta}, p_a = {p_a} (cells {cells})")
    return cast(tuple[float, float, float, float], tuple(max(c, 0.0) for c in cells))


def halfwidth_paired_binary(n: int, discordance: float, delta: float = 0.0, p_a: float = 0.5, ci: float = 0.95,
                            method: str = "newcombe") -> float:
    """Expected half-width of the interval for a paired difference of proportions at n pairs.

    `method="normal"`: z·√((ψ − δ²)/n), the large-sample half-width (Var θ̂ = (ψ − δ²)/n).
    `method="newcombe"`: the exact expectation of (high − low)/2 of `newcombe_paired_ci` over all 2×2
    tables of n pairs, drawn multinomially with cell probabilities both = p_a − (ψ − δ)/2,
    only_b = (ψ + δ)/2, only_a = (ψ − δ)/2, neither = the rest (p_a = success rate of condition a).
    ψ = `discordance`; δ = expected difference b − a.
    """
    if n <= 0:
        return float("inf")
    if method == "normal":
        return _z(ci) * math.sqrt(max(discordance - delta * delta, 0.0) / n)
    if method != "newcombe":
        raise ValueError(f"method must be 'newcombe' or 'normal', got {method!r}")
    p11, p10, p01, p00 = _paired_cells(discordance, delta, p_a)
    i, j = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")   # i = only b, j = only a
    total = 0.0
    marg = _st.binom.pmf(np.arange(n + 1), n, p11)
    for n11 in np.nonzero(marg > 1e-14)[0]:
        ok = i + j <= n - n11
        n10, n01 = i[ok], j[ok]
        n00 = n - n11 - n10 - n01
        logp = (gammaln(n + 1) - gammaln(n11 + 1) - gammaln(n10 + 1) - gammaln(n01 + 1) - gammaln(n00 + 1)
                + xlogy(n11, p11) + xlogy(n10, p10) + xlogy(n01, p01) + xlogy(n00, p00))
        _, lo, hi = newcombe_paired_ci(n11, n10, n01, n00, ci)
        total += float(np.sum(np.exp(logp) * (hi - lo) / 2))
    return total


def n_for_halfwidth(target: float = 0.08, discordance: float = 0.3, delta: float = 0.0, p_a: float = 0.5,
                    ci: float = 0.95, method: str = "newcombe", n_max: int = 5000) -> int:
    """Smallest number of pairs whose expected half-width (`halfwidth_paired_binary`) is ≤ `target`.

    `method="normal"` is the closed form n = ⌈z²(ψ − δ²)/target²⌉. `method="newcombe"` bisects n between
    1 and `n_max` on the exact expected Newcombe half-width (monotone in n up to discreteness wobbles far
    below 0.001); raises ValueError when even `n_max` pairs are not enough.
    """
    if method == "normal":
        return max(1, math.ceil(_z(ci) ** 2 * max(discordance - delta * delta, 0.0) / target ** 2))
    hw = lambda m: halfwidth_paired_binary(m, discordance, delta, p_a, ci, method)  # noqa: E731
    lo = 1
    hi = max(2, n_for_halfwidth(target, discordance, delta, p_a, ci, "normal"))
    while hw(hi) > target:
        lo, hi = hi, hi * 2
        if hi > n_max:
            if hw(n_max) > target:
                raise ValueError(f"half-width {target} needs more than n_max = {n_max} pairs")
            hi = n_max
            break
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if hw(mid) <= target else (mid, hi)
    return hi if hw(lo) > target else lo


# ---------------------------------------------------------------------------------------------------------
# several claims

def holm(pvalues) -> np.ndarray:
    """Holm's step-down adjusted p-values (Holm 1979): with the m non-missing p sorted ascending,
    p_adj(i) = max_{j ≤ i} min(1, (m − j + 1) · p(j)). Monotone in the raw p; NaNs stay NaN and do not
    count in m. Reject H_i at family-wise level α iff p_adj(i) < α (≤ α in statsmodels' convention)."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = ~np.isnan(p)
    m = int(ok.sum())
    if m == 0:
        return out
    idx = np.nonzero(ok)[0]
    order = idx[np.argsort(p[idx], kind="stable")]
    adj = np.minimum(1.0, (m - np.arange(m)) * p[order])
    out[order] = np.maximum.accumulate(adj)
    return out


# ---------------------------------------------------------------------------------------------------------
# strata, budgets, unpaired bootstrap

def difficulty_strata(gold_length: pd.Series, labels=("easy", "medium", "hard")) -> pd.Series:
    """Tercile strata of the gold-path length: ≤ 1/3 quantile, ≤ 2/3 quantile, above (ties stay together)."""
    q1, q2 = gold_length.quantile([1 / 3, 2 / 3])
    return pd.Series(np.where(gold_length <= q1, labels[0], np.where(gold_length <= q2, labels[1], labels[2])),
                     index=gold_length.index)


def budget_curve(df: pd.DataFrame, cost: str, by: str | None = None, success: str = "success",
                 points: int = 50) -> pd.DataFrame:
    """Share of all tasks solved within each cost budget (the paper's success-vs-cost curves)."""
    groups = df.groupby(by) if by else [(None, df)]
    top = float(df[cost].max()) if len(df) else 0.0
    budgets = np.linspace(0, top, points)
    rows = []
    for name, g in groups:
        solved = g.loc[g[success].astype(bool), cost].to_numpy(dtype=float)
        for b in budgets:
            rows.append({**({by: name} if by else {}), "budget": b, "solved_share": (solved <= b).sum() / len(g)})
    return pd.DataFrame(rows)


def bootstrap_difference(a, b, stat=np.median, n_boot: int = 10_000, ci: float = 0.95, seed: int = 0,
                         alpha: float = 0.05, power: float = 0.8) -> dict:
    """stat(b) − stat(a) of two independent samples, each resampled separately (percentile bootstrap).

    Also `p`, the percentile-bootstrap p-value of 'no difference' (`_boot_p`: twice the smaller share of
    replicates on either side of 0), `mde` from the interval (`mde_from_ci`), and the sample sizes."""
    a, b = (np.asarray(x, dtype=float) for x in (a, b))
    a, b = a[~np.isnan(a)], b[~np.isnan(b)]
    base = {"n_a": len(a), "n_b": len(b), "n": len(a) + len(b)}
    if len(a) == 0 or len(b) == 0:
        return {"difference": np.nan, "ci_low": np.nan, "ci_high": np.nan, "p": np.nan, "mde": np.nan, **base}
    rng = np.random.default_rng(seed)
    ra = a[rng.integers(0, len(a), size=(n_boot, len(a)))]
    rb = b[rng.integers(0, len(b), size=(n_boot, len(b)))]
    d = stat(rb, axis=1) - stat(ra, axis=1)
    lo, hi = float(np.quantile(d, (1 - ci) / 2)), float(np.quantile(d, 1 - (1 - ci) / 2))
    return {"difference": float(stat(b) - stat(a)), "ci_low": lo, "ci_high": hi, "p": _boot_p(d),
            "mde": mde_from_ci(lo, hi, ci, alpha, power), **base}


# ---------------------------------------------------------------------------------------------------------
# clustered statistics

def _weighted_spearman(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Spearman's ρ of the sample that holds point i w[r, i] times, for every row r of w (B × N).

    Ranks are mid-ranks within the resampled sample: a value's rank is the weight of smaller values plus
    (its own weight + 1)/2, which is what ranking the explicit resample (ties averaged) gives."""
    def ranks(v):
        order = np.argsort(v, kind="stable")
        vs = v[order]
        starts = np.r_[0, np.nonzero(np.diff(vs))[0] + 1]
        inv = np.empty(len(v), dtype=int)
        inv[order] = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(v)]))
        wu = np.add.reduceat(w[:, order], starts, axis=1)          # weight per distinct value
        r_u = np.cumsum(wu, axis=1) - wu + (wu + 1) / 2
        return r_u[:, inv]

    rx, ry = ranks(x), ranks(y)
    tot = w.sum(axis=1, keepdims=True)
    mx, my = (w * rx).sum(axis=1, keepdims=True) / tot, (w * ry).sum(axis=1, keepdims=True) / tot
    dx, dy = rx - mx, ry - my
    with np.errstate(invalid="ignore", divide="ignore"):
        return (w * dx * dy).sum(axis=1) / np.sqrt((w * dx * dx).sum(axis=1) * (w * dy * dy).sum(axis=1))


def spearman_ci(x, y, groups=None, n_boot: int = 10_000, ci: float = 0.95, seed: int = 0, alpha: float = 0.05,
                power: float = 0.8) -> dict:
    """Spearman's rank correlation with a percentile-bootstrap interval.

    Without `groups` the (x, y) pairs are resampled (the pairs are the independent units). With `groups`
    (one label per pair, e.g. the trajectory a candidate came from) whole groups are resampled with
    replacement, G of them, so pairs that share a group stay together: the cluster bootstrap, right when
    pairs within a group are correlated. With few groups (fewer than ~10) it is itself unreliable; the
    interval is NaN with fewer than 2 groups.

    Pairs with a missing x or y (or group) are dropped first. Returns rho (= estimate), ci_low, ci_high,
    p (percentile-bootstrap p of ρ = 0, `_boot_p`), mde (from the interval, `mde_from_ci`), n (pairs) and
    n_clusters (G; NaN without groups).
    """
    names = [getattr(v, "name", None) or default for v, default in ((x, "x"), (y, "y"))]
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    ok = ~(np.isnan(x) | np.isnan(y))
    if groups is not None:
        g = pd.Series(np.asarray(groups, dtype=object))
        ok &= g.notna().to_numpy()
        codes = pd.factorize(g[ok])[0]
    x, y = x[ok], y[ok]
    n = len(x)
    if groups is None:
        codes = np.arange(n)
    n_groups = int(codes.max()) + 1 if n else 0
    nan = float("nan")
    out: dict[str, Any] = {"rho": nan, "estimate": nan, "ci_low": nan, "ci_high": nan, "p": nan, "mde": nan,
                           "n": n, "n_clusters": n_groups if groups is not None else nan}
    # Where ρ or its interval is undefined, `note` says why (a claims table shows it next to "MDE n/a").
    if n < 3:
        out["note"] = f"{n} pair{'s' * (n != 1)} with both values: ρ needs at least 3"
        return out
    constant = [f"{name} is {v[0]:+g} on all {n} pairs" for name, v in zip(names, (x, y)) if np.ptp(v) == 0]
    if constant:
        out["note"] = " and ".join(constant) + ": a constant has no rank correlation, ρ is undefined"
        return out
    rho = float(_weighted_spearman(x, y, np.ones((1, n)))[0])
    out.update({"rho": rho, "estimate": rho})
    if n_groups < 2:
        out["note"] = "all pairs in one cluster: no interval"
        return out
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, n_groups, size=(n_boot, n_groups))
    boots = []
    for chunk in np.array_split(np.arange(n_boot), max(1, (n_boot * n) // 2_000_000)):
        counts = np.zeros((len(chunk), n_groups))
        np.add.at(counts, (np.repeat(np.arange(len(chunk)), n_groups), draws[chunk].ravel()), 1)
        boots.append(_weighted_spearman(x, y, counts[:, codes]))
    boots = np.concatenate(boots)
    good = boots[~np.isnan(boots)]
    if len(good):
        lo, hi = float(np.quantile(good, (1 - ci) / 2)), float(np.quantile(good, 1 - (1 - ci) / 2))
        out.update({"ci_low": lo, "ci_high": hi, "p": _boot_p(good), "mde": mde_from_ci(lo, hi, ci, alpha, power)})
    else:
        out["note"] = "every bootstrap resample had a constant column: no interval"
    return out


def cluster_slope(df: pd.DataFrame, x: str, y: str, cluster: str, within: str | None = None,
                  standardize: bool = False, vcov: str = "CR1", ci: float = 0.95, alpha: float = 0.05,
                  power: float = 0.8) -> dict:
    """OLS slope of `y` on `x` (a linear-probability model when y is 0/1) with a cluster-robust interval.

    Rows are episodes; `cluster` names the column whose rows are not independent (e.g. task_id: episodes
    of one task share its difficulty). `within` adds fixed effects (one intercept per level, e.g. task
    type); `standardize` reports the slope per SD of x. The variance is

        CR1 (default): V = c · B (Σ_g X_gᵀ e_g e_gᵀ X_g) B,  B = (XᵀX)⁻¹,  c = G/(G−1) · (N−1)/(N−K),
             statsmodels' OLS(...).fit(cov_type="cluster");
        CR2 (Bell & McCaffrey 2002): V = B (Σ_g X_gᵀ A_g e_g e_gᵀ A_g X_g) B, A_g = (I − H_gg)^(−1/2),
             H_gg = X_g B X_gᵀ; less biased with few clusters (equals HC2 with one row per cluster).

    Interval and p use t with G − 1 degrees of freedom. `mde` = (t_{1−α/2} + t_{power}) · se.
    Rows with a missing x, y or cluster are dropped. Raises ValueError with fewer than 2 clusters;
    NaN estimate when x does not vary.
    """
    import statsmodels.api as sm  # deferred: ~0.7 s more on importing skillbook.analysis; only cluster_slope needs it
    cols = [x, y, cluster] + ([within] if within else [])
    d = df[cols].dropna()
    n = len(d)
    codes = pd.factorize(d[cluster])[0]
    n_clusters = int(codes.max()) + 1 if n else 0
    if n_clusters < 2:
        raise ValueError(f"cluster_slope needs at least 2 clusters in {cluster!r}, got {n_clusters} "
                         f"({n} rows): a cluster-robust variance cannot be estimated from one cluster")
    out = {"x": x, "y": y, "cluster": cluster, "within": within or "", "vcov": vcov, "n": n,
           "n_clusters": n_clusters, "df": n_clusters - 1}
    xv = d[x].to_numpy(dtype=float)
    if np.std(xv) == 0:
        return {**out, **dict.fromkeys(("slope", "estimate", "se", "ci_low", "ci_high", "p", "mde"), float("nan"))}
    X = pd.DataFrame({"x": (xv - xv.mean()) / xv.std() if standardize else xv}, index=d.index)
    if within:
        X = X.join(pd.get_dummies(d[within], prefix="w", drop_first=True, dtype=float))
    X = sm.add_constant(X, has_constant="add")
    yv = d[y].to_numpy(dtype=float)
    if vcov == "CR1":
        fit = sm.OLS(yv, X).fit(cov_type="cluster", cov_kwds={"groups": codes}, use_t=True)
        slope, se = float(fit.params["x"]), float(fit.bse["x"])
    elif vcov == "CR2":
        Xm = X.to_numpy(dtype=float)
        B = np.linalg.pinv(Xm.T @ Xm)
        beta = B @ Xm.T @ yv
        e = yv - Xm @ beta
        meat = np.zeros((Xm.shape[1],) * 2)
        for g in range(n_clusters):
            rows = codes == g
            Xg = Xm[rows]
            w, v = np.linalg.eigh(np.eye(rows.sum()) - Xg @ B @ Xg.T)
            inv_sqrt = np.where(w > 1e-12, 1 / np.sqrt(np.clip(w, 1e-12, None)), 0.0)
            u = Xg.T @ ((v * inv_sqrt) @ v.T) @ e[rows]
            meat += np.outer(u, u)
        V = B @ meat @ B
        j = list(X.columns).index("x")
        slope, se = float(beta[j]), float(math.sqrt(V[j, j]))
    else:
        raise ValueError(f"vcov must be 'CR1' or 'CR2', got {vcov!r}")
    df_t = n_clusters - 1
    tq = float(_st.t.ppf(1 - (1 - ci) / 2, df_t))
    p = float(2 * _st.t.sf(abs(slope / se), df_t)) if se > 0 else float("nan")
    mde = float((_st.t.ppf(1 - alpha / 2, df_t) + _st.t.ppf(power, df_t)) * se)
    return {**out, "slope": slope, "estimate": slope, "se": se, "ci_low": slope - tq * se,
            "ci_high": slope + tq * se, "p": p, "mde": mde}


def dedupe_episodes(df: pd.DataFrame, keys: list[str] | str) -> tuple[pd.DataFrame, int]:
    """(df without repeated episodes, how many rows were dropped). Rows with equal values in every `keys`
    column are one episode recorded more than once; the first (in row order) is kept."""
    keys = [keys] if isinstance(keys, str) else list(keys)
    missing = [k for k in keys if k not in df.columns]
    if missing:
        raise ValueError(f"key column(s) {missing} not in the frame; present: {list(df.columns)}")
    dup = df.duplicated(subset=keys, keep="first")
    return df.loc[~dup], int(dup.sum())


def verdict(ci_low: float, ci_high: float, expected_sign: int) -> str:
    """'supported' when the interval excludes zero in the expected direction, 'contradicted' when it excludes
    zero in the other, 'not resolved' otherwise. (Kept for old chapters; claims tables decide by the test
    and Holm, see `skillbook.analysis.claims.claims_table`.)"""
    if np.isnan(ci_low) or np.isnan(ci_high):
        return "not resolved"
    if expected_sign * ci_low > 0 and expected_sign * ci_high > 0:
        return "supported"
    if expected_sign * ci_low < 0 and expected_sign * ci_high < 0:
        return "contradicted"
    return "not resolved"
