"""Issue 17: the planted-effects simulation through Assay's own attribution and restructuring decisions."""
import numpy as np
import pytest

from skillbook.papers.assay.pipeline import AssaySettings
from skillbook.papers.assay.simulate import GRID, METRICS, kind_counts, plant, simulate_cell, simulate_grid


def test_planted_library_has_the_stated_kinds():
    assert kind_counts(10) == {"null": 6, "helpful": 1, "harmful": 1, "heterogeneous": 2}
    assert kind_counts(20) == {"null": 12, "helpful": 2, "harmful": 2, "heterogeneous": 4}
    assert sum(kind_counts(3).values()) == 3
    lib = plant(20, 3, 1.5, np.random.default_rng(0))
    by = {k: lib.effects[[i for i, x in enumerate(lib.kinds) if x == k]] for k in set(lib.kinds)}
    assert (by["null"] == 0).all() and (by["helpful"] == 1.5).all() and (by["harmful"] == -1.5).all()
    assert all((row > 0).any() and (row < 0).any() for row in by["heterogeneous"])   # helps somewhere, hurts elsewhere
    with pytest.raises(ValueError, match="at least 2 task types"):
        plant(10, 1, 1.5, np.random.default_rng(0))
    with pytest.raises(ValueError, match="summing to 1"):
        kind_counts(10, shares=(0.5, 0.1, 0.1, 0.1))


def test_enough_masks_recover_the_signs_and_split_only_heterogeneous_skills():
    r = simulate_cell(400, 6, 0.4, n_skills=10, reps=20, settings=AssaySettings(max_split=2))
    assert r["sign_recovery"] > 0.95 and r["row_sign"] == 1.0
    assert r["false_split"] == 0 and r["split_recall"] > 0.8 and r["false_retire"] < 0.05
    assert simulate_cell(400, 6, 0.4, n_skills=10, reps=20, settings=AssaySettings(max_split=2)) == r   # seeded


def test_more_dev_tasks_need_more_masks_before_H_stops_flagging_null_skills():
    """H is a range over M cells: at a fixed K its noise grows with M, and only more masks shrink it."""
    s = AssaySettings(max_split=2)
    few, many = (simulate_cell(12, m, 0.4, n_skills=10, reps=60, settings=s) for m in (3, 30))
    assert many["null_flagged"] > few["null_flagged"] + 0.3
    assert simulate_cell(64, 12, 0.4, n_skills=10, reps=60, settings=s)["null_flagged"] < 0.2 < \
        simulate_cell(6, 12, 0.4, n_skills=10, reps=60, settings=s)["null_flagged"]
    assert simulate_cell(64, 12, 0.4, n_skills=10, reps=60, settings=s)["sign_recovery"] > \
        simulate_cell(6, 12, 0.4, n_skills=10, reps=60, settings=s)["sign_recovery"] + 0.2


def test_the_pipeline_settings_decide():
    """The decisions are the pipeline's: no split above every possible H, everything unsplit retired below τ."""
    r = simulate_cell(12, 3, 0.4, n_skills=10, reps=10, settings=AssaySettings(tau_split=3.0, tau_retire=2.0))
    assert r["false_split"] == r["split_recall"] == 0 and np.isnan(r["split_fdp"])
    assert r["null_retired"] == r["false_retire"] == 1.0


def test_grid_and_errors():
    g = simulate_grid(Ks=(6, 12), Ms=(3,), fs=(0.4,), n_skills=6, reps=5)
    assert list(g[["K", "M", "f"]].itertuples(index=False, name=None)) == [(6, 3, 0.4), (12, 3, 0.4)]
    assert set(METRICS) <= set(g.columns) and list(g["trials"]) == [18, 36]
    assert GRID == {"K": (6, 12, 32, 64), "M": (3, 12, 30), "f": (0.2, 0.4)}
    for bad, message in ((dict(K=1), "K must be an integer ≥ 2"), (dict(M=0), "M \\(dev tasks\\)"),
                         (dict(f=0.0), "f must be in"), (dict(reps=0), "reps")):
        with pytest.raises(ValueError, match=message):
            simulate_cell(**{"K": 6, "M": 3, "f": 0.4, **bad})


def test_recovery_claim_tests_the_sign_recovery_of_the_same_draws_against_a_coin():
    """Issue 17 asks for a claims-table line for the planted simulation: per planted library, the share of
    right signs minus 1/2, tested across libraries (the t test that matches its interval: see the next test)."""
    from skillbook.papers.assay.simulate import recovery_claim
    strong = recovery_claim(64, 30, 0.4, reps=30, n_skills=12)
    assert strong["n"] == 30 and strong["p"] < 0.001 and strong["ci_low"] > 0.2
    assert strong["estimate"] == pytest.approx(simulate_cell(64, 30, 0.4, reps=30, n_skills=12)["sign_recovery"] - 0.5)
    # an effect too small to find: the signs do no better than a coin
    faint = recovery_claim(6, 3, 0.2, reps=40, n_skills=12, effect=0.01)
    assert faint["p"] > 0.05 or faint["estimate"] <= 0
    # nothing planted at all: no cell has a sign to recover, so there is nothing to test
    none = recovery_claim(6, 3, 0.2, reps=5, n_skills=12, effect=0.0)
    assert none["n"] == 0 and np.isnan(none["p"])
    assert set(strong) >= {"estimate", "ci_low", "ci_high", "p", "n", "test"}
    # its units are simulated libraries, whose number is a parameter: a check of the book's tools
    assert strong["unit"] == none["unit"] == "libraries"


@pytest.mark.parametrize("design", [dict(K=6, M=1, f=0.4, n_skills=9), dict(K=6, M=3, f=0.2, n_skills=12),
                                    dict(K=12, M=3, f=0.4, n_skills=12, effect=0.3)])
def test_the_recovery_interval_and_test_agree(design):
    # Real case (chapter 06, τ²-bench's design: one dev task): −0.12 [−0.17, −0.08] beside sign-test p = 0.09
    # and "not resolved" — a mean's t interval next to a median's test. Now both come from the t test.
    from skillbook.papers.assay.simulate import recovery_claim
    r = recovery_claim(reps=120, **design)
    assert r["ci_low"] <= r["estimate"] <= r["ci_high"]
    assert (r["ci_low"] <= 0 <= r["ci_high"]) == (r["p"] >= 0.05), r
