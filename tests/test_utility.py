"""Skill utility and transfer density on hand-computed cases (the first paper, §6)."""
from math import comb

import numpy as np
import pytest

from skillbook.papers.breakdown.density import bin_of, reuse_frequency, reuse_matrix, transfer_density
from skillbook.papers.breakdown.utility import (
    abstractness,
    bucket_success,
    specificity,
    specificity_sampled,
    split_at_median,
    success_slope,
    utility,
)
from skillbook.records import Episode


def tasks(n=6, seed=0):
    rng = np.random.default_rng(seed)
    v = rng.normal(size=(n, 8))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v @ v.T


def test_uniform_similarities_give_abstractness_one():
    assert abstractness(np.full(7, 0.42)) == pytest.approx(1.0)
    assert abstractness(np.zeros(100), tau=0.5) == pytest.approx(1.0)


def test_one_hot_similarities_give_abstractness_one_over_n():
    c = np.zeros(20)
    c[3] = 1.0                        # softmax(c / 0.1) puts e^10 / (e^10 + 19) ≈ 0.999 on one task
    assert abstractness(c) == pytest.approx(1 / 20, rel=0.02)
    assert abstractness(c) > 1 / 20   # never below the one-task floor


def test_abstractness_hand_computed_two_tasks():
    # softmax([0, ln 3 · τ] / τ) = [1/4, 3/4]; H = -(1/4 ln 1/4 + 3/4 ln 3/4)
    tau = 0.1
    c = np.array([0.0, np.log(3) * tau])
    h = -(0.25 * np.log(0.25) + 0.75 * np.log(0.75))
    assert abstractness(c, tau) == pytest.approx(np.exp(h) / 2)


def test_skill_closer_to_its_best_task_than_any_task_pair_has_specificity_one():
    t = tasks()
    off = t[~np.eye(6, dtype=bool)]
    c = np.full(6, -0.5)
    c[2] = off.max() + 0.01
    assert specificity(c, t) == 1.0


def test_specificity_counts_ordered_pairs_exactly():
    t = np.array([[1.0, 0.2, 0.5],
                  [0.2, 1.0, 0.8],
                  [0.5, 0.8, 1.0]])   # ordered pairs: 0.2, 0.2, 0.5, 0.5, 0.8, 0.8
    assert specificity(np.array([0.1, 0.3, 0.0]), t) == pytest.approx(2 / 6)   # max 0.3 ≥ 0.2 only
    assert specificity(np.array([0.5, 0.0, 0.0]), t) == pytest.approx(4 / 6)   # ties count (≥)
    assert specificity(np.array([0.0, 0.0, 0.1]), t) == 0.0


def test_utility_is_the_product_and_vectorised_rows_match():
    t = tasks(10, seed=1)
    rng = np.random.default_rng(2)
    c = rng.uniform(-0.2, 0.9, size=(5, 10))
    u = utility(c, t)
    assert u.shape == (5,)
    for row, value in zip(c, u):
        assert value == pytest.approx(specificity(row, t) * abstractness(row))
    assert isinstance(utility(c[0], t), float)


def test_sampled_specificity_approximates_exact():
    t = tasks(40, seed=3)
    c = np.random.default_rng(4).uniform(-0.3, 0.8, size=40)
    assert specificity_sampled(c, t, n_pairs=200_000, seed=0) == pytest.approx(specificity(c, t), abs=0.01)


def test_bad_shapes_are_named():
    with pytest.raises(ValueError, match="4×4"):
        specificity(np.zeros(4), np.zeros((3, 3)))
    with pytest.raises(ValueError, match="tau"):
        abstractness(np.zeros(3), tau=0)


def test_transfer_density_full_and_empty_triangles():
    n = 7
    assert transfer_density(np.triu(np.ones((n, n), bool), k=1)) == 1.0
    assert transfer_density(np.zeros((n, n), bool)) == 0.0
    # the diagonal and lower triangle are not transfer to a later bin
    assert transfer_density(np.tril(np.ones((n, n), bool))) == 0.0
    r = np.zeros((5, 5), bool)
    r[0, 3] = r[1, 2] = True
    assert transfer_density(r) == pytest.approx(2 / comb(5, 2))
    with pytest.raises(ValueError, match="square"):
        transfer_density(np.zeros((3, 4)))


