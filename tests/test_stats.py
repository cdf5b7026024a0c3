import numpy as np
import pandas as pd
import pytest

from skillbook.analysis import bootstrap_ci, budget_curve, difficulty_strata, paired_difference, summarize


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


def test_summarize_per_group():
    df = pd.DataFrame({"agent": ["a"] * 4 + ["b"] * 4, "success": [1, 1, 0, 0, 1, 1, 1, 1]})
    s = summarize(df, "agent").set_index("agent")
    assert s.loc["a", "success"] == 0.5 and s.loc["b", "success"] == 1.0
    assert s.loc["a", "n"] == 4 and s.loc["b", "ci_low"] == 1.0


def test_paired_difference_on_the_same_tasks():
    df = pd.DataFrame({"task_id": list("abcdef") * 2, "cond": ["x"] * 6 + ["y"] * 6,
                       "success": [0, 0, 0, 1, 1, 0] + [1, 1, 0, 1, 1, 1]})
    d = paired_difference(df, "cond", "x", "y")
    assert d["n_tasks"] == 6 and d["difference"] == pytest.approx(3 / 6)
    assert d["only_b"] == 3 and d["only_a"] == 0 and d["ci_low"] <= 0.5 <= d["ci_high"]
    assert 0 < d["mcnemar_p"] <= 0.25
    with pytest.raises(ValueError, match="not in column"):
        paired_difference(df, "cond", "x", "z")


def test_difficulty_strata_keep_ties_together():
    s = difficulty_strata(pd.Series([3, 3, 3, 5, 8, 13, 21, 40, 40]))
    assert list(s[:3]) == ["easy"] * 3 and s.iloc[-1] == "hard" and s.iloc[-2] == "hard"


def test_budget_curve_counts_solved_tasks_within_budget():
    df = pd.DataFrame({"success": [True, True, False, True], "latency": [1.0, 3.0, 2.0, 10.0]})
    c = budget_curve(df, "latency", points=11)
    at = dict(zip(c.budget, c.solved_share))
    assert at[0.0] == 0 and at[1.0] == 0.25 and at[3.0] == 0.5 and at[10.0] == 0.75


def test_spearman_difference_and_verdict():
    from scipy.stats import spearmanr

    from skillbook.analysis import bootstrap_difference, spearman_ci, verdict
    rng = np.random.default_rng(0)
    x = rng.normal(size=60)
    y = x + rng.normal(scale=0.5, size=60)
    r = spearman_ci(x, y)
    assert r["rho"] == pytest.approx(spearmanr(x, y).statistic)
    assert 0 < r["ci_low"] < r["rho"] < r["ci_high"] <= 1
    d = bootstrap_difference(np.zeros(30), np.ones(30) + rng.normal(scale=0.1, size=30))
    assert d["ci_low"] > 0.8
    assert verdict(0.1, 0.3, +1) == "supported" and verdict(0.1, 0.3, -1) == "contradicted"
    assert verdict(-0.1, 0.3, +1) == "not resolved" and verdict(float("nan"), 1, 1) == "not resolved"
