"""The study of chapter 09 (papers/breakdown/study.py) on the FAKE world and model (tests/fakes.py): the
pre-registered design read from a profile (bad settings named before any model time), n from the planning
discordance, streams advanced together chunk by chunk and resumed, interim analysis on the tasks every
stream has, the claims (three primaries, placebo, utility), library growth. Control flow only: seconds."""

import numpy as np
import pandas as pd
import pytest
import yaml

from fakes import FakeWorld
from skillbook.papers.breakdown import study
from skillbook.profiles import ProfileError
from test_breakdown_pipeline import TypedInducer


def write_profile(root, name, spec):
    (root / "profiles").mkdir(exist_ok=True)
    (root / "profiles" / f"{name}.yml").write_text(yaml.safe_dump({"backend": "fake:scripted", "study": spec}))


DESIGN = {"task_types": "fake/count,fake/fetch", "n_tasks": 4, "split": "dev", "chunk": 2, "threshold": 0.0,
          "max_steps": 6, "max_subtask_steps": 3, "planning_discordance": 0.2}


def test_the_design_comes_from_the_profile_and_bad_settings_are_named(tmp_path):
    write_profile(tmp_path, "s", DESIGN)
    d = study.StudyDesign.from_profile("s", tmp_path)
    assert d.n_tasks == 4 and d.conditions == study.CONDITIONS and d.chunk == 2
    write_profile(tmp_path, "bad", {**DESIGN, "n_task": 3})
    with pytest.raises(ProfileError, match=r"unknown study setting\(s\) \['n_task'\]; valid: .*n_tasks"):
        study.StudyDesign.from_profile("bad", tmp_path)
    write_profile(tmp_path, "badc", {**DESIGN, "conditions": ["task-none", "task-code"]})
    with pytest.raises(ProfileError, match=r"unknown study condition\(s\) \['task-code'\]; valid: task-none"):
        study.StudyDesign.from_profile("badc", tmp_path)
    (tmp_path / "profiles" / "none.yml").write_text("backend: x\n")
    with pytest.raises(ProfileError, match="no `study:` section"):
        study.StudyDesign.from_profile("none", tmp_path)


def test_the_designs_agent_is_the_agent_config_of_every_condition_each_at_its_level(fake_env):
    from dataclasses import replace

    from skillbook.agent import AgentConfig
    d = study.StudyDesign(**DESIGN)
    assert d.agent == AgentConfig(max_steps=6, max_subtasks=d.max_subtasks, max_subtask_steps=3)
    conds = study.study_conditions(d, TypedInducer())
    assert [c.name for c in conds] == list(d.conditions)
    assert all(c.agent == replace(d.agent, level=c.name.split("-")[0]) for c in conds)


def test_unknown_calibration_settings_are_named_before_any_model_time(tmp_path):
    with pytest.raises(ValueError, match="unknown calibration setting.*valid: peckingorder"):
        study.calibrate(tmp_path, llm=None, settings=["twc-L9"])


def test_plan_sizes_n_for_the_halfwidth_and_the_interaction_is_wider():
    p = study.plan(0.2, target=0.08)
    assert p["halfwidth"] <= 0.08 < study.plan(0.2, target=0.08)["halfwidth"] * (p["n"] / (p["n"] - 1)) ** 0.5 + 0.01
    assert p["halfwidth_interaction"] == pytest.approx(2 ** 0.5 * p["halfwidth"])
    assert study.plan(0.3)["n"] > p["n"] > study.plan(0.1)["n"]


def test_the_test_stream_is_seeded_interleaved_and_of_size_n(fake_env):
    d = study.StudyDesign(**DESIGN)
    tasks = d.tasks()
    assert len(tasks) == 4 and tasks == d.tasks()
    assert [t.split("/")[1] for t in tasks] == ["count", "fetch", "count", "fetch"]


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    from skillbook import envs
    mp.setitem(envs.ENVS, "fake", FakeWorld)
    root = tmp_path_factory.mktemp("study")
    design, llm = study.StudyDesign(**DESIGN), TypedInducer()
    from skillbook.llm import ResponseCache
    llm.cache = ResponseCache.for_run(root / "streams")  # as the CLI opens it: saved after every chunk
    study.run_study(root, llm, design, until=2)          # a first sitting: every stream to 2 tasks
    first = study.status(root, design)
    calls = len(llm.calls)
    study.run_study(root, llm, design)                   # the next sitting resumes to n
    yield {"root": root, "design": design, "llm": llm, "first": first, "calls": calls}
    mp.undo()


