"""The second study's machinery (issue 36) on the FAKE world and model — control flow only: which games
each stream gets, that the gold libraries are built once and refused when stale, that a run resumes."""
import json

import pytest

from fakes import FakeModel
from skillbook.llm import ResponseCache
from skillbook.papers.breakdown.ceiling import CeilingDesign, library_file, load_ceiling, prepare, run_ceiling, subsets


def design(**kw):
    base = dict(env="fake", mix={"count": {}}, placebo_game="fetch", games=4, streams=2, oracle_games=2,
                seeds_searched=12, chunk=2, max_steps=6, max_subtask_steps=4)
    return CeilingDesign(**{**base, **kw})


def test_streams_are_disjoint_subsets_covering_every_game():
    games = [f"g{i}" for i in range(7)]
    parts = subsets(games, 3, seed=1)
    assert sorted(sum(parts, [])) == sorted(games) and [len(p) for p in parts] == [3, 2, 2]
    assert subsets(games, 3, seed=1) == parts != subsets(games, 3, seed=2)


def test_streams_of_a_mix_hold_the_same_share_of_each_game():
    games = [f"twx/{g}/test/{i}" for g in ("coin", "twc", "cookingworld") for i in range(6)]
    parts = subsets(games, 3, seed=0)
    assert sorted(sum(parts, [])) == sorted(games)
    for part in parts:
        assert sorted(t.split("/")[1] for t in part) == ["coin"] * 2 + ["cookingworld"] * 2 + ["twc"] * 2
    one = [f"twx/coin/test/{i}" for i in range(7)]
    assert [len(p) for p in subsets(one, 3)] == [3, 2, 2]


def test_a_mixed_stream_has_half_its_games_of_each_and_the_oracle_learns_from_both_in_turn(fake_env, tmp_path):
    from skillbook.papers.breakdown.ceiling import oracle_tasks, test_games
    d = design(mix={"count": {}, "fetch": {}}, games=4, streams=1, conditions=("none", "oracle", "self"))
    games = test_games(d)
    assert sorted(t.split("/")[1] for t in games) == ["count", "count", "fetch", "fetch"]
    assert [t.split("/")[1] for t in oracle_tasks(d)] == ["count", "fetch", "count", "fetch"]
    model = FakeModel()
    model.cache = ResponseCache.for_run(tmp_path)
    plan = run_ceiling(tmp_path, model, d)
    assert [n for n, _, _ in plan.runs] == ["none", "oracle", "self-1"]
    df = load_ceiling(tmp_path, plan)
    assert df.groupby("condition").task_id.nunique().to_dict() == {"none": 4, "oracle": 4, "self": 4}


def test_bad_designs_are_refused_before_any_model_time():
    with pytest.raises(ValueError, match="outside the mix"):
        design(placebo_game="count")
    with pytest.raises(ValueError, match="split evenly"):
        design(mix={"count": {}, "fetch": {}}, games=5, conditions=("none",))
    with pytest.raises(ValueError, match="names the test stream's games"):
        design(mix="count")
    with pytest.raises(ValueError, match="streams"):
        design(streams=5)
    with pytest.raises(ValueError, match="unknown prompt version"):
        design(prompts="v7")


def test_the_designs_agent_is_the_subtask_level_agent_config_of_every_condition():
    from skillbook.agent import AgentConfig
    d = design(prompts="v2")
    assert d.agent == AgentConfig(level="subtask", max_steps=6, max_subtasks=d.max_subtasks, max_subtask_steps=4,
                                  prompts="v2")
    assert "agent" not in d.settings()                   # the registration's fields, not the property