def ep(position, written=(), retrieved=(), success=False):
    return Episode(task_id=f"twx/coin/test/{position}", env="twx", task_type="coin", split="test", agent="subtask",
                   memory="text", position=position, written=list(written), retrieved=list(retrieved), success=success)


def test_reuse_matrix_from_records():
    episodes = [ep(0, written=["a"]), ep(1, written=["b"], retrieved=["a"]), ep(2, retrieved=["a", "b", "a"]),
                ep(3, written=["a"], retrieved=["a"]),      # a merge re-writes "a": its birth stays at 0
                ep(4, retrieved=["zz"])]                     # a skill never written in this stream is no transfer
    r = reuse_matrix(episodes)
    assert r.shape == (5, 5)                                 # 5 tasks: fewer bins than the default 50
    assert {tuple(ij) for ij in np.argwhere(r)} == {(0, 1), (0, 2), (1, 2), (0, 3)}
    assert transfer_density(r) == pytest.approx(4 / 10)
    r2 = reuse_matrix(episodes, n_bins=2)                    # positions 0-2 → bin 0, 3-4 → bin 1
    assert r2.tolist() == [[False, True], [False, False]]
    freq = reuse_frequency(episodes).set_index("skill_id")["later_tasks"]
    assert freq.to_dict() == {"a": 3, "b": 1}
    assert [bin_of(p, 100, 50) for p in (0, 1, 2, 99)] == [0, 0, 1, 49]


def test_split_at_median_keeps_the_median_skill_high():
    import pandas as pd

    from skillbook.skills.library import SkillLibrary
    from skillbook.skills.record import Skill

    lib = SkillLibrary()   # nothing is embedded: adding and filtering only copy records
    for i in range(5):
        lib.add(Skill(id=f"s{i}", description=f"d{i}", body="", format="text"))
    scores = pd.DataFrame({"skill_id": [f"s{i}" for i in range(5)], "utility": [0.1, 0.5, 0.3, 0.3, 0.9]})
    high, low = split_at_median(lib, scores)
    assert set(high.skills) == {"s4", "s1", "s2"} and set(low.skills) == {"s3", "s0"}


def test_buckets_and_slope_see_a_planted_trend():
    import pandas as pd
    rng = np.random.default_rng(0)
    u = rng.uniform(0, 1, 300)
    df = pd.DataFrame({"task_id": [f"t{i}" for i in range(300)], "utility": u,
                       "success": (rng.uniform(0, 1, 300) < u).astype(float)})
    b = bucket_success(df, "utility", n_buckets=3)
    assert b["n"].sum() == 300 and b["success"].is_monotonic_increasing
    assert (b["successes"] == (b["success"] * b["n"]).round()).all()
    s = success_slope(df, "utility")
    assert s["ci_low"] > 0 and s["n_clusters"] == 300 and s["p"] < 0.001 and s["mde"] > 0
    flat = success_slope(df.assign(success=(rng.uniform(0, 1, 300) < 0.5).astype(float)), "utility")
    assert flat["ci_low"] < 0 < flat["ci_high"]


def test_bucket_intervals_are_wilson_intervals_valid_at_small_n():
    """The real case: chapter 05's buckets of a handful of episodes, all failed, had the bootstrap
    interval [0, 0] — certainty from three coin flips. Wilson's interval is not degenerate."""
    import pandas as pd
    df = pd.DataFrame({"utility": [0.1, 0.2, 0.3, 0.7, 0.8, 0.9], "success": [0, 0, 0, 1, 1, 0]})
    b = bucket_success(df, "utility", n_buckets=2).set_index("bucket")
    assert b.loc[1, "successes"] == 0 and b.loc[1, "ci_low"] == 0
    assert b.loc[1, "ci_high"] == pytest.approx(0.5615, abs=1e-4)      # Wilson 95% upper limit of 0/3
    assert b.loc[2, "success"] == pytest.approx(2 / 3)
    assert (b.loc[2, "ci_low"], b.loc[2, "ci_high"]) == pytest.approx((0.2077, 0.9385), abs=1e-4)