def test_streams_advance_together_and_a_later_sitting_resumes(ran):
    first, root, design = ran["first"], ran["root"], ran["design"]
    assert list(first.loc[list(design.conditions), "done"]) == [2] * 5      # every stream at the same n
    assert first.loc["all", "done"] == 10 and first.loc["all", "n"] == 20
    assert first.loc["all", "eta_hours"] >= 0
    done = study.status(root, design)
    assert list(done.loc[list(design.conditions), "done"]) == [4] * 5 and done.loc["all", "eta_hours"] == 0
    n = len(ran["llm"].calls)
    study.run_study(root, ran["llm"], design)            # nothing left: no model call
    assert len(ran["llm"].calls) == n


def test_status_has_no_total_eta_until_every_stream_has_a_pace(tmp_path, fake_env):
    d = study.StudyDesign(**DESIGN)
    from skillbook.papers.breakdown.pipeline import condition
    from skillbook.run import run_condition
    run_condition(tmp_path / "streams" / "task-none", TypedInducer(), condition("task-none", TypedInducer(), d.agent),
                  d.tasks()[:1], d.env_options)
    s = study.status(tmp_path, d)
    assert s.loc["task-none", "done"] == 1 and s.loc["task-none", "eta_hours"] >= 0
    assert pd.isna(s.loc["task-text", "eta_hours"]) and pd.isna(s.loc["all", "eta_hours"])


def test_interim_analysis_uses_only_tasks_every_stream_has(ran):
    df = study.load_study(ran["root"], ran["design"])
    assert set(df.condition) == set(study.CONDITIONS) and len(df) == 20
    partial = df[~((df.condition == "task-text") & (df.task_id == df.task_id.iloc[-1]))]
    assert len(study.common_tasks(partial, study.CONDITIONS)) == 3
    assert len(study.common_tasks(df, study.CONDITIONS)) == 4


def test_claims_name_three_primaries_then_the_placebo_and_utility(ran, fake_env):
    df = study.load_study(ran["root"], ran["design"])
    eff = study.effects(df)
    assert set(eff.level) == {"task", "subtask"} and len(eff) == 8 and set(eff.effect) <= {-1.0, 0.0, 1.0}
    scored = study.retrieved_utility(ran["root"], ran["design"])
    assert set(scored.condition) <= {"task-text", "subtask-text"} and len(scored)
    assert {"utility", "specificity", "abstractness", "success"} <= set(scored.columns)
    cl = study.claims(df, study.utility_claim(scored))
    from skillbook.analysis import claims_table
    table = claims_table(cl)
    assert list(table.role) == ["primary"] * 3 + ["secondary"] * 2
    assert table.claim.iloc[2].startswith("interaction") and "placebo" in table.claim.iloc[3]


def test_library_growth_counts_each_skill_once_per_memory_stream(ran):
    g = study.library_growth(ran["root"], ran["design"])
    assert set(g.condition) == {"task-text", "subtask-text", "subtask-placebo"}
    for _, s in g.groupby("condition"):
        assert s.skills.is_monotonic_increasing and len(s) == 4


def test_findings_name_the_model_that_answered():
    # Real case: the closing paragraph said "with the 1.5B model" whatever backend ran the streams.
    import pandas as pd

    from skillbook.papers.breakdown import study
    design = study.StudyDesign(task_types="twx/coin", n_tasks=223)
    claims = pd.DataFrame([{"claim": "subtask-text − subtask-none", "role": "primary", "paper": "+1.9 pp",
                            "estimate": 0.05, "ci_low": -0.02, "ci_high": 0.12, "p": 0.2,
                            "verdict": "not resolved", "n": 40}])
    progress = pd.DataFrame({"hours": [1.5]}, index=["all"])
    text = study.closing_paragraph(claims, design, progress, final=False, model="`embedded:qwen2.5-coder-0.5b`")
    assert "qwen2.5-coder-0.5b" in text and "1.5B" not in text
    assert "interim: 40 of the pre-registered 223" in text


