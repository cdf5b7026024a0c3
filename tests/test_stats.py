import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as st
from scipy.optimize import brentq
from scipy.special import gammaln, xlogy

from skillbook.analysis import (
    bootstrap_ci,
    bootstrap_difference,
    budget_curve,
    cluster_slope,
    dedupe_episodes,
    difficulty_strata,
    exact_mcnemar_p,
    halfwidth_paired_binary,
    holm,
    mde_from_ci,
    mde_paired_binary,
    mde_paired_binary_connor,
    mde_paired_t,
    n_for_halfwidth,
    newcombe_paired_ci,
    paired_difference,
    power_paired_binary,
    sign_test_p,
    spearman_ci,
    summarize,
    verdict,
    wilson_interval,
)


def _frame(a_vals, b_vals, metric="success"):
    n = len(a_vals)
    return pd.DataFrame({"task_id": [f"t{i}" for i in range(n)] * 2, "cond": ["x"] * n + ["y"] * n,
                         metric: list(a_vals) + list(b_vals)})


def _tables(n):
    """Every 2×2 paired table of n pairs as four count arrays (n11, n10, n01, n00)."""
    t = [(i, j, k, n - i - j - k) for i in range(n + 1) for j in range(n + 1 - i) for k in range(n + 1 - i - j)]
    return np.array(t).T


def _multinomial_pmf(t, cells):
    n = t.sum(axis=0)
    p = np.asarray(cells, dtype=float)[:, None]
    return np.exp(gammaln(n + 1) - gammaln(t + 1).sum(axis=0) + xlogy(t, p).sum(axis=0))


# --- one proportion, one mean --------------------------------------------------------------------------

def test_bootstrap_ci_brackets_the_mean_and_narrows_with_n():
    rng = np.random.default_rng(1)
    small = rng.integers(0, 2, 20)
    large = rng.integers(0, 2, 2000)
    m, lo, hi = bootstrap_ci(small)
    assert lo <= m <= hi and 0 <= lo and hi <= 1
    _, lo2, hi2 = bootstrap_ci(large)
    assert hi2 - lo2 < (hi - lo) / 3
    assert bootstrap_ci([1, 1, 1]) == (1.0, 1.0, 1.0)
    assert all(np.isnan(bootstrap_ci([])))


def test_wilson_interval_matches_statsmodels_and_the_published_values():
    from statsmodels.stats.proportion import proportion_confint
    for k, n in [(0, 9), (4, 4), (3, 9), (15, 148), (1, 29), (50, 50)]:
        lo, hi = wilson_interval(k, n)
        slo, shi = proportion_confint(k, n, method="wilson")
        assert (lo, hi) == pytest.approx((slo, shi), abs=1e-12)
    # Newcombe (1998, Stat Med 17:857) Table I, method 3: 15/148, 0/20, 1/29
    assert np.round(wilson_interval(15, 148), 4).tolist() == [0.0624, 0.1605]
    assert np.round(wilson_interval(0, 20), 4).tolist() == [0.0, 0.1611]
    assert np.round(wilson_interval(1, 29), 4).tolist() == [0.0061, 0.1718]
    assert all(np.isnan(wilson_interval(0, 0)))


def test_wilson_interval_contains_the_estimate_at_zero_and_all():
    # Real case: chapter 05 with n_buckets=2 put 0 of 9 successes in a bucket; centre - half came out
    # as 2.8e-17 > 0 = p, so yerr = p - lo was negative and matplotlib's errorbar raised.
    for n in range(1, 200):
        lo, hi = wilson_interval(0, n)
        assert lo == 0.0 and hi > 0
        lo, hi = wilson_interval(n, n)
        assert hi == 1.0 and lo < 1
    lo, hi = wilson_interval(np.array([0, 9, 4]), np.array([9, 9, 9]))
    p = np.array([0, 9, 4]) / 9
    assert (p - lo >= 0).all() and (hi - p >= 0).all()


