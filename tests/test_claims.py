import math

import numpy as np
import pandas as pd
import pytest

from skillbook.analysis import Claim, claims_table, holm, paired_difference, render_claims, spearman_ci
from skillbook.analysis.stats import mde_from_ci


def _r(estimate, p, lo=-1.0, hi=1.0, mde=0.3, n=20):
    return {"difference": estimate, "ci_low": lo, "ci_high": hi, "p": p, "mde": mde, "n_tasks": n}


def test_primary_claims_keep_their_p_and_secondary_claims_are_holm_adjusted():
    claims = [Claim("primary helps", "+1.9 pp", +1, True, _r(0.10, 0.03, 0.01, 0.2)),
              Claim("s1", "+5 pp", +1, False, _r(0.20, 0.01, 0.05, 0.35)),
              Claim("s2", "+3 pp", +1, False, _r(0.15, 0.04, 0.01, 0.3)),
              Claim("s3", "−2 pp", -1, False, _r(0.12, 0.03, 0.01, 0.25))]
    t = claims_table(claims).set_index("claim")
    assert t.loc["primary helps", "role"] == "primary" and np.isnan(t.loc["primary helps", "p_holm"])
    assert t.loc["primary helps", "verdict"] == "supported"                     # p = 0.03 < 0.05, unadjusted
    # Holm over the three secondaries: 0.01·3 = 0.03, then max(0.03·2, 0.03) = 0.06, max(0.04·1, 0.06) = 0.06
    assert t.loc[["s1", "s3", "s2"], "p_holm"].tolist() == pytest.approx([0.03, 0.06, 0.06])
    assert t.loc["s1", "verdict"] == "supported"
    # raw p = 0.04 and an interval that excludes 0, but after Holm: not resolved, with the MDE
    assert t.loc["s2", "verdict"] == "not resolved (MDE ±0.30)"
    assert t.loc["s3", "verdict"] == "not resolved (MDE ±0.30)"


def test_contradicted_and_the_sign_rule():
    t = claims_table([Claim("memory hurts", "−4 pp", -1, True, _r(0.2, 0.001)),
                      Claim("memory helps", "+4 pp", +1, True, _r(0.2, 0.001)),
                      Claim("zero", "+4 pp", +1, True, _r(0.0, 0.001))])
    assert t.verdict.tolist()[:2] == ["contradicted", "supported"]
    assert t.verdict.iloc[2].startswith("not resolved")


def test_the_exact_test_decides_when_newcombe_excludes_zero():
    df = pd.DataFrame({"task_id": list(range(9)) * 2, "cond": ["none"] * 9 + ["memory"] * 9,
                       "success": [0, 0, 0, 0, 1, 1, 0, 0, 0] + [1, 1, 1, 1, 1, 1, 0, 0, 0]})
    d = paired_difference(df, "cond", "none", "memory")
    assert d["ci_low"] > 0 and d["p"] == 0.125
    t = claims_table([Claim("memory helps", "+10 pp", +1, True, d)])
    assert t.verdict.iloc[0] == "not resolved (MDE ±0.73)" and t.n.iloc[0] == 9
    assert t.estimate.iloc[0] == pytest.approx(4 / 9) and t.p.iloc[0] == 0.125


def test_generic_results_descriptive_claims_and_mde_fallback():
    rng = np.random.default_rng(0)
    x = rng.normal(size=30)
    rho = spearman_ci(x, x + rng.normal(size=30), groups=np.repeat(np.arange(10), 3), n_boot=2000)
    slope = {"slope": 0.05, "ci_low": -0.02, "ci_high": 0.12, "p": 0.2, "n": 120, "n_clusters": 30}
    t = claims_table([Claim("judge agrees", "ρ > 0", +1, False, rho),
                      Claim("utility slope", "+", +1, False, slope),
                      Claim("compression 10–20×", "10–20×", +1, False, {"estimate": 14.2}, note="in range"),
                      Claim("failed test", "+", +1, False, {"estimate": np.nan, "p": np.nan})])
    t = t.set_index("claim")
    assert t.loc["judge agrees", "estimate"] == rho["rho"] and t.loc["judge agrees", "n"] == 30
    assert t.loc["judge agrees", "n_clusters"] == 10
    assert t.loc["utility slope", "mde"] == pytest.approx(mde_from_ci(-0.02, 0.12))   # no mde given: from the CI
    assert t.loc["utility slope", "n_clusters"] == 30
    assert t.loc["compression 10–20×", "verdict"] == "not tested"
    assert np.isnan(t.loc["compression 10–20×", "p_holm"])
    assert t.loc["compression 10–20×", "note"] == "in range"
    assert t.loc["failed test", "verdict"] == "not resolved (MDE n/a)"
    # the untested claim does not enlarge the Holm family; the failed one (p NaN) does not either
    assert t.loc["utility slope", "p_holm"] == pytest.approx(holm([rho["p"], 0.2])[1])


def test_infinite_mde_and_validation():
    t = claims_table([Claim("tiny run", "+", +1, True, _r(0.2, 1.0, mde=math.inf, n=4))])
    assert t.verdict.iloc[0] == "not resolved (no effect detectable at n = 4)"
    with pytest.raises(ValueError, match="expected_sign"):
        Claim("x", "+", 0, True, {})
    assert claims_table([]).empty