def test_a_ceiling_run_records_every_stream_and_resumes_with_no_new_call(fake_env, tmp_path):
    model, d = FakeModel(), design()
    model.cache = ResponseCache.for_run(tmp_path)
    plan = run_ceiling(tmp_path, model, d)
    names = [n for n, _, _ in plan.runs]
    assert names == ["none", "oracle", "self-1", "placebo-1", "self-2", "placebo-2"]
    df = load_ceiling(tmp_path, plan)
    per = df.groupby("condition").task_id.nunique()
    assert per.to_dict() == {"none": 4, "oracle": 4, "self": 4, "placebo": 4}
    assert set(df[df.condition == "self"].stream) == {"self-1", "self-2"}
    oracle = json.loads(library_file(tmp_path, "oracle").read_text())
    assert all(t.split("/")[2] == "train" and int(t.split("/")[3]) >= 2 for t in oracle["made_from"]["tasks"])
    calls = len(model.calls)
    run_ceiling(tmp_path, model, d)
    assert len(model.calls) == calls
    with pytest.raises(ValueError, match="built from other settings"):
        prepare(tmp_path, model, design(oracle_games=3))
    games = json.loads((tmp_path / "games.json").read_text())["games"]
    assert sorted(games) == sorted(plan.games) and len(set(games)) == 4
    with pytest.raises(ValueError, match="games of another design"):
        prepare(tmp_path, model, design(games=6))


def test_the_contrasts_are_paired_over_games_and_the_streams_are_a_replicated_treatment():
    import pandas as pd

    from skillbook.analysis import claims_table
    from skillbook.papers.breakdown.ceiling import ceiling_claims, stream_effects
    games = [f"twx/coin/test/{i}" for i in range(12)]
    rows = []
    for i, g in enumerate(games):
        stream = f"self-{1 + i % 3}"
        rows += [{"task_id": g, "condition": "none", "stream": "none", "success": i % 4 == 0},
                 {"task_id": g, "condition": "oracle", "stream": "oracle", "success": i % 2 == 0},
                 {"task_id": g, "condition": "self", "stream": stream, "success": i % 3 == 0},
                 {"task_id": g, "condition": "placebo", "stream": stream.replace("self", "placebo"),
                  "success": False}]
    df = pd.DataFrame(rows)
    claims = ceiling_claims(df)
    assert [c.name for c in claims] == ["oracle − none", "self − none", "self − oracle", "oracle − placebo",
                                        "self − placebo"]
    assert [c.primary for c in claims] == [True, True, True, False, False]
    oracle_none = claims[0].result
    assert oracle_none["difference"] == (6 - 3) / 12 and oracle_none["n_units"] == 12
    table = claims_table(claims)
    assert len(table) == 5
    s = stream_effects(df)
    assert s.stream.tolist() == ["self-1", "self-2", "self-3", "over 3 streams"]
    assert s.games.tolist() == [4, 4, 4, 12]
    assert s.iloc[-1].p >= 0.25                                         # 3 streams can never reject


def test_calibration_runs_on_dev_without_the_placebo_and_bad_settings_are_named(tmp_path):
    from skillbook.papers.breakdown.ceiling import CALIBRATION, calibration_design, main
    d = calibration_design("coin-L3", 20)
    assert d.split == "dev" and d.streams == 1 and d.conditions == ("none", "oracle", "self")
    assert d.placebo_game not in d.mix and d.prompts == "v2"
    mix = calibration_design("mix3", 18)
    assert list(mix.mix) == ["coin", "twc", "cookingworld"] and mix.placebo_game == "sorting"
    with pytest.raises(SystemExit, match="unknown calibration setting 'nope'; valid: " + ", ".join(CALIBRATION)):
        main(["calibrate", "--settings", "coin-L3,nope", "--runs-root", str(tmp_path)])
    assert not (tmp_path / "calibration").exists()                      # refused before anything ran


def test_a_stream_stopped_before_its_first_episode_reads_as_no_episodes(fake_env, tmp_path):
    # Real case: the mix3 calibration stopped as its oracle stream opened; load_ceiling failed on the
    # stream's empty frame ("'DataFrame' object has no attribute 'task_id'")
    import shutil
    model, d = FakeModel(), design(conditions=("none", "oracle"), games=2, streams=1)
    model.cache = ResponseCache.for_run(tmp_path)
    plan = run_ceiling(tmp_path, model, d)
    late = tmp_path / "streams" / "late"                 # what the stopped stream left: its run.json only
    late.mkdir()
    shutil.copy(tmp_path / "streams" / "oracle" / "run.json", late / "run.json")
    plan.runs.append(("late", plan.runs[1][1], plan.games))
    df = load_ceiling(tmp_path, plan)
    assert set(df.stream) == {"none", "oracle"}