def test_a_stopped_run_ends_with_its_message_not_a_traceback(tmp_path, monkeypatch, capsys):
    # Real case: `study stop` (SIGINT) left a 12-line traceback ending in Interrupted in study.log.
    import pytest

    from skillbook.papers.breakdown import study

    def stopped(*a, **k):
        raise study.Interrupted("stopped; finished episodes are recorded in X, run again to resume")
    monkeypatch.setattr(study, "run_study", stopped)
    monkeypatch.setattr(study, "get_llm", lambda *a, **k: None)
    with pytest.raises(SystemExit) as e:
        study.main(["run", "--profile", "study", "--runs-root", str(tmp_path)])
    assert e.value.code == 130
    assert "run again to resume" in capsys.readouterr().out


def test_findings_say_n_a_for_a_claim_without_an_estimate_and_keep_short_runs_in_minutes():
    # Real case (exercise 09.1, smoke): "utility … : +nan [+nan, +nan], p = nan" and 0.05 h printed as "0.1 hours".
    import pandas as pd

    from skillbook.papers.breakdown import study
    design = study.StudyDesign(task_types="twx/twc", n_tasks=2)
    nan = float("nan")
    claims = pd.DataFrame([{"claim": "success rises with retrieved utility", "role": "secondary", "paper": "+",
                            "estimate": nan, "ci_low": nan, "ci_high": nan, "p": nan, "verdict": "not resolved",
                            "n": 2, "note": "no retrieved skill had a score"}])
    progress = pd.DataFrame({"hours": [0.05]}, index=["all"])
    text = study.closing_paragraph(claims, design, progress, final=True)
    assert "nan" not in text
    assert "n/a (no retrieved skill had a score)" in text and "3 minutes of episodes" in text


def test_findings_format_numbers_as_the_claims_table_and_state_the_measured_mde():
    # Real case: the closing paragraph printed "-0.050" (a hyphen, where the claims table prints −0.05) and
    # said "about ten points" whatever the MDE in the table was.
    import pandas as pd

    from skillbook.analysis import Claim, claims_table
    from skillbook.papers.breakdown import study
    design = study.StudyDesign(task_types="twx/coin", n_tasks=223)
    result = {"estimate": -0.05, "ci_low": -0.12, "ci_high": 0.02, "p": 0.21, "n": 223, "mde": 0.094}
    table = claims_table([Claim("subtask-text − subtask-none", "+1.9 pp", +1, True, result)])
    text = study.closing_paragraph(table, design, pd.DataFrame({"hours": [20.0]}, index=["all"]), final=True)
    assert "−0.05 [−0.12, +0.02], p = 0.21" in text and "-0.05" not in text
    # Real case (chapter 09 at n = 190): "−0.14 [−0.21, −0.06], p = <0.001"
    small = claims_table([Claim("subtask-text − subtask-none", "+1.9 pp", +1, True, {**result, "p": 0.0004})])
    text = study.closing_paragraph(small, design, pd.DataFrame({"hours": [20.0]}, index=["all"]), final=True)
    assert "p < 0.001" in text and "p = <" not in text
    assert "±0.09 " in text and "at most 3.1 pp" in text and "ten points" not in text


def test_findings_say_what_one_small_model_on_one_game_cannot_show():
    # Issue 16: "say what a 1.5B model can and cannot show" — in the closing paragraph, interim or final.
    import pandas as pd

    from skillbook.analysis import Claim, claims_table
    design = study.StudyDesign(task_types="twx/coin", n_tasks=223)
    result = {"estimate": -0.05, "ci_low": -0.12, "ci_high": 0.02, "p": 0.21, "n": 223, "mde": 0.094}
    table = claims_table([Claim("subtask-text − subtask-none", "+1.9 pp", +1, True, result)])
    for final in (False, True):
        text = study.closing_paragraph(table, design, pd.DataFrame({"hours": [20.0]}, index=["all"]), final=final,
                              model="`embedded:qwen2.5-coder-1.5b`")
        last = text.split("\n\n")[-1]
        assert last.startswith("**What it can and cannot show.** One model (`embedded:qwen2.5-coder-1.5b`) on "
                               "one setting (twx/coin)")
        assert "one library trajectory per memory condition" in last
        assert "11 models on three other benchmarks" in last and "cannot say" in last