def test_render_claims_formats_for_the_page():
    claims = [Claim("memory helps", "+1.9 pp", +1, True, _r(0.12, 0.2, -0.03, 0.27, mde=0.31)),
              Claim("fewer steps", "−3 steps", -1, False, {"difference": -12.5, "ci_low": -20.5, "ci_high": -4.0,
                                                           "p": 0.004, "mde": 8.0, "n": 30, "n_clusters": 10})]
    r = render_claims(claims)
    assert r["measured [95% CI]"].tolist() == ["+0.12 [−0.03, +0.27]", "−12.5 [−20.5, −4.0]"]
    assert r.verdict.tolist() == ["not resolved (MDE ±0.31)", "supported"]
    assert r["p"].tolist() == ["0.20", "0.004"] and r["p (Holm)"].tolist() == ["—", "0.004"]
    assert r["MDE"].tolist() == ["±0.31", "±8.00"] and r.n.tolist() == ["20", "30 (10 clusters)"]
    assert render_claims(claims_table(claims)).equals(r)
    assert "note" not in r             # no row has one: the page keeps the width for the others
    noted = render_claims(claims + [Claim("x", "—", +1, False, _r(0.1, 0.5, n=1), note="one task")])
    assert noted["note"].tolist() == ["", "", "one task"]


def test_an_undetectable_effect_names_n_as_an_integer():
    from skillbook.analysis import Claim, claims_table
    t = claims_table([Claim("c", "+1 pp", 1, True, {"difference": 0.0, "ci_low": -1.0, "ci_high": 1.0, "p": 1.0,
                                                    "mde": float("inf"), "n_tasks": 4})])
    assert t.verdict[0] == "not resolved (no effect detectable at n = 4)"


def test_a_claim_without_an_estimate_or_interval_says_why():
    # Real case (chapter 08, workshop run): the 1.5B judge gave runs A and B the same probability on every
    # gold window, so judge credit was +0 on all 246 unsaturated windows, and the credit macros took the same
    # steps as no memory on all 6 test tasks. Seven rows read "not resolved (MDE n/a)" with an empty note,
    # in chapter 08 and in chapter 10's table of every claim.
    from skillbook.analysis import paired_difference, spearman_ci
    judge = pd.Series([0.0] * 246, name="judge_neutral")
    replay = pd.Series(np.linspace(-1, 1, 246), name="replay_neutral")
    rho = spearman_ci(judge, replay, groups=np.arange(246) // 20)
    assert np.isnan(rho["rho"]) and rho["note"] == ("judge_neutral is +0 on all 246 pairs: a constant has no rank "
                                                    "correlation, ρ is undefined")
    assert "note" not in spearman_ci(replay, replay ** 3, groups=np.arange(246) // 20)   # defined: no note
    assert spearman_ci([1.0, 2.0], [2.0, 1.0])["note"].startswith("2 pairs with both values")
    steps = pd.DataFrame({"task_id": [f"t{i}" for i in range(6)] * 2, "condition": ["none"] * 6 + ["credit"] * 6,
                          "steps": [7, 20, 20, 9, 20, 12] * 2})
    same = paired_difference(steps, "condition", "none", "credit", "steps")
    assert same["note"] == "the steps difference is +0 on every one of the 6 tasks: no spread, so no interval or MDE"
    t = claims_table([Claim("judge credit tracks replay credit", "assumed", +1, True, rho),
                      Claim("credit macros need fewer steps", "fewer steps", -1, False, same),
                      Claim("own note wins", "—", -1, False, same, note="said by the chapter")])
    assert t.verdict.tolist()[:2] == ["not resolved (MDE n/a)"] * 2
    assert t.note.tolist() == [rho["note"], same["note"], "said by the chapter"]
    spread = steps.assign(steps=[7, 20, 20, 9, 20, 12] + [6, 20, 18, 9, 20, 11])
    assert "note" not in paired_difference(spread, "condition", "none", "credit", "steps")


def test_checks_of_the_book_s_tools_are_their_own_holm_family():
    # Real case (chapter 06): the planted simulation's two lines (p ≈ 0 over 300 simulated libraries) sat in
    # one Holm family with the test-task contrasts, so a claim of the paper was adjusted for checks of the
    # book's own simulation, and the other way round.
    claims = [Claim("s1", "+5 pp", +1, False, _r(0.20, 0.02, 0.05, 0.35)),
              Claim("s2", "+3 pp", +1, False, _r(0.15, 0.04, 0.01, 0.3)),
              Claim("sim", "assumed", +1, False, _r(0.08, 1e-6, n=300), unit="libraries", kind="check")]
    t = claims_table(claims).set_index("claim")
    # the papers' family is s1, s2 only: 0.02·2 = 0.04, max(0.04·1, 0.04) = 0.04
    assert t.loc[["s1", "s2"], "p_holm"].tolist() == pytest.approx([0.04, 0.04])
    assert t.loc["s1", "verdict"] == "supported" and t.loc["s2", "verdict"] == "supported"
    assert t.loc["sim", "p_holm"] == pytest.approx(1e-6) and t.loc["sim", "kind"] == "check"


def test_the_page_names_the_kind_only_when_a_check_is_in_the_table_and_says_one_task():
    plain = render_claims([Claim("x", "+", +1, True, _r(0.1, 0.5, n=1), unit="tasks")])
    assert "kind" not in plain.columns and plain.n[0] == "1 task"
    mixed = render_claims([Claim("x", "+", +1, True, _r(0.1, 0.5, n=9), unit="games"),
                           Claim("sim", "+", +1, False, _r(0.1, 0.01, n=300), unit="libraries", kind="check")])
    assert mixed.columns[:3].tolist() == ["claim", "role", "kind"]
    assert mixed.kind.tolist() == ["paper", "check"] and mixed.n.tolist() == ["9 games", "300 libraries"]