def test_library_health_is_read_per_memory_stream(fake_env, tmp_path):
    from skillbook.papers.breakdown.ceiling import library_health
    model, d = FakeModel(), design()
    model.cache = ResponseCache.for_run(tmp_path)
    run_ceiling(tmp_path, model, d)
    table, along = library_health(tmp_path, d)
    assert list(table.index) == ["self-1", "placebo-1", "self-2", "placebo-2"]
    assert {"skills", "strict subset", "median lines", "writes from successes"} <= set(table.columns)
    assert set(along.stream) <= set(table.index) and (along.k == d.k).all()
    assert along.strict_share.between(0, 1).all()
    empty, _ = library_health(tmp_path / "nothing", d)
    assert empty.empty


def test_start_needs_a_registered_design_and_freezes_it_once(tmp_path, monkeypatch):
    """`ceiling start` refuses an unregistered design before any model time, and freezes the registration
    (the profile and chapter 11's design cells, verbatim from the registering commit) beside the records."""
    import subprocess

    from skillbook.papers.breakdown import ceiling
    from skillbook.profiles import project_root
    project = project_root()
    monkeypatch.setattr(ceiling, "REGISTRATION_COMMIT", "")
    with pytest.raises(ValueError, match="not registered yet"):
        ceiling.freeze(project, tmp_path)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=project, capture_output=True, text=True).stdout.strip()
    monkeypatch.setattr(ceiling, "REGISTRATION_COMMIT", head)
    path = ceiling.freeze(project, tmp_path)
    text = path.read_text()
    assert f"`{head[:12]}`" in text and "profiles/ceiling.yml" in text and "# The second study" in text
    path.write_text("kept")
    assert ceiling.freeze(project, tmp_path).read_text() == "kept"        # frozen once, never rewritten


def test_version_effect_pairs_two_calibrations_over_the_games_both_played(fake_env, tmp_path):
    """What an agent-side change did on dev: the same games under two prompt versions, condition by
    condition (fake world and model: the pairing and the counts, not the effect)."""
    from skillbook.papers.breakdown.ceiling import version_effect
    for label, version, games in (("old", "v2", 4), ("new", "v3", 2)):
        model = FakeModel()
        model.cache = ResponseCache.for_run(tmp_path / label)
        d = design(streams=1, games=games, prompts=version, conditions=("none", "self"), split="dev")
        run_ceiling(tmp_path / "calibration" / label, model, d)
    t = version_effect(tmp_path, "old", "new")
    assert list(t.index) == ["none", "self"] and (t["games"] == 2).all()
    # the fake model plays both versions alike: the same games solved, nothing discordant
    assert (t["success old"] == t["success new"]).all() and (t["only old"] + t["only new"] == 0).all()
    assert (t["live s/episode new"] > 0).all()


def test_costs_count_live_calls_only(fake_env, tmp_path):
    """Chapter 11's cost table: a replayed answer keeps the latency of the call that made it, so the
    seconds are the live calls' (issue 35: chapter 09's table once averaged over cache hits)."""
    from skillbook.papers.breakdown.ceiling import costs
    d = design(streams=1, games=2, conditions=("none", "self"))
    model = FakeModel()
    model.cache = ResponseCache.for_run(tmp_path)
    run_ceiling(tmp_path, model, d)
    t = costs(tmp_path, d)
    assert list(t.index) == ["none", "self"] and (t["episodes"] == 2).all()
    # the fake model answers without the response cache: every call is live
    assert (t["live share"] == 1).all() and (t["live s/episode (mean)"] > 0).all()


def test_side_by_side_shows_both_libraries_for_the_same_first_subtask(fake_env, tmp_path):
    from skillbook.papers.breakdown.ceiling import side_by_side
    d = design(streams=1, games=4, conditions=("none", "oracle", "self"))
    model = FakeModel()
    model.cache = ResponseCache.for_run(tmp_path)
    run_ceiling(tmp_path, model, d)
    t = side_by_side(tmp_path, d, n=2)
    assert len(t) == 2 and (t["subtask"] == "finish the task").all()
    assert t["oracle retrieved"].str.contains("finish a fake task").all()
    assert t["self retrieved"].str.len().gt(0).all() and list(t["position"]) == sorted(t["position"])