def test_slope_clusters_by_task_so_repeated_episodes_do_not_narrow_it():
    """Episodes of one task recorded by several runs (e.g. E.2 and E.4 replaying the same library) are one
    observation: an episode-level interval shrinks by √2 when every episode is counted twice, the
    task-clustered one does not."""
    import pandas as pd
    rng = np.random.default_rng(3)
    u = rng.uniform(0, 1, 60)
    df = pd.DataFrame({"task_id": [f"t{i}" for i in range(60)], "utility": u,
                       "success": (rng.uniform(0, 1, 60) < u).astype(float)})
    once, twice = success_slope(df, "utility"), success_slope(pd.concat([df, df]), "utility")
    assert twice["n"] == 120 and twice["n_clusters"] == 60 and twice["slope"] == pytest.approx(once["slope"])
    assert twice["ci_high"] - twice["ci_low"] == pytest.approx(once["ci_high"] - once["ci_low"], rel=0.02)
    few = success_slope(df.head(2), "utility")
    assert np.isnan(few["slope"]) and "too few" in few["note"]


def test_task_texts_append_the_first_observation_and_name_valid_kinds():
    from skillbook.envs import task_texts
    with pytest.raises(ValueError, match="instruction, instruction\\+observation, observation\\+instruction"):
        task_texts(["twx/simonsays/test/0"], kind="goal")
    ids = ["twx/twc/test/0", "twx/twc/test/1"]
    opts = {"twx": {"game_params": {"twc": "numLocations=1,numItemsToPutAway=1,includeDoors=0,limitInventorySize=0"}}}
    plain = task_texts(ids, opts, kind="instruction")
    full = task_texts(ids, opts)
    assert plain[ids[0]] == plain[ids[1]]                     # one instruction sentence per game
    assert full[ids[0]] != full[ids[1]] and all(full[t].startswith(plain[t] + "\n") for t in ids)


def test_slope_within_task_types_removes_a_confound():
    import pandas as pd
    # the score only tells the easy type (high score, always solved) from the hard one (low score, never)
    rng = np.random.default_rng(1)
    df = pd.DataFrame({"task_id": [f"t{i}" for i in range(100)], "task_type": ["easy"] * 50 + ["hard"] * 50,
                       "utility": np.r_[rng.uniform(0.6, 1, 50), rng.uniform(0, 0.4, 50)],
                       "success": [1.0] * 25 + [0.0] * 25 + [1.0] * 5 + [0.0] * 45})
    df["success"] = rng.permutation(df["success"][:50]).tolist() + rng.permutation(df["success"][50:]).tolist()
    assert success_slope(df, "utility")["ci_low"] > 0
    within = success_slope(df, "utility", within="task_type")
    assert within["within"] == "task_type" and within["ci_low"] < 0 < within["ci_high"]


# The workshop's subtask-code stream as recorded (runs/workshop/transfer/subtask-code): per position the ids
# its episode wrote and retrieved, and the library's overwrite events, from before overwrites kept the id.
REAL_WRITTEN = {0: ["c0001"], 1: ["c0002"], 2: ["c0003", "c0004", "c0005", "c0006"], 3: ["c0007", "c0008", "c0009"],
                4: [], 5: ["c0012", "c0013"], 6: ["c0014", "c0015", "c0016"], 7: ["c0017"], 8: ["c0018", "c0020"]}
REAL_RETRIEVED = {2: ["c0004", "c0005"], 3: ["c0001", "c0007", "c0006", "c0008", "c0007", "c0006"],
                  5: ["c0006", "c0012"], 6: ["c0009", "c0007", "c0013", "c0009"]}
REAL_OVERWRITES = [("c0004", "c0003"), ("c0005", "c0004"), ("c0006", "c0005"), ("c0007", "c0001"),
                   ("c0009", "c0008"), ("c0012", "c0006"), ("c0013", "c0012"), ("c0014", "c0007"),
                   ("c0018", "c0013"), ("c0020", "c0018")]