def test_seconds_per_call_count_only_live_calls_per_stream(ran):
    from skillbook.run.streams import load_episodes
    s = study.seconds_per_call(ran["root"], ran["design"])
    assert list(s.index) == [c for c in ran["design"].conditions if c in s.index]
    for c, r in s.iterrows():
        live = [x.latency_s for e in load_episodes(ran["root"] / "streams" / c) for x in e.calls if not x.cached]
        assert r.live_calls == len(live) and r.max_s == max(live) and r.median_s <= r.p90_s <= r.max_s


def test_findings_count_tasks_from_the_primary_contrasts_not_the_utility_rows():
    # Real case (chapter 09, interim): "5 streams over the same 25 test tasks (interim: 25 of 223)" at 13
    # common tasks: the utility claim's n counts episodes (25), not tasks.
    import pandas as pd

    from skillbook.analysis import Claim, claims_table
    design = study.StudyDesign(task_types="twx/coin", n_tasks=223)
    pair = {"estimate": -0.23, "ci_low": -0.48, "ci_high": 0.05, "p": 0.25, "n": 13, "mde": 0.54}
    slope = {"estimate": 0.1, "ci_low": -0.2, "ci_high": 0.4, "p": 0.5, "n": 25, "n_clusters": 13}
    table = claims_table([Claim("subtask-text − subtask-none", "+1.9 pp", +1, True, pair),
                          Claim("success rises with retrieved utility", "§6.1: yes", +1, False, slope)])
    text = study.closing_paragraph(table, design, pd.DataFrame({"hours": [3.2]}, index=["all"]), final=False)
    assert "the same 13 test seeds (interim: 13 of the pre-registered 223)" in text


def test_a_utility_that_does_not_vary_is_not_tested_and_the_table_says_why():
    # Real case (study records, 13 common tasks): every coin task's text is closer to the others than any
    # skill is to its nearest task, so every skill's specificity, and utility, is 0; the claim read
    # "not resolved (MDE n/a)" with an empty note.
    import pandas as pd

    from skillbook.analysis import claims_table
    scored = pd.DataFrame({"task_id": [f"t{i % 5}" for i in range(12)], "task_type": "coin",
                           "success": [0, 1] * 6, "specificity": 0.0, "abstractness": 0.995,
                           "utility": 0.0, "condition": "subtask-text"})
    df = pd.DataFrame({"task_id": ["a", "a", "a", "a"], "condition": ["task-none", "task-text",
                       "subtask-none", "subtask-text"], "success": [0, 0, 1, 1]})
    row = claims_table(study.claims(df, study.utility_claim(scored))).iloc[-1]
    assert row["verdict"] == "not tested"
    assert "utility is 0 for every" in row["note"] and "specificity" in row["note"]


def test_the_eta_uses_the_pace_of_the_last_chunk(tmp_path, monkeypatch):
    # Real case: after sittings shared with a second model server, `study status` said 37.5 h to go at
    # a mean of 239 s per task-text episode, while that stream's recent episodes took about 25 s.
    from types import SimpleNamespace
    d = study.StudyDesign(task_types="twx/coin", n_tasks=40, chunk=10)
    walls = {c: [10.0] * 20 for c in d.conditions}
    walls["task-text"] = [500.0] * 10 + [20.0] * 10
    for c in d.conditions:
        (tmp_path / "streams" / c).mkdir(parents=True)
        (tmp_path / "streams" / c / "run.json").write_text("{}")
    monkeypatch.setattr(study, "load_condition", lambda path, *a: SimpleNamespace(
        episodes=[SimpleNamespace(wall_s=w) for w in walls[path.name]]))
    s = study.status(tmp_path, d)
    assert s.loc["task-text", "s_per_episode"] == 260.0 and s.loc["task-text", "recent_s"] == 20.0
    assert s.loc["task-text", "eta_hours"] == round(20 * 20.0 / 3600, 1)
    assert s.loc["all", "eta_hours"] == round((4 * 20 * 10.0 + 20 * 20.0) / 3600, 1)


def _stream_rows(outcomes: dict[str, list[int]]) -> pd.DataFrame:
    return pd.DataFrame([{"task_id": f"t{i}", "condition": c, "success": s}
                         for c, v in outcomes.items() for i, s in enumerate(v)])