def test_the_closing_paragraph_says_what_the_claims_table_says_and_no_verdict_before_n():
    """Chapter 11's closing section is written from its tables: before the registered size it states
    measurements only (no verdict, no comparison with the papers); at it, each claim's verdict as the
    table gives it, the MDE beside every "not resolved", and each primary interval against the papers'."""
    import pandas as pd

    from skillbook.analysis import claims_table
    from skillbook.analysis.claims import measured_text
    from skillbook.papers.breakdown.ceiling import REPORTED, ceiling_claims, closing_paragraph, stream_effects
    rows = []
    for i in range(40):
        g, stream = f"twx/coin/test/{i}", f"self-{1 + i % 2}"
        rows += [{"task_id": g, "condition": "none", "stream": "none", "success": i % 2 == 0},
                 {"task_id": g, "condition": "oracle", "stream": "oracle", "success": i % 8 != 7},
                 {"task_id": g, "condition": "self", "stream": stream, "success": i % 2 == 0 or i == 1},
                 {"task_id": g, "condition": "placebo", "stream": stream.replace("self", "placebo"),
                  "success": i % 2 == 0}]
    df = pd.DataFrame(rows)
    table = claims_table(ceiling_claims(df))
    d = design(games=40)
    interim = closing_paragraph(table, design(games=400), 40, final=False)
    assert interim.startswith("**Interim: 40 of 400 games.**")
    for word in ("supported", "contradicted", "not resolved", "SkillsBench", "excludes", "includes"):
        assert word not in interim
    final = closing_paragraph(table, d, 40, final=True, effects=stream_effects(df), model="`m`")
    row = table.set_index("claim")
    for claim, r in row.iterrows():
        assert f"*{claim}* ({r.role}): {measured_text(r.estimate, r.ci_low, r.ci_high)} over 40 games" in final
        assert f"**{r.verdict}**" in final
    assert row.loc["oracle − none", "verdict"] == "supported"        # 15 of 40 only oracle, 0 only none
    nr = row[row.verdict.str.startswith("not resolved")]
    assert len(nr) and all(f"±{r.mde:.2f}" in final for _, r in nr.iterrows())
    assert "on 1 TextWorldExpress game (count)" in final
    lo, hi = row.loc["oracle − none", ["ci_low", "ci_high"]]
    assert ("includes" if lo <= REPORTED["oracle − none"][1] <= hi else "excludes") in \
        final.split("*oracle − none*")[1].split("\n")[0]
    assert "self-1" in final and "cannot fall below 0.50" in final
    assert closing_paragraph(table.iloc[0:0], d, 0, final=False).startswith("*No contrast")


def _opening_frame(n_openings: int = 4, per: int = 10):
    """Games in `n_openings` groups that open alike, every game of a group with the same outcomes: none
    fails everywhere, oracle wins in all groups but the last, self and placebo as none."""
    import pandas as pd
    rows, opening = [], {}
    for o in range(n_openings):
        for j in range(per):
            g = f"twx/coin/test/{o * per + j}"
            opening[g] = f"twx/coin/opening-{o}"
            stream = f"self-{1 + j % 2}"
            rows += [{"task_id": g, "condition": "none", "stream": "none", "success": False},
                     {"task_id": g, "condition": "oracle", "stream": "oracle", "success": o < n_openings - 1},
                     {"task_id": g, "condition": "self", "stream": stream, "success": False},
                     {"task_id": g, "condition": "placebo", "stream": stream.replace("self", "placebo"),
                      "success": False}]
    return pd.DataFrame(rows), pd.Series(opening)