def test_summarize_uses_wilson_for_binary_and_the_bootstrap_otherwise():
    df = pd.DataFrame({"agent": ["a"] * 4 + ["b"] * 4, "success": [1, 1, 0, 0, 1, 1, 1, 1],
                       "score": [0.1, 0.5, 0.2, np.nan, 0.9, 0.8, 1.0, 0.7]})
    s = summarize(df, "agent").set_index("agent")
    assert s.loc["a", "success"] == 0.5 and s.loc["b", "success"] == 1.0
    # 4 of 4 is not "certainly 1": the Wilson interval is [0.510, 1]
    assert s.loc["a", "n"] == 4 and s.loc["b", "ci_low"] == pytest.approx(0.5101, abs=1e-4)
    assert s.loc["b", "ci_high"] == 1.0
    assert (s.loc["a", "ci_low"], s.loc["a", "ci_high"]) == pytest.approx(wilson_interval(2, 4))
    c = summarize(df, "agent", "score", seed=3).set_index("agent")
    assert c.loc["a", "n"] == 3 and c.loc["a", "score"] == pytest.approx(0.8 / 3)   # NaN not counted
    assert (c.loc["a", "ci_low"], c.loc["a", "ci_high"]) == pytest.approx(bootstrap_ci([0.1, 0.5, 0.2], seed=3)[1:])


# --- paired 0/1 outcomes: Newcombe and exact McNemar -----------------------------------------------------