def test_the_subtask_effect_splits_into_content_and_prompt_slot_and_they_add_up():
    # Real case (the final study): subtask-none 0.34, subtask-text 0.23, placebo 0.10. The memory hurt, but
    # the placebo hurt more: Δ_sub = (text − placebo) + (placebo − none), per task, so the two parts add up.
    # The second part was named after the results: it is labelled exploratory and gets no verdict.
    df = _stream_rows({"subtask-none": [1, 1, 1, 0, 1, 0, 1, 1], "subtask-text": [1, 0, 1, 0, 0, 1, 1, 0],
                       "subtask-placebo": [0, 0, 1, 0, 0, 0, 0, 0]})
    d = study.decomposition(df).set_index("part")
    assert list(d.index) == ["memory effect Δ_sub", "content (text − placebo)", "prompt slot (placebo − none)"]
    assert list(d.role) == ["primary", "secondary", "exploratory"]
    assert d.estimate.iloc[0] == pytest.approx(d.estimate.iloc[1] + d.estimate.iloc[2])
    assert d.estimate.iloc[2] == pytest.approx((1 - 6) / 8) and (d.ci_low <= d.estimate).all()
    assert {"p", "n", "contrast"} <= set(d.columns)
    # without a placebo stream there is nothing to split
    assert study.decomposition(df[df.condition != "subtask-placebo"]).empty


def test_findings_state_the_exploratory_split_without_a_verdict_and_say_what_the_placebo_was():
    # Issue 34: the placebo is fragments shaped after its own hidden library, not an irrelevant skill; the
    # sentence "length-matched irrelevant text in the skill slot lowered success ..." said more than that.
    from skillbook.analysis import Claim, claims_table
    design = study.StudyDesign(task_types="twx/coin", n_tasks=223)
    table = claims_table([
        Claim("subtask-text − subtask-none", "+1.9 pp", +1, True,
              {"estimate": -0.11, "ci_low": -0.18, "ci_high": -0.04, "p": 0.003, "n": 223, "mde": 0.1}),
        Claim("subtask-text − subtask-placebo", "(no placebo)", +1, False,
              {"estimate": 0.13, "ci_low": 0.06, "ci_high": 0.21, "p": 0.0004, "n": 223, "mde": 0.1})])
    split = pd.DataFrame([
        {"part": "prompt slot (placebo − none)", "contrast": "subtask-placebo − subtask-none",
         "role": "exploratory", "estimate": -0.24, "ci_low": -0.31, "ci_high": -0.17, "p": 1e-9, "n": 223}])
    hours = pd.DataFrame({"hours": [15.2]}, index=["all"])
    text = study.closing_paragraph(table, design, hours, final=True, decomposition=split)
    assert "exploratory" in text.lower() and "−0.24 [−0.31, −0.17]" in text
    assert "lowered" not in text and "own hidden library" in text and "not well-formed skills" in text


def _repeated_games(games=8, copies=10):
    """A study's records on few games, each repeated as seeds: deterministic agents repeat their outcome."""
    rng = np.random.default_rng(0)
    rows, units = [], {}
    for g in range(games):
        a, b, c, d = rng.integers(0, 2, 4)
        for k in range(copies):
            t = f"twx/coin/test/{g * 100 + k}"
            units[t] = f"twx/coin/g{g}"
            rows += [{"task_id": t, "condition": "subtask-none", "success": a},
                     {"task_id": t, "condition": "subtask-text", "success": b},
                     {"task_id": t, "condition": "task-none", "success": c},
                     {"task_id": t, "condition": "task-text", "success": d},
                     {"task_id": t, "condition": "subtask-placebo", "success": 0}]
    return pd.DataFrame(rows), pd.Series(units)


def test_the_verdicts_are_computed_over_games_and_the_per_seed_tests_are_only_what_was_registered():
    # Issue 34, the real case: 223 seeds of 16 games; per-seed McNemar called subtask-text − none
    # "contradicted" (p = 0.003), over games p = 0.41. Here: 8 games × 10 seeds.
    from skillbook.analysis import claims_table
    df, units = _repeated_games()
    per_seed = claims_table(study.claims(df))
    by_game = claims_table(study.claims(df, units=units))
    assert (by_game.n.iloc[:4] == 8).all() and (by_game.n_tasks.iloc[:4] == 80).all()
    assert by_game.estimate.tolist() == pytest.approx(per_seed.estimate.tolist())   # the same estimand
    assert all(t.startswith("exact sign-flip over games") for t in by_game.test.iloc[:4])
    assert (by_game.p.iloc[:4] > per_seed.p.iloc[:4]).all() or (per_seed.p.iloc[:4] == 1).any()
    # with 8 games the smallest attainable p is 2/2^8: every verdict is over those 8, whatever the seeds
    assert (by_game.p.dropna() >= 2 / 2 ** 8).all()
    assert set(per_seed.unit.iloc[:4]) == {"tasks"}


