"""Independent units: repeated games are one unit, and a verdict is computed over games (issue 34)."""
import itertools

import numpy as np
import pandas as pd
import pytest

from skillbook.analysis import Claim, claims_table, paired_difference, render_claims, sign_flip_test


def _repeated_games_run(copies=(20, 20, 19, 18, 17, 16, 14, 14), flips=(1, 1, 1, 0, 0, 0, 0, 0)):
    """A run like chapter 09's: few games, each repeated as many seeds, deterministic agents (the same
    outcome on every copy of a game). Memory wins on the games marked 1 and changes nothing elsewhere."""
    rows = []
    for g, (n, win) in enumerate(zip(copies, flips)):
        for i in range(n):
            t = f"twx/coin/test/{g * 100 + i}"
            rows += [{"task_id": t, "condition": "none", "success": 0, "game": f"g{g}"},
                     {"task_id": t, "condition": "memory", "success": win, "game": f"g{g}"}]
    return pd.DataFrame(rows)


def test_per_seed_mcnemar_would_call_three_games_significant_but_the_verdict_is_over_games():
    df = _repeated_games_run()
    units = df.drop_duplicates("task_id").set_index("task_id")["game"]
    per_seed = paired_difference(df, "condition", "none", "memory")
    assert per_seed["p"] < 1e-10            # 59 discordant seeds, all one way: 'significant' per seed
    by_game = paired_difference(df, "condition", "none", "memory", units=units)
    assert by_game["n_units"] == 8 and by_game["n_tasks"] == len(units)
    assert by_game["difference"] == pytest.approx(per_seed["difference"])   # the same estimand
    # three games of eight moved, all one way: exact sign-flip p = 2 · 1/2^3 (the five zero games do not
    # change |S|) = 0.25
    assert by_game["p"] == pytest.approx(0.25)
    assert by_game["test"] == "exact sign-flip over games"
    # the tasks' 2×2 table stays as a description (chapters quote it), not as the test
    assert (by_game["only_b"], by_game["only_a"]) == (per_seed["only_b"], per_seed["only_a"]) == (59, 0)
    table = claims_table([Claim("memory helps", "+", +1, True, by_game)])
    assert table.verdict[0].startswith("not resolved")
    assert render_claims(table)["n"][0] == f"8 games ({len(units)} tasks)"


def test_distinct_units_keep_the_per_task_test_and_say_so():
    df = _repeated_games_run(copies=(1,) * 12, flips=(1,) * 9 + (0,) * 3)
    units = df.drop_duplicates("task_id").set_index("task_id")["game"]
    plain = paired_difference(df, "condition", "none", "memory")
    r = paired_difference(df, "condition", "none", "memory", units=units)
    assert r["p"] == plain["p"] and r["test"] == "exact McNemar" and r["n_units"] == 12
    assert render_claims(claims_table([Claim("x", "+", +1, True, r)]))["n"][0] == "12 games"


def test_a_task_without_a_unit_is_an_error_naming_it():
    df = _repeated_games_run()
    with pytest.raises(ValueError, match="no unit for"):
        paired_difference(df, "condition", "none", "memory", units={"twx/coin/test/0": "g0"})


def test_sign_flip_is_exact_against_brute_force():
    rng = np.random.default_rng(3)
    totals, sizes = rng.integers(-5, 6, 9).astype(float), rng.integers(1, 6, 9).astype(float)
    r = sign_flip_test(totals, sizes)
    observed = abs(totals.sum())
    hits = sum(abs(sum(s * t for s, t in zip(signs, totals))) >= observed - 1e-12
               for signs in itertools.product((-1, 1), repeat=9))
    assert r["p"] == pytest.approx(hits / 2 ** 9) and r["exact"]
    assert r["estimate"] == pytest.approx(totals.sum() / sizes.sum())
    # the interval inverts the test: its edges are where p crosses 0.05
    assert r["ci_low"] <= r["estimate"] <= r["ci_high"]
    inside = sign_flip_test(totals - sizes * (r["ci_low"] + 1e-6), sizes)["p"]
    assert inside > 0.05


def test_five_units_can_never_reject():
    r = sign_flip_test([1.0, 2.0, 3.0, 1.0, 2.0])
    assert r["p"] == pytest.approx(2 / 32) and r["p"] > 0.05