def test_a_verdict_over_games_is_checked_over_the_texts_the_games_open_on():
    """Issue 36's check: 30 of 40 games favour oracle, but they are 3 of 4 openings — over games the
    exact McNemar test supports oracle − none, over openings the sign-flip test cannot (smallest p with 4
    units: 2/16). The check is tabled beside the registered verdict, carried in each claim's note (so
    chapter 10 shows it) and stated in the closing paragraph; it never changes the verdict."""
    from skillbook.analysis import claims_table
    from skillbook.analysis.claims import format_p
    from skillbook.papers.breakdown.ceiling import (
        ceiling_claims,
        closing_paragraph,
        opening_check,
        opening_table,
        with_check,
    )
    df, opening = _opening_frame()
    check = opening_check(df, opening, ceiling_claims(df)).set_index("claim")
    row = check.loc["oracle − none"]
    assert row.registered == "supported" and row.verdict.startswith("not resolved")
    assert row.n == 4 and row.largest == 10 and row.test == "exact sign-flip over openings" and row.p >= 0.125
    table = claims_table(with_check(ceiling_claims(df), check.reset_index())).set_index("claim")
    assert table.loc["oracle − none", "verdict"] == "supported" and table.loc["oracle − none", "n"] == 40
    assert table.loc["oracle − none", "note"].startswith("check over the 4 texts the games open on: not resolved (MDE")
    assert table.loc["oracle − placebo", "note"].endswith("(Holm)")
    text = closing_paragraph(table.reset_index(), design(games=40), 40, final=True, check=check.reset_index())
    assert "*oracle − none* is not resolved" in text and "may depend on counting games that open alike" in text
    shown = opening_table(check.reset_index()).loc["oracle − none"]
    assert shown["over openings"].startswith("not resolved") and shown["over games"] == "supported"
    assert shown["p"] == format_p(row.p) and shown["measured [95% CI]"].startswith("+0.75 [")
    assert opening_table(check.reset_index()).loc["oracle − placebo", "p"].endswith("(Holm)")
    with pytest.raises(ValueError, match="no opening for 40 game"):
        opening_check(df, opening.rename(lambda g: g + "x"), ceiling_claims(df))


def test_self_below_oracle_is_supported_over_games_but_not_over_openings():
    """The real case, from the committed records of the second study: 408 distinct games open on 87
    texts; over games *self − oracle* is supported (p 0.010), over openings it is not resolved (p ≈ 0.067),
    while the other four verdicts are the same under both."""
    from skillbook.papers.breakdown import ceiling
    from skillbook.profiles import project_root
    root = project_root() / "runs" / "ceiling"
    d = ceiling.CeilingDesign.from_profile("ceiling")
    openings = ceiling.fixed_openings(root, d)             # the record: no simulator call
    df = ceiling.recorded(root, d)
    check = ceiling.opening_check(df, openings, ceiling.ceiling_claims(df)).set_index("claim")
    assert int(check.n.iloc[0]) == 87 and openings.nunique() == 87 and len(openings) == 408
    assert check.loc["self − oracle", "registered"] == "supported"
    assert check.loc["self − oracle", "verdict"].startswith("not resolved") and check.loc["self − oracle", "p"] > 0.05
    same = check.drop("self − oracle")
    assert (same.verdict == same.registered).all() and (same.registered == "contradicted").all()


def test_openings_are_read_once_and_kept_beside_the_games(tmp_path, monkeypatch):
    from skillbook.papers.breakdown import ceiling
    d = design(games=4)
    first = ceiling.fixed_openings(tmp_path, d)
    assert list(first.index) == ceiling.fixed_games(tmp_path, d) and (tmp_path / "openings.json").exists()
    monkeypatch.setattr(ceiling, "openings", lambda *a, **k: pytest.fail("read again from the simulator"))
    assert ceiling.fixed_openings(tmp_path, d).equals(first)


def test_the_share_of_writes_from_successes_is_read_along_the_stream():
    """The registered figure 'writes from successful spans', per query in stream order: the writes made at
    earlier positions that shaped the final library (its own provenance and each merged into it)."""
    from types import SimpleNamespace

    from skillbook.papers.breakdown.health import health_along
    episodes = [SimpleNamespace(position=p, task_id=f"g{p}", subtasks=[], retrieved=["t1"] if p else [],
                                written=["t1"] if p == 0 else []) for p in range(4)]
    skills = [{"id": "t1", "provenance": {"stream_position": 0, "span_success": True,
                                          "merged_from": [{"stream_position": 1, "span_success": False},
                                                          {"stream_position": 2, "span_success": False}]}}]
    along = health_along(episodes, 5, skills)
    assert along.position.tolist() == [1, 2, 3]
    assert along.from_successes.tolist() == [1.0, 0.5, 1 / 3]
    assert along.library_size.tolist() == [1, 1, 1] and not along.strict_subset.any()
    assert health_along(episodes, 5).from_successes.isna().all()