def _newcombe_by_hand(n11, n10, n01, n00, z=1.959963984540054):
    """Method 10 written a second way: each Wilson limit found numerically as a root of the score equation
    (p̂ − p)² = z² p(1 − p)/n, the correlation written out case by case."""
    n = n11 + n10 + n01 + n00

    def limits(k):
        p = k / n
        f = lambda q: (p - q) ** 2 - z * z * q * (1 - q) / n  # noqa: E731
        # the score equation also holds at q = p̂ itself, so each bracket starts just off p̂
        lo = 0.0 if k == 0 else brentq(f, 1e-15, p - 1e-12, xtol=1e-15)
        hi = 1.0 if k == n else brentq(f, p + 1e-12, 1 - 1e-15, xtol=1e-15)
        return lo, hi

    p1, p2 = (n11 + n10) / n, (n11 + n01) / n
    (l1, u1), (l2, u2) = limits(n11 + n10), limits(n11 + n01)
    margins = (n11 + n10) * (n01 + n00) * (n11 + n01) * (n10 + n00)
    a = n11 * n00 - n10 * n01
    if margins == 0:
        phi = 0.0
    elif a > n / 2:
        phi = (a - n / 2) / math.sqrt(margins)
    elif a >= 0:
        phi = 0.0
    else:
        phi = a / math.sqrt(margins)
    low = (p1 - p2) - math.sqrt((p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2)
    high = (p1 - p2) + math.sqrt((u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2)
    return low, high


def test_newcombe_reproduces_published_intervals():
    # Newcombe (1998, Stat Med 17:2635) worked example, n = 50: method 10 gives 0.0562 to 0.3292
    # (and his method 8, plain phi, 0.0618 to 0.3242)
    assert np.round(newcombe_paired_ci(20, 12, 2, 16)[1:], 4).tolist() == [0.0562, 0.3292]
    assert np.round(newcombe_paired_ci(20, 12, 2, 16, phi="plain")[1:], 4).tolist() == [0.0618, 0.3242]
    # Fagerland, Lydersen & Laake (2014, Stat Med 33:2850), Bentur et al. airway data: −0.507 to −0.026
    assert np.round(newcombe_paired_ci(1, 1, 7, 12)[1:], 3).tolist() == [-0.507, -0.026]
    # Fagerland et al.'s book, Cavo et al. complete-response data: −0.0621 (−0.1186 to −0.0046)
    theta, lo, hi = newcombe_paired_ci(59, 6, 16, 80)
    assert np.round([theta, lo, hi], 4).tolist() == [-0.0621, -0.1186, -0.0046]


def test_newcombe_equals_an_independent_implementation_and_statsmodels_without_correlation():
    from statsmodels.stats.proportion import confint_proportions_2indep
    t = _tables(9)
    theta, lo, hi = newcombe_paired_ci(*t)
    assert (lo >= -1).all() and (hi <= 1).all() and (lo <= theta).all() and (theta <= hi).all() and (hi > lo).all()
    for i in range(t.shape[1]):
        assert (lo[i], hi[i]) == pytest.approx(_newcombe_by_hand(*t[:, i]), abs=1e-9), t[:, i]
    # φ = 0 is Newcombe's square-and-add interval for independent samples (statsmodels' "newcomb")
    for cells in [(20, 12, 2, 16), (1, 1, 7, 12), (3, 0, 4, 2), (0, 5, 0, 4)]:
        n = sum(cells)
        _, lo, hi = newcombe_paired_ci(*cells, phi="none")
        s = confint_proportions_2indep(cells[0] + cells[1], n, cells[0] + cells[2], n, method="newcomb")
        assert (lo, hi) == pytest.approx(s, abs=1e-10)


def test_newcombe_exact_coverage_at_small_n():
    """Exact coverage (all tables enumerated, no simulation error) over a grid of true cell probabilities."""
    for n, floor in ((9, 0.92), (30, 0.935)):
        t = _tables(n)
        covs = []
        for p11 in np.linspace(0.05, 0.9, 6):
            for p10 in np.linspace(0.02, 0.5, 6):
                for p01 in np.linspace(0.02, 0.5, 6):
                    p00 = 1 - p11 - p10 - p01
                    if p00 < 0.02:
                        continue
                    _, lo, hi = newcombe_paired_ci(*t)
                    delta = p10 - p01
                    covs.append(np.sum(_multinomial_pmf(t, (p11, p10, p01, p00)) * ((lo <= delta) & (delta <= hi))))
        assert min(covs) >= floor and np.mean(covs) >= 0.95, (n, min(covs), np.mean(covs))


def test_newcombe_simulated_coverage():
    rng = np.random.default_rng(0)
    for n in (9, 30):
        for cells in [(0.3, 0.25, 0.1, 0.35), (0.2, 0.3, 0.3, 0.2), (0.6, 0.1, 0.05, 0.25)]:
            t = rng.multinomial(n, cells, size=2000).T
            _, lo, hi = newcombe_paired_ci(*t)
            delta = cells[1] - cells[2]
            assert ((lo <= delta) & (delta <= hi)).mean() >= 0.93, (n, cells)


def test_exact_mcnemar_and_sign_test():
    assert exact_mcnemar_p(0, 4) == 0.125 and exact_mcnemar_p(4, 0) == 0.125
    assert exact_mcnemar_p(0, 0) == 1.0 and exact_mcnemar_p(1, 0) == 1.0 and exact_mcnemar_p(3, 3) == 1.0
    assert exact_mcnemar_p(0, 6) == pytest.approx(2 / 64)
    assert exact_mcnemar_p(2, 10) == pytest.approx(2 * st.binom.cdf(2, 12, 0.5))
    from statsmodels.stats.contingency_tables import mcnemar
    for b, c in [(1, 7), (5, 9), (0, 3), (12, 2)]:
        assert exact_mcnemar_p(b, c) == pytest.approx(mcnemar([[10, b], [c, 10]], exact=True).pvalue)
    assert sign_test_p([0.5, 0.2, 0, 0, 0.1, np.nan]) == pytest.approx(0.25)   # 3 positive, ties dropped
    assert sign_test_p([0, 0, 0]) == 1.0 and sign_test_p([]) == 1.0


def test_paired_difference_binary_regressions_from_the_issue():
    # no discordant pair: the interval is not [0, 0]; it contains 0 and has width
    d = paired_difference(_frame([1, 1, 0, 0, 0, 1, 0, 1, 0], [1, 1, 0, 0, 0, 1, 0, 1, 0]), "cond", "x", "y")
    assert d["difference"] == 0 and d["p"] == 1.0 and d["mcnemar_p"] == 1.0
    assert d["ci_low"] < 0 < d["ci_high"] and d["ci_high"] - d["ci_low"] > 0.3
    assert d["only_a"] == d["only_b"] == 0 and d["both"] == 4 and d["neither"] == 5
    # 4 of 9 pairs discordant, all one way: the exact test gives p = 0.125 (the bootstrap interval excluded
    # 0). Newcombe's interval (an asymptotic score interval) excludes 0 here too, so the verdict must
    # come from the exact test; this pins that documented disagreement.
    d = paired_difference(_frame([0, 0, 0, 0, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1, 0, 0, 0]), "cond", "x", "y")
    assert d["p"] == 0.125 and d["only_b"] == 4 and d["only_a"] == 0
    assert d["difference"] == pytest.approx(4 / 9)
    assert d["ci_low"] > 0 and d["ci_low"] == pytest.approx(_newcombe_by_hand(2, 4, 0, 3)[0])
    # at n = 9 only an effect of ~0.73 is detectable (6 of 9 pairs all one way needed for p < 0.05)
    assert d["mde"] == pytest.approx(brentq(lambda q: st.binom.sf(5, 9, q) - 0.8, 0.01, 0.99), abs=1e-5)


def test_paired_difference_binary_fields_and_old_keywords():
    df = pd.DataFrame({"task_id": list("abcdef") * 2, "cond": ["x"] * 6 + ["y"] * 6,
                       "success": [0, 0, 0, 1, 1, 0] + [1, 1, 0, 1, 1, 1]})
    d = paired_difference(df, "cond", "x", "y", seed=0)      # chapters still pass seed=
    assert d["n_tasks"] == 6 and d["difference"] == pytest.approx(3 / 6)
    assert d["only_b"] == 3 and d["only_a"] == 0 and d["ci_low"] <= 0.5 <= d["ci_high"]
    assert d["mcnemar_p"] == d["p"] == 0.25
    assert (d["difference"], d["ci_low"], d["ci_high"]) == pytest.approx(newcombe_paired_ci(2, 3, 0, 1))
    assert {"a", "b", "metric", "mean_a", "mean_b"} <= set(d) and d["mean_b"] - d["mean_a"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="not in column"):
        paired_difference(df, "cond", "x", "z")
    # a planning discordance replaces the observed one
    assert paired_difference(df, "cond", "x", "y", mde_discordance=0.9)["mde_discordance"] == 0.9


def test_paired_difference_binary_edge_cases():
    d = paired_difference(_frame([1], [0]), "cond", "x", "y")                        # n = 1
    assert d["n_tasks"] == 1 and d["difference"] == -1 and d["p"] == 1.0 and math.isinf(d["mde"])
    assert -1 <= d["ci_low"] < d["ci_high"] <= 1 and d["ci_high"] > 0
    empty = _frame([1, 0], [1, 0]).assign(success=[1, np.nan, np.nan, 0])             # no task has both
    d = paired_difference(empty, "cond", "x", "y")
    assert d["n_tasks"] == 0 and np.isnan(d["difference"]) and np.isnan(d["ci_low"]) and d["p"] == 1.0
    # repeated episodes of a task are averaged first: the task, not the episode, is the unit
    rep = pd.DataFrame({"task_id": ["t1", "t1", "t2", "t1", "t2"], "cond": ["x", "x", "x", "y", "y"],
                        "success": [1, 0, 0, 1, 1]})
    d = paired_difference(rep, "cond", "x", "y")
    assert d["n_tasks"] == 2 and d["test"] == "exact sign test" and d["difference"] == pytest.approx(0.75)


def test_paired_difference_continuous_metric():
    a = [0.2, 0.5, 0.1, 0.0, 0.7, 0.3, 0.4]
    b = [0.4, 0.5, 0.3, 0.2, 0.6, 0.9, 0.4]
    d = paired_difference(_frame(a, b, "score"), "cond", "x", "y", "score")
    diffs = np.subtract(b, a)
    t = st.ttest_rel(b, a)
    assert d["difference"] == pytest.approx(diffs.mean())
    assert (d["ci_low"], d["ci_high"]) == pytest.approx(tuple(t.confidence_interval(0.95)))
    assert d["p"] == pytest.approx(exact_mcnemar_p(1, 4))          # 4 up, 1 down, 2 ties dropped
    assert d["test"] == "exact sign test" and d["ci_method"] == "Student t"
    assert d["mde"] == pytest.approx(mde_paired_t(7, diffs.std(ddof=1)))
    assert "only_a" not in d
    # all ties: no spread, so no interval (not a zero-width one) and p = 1
    d = paired_difference(_frame(a, a, "score"), "cond", "x", "y", "score")
    assert d["difference"] == 0 and np.isnan(d["ci_low"]) and np.isnan(d["ci_high"]) and d["p"] == 1.0
    assert np.isnan(d["mde"])
    d = paired_difference(_frame([0.2], [0.5], "score"), "cond", "x", "y", "score")       # n = 1
    assert d["difference"] == pytest.approx(0.3) and np.isnan(d["ci_low"]) and d["p"] == 1.0
    nan = _frame(a, b, "score")
    nan.loc[0, "score"] = np.nan
    assert paired_difference(nan, "cond", "x", "y", "score")["n_tasks"] == 6


# --- power and minimum detectable effects ---------------------------------------------------------------

def test_power_paired_binary_equals_brute_force_enumeration():
    for n in (6, 8, 11):
        t = _tables(n)
        reject = np.array([exact_mcnemar_p(t[2, i], t[1, i]) <= 0.05 for i in range(t.shape[1])])
        for psi, delta in [(0.5, 0.0), (0.5, 0.3), (0.9, 0.6), (0.2, 0.2)]:
            cells = (0.5 * (1 - psi), (psi + delta) / 2, (psi - delta) / 2, 0.5 * (1 - psi))
            brute = float(np.sum(_multinomial_pmf(t, cells) * reject))
            assert power_paired_binary(n, delta, psi) == pytest.approx(brute, abs=1e-12)
    assert power_paired_binary(30, 0.0, 0.4) <= 0.05                                   # exact test: size ≤ α


def test_mde_paired_binary_hand_computed_values():
    # n = 6, ψ = 1: the test rejects only when all six pairs go one way, power = q⁶ + (1 − q)⁶, q = (1 + δ)/2
    q = brentq(lambda q: q ** 6 + (1 - q) ** 6 - 0.8, 0.5, 1)
    assert mde_paired_binary(6, 1.0) == pytest.approx(2 * q - 1, abs=1e-6)
    # nothing is detectable with 5 pairs: (½)⁵·2 = 0.0625 > 0.05
    assert math.isinf(mde_paired_binary(5, 1.0)) and math.isinf(mde_paired_binary(5, 0.0, at_least_delta=True))
    # with ψ fixed too small, even δ = ψ is not detectable
    assert math.isinf(mde_paired_binary(30, 0.1)) and math.isinf(mde_paired_binary(0, 0.5))
    # ψ growing with δ (how an observed table is reported): at n = 9 the MDE is P(Bin(9, δ) ≥ 6) = 0.8
    assert mde_paired_binary(9, 0.0, at_least_delta=True) == pytest.approx(
        brentq(lambda d: st.binom.sf(5, 9, d) - 0.8, 0.01, 0.99), abs=1e-6)
    # power at the MDE is the target, and the MDE shrinks with n
    m = mde_paired_binary(100, 0.3)
    assert power_paired_binary(100, m, 0.3) == pytest.approx(0.8, abs=1e-5)
    assert mde_paired_binary(400, 0.3) < m < mde_paired_binary(50, 0.3)


def test_mde_exact_against_connor_approximation():
    for n, psi in [(200, 0.3), (500, 0.6), (500, 0.1), (1000, 0.2)]:
        exact, connor = mde_paired_binary(n, psi), mde_paired_binary_connor(n, psi)
        assert exact == pytest.approx(connor, rel=0.06), (n, psi)
    # Connor's closed form: n = (z_α/2 √ψ + z_β √(ψ − δ²))² / δ²
    za, zb, psi, d = st.norm.ppf(0.975), st.norm.ppf(0.8), 0.3, mde_paired_binary_connor(150, 0.3)
    assert (za * math.sqrt(psi) + zb * math.sqrt(psi - d * d)) ** 2 / d ** 2 == pytest.approx(150)


def test_mde_paired_t_and_from_ci():
    from statsmodels.stats.power import TTestPower
    es = TTestPower().solve_power(nobs=12, alpha=0.05, power=0.8)
    assert mde_paired_t(12, 0.4) == pytest.approx(es * 0.4, rel=1e-6)
    assert mde_paired_t(2, 1.0) == pytest.approx(TTestPower().solve_power(nobs=2, alpha=0.05, power=0.8), rel=1e-6)
    assert np.isnan(mde_paired_t(1, 0.4)) and np.isnan(mde_paired_t(10, 0.0))
    # 95% interval ± 1.96 se → MDE = (1.96 + 0.84) se
    se = 1.96 / st.norm.ppf(0.975)
    assert mde_from_ci(-1.96, 1.96) == pytest.approx((st.norm.ppf(0.975) + st.norm.ppf(0.8)) * se)
    assert mde_from_ci(0.1, 0.5) == pytest.approx(mde_from_ci(-0.2, 0.2))           # only the width matters
    assert np.isnan(mde_from_ci(np.nan, 1.0))


def test_halfwidth_planning():
    # large n: the exact expected Newcombe half-width approaches z √((ψ − δ²)/n)
    assert halfwidth_paired_binary(200, 0.3, method="normal") == pytest.approx(1.959964 * math.sqrt(0.3 / 200))
    assert halfwidth_paired_binary(200, 0.3) == pytest.approx(halfwidth_paired_binary(200, 0.3, method="normal"),
                                                              rel=0.02)
    assert halfwidth_paired_binary(30, 0.3) < halfwidth_paired_binary(9, 0.3)
    n = n_for_halfwidth(0.08, 0.3, method="normal")
    assert n == math.ceil(st.norm.ppf(0.975) ** 2 * 0.3 / 0.08 ** 2) == 181
    n = n_for_halfwidth(0.08, 0.2, delta=0.1, p_a=0.3)
    assert halfwidth_paired_binary(n, 0.2, 0.1, 0.3) <= 0.08 < halfwidth_paired_binary(n - 1, 0.2, 0.1, 0.3)
    with pytest.raises(ValueError, match="no paired table"):
        halfwidth_paired_binary(10, 0.5, 0.0, p_a=0.1)


# --- Holm ---------------------------------------------------------------------------------------------

def test_holm_matches_statsmodels():
    from statsmodels.stats.multitest import multipletests
    rng = np.random.default_rng(0)
    for p in [[0.01, 0.04, 0.03], [0.2, 0.01, 0.01, 0.5, 0.049], list(rng.uniform(0, 0.2, 12)), [0.5]]:
        assert holm(p) == pytest.approx(multipletests(p, method="holm")[1])
    assert holm([0.01, 0.04, 0.03]).tolist() == pytest.approx([0.03, 0.06, 0.06])   # by hand
    out = holm([0.01, np.nan, 0.04])
    assert np.isnan(out[1]) and out[[0, 2]].tolist() == pytest.approx([0.02, 0.04])
    assert holm([]).size == 0


# --- clustered statistics -----------------------------------------------------------------------------

def _old_spearman_ci(x, y, n_boot=10_000, ci=0.95, seed=0):
    """The pair-bootstrap implementation this module had before the cluster bootstrap."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    rank = lambda v: pd.DataFrame(v).rank(axis=1).to_numpy()  # noqa: E731

    def rho(a, b):
        a, b = rank(a), rank(b)
        a = a - a.mean(axis=-1, keepdims=True)
        b = b - b.mean(axis=-1, keepdims=True)
        return (a * b).sum(axis=-1) / np.sqrt((a * a).sum(axis=-1) * (b * b).sum(axis=-1))

    idx = np.random.default_rng(seed).integers(0, len(x), size=(n_boot, len(x)))
    boots = rho(x[idx], y[idx])
    boots = boots[~np.isnan(boots)]
    return np.quantile(boots, (1 - ci) / 2), np.quantile(boots, 1 - (1 - ci) / 2)


def test_spearman_ci_unclustered_is_unchanged():
    rng = np.random.default_rng(0)
    x = rng.normal(size=60)
    y = np.round(x + rng.normal(scale=0.5, size=60), 1)          # ties in y
    r = spearman_ci(x, y, n_boot=2000)
    assert r["rho"] == r["estimate"] == pytest.approx(st.spearmanr(x, y).statistic)
    assert (r["ci_low"], r["ci_high"]) == pytest.approx(_old_spearman_ci(x, y, n_boot=2000), abs=1e-12)
    assert (0 < r["ci_low"] < r["rho"] < r["ci_high"] <= 1 and r["p"] < 0.01 and r["n"] == 60
            and np.isnan(r["n_clusters"]))


def test_spearman_cluster_bootstrap_resamples_whole_groups():
    rng = np.random.default_rng(1)
    x0 = rng.normal(size=15)
    y0 = 0.3 * x0 + rng.normal(size=15)
    # every pair recorded 5 times within its group: the cluster bootstrap sees 15 units, not 75
    x, y, g = np.repeat(x0, 5), np.repeat(y0, 5), np.repeat(np.arange(15), 5)
    clustered = spearman_ci(x, y, groups=g, n_boot=2000, seed=4)
    once = spearman_ci(x0, y0, n_boot=2000, seed=4)
    assert clustered["n"] == 75 and clustered["n_clusters"] == 15
    assert (clustered["ci_low"], clustered["ci_high"]) == pytest.approx((once["ci_low"], once["ci_high"]), abs=1e-12)
    naive = spearman_ci(x, y, n_boot=2000, seed=4)
    assert naive["ci_high"] - naive["ci_low"] < 0.6 * (clustered["ci_high"] - clustered["ci_low"])
    # NaNs dropped; fewer than 3 pairs or 2 groups → no interval
    assert spearman_ci([1, 2, np.nan, 4, 5], [2, 1, 3, np.nan, 5])["n"] == 3
    r = spearman_ci([1, 2, 3, 4], [1, 3, 2, 4], groups=["a"] * 4)
    assert r["n_clusters"] == 1 and np.isnan(r["ci_low"]) and not np.isnan(r["rho"])
    assert np.isnan(spearman_ci([1, 2], [2, 1])["rho"])


def test_cluster_slope_matches_hc_with_singleton_clusters_and_refuses_one_cluster():
    import statsmodels.api as sm
    rng = np.random.default_rng(2)
    df = pd.DataFrame({"x": rng.normal(size=40)})
    df["y"] = 0.5 * df.x + rng.normal(size=40)
    df["id"] = np.arange(40)
    X = sm.add_constant(df[["x"]])
    for vcov, hc in (("CR1", "HC1"), ("CR2", "HC2")):
        r = cluster_slope(df, "x", "y", "id", vcov=vcov)
        fit = sm.OLS(df.y, X).fit(cov_type=hc)
        assert r["slope"] == pytest.approx(fit.params["x"]) and r["se"] == pytest.approx(fit.bse["x"], rel=1e-9)
        assert r["n_clusters"] == 40 and r["df"] == 39
        tq = st.t.ppf(0.975, 39)
        assert (r["ci_low"], r["ci_high"]) == pytest.approx((r["slope"] - tq * r["se"], r["slope"] + tq * r["se"]))
    with pytest.raises(ValueError, match="at least 2 clusters"):
        cluster_slope(df.assign(id=1), "x", "y", "id")


def test_cluster_slope_counts_a_repeated_task_once():
    import statsmodels.api as sm
    rng = np.random.default_rng(3)
    base = pd.DataFrame({"task_id": [f"t{i}" for i in range(20)], "x": rng.normal(size=20)})
    base["success"] = (base.x + rng.normal(size=20) > 0).astype(float)
    five = pd.concat([base] * 5, ignore_index=True)               # each task's episode recorded 5 times
    once = cluster_slope(base, "x", "success", "task_id")
    clustered = cluster_slope(five, "x", "success", "task_id")
    assert clustered["slope"] == pytest.approx(once["slope"]) and clustered["n_clusters"] == 20
    assert clustered["se"] == pytest.approx(once["se"], rel=0.05)   # CR1's (N−1)/(N−K) factor differs a little
    naive = sm.OLS(five.success, sm.add_constant(five[["x"]])).fit(cov_type="HC3").bse["x"]
    assert naive < 0.5 * clustered["se"]
    # CR1 by hand, with t on G − 1 df
    tasks = pd.DataFrame({"task_id": np.repeat([f"t{i}" for i in range(6)], 4), "x": rng.normal(size=24)})
    tasks["y"] = tasks.x + np.repeat(rng.normal(size=6), 4) + rng.normal(size=24)
    Xm = np.c_[np.ones(24), tasks.x]
    B = np.linalg.inv(Xm.T @ Xm)
    e = tasks.y - Xm @ (B @ Xm.T @ tasks.y)
    meat = sum(np.outer(Xm[g].T @ e[g], Xm[g].T @ e[g]) for g in (tasks.task_id == t for t in tasks.task_id.unique()))
    se = math.sqrt((B @ meat @ B)[1, 1] * 6 / 5 * 23 / 22)
    r = cluster_slope(tasks, "x", "y", "task_id")
    assert r["se"] == pytest.approx(se) and r["p"] == pytest.approx(2 * st.t.sf(abs(r["slope"] / se), 5))
    assert r["mde"] == pytest.approx((st.t.ppf(0.975, 5) + st.t.ppf(0.8, 5)) * se)
    assert cluster_slope(tasks, "x", "y", "task_id", standardize=True)["slope"] == pytest.approx(
        r["slope"] * tasks.x.std(ddof=0))
    assert np.isnan(cluster_slope(tasks.assign(x=1.0), "x", "y", "task_id")["slope"])


def test_dedupe_episodes():
    df = pd.DataFrame({"condition": ["a", "a", "a", "b"], "task_id": ["t1", "t1", "t2", "t1"], "success": [1, 1, 0, 0]})
    out, dropped = dedupe_episodes(df, ["condition", "task_id"])
    assert dropped == 1 and len(out) == 3 and out.index.tolist() == [0, 2, 3]
    assert dedupe_episodes(df, "success")[1] == 2
    with pytest.raises(ValueError, match="not in the frame"):
        dedupe_episodes(df, ["run"])


# --- unchanged helpers ----------------------------------------------------------------------------------

def test_difficulty_strata_keep_ties_together():
    s = difficulty_strata(pd.Series([3, 3, 3, 5, 8, 13, 21, 40, 40]))
    assert list(s[:3]) == ["easy"] * 3 and s.iloc[-1] == "hard" and s.iloc[-2] == "hard"


def test_budget_curve_counts_solved_tasks_within_budget():
    df = pd.DataFrame({"success": [True, True, False, True], "latency": [1.0, 3.0, 2.0, 10.0]})
    c = budget_curve(df, "latency", points=11)
    at = dict(zip(c.budget, c.solved_share))
    assert at[0.0] == 0 and at[1.0] == 0.25 and at[3.0] == 0.5 and at[10.0] == 0.75


def test_bootstrap_difference_and_verdict():
    rng = np.random.default_rng(0)
    d = bootstrap_difference(np.zeros(30), np.ones(30) + rng.normal(scale=0.1, size=30))
    assert d["ci_low"] > 0.8 and d["p"] == pytest.approx(2 / 10_001) and d["n"] == 60
    same = bootstrap_difference(rng.normal(size=40), rng.normal(size=40), stat=np.mean, seed=1)
    assert same["p"] > 0.05 and same["ci_low"] < 0 < same["ci_high"] and same["mde"] > 0
    assert np.isnan(bootstrap_difference([], [1.0])["p"])
    assert verdict(0.1, 0.3, +1) == "supported" and verdict(0.1, 0.3, -1) == "contradicted"
    assert verdict(-0.1, 0.3, +1) == "not resolved" and verdict(float("nan"), 1, 1) == "not resolved"


def test_mean_t_test_is_scipys_one_sample_t_and_the_two_callers_share_it():
    # Review of the 2026-12-03 diff: `recovery_claim` and `paired_difference` each computed a Student-t
    # interval of a mean on their own; one helper now serves both, checked against scipy's.
    from skillbook.analysis.stats import mean_t_test
    x = np.array([0.3, -0.1, 0.5, 0.2, 0.0, 0.4, -0.2, 0.6])
    r = mean_t_test(x)
    ref = st.ttest_1samp(x, 0.0)
    lo, hi = ref.confidence_interval(0.95)
    assert r["n"] == 8 and r["mean"] == pytest.approx(x.mean())
    assert (r["ci_low"], r["ci_high"]) == pytest.approx((lo, hi)) and r["p"] == pytest.approx(ref.pvalue)
    assert mean_t_test(x, ci=0.9)["ci_high"] < hi
    # no spread or a single value: no interval and no p (a zero-width interval would claim certainty)
    for degenerate in ([0.25] * 5, [0.4], []):
        d = mean_t_test(degenerate)
        assert np.isnan(d["ci_low"]) and np.isnan(d["ci_high"]) and np.isnan(d["p"])
    assert mean_t_test([np.nan, 1.0, 2.0, np.nan])["n"] == 2          # NaNs dropped
    # paired_difference's continuous branch gives the same interval as the helper on the differences
    df = pd.DataFrame({"task_id": list(range(8)) * 2, "c": ["a"] * 8 + ["b"] * 8,
                       "steps": np.r_[np.zeros(8), x]})
    pdiff = paired_difference(df, "c", "a", "b", metric="steps")
    assert (pdiff["ci_low"], pdiff["ci_high"]) == pytest.approx((lo, hi))