def test_too_few_units_give_an_unbounded_interval_not_the_range_of_their_means():
    # chapter 11's three self streams (self − none totals over 136 games each): with 3 units the smallest
    # attainable p is 0.25, so no θ is rejected at 0.05 and the 95% interval is the whole line. It was
    # reported as the range of the per-stream means, [−0.287, −0.213], read as a 95% interval.
    totals, sizes = [-39.0, -36.0, -29.0], [136.0, 136.0, 136.0]
    r = sign_flip_test(totals, sizes)
    assert r["p"] == pytest.approx(0.25)
    assert r["ci_low"] == -np.inf and r["ci_high"] == np.inf
    # bounded by the parameter's own range when the caller gives it (a difference of success rates)
    r = sign_flip_test(totals, sizes, bounds=(-1.0, 1.0))
    assert (r["ci_low"], r["ci_high"]) == (-1.0, 1.0)
    # the same when every unit has one mean: 3 units reject nothing, 6 reject every other value
    r = sign_flip_test([-30.0, -30.0, -30.0], [136.0] * 3)
    assert r["ci_low"] == -np.inf and r["ci_high"] == np.inf
    r = sign_flip_test([-30.0] * 6, [136.0] * 6)
    assert r["ci_low"] == r["ci_high"] == pytest.approx(-30 / 136)
    # enough units to reject outside their range: the interval stays finite and inside it
    r = sign_flip_test([-39.0, -36.0, -29.0, -30.0, -35.0, -33.0], [136.0] * 6)
    assert -39 / 136 <= r["ci_low"] < r["ci_high"] <= -29 / 136


def test_many_units_use_a_fixed_sample_of_sign_patterns():
    x = np.r_[np.ones(30), -np.ones(10)]
    a, b = sign_flip_test(x), sign_flip_test(x)
    assert not a["exact"] and a["p"] == b["p"] and 0 < a["p"] < 0.01


def test_claim_kind_is_checked_and_tabled():
    with pytest.raises(ValueError, match="kind must be one of paper, check"):
        Claim("x", "+", +1, True, {}, kind="tool")
    t = claims_table([Claim("recovers the planted effect", "", +1, True, {"estimate": 1, "p": 0.01, "n": 300},
                            unit="libraries", kind="check")])
    assert t.kind[0] == "check" and render_claims(t)["n"][0] == "300 libraries"


def test_coin_with_two_rooms_generates_sixteen_games(tmp_path, monkeypatch):
    """The real case: TextWorldExpress coin, two rooms, no distractors — its 1,000 test seeds are 16 games
    (the first 400 only 8 of them), read from the simulator and cached per user; ScienceWorld variations
    are their own units."""
    from skillbook.envs import unit_counts, units
    monkeypatch.setenv("SKILLBOOK_CACHE", str(tmp_path))
    options = {"twx": {"game_params": {"coin": {"numLocations": 2, "numDistractorItems": 0, "includeDoors": 0,
                                                "limitInventorySize": 0}}}}
    ids = [f"twx/coin/test/{i}" for i in range(1000)]
    u = units(ids, options, progress=False)
    assert u.nunique() == 16 and list(u.index) == ids
    assert u[:400].nunique() == 8 and unit_counts(u).tasks.sum() == 1000
    assert units(ids[:5], options, progress=False).equals(u[:5])      # from the cache, the same
    assert units(["sciworld/boil/test/0"], progress=False).tolist() == ["sciworld/boil/test/0"]


def test_units_are_named_by_benchmark():
    from skillbook.envs import unit_name
    assert unit_name(["twx/coin/test/0", "twx/twc/test/3"]) == "games"
    assert unit_name(["sciworld/boil/test/0"]) == "variations"
    assert unit_name(["tau2/retail/test/1"]) == "tasks"
    assert unit_name(["twx/coin/test/0", "sciworld/boil/test/0"]) == "units"


def test_units_of_a_random_walk_game_are_the_same_in_every_jvm(tmp_path, monkeypatch):
    """The real case: coin with three rooms, whose package gold path is a random walk seeded from the
    clock; a unit digest over that path counted one game as several, and differently each time."""
    from skillbook.envs import units
    options = {"twx": {"game_params": {"coin": {"numLocations": 3, "numDistractorItems": 0,
                                                "includeDoors": 0, "limitInventorySize": 0}}}}
    ids = [f"twx/coin/dev/{i}" for i in range(60)]
    runs = []
    for k in range(2):
        monkeypatch.setenv("SKILLBOOK_CACHE", str(tmp_path / str(k)))     # computed afresh each time
        runs.append(units(ids, options, progress=False))
    assert runs[0].equals(runs[1])
    assert runs[0].nunique() < len(ids)        # 60 seeds of a 3-room setting repeat games


def test_distinct_games_can_open_on_the_same_text():
    """The real case: the second study's setting (coin, three rooms, two distractor items); its distinct
    test games open on fewer texts (the same first room, the coin elsewhere). Other benchmarks: the task."""
    from skillbook.envs import openings, units
    options = {"twx": {"game_params": {"coin": {"numLocations": 3, "numDistractorItems": 2, "includeDoors": 0,
                                                "limitInventorySize": 0}}}}
    ids = [f"twx/coin/test/{i}" for i in range(80)]
    games = units(ids, options, progress=False).drop_duplicates().index
    first = openings(games, options)
    assert list(first.index) == list(games) and first.str.startswith("twx/coin/opening-").all()
    assert first.nunique() < len(games)
    assert openings(games, options).equals(first)                  # the same in another JVM
    assert openings(["sciworld/boil/test/0"]).tolist() == ["sciworld/boil/test/0"]