def test_a_design_with_fewer_games_than_n_is_refused_before_any_test_episode(monkeypatch):
    # Issue 34: chapter 09's design (coin with two rooms, n = 223) has 16 games; it must be refused now.
    design = study.StudyDesign(task_types="twx/coin", n_tasks=20)
    units = pd.Series({f"twx/coin/test/{i}": f"g{i % 4}" for i in range(20)})
    with pytest.raises(study.StudyDesignError, match="only 4 distinct games among the 20 test tasks"):
        study.check_units(design, units)
    assert study.check_units(design, units, allow_repeats=True) == 4
    called = []
    monkeypatch.setattr(study, "units_of", lambda d: units)
    monkeypatch.setattr(study, "study_conditions", lambda *a: called.append(a) or [])
    monkeypatch.setattr(study.StudyDesign, "tasks", lambda self: list(units.index))
    with pytest.raises(study.StudyDesignError):
        study.run_study("unused", None, design)
    assert not called                              # refused before any condition was built or run


def test_the_plan_names_the_contrast_whose_discordance_it_uses():
    p = study.plan(0.375, contrast="task-level vs subtask-level agent")
    assert p["contrast"] == "task-level vs subtask-level agent" and p["n"] == 223
    assert study.plan(0.375)["contrast"] == "(not named)"


def test_library_health_says_when_retrieval_returned_the_whole_library(ran):
    h = study.library_health(ran["root"], ran["design"])
    assert set(h.index) <= {"task-text", "subtask-text", "subtask-placebo"} and len(h)
    assert ((h["strict subset"] >= 0) & (h["strict subset"] <= 1)).all()
    assert (h.k == ran["design"].k).all() and (h.writes >= h.skills).all()
    text = study._health_text(h.assign(skills=5, writes=616, **{"strict subset": 0.0016, "retrievals": 615,
                                                                "writes from successes": 0.084}), 5)
    assert "5 skills from 616 writes" in text and "0.2% of its 615 retrievals" in text
    assert "one library trajectory" in text


def test_the_frozen_registration_is_the_commit_verbatim():
    # Issue 34: the chapter shows the pre-registration verbatim from its commit (a copy without git history
    # reads the frozen file); checked against git whenever the commit is in the history.
    import subprocess

    from skillbook.profiles import project_root
    root = project_root()
    frozen = study.registration_path(root / "runs" / "study").read_text()
    have = subprocess.run(["git", "cat-file", "-e", study.REGISTRATION_COMMIT], cwd=root,
                          capture_output=True).returncode == 0
    if not have:
        pytest.skip("this copy has no git history")
    assert frozen == study.registration_markdown(root)
    assert "can therefore at best be\n\"not resolved\" here" in frozen     # the sentence later softened
    log = study.amendments(root / "runs" / "study")
    assert list(log.columns) == ["date", "commit", "when", "change"] and log.date.is_monotonic_increasing
    assert "f75a539" in set(log.commit)


def test_the_library_paragraph_is_written_from_its_tables():
    # The chapter once typed "616 writes became 5 skills" by hand: wrong for any other run (smoke, ci).
    health = pd.Series({"skills": 5, "writes": 616, "strict subset": 0.0016})
    lib = pd.DataFrame({"description": ["Search the kitchen for the coin.", "Take the coin."], "lines": [35, 7],
                        "characters": [519, 580], "writes": [534, 2], "from successes": [3, 0]})
    text = study.library_text(health, lib)
    assert "616 writes became 5 skills" in text and "absorbed 534 writes, 3 of them" in text
    assert "35 lines" in text and "0.2% of the retrievals" in text
    assert study.library_text(health, pd.DataFrame()).endswith("No skill was kept.")