def test_reuse_is_counted_per_skill_identity_in_records_from_before_overwrites_kept_the_id():
    """The real case (issue 13): subtask-code 'wrote' 17 skills (10 of them overwrites) against 9 for
    text, which made E.5's verdict. Per identity it wrote 7, reused by 6/7 later tasks each on average."""
    from skillbook.papers.breakdown.hygiene import identities
    from skillbook.skills.library import SkillLibrary
    episodes = [Episode(task_id=f"twx/twc/test/{p}", env="twx", task_type="twc", split="test", agent="subtask",
                        memory="code", position=p, written=REAL_WRITTEN[p], retrieved=REAL_RETRIEVED.get(p, []))
                for p in range(9)]
    lib = SkillLibrary()
    for new, old in REAL_OVERWRITES:
        lib.log("overwritten", skill=new, replaced=old, function="f")
    ident = identities(lib)
    assert ident["c0003"] == ident["c0013"] == "c0020" and ident["c0001"] == "c0014" and ident["c0008"] == "c0009"
    assert len(reuse_frequency(episodes)) == 17                              # the bug: one "skill" per version
    freq = reuse_frequency(episodes, ident).set_index("skill_id")
    assert freq["writes"].to_dict() == {"c0014": 3, "c0002": 1, "c0020": 8, "c0009": 2, "c0015": 1, "c0016": 1,
                                        "c0017": 1}
    assert freq["born"].to_dict() == {"c0014": 0, "c0002": 1, "c0020": 2, "c0009": 3, "c0015": 6, "c0016": 6,
                                      "c0017": 7}
    assert freq["later_tasks"].to_dict() == {"c0014": 2, "c0002": 0, "c0020": 3, "c0009": 1, "c0015": 0,
                                             "c0016": 0, "c0017": 0}
    r = reuse_matrix(episodes, identity=ident)
    assert {tuple(ij) for ij in np.argwhere(r)} == {(0, 3), (0, 6), (2, 3), (2, 5), (2, 6), (3, 6)}


def test_a_stream_of_code_overwrites_writes_one_skill(tmp_path, fake_env):
    """The same case run through the agent: a code memory whose model writes the same function after every
    task keeps one skill, written (as recorded in the episodes) under one id, with every version."""
    from fakes import FakeCoder
    from skillbook.agent import AgentConfig
    from skillbook.papers.breakdown import InducedMemory
    from skillbook.run import Condition, run_condition
    llm = FakeCoder(names=["open_door"])
    tasks = [f"fake/fetch/dev/{i}" for i in range(4)]
    c = Condition("c", AgentConfig(level="subtask", max_steps=6, n_examples=0),
                  lambda: InducedMemory(llm, "code", threshold=0.0),
                  stream=True)
    eps = run_condition(tmp_path, llm, c, tasks).episodes
    assert [e.written for e in eps] == [["c0001"]] * 4 and all(e.retrieved == ["c0001"] for e in eps[1:])
    from skillbook.papers.breakdown import library_of
    lib = library_of(tmp_path)
    (skill,) = lib
    assert skill.id == "c0001" and skill.extra["version"] == 4 and len(skill.extra["lineage"]) == 3
    assert skill.stats["retrievals"] == 3 and skill.created_at == 0 and skill.extra["written_at"] == 3
    freq = reuse_frequency(eps)
    assert freq.to_dict("records") == [{"skill_id": "c0001", "born": 0, "writes": 4, "later_tasks": 3}]


def test_library_comparisons_use_exact_permutation_p_values_at_small_n():
    """The real case: in the smoke run, 2 task-text skills against 3 subtask-text skills gave a bootstrap
    p < 0.001 for the median-utility difference — 'contradicted' from five numbers. Five values have 10
    relabellings into 2 + 3, so no test of them can give p below 2/10."""
    from skillbook.analysis import bootstrap_difference
    from skillbook.papers.breakdown.utility import permutation_difference, spearman_permutation
    a, b = [0.46, 0.47], [0.38, 0.39, 0.40]
    assert bootstrap_difference(a, b)["p"] < 0.001
    d = permutation_difference(a, b)
    assert d["difference"] == pytest.approx(0.39 - 0.465) and d["test"] == "permutation"
    assert d["p"] == pytest.approx(0.2) and d["ci_high"] < 0                # the interval is kept
    assert permutation_difference(a, b, stat="mean")["difference"] == pytest.approx(0.39 - 0.465)
    with pytest.raises(ValueError, match="'median' or 'mean'"):
        permutation_difference(a, b, stat="mode")
    r = spearman_permutation([1, 2, 3, 4], [10, 20, 30, 40])
    assert r["rho"] == pytest.approx(1.0) and r["p"] == pytest.approx(2 / 24)   # 4! orderings, two as extreme


def test_a_constant_outcome_has_no_slope_to_test():
    """The real case: in the smoke run no episode succeeded; the slope came out 0 with interval [0, 0] and
    MDE 0 — a certainty the data cannot give."""
    import pandas as pd
    df = pd.DataFrame({"task_id": ["a", "a", "b", "c", "d"], "utility": [0.1, 0.2, 0.3, 0.4, 0.5],
                       "success": [0.0] * 5})
    s = success_slope(df, "utility")
    assert np.isnan(s["slope"]) and np.isnan(s["mde"]) and "success = 0.0" in s["note"]
