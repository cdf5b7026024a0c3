"""SKILLC: candidates, replay credit (neutral and deletion, open and closed loop) on real gold trajectories,
saturated replays, the judge's prompt, the gold-trajectory study, macro expansion, judge reply parsing."""
import inspect
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from fakes import FakeModel, ScriptedModel
from skillbook.agent import AgentConfig
from skillbook.envs import make_env
from skillbook.papers.skillc import CreditMemory, agreement, calibration
from skillbook.papers.skillc.credit import (
    Candidate,
    ablate,
    candidates,
    closed_loop,
    closed_loop_credit,
    judge_credit,
    judge_id,
    judge_prompt,
    parse_probabilities,
    replay,
    replay_ablation,
    replay_credit,
    replay_score,
    touched,
    window_candidates,
)
from skillbook.papers.skillc.gold import (
    GoldSettings,
    gold_study,
    gold_tasks,
    gold_windows,
)
from skillbook.papers.skillc.macros import Macro, add_macro, macro_skill, parse_macro
from skillbook.papers.skillc.pipeline import spread
from skillbook.records import Step, Trajectory
from skillbook.skills.library import SkillLibrary
from skillbook.skills.sandbox import run

TWC = {"twc": "numLocations=1,numItemsToPutAway=1,includeDoors=0,limitInventorySize=0"}


def test_windows_cover_every_length_in_the_range():
    c = window_candidates(5, 1, 3)
    assert {len(x.indices) for x in c} == {1, 2, 3}
    assert len(c) == 5 + 4 + 3 and all(x.indices == tuple(range(x.indices[0], x.indices[-1] + 1)) for x in c)
    assert window_candidates(2, 3, 4) == []
    with pytest.raises(ValueError, match="min_len"):
        window_candidates(5, 0, 2)
    steps = [SimpleNamespace(action=a, observation=o, thought=t) for a, o, t in
             [("look around", "You see an apple and a fridge.", ""), ("take apple", "Taken.", "need it"),
              ("open fridge", "Opened.", ""), ("put apple in fridge", "Done.", "store it"), ("wait", "", "")]]
    got = candidates(steps, 2, 2)
    assert {x.kind for x in got} == {"window", "step", "dependency"}
    assert Candidate("dependency", (0, 1, 2, 3)) in got                     # apple and fridge link these steps
    assert [x.indices for x in got if x.kind == "step"] == [(1,), (3,)]    # steps with a thought
    assert spread(list(range(10)), 3) == [0, 4, 9] and spread([1, 2], 5) == [1, 2]


@pytest.fixture(scope="module")
def twx():
    env = make_env("twx", game_params=TWC)
    yield env
    env.close()


def test_replay_credit_is_positive_for_a_needed_step_and_zero_for_an_inert_one(twx):
    task = "twx/twc/train/0"
    gold = twx.gold_actions(task)
    assert replay_score(twx, task, gold) == 1.0
    needed = next(i for i, a in enumerate(gold) if a.startswith("put ") or a.startswith("insert "))
    assert replay_credit(twx, task, gold, Candidate("step", (needed,))) > 0
    padded = ["look around"] + gold
    assert replay_credit(twx, task, padded, Candidate("step", (0,))) == 0.0
    assert ablate(["a", "b", "c"], Candidate("window", (1, 2))) == ["a", "look around", "look around"]


def test_macro_expansion_issues_exactly_the_templates_commands():
    m = parse_macro('Here you go: {"name": "stash_item", "description": "Put an item away in a container", '
                    '"inputs": ["obj", "box"], "preconditions": "the item is in view", '
                    '"steps": ["take {obj}", "open {box}", "put {obj} in {box}"]}')
    assert m is not None and m.inputs == ["obj", "box"]
    issued = []

    def step(action):
        issued.append(action)
        return f"ok: {action}", False

    result = run([m.code()], ("stash_item", ["red apple", "fridge"]), step)
    assert not result.error, result.error
    assert issued == m.commands("red apple", "fridge") == ["take red apple", "open fridge", "put red apple in fridge"]


def test_a_macro_is_kept_only_if_it_reproduces_its_window():
    m = Macro("stash", "d", ["obj", "box"], "", ["take {obj}", "open {box}", "put {obj} in {box}"])
    assert (m.binding(["take Red Apple", "open fridge", "put red apple in fridge"])
            == {"obj": "red apple", "box": "fridge"})
    assert m.binding(["take red apple", "open fridge", "put pear in fridge"]) is None  # one input, two values
    assert m.binding(["take red apple", "open fridge"]) is None                          # a step lost
    invented = Macro("x", "d", ["grape"], "", ["take grape", "replace grape with {grape}"])
    assert invented.binding(["take grape", "take peach"]) is None                        # a made-up action
    assert Macro("x", "d", [], "", ["take banana", "slice banana"]).binding(["take banana", "slice banana"]) == {}
    # a name bound by an earlier step fixes how a later step splits
    two = Macro("x", "d", ["a", "b"], "", ["take {a}", "put {a} {b}"])
    assert two.binding(["take red apple", "put red apple in fridge"]) == {"a": "red apple", "b": "in fridge"}
    assert Macro("x", "d", ["a"], "", ["give {a} to {a}"]).binding(["give x to y"]) is None


def test_malformed_macro_replies_are_refused():
    assert parse_macro("no json") is None
    assert parse_macro('{"name": "Bad Name", "description": "d", "inputs": [], "steps": ["look"]}') is None
    assert parse_macro('{"name": "ok", "description": "d", "inputs": ["a"], "steps": ["take {b}"]}') is None
    assert parse_macro('{"name": "ok", "description": "d", "inputs": ["a"], "steps": ["take {a"]}') is None
    assert parse_macro('{"name": "ok", "description": "d", "inputs": ["a"], "steps": []}') is None


def test_judge_parsing_survives_malformed_replies():
    assert parse_probabilities('```json\n{"p_a": 0.9, "p_b": 0.25}\n```') == (0.9, 0.25)
    assert parse_probabilities("Run A: 0.8. Run B: 0.3") == (0.8, 0.3)
    assert parse_probabilities('{"p_a": "high", "p_b": 2}') is None
    assert parse_probabilities("I cannot tell.") is None
    # the real case: every reply of chapter 08's 1.5B judge at 24 tokens ended right after p_b's value; a
    # longer value would have been cut ('0.25' → '0.2') and read as another number
    real = '```json\n{\n  "p_a": 0.5,\n  "p_b": 0.5\n'
    assert parse_probabilities(real, truncated=True) == (0.5, 0.5)
    assert parse_probabilities('```json\n{\n  "p_a": 0.75,\n  "p_b": 0.2', truncated=True) is None
    assert parse_probabilities('{"p_a": 0.75, "p_b": 0.2}', truncated=True) == (0.75, 0.2)
    c = Candidate("window", (1,))
    j = judge_credit(ScriptedModel(['{"p_a": 0.9, "p_b": 0.3}', "no idea", "A 0.7 B 0.5"]), "task", "start", ["a", "b"],
                     c, samples=3)
    assert j["unusable"] == 1 and j["credit"] == pytest.approx((0.9 + 0.7) / 2 - (0.3 + 0.5) / 2)
    assert j["model_seconds"] == pytest.approx(0.3) and j["prompt_tokens"] == 10 and j["cached"] == 0
    hit = ScriptedModel(['{"p_a": 1, "p_b": 0}'])
    hit.cached = True                                   # a response-cache hit: its recorded latency was not paid
    assert judge_credit(hit, "task", "start", ["a"], c)["model_seconds"] == 0.0
    j = judge_credit(ScriptedModel(["?", "??"]), "task", "start", ["a"], c, samples=2)
    assert np.isnan(j["credit"]) and j["unusable"] == 2


def trajectory(steps, success):
    return Trajectory("twx/twc/test/0", "twc", "twx", "", "", "task", (0, len(steps)), steps, float(success), success)


def test_credit_memory_tracks_use_merges_duplicates_and_retires():
    lib = SkillLibrary()
    m1 = Macro("stash_item", "Put an item away in a container", ["obj"], "", ["take {obj}"], credit=[0.5])
    m2 = Macro("store_thing", "Put an item away in a container.", ["obj"], "", ["take {obj}", "look"], credit=[0.9])
    assert add_macro(lib, macro_skill(m1, "m0001", {})) == "added"
    assert add_macro(lib, macro_skill(m2, "m0002", {})) == "merged"
    s = lib.get("m0001")
    assert (len(lib) == 1 and s.extra["credit_history"] == [0.5, 0.9]
            and s.extra["macro"]["steps"] == ["take {obj}", "look"])
    assert "def stash_item(" in s.body                                       # the kept skill keeps its name
    mem = CreditMemory(lib, k=3, threshold=0.0, retire_window=2)
    assert mem.callable_code("stash_item") == [s.body] and mem.callable_code("nope") is None
    mem.write(trajectory([Step("", "take x", "", 0.0, macro="stash_item")], True), {})
    assert s.stats["uses"] == 1 and s.stats["successes"] == 1
    lib.add(macro_skill(Macro("idle", "Never used macro", [], "", ["look"]), "m0003", {}))
    mem.write(trajectory([], False), {})
    assert "m0003" not in lib and "m0001" in lib and mem.retired[0]["reason"] == "unused"


# -- issue 13: the judge's outcome leak and the saturated replay, from the committed workshop run ------------------
# twx/simonsays/train/394 as the base agent ran it (runs/workshop/08_credit/collect): actions and what it saw.
SIMON_TASK = "twx/simonsays/train/394"
SIMON = ["hop on your right foot", "examine grape", "examine peach", "sit down", "examine tangerine"]
SIMON_SEEN = ["Simon says, 'examine grape'.", "Simon says, 'examine peach'.", "Simon says, 'sit down'.",
              "Simon says, 'examine tangerine'.", "Simon says, you have completed the game. You win!"]
TWC_TASK = "twx/twc/train/41"
TWC_RUN = ["look around", "take vegetable oil", "put vegetable oil in folding chair", "take vegetable oil",
           "put vegetable oil in shelf"]
# the ten candidates credited per run and the replay credit the committed credits.jsonl holds for them
LABELS = ["window:0", "window:2", "window:4", "window:1,2", "window:3,4", "window:0,1,2", "window:2,3,4", "step:1",
          "step:3", "dependency:0,1,2,3,4"]
SIMON_CREDIT = [1.0, 1.0, 0.2, 1.0, 0.4, 1.0, 0.6, 1.0, 1.0, 1.0]
TWC_CREDIT = [0.0, 0.0, 0.5, 0.0, 1.0, 0.0, 0.5, 0.0, 1.0, 1.0]


def test_the_judge_sees_both_runs_but_not_their_outcomes(twx):
    """The real case: the prompt told the judge 'Run A ended with: task completed', and showed run A's
    observations, the last of which reads 'you have completed the game. You win!'."""
    assert not {"success", "observations"} & set(inspect.signature(judge_credit).parameters)
    start = twx.reset(SIMON_TASK)
    c = Candidate("window", (1, 2))
    for how in ("neutral", "delete"):
        prompt = judge_prompt("Your task is to do exactly what Simon says.", start, SIMON, c, how)
        assert start in prompt and all(a in prompt for a in SIMON)              # both runs, in full
        assert not any(seen in prompt for seen in SIMON_SEEN)                  # nothing seen after the start
        assert "completed" not in prompt and "ended with" not in prompt and "win" not in prompt.lower()
    neutral = judge_prompt("i", start, SIMON, c)
    assert "2. look around *\n3. look around *" in neutral
    deleted = judge_prompt("i", start, SIMON, c, "delete")
    assert "1. hop on your right foot\n(2 steps left out here)\n2. sit down" in deleted
    # everything up to the end of run A is shared by all candidates (the server's prompt cache reuses it)
    other = judge_prompt("i", start, SIMON, Candidate("window", (4,)))
    head = neutral[: neutral.index("Run B")]
    assert other.startswith(head) and "5. examine tangerine\n" in head
    assert judge_id("neutral") != judge_id("delete") != judge_id("neutral", samples=3)


def test_replays_that_end_the_episode_at_once_are_marked(twx):
    """The real case: in Simon says any substitution ends the game, so 14 of its 20 candidates got replay
    credit exactly 1.0. Those whose ablation ended the episode at once are marked; replacing every step
    (the dependency cluster) and windows at the end of the run are not (the game was not ended by them)."""
    for task, actions, credits in ((SIMON_TASK, SIMON, SIMON_CREDIT), (TWC_TASK, TWC_RUN, TWC_CREDIT)):
        base = replay(twx, task, actions)
        assert base.score == 1.0 and base.ended_at == len(actions) - 1
        got = [replay_ablation(twx, task, actions, Candidate.parse(lab), base.score) for lab in LABELS]
        assert [r["credit"] for r in got] == pytest.approx(credits)       # the committed replay credits
        marked = [lab for lab, r in zip(LABELS, got) if r["ends_episode"]]
        if task == SIMON_TASK:
            assert marked == ["window:0", "window:2", "window:1,2", "window:0,1,2", "step:1", "step:3"]
            # 'look around' for the first command: Simon's next command is then out of step, game over
            assert got[0]["ended_at"] == 1 and got[0]["score"] == 0.0
        else:
            assert marked == []                                             # twc: a deviation does not end it
    # deletion ends the same Simon-says game one step earlier (the next command arrives out of turn)
    r = replay_ablation(twx, SIMON_TASK, SIMON, Candidate("window", (0,)), 1.0, "delete")
    assert r["ends_episode"] and r["ended_at"] == 0 and r["credit"] == 1.0


def test_agreement_is_reported_on_the_unsaturated_rest_with_trajectories_resampled():
    """The committed 30 candidates (judge credit, replay credit, run): after the saturated Simon-says ones
    are set aside, one run is left, and one run cannot give a bootstrap interval over runs."""
    judge = {SIMON_TASK: [0, -0.5, 0.5, 0.5, 0.5, 0, 0, 0.5, -0.5, 0],
             "twx/simonsays/train/864": [0.5, 0, 0, 0, 0.5, 0, 0, 0, 0, 0.5],
             TWC_TASK: [0, 0, 0, 0.5, 0.5, 0.5, 0, 0.5, 0, 0.5]}
    saturated = {"window:0", "window:2", "window:1,2", "window:0,1,2", "step:1", "step:3"}
    df = pd.DataFrame([{"task_id": t, "candidate": lab, "judge": j,
                        "replay": (TWC_CREDIT if t == TWC_TASK else SIMON_CREDIT)[i],
                        "kept": t == TWC_TASK or lab not in saturated}
                       for t, js in judge.items() for i, (lab, j) in enumerate(zip(LABELS, js))])
    every = agreement(df, "judge", "replay", n_boot=500).iloc[0]
    assert every.n == 30 and every.n_clusters == 3 and np.isfinite(every.ci_low)
    rest = agreement(df, "judge", "replay", by="task_id", where="kept", n_boot=500).set_index("subset")
    assert rest.loc["all", "n"] == 18 and rest.loc["all", "n_clusters"] == 3
    alone = rest.loc[TWC_TASK]
    assert alone.n == 10 and alone.n_clusters == 1 and np.isnan(alone.ci_low) and np.isfinite(alone.rho)


# -- issue 17: ablation by deletion or by a neutral action; open and closed loop; gold trajectories -------------
def test_deletion_leaves_steps_out_and_acts_where_they_were():
    assert ablate(list("abcde"), Candidate("window", (1, 2)), how="delete") == ["a", "d", "e"]
    assert ablate(list("abcde"), Candidate("dependency", (0, 3)), how="delete") == ["b", "c", "e"]
    assert touched(Candidate("window", (1, 2)), "delete") == {1}
    assert touched(Candidate("dependency", (0, 3)), "delete") == {0, 2}
    assert touched(Candidate("window", (1, 2))) == {1, 2, 3}
    with pytest.raises(ValueError, match="valid: neutral, delete"):
        ablate(["a"], Candidate("window", (0,)), how="swap")


def test_both_ablations_on_real_gold_trajectories(twx):
    task = "twx/twc/train/2"
    gold = twx.gold_actions(task)
    assert gold == ["look around", "take flour", "put flour in shelf"]
    for how in ("neutral", "delete"):
        got = {c.label: replay_ablation(twx, task, gold, c, 1.0, how) for c in window_candidates(3, 1, 2)}
        assert {k: v["credit"] for k, v in got.items()} == {"window:0": 0.0, "window:1": 1.0, "window:2": 0.5,
                                                            "window:0,1": 1.0, "window:1,2": 1.0}
        assert not any(v["ends_episode"] for v in got.values())
    # the replay stops where the episode ends: deleting the first step ends it one action earlier
    assert replay_ablation(twx, task, gold, Candidate("window", (0,)), 1.0, "delete")["ended_at"] == 1


def test_gold_tasks_come_from_train_skip_the_example_tasks_and_extend(twx):
    opts = {"twx": {"game_params": TWC}}
    three = gold_tasks("twx/twc,twx/coin", 3, seed=1, env_options=opts)
    assert len(three) == 6 and all(t.split("/")[2] == "train" and int(t.split("/")[3]) >= 2 for t in three)
    five = gold_tasks("twx/twc,twx/coin", 5, seed=1, env_options=opts)
    assert five[:3] == three[:3] and five[5:8] == three[3:]
    assert gold_tasks("twx/twc", 3, seed=2, env_options=opts) != three[:3]
    w = gold_windows(20, 6, 1, 3)
    assert len(w) == 6 and {len(c.indices) for c in w} == {1, 2, 3} and w[0].indices == (0,)
    assert gold_windows(3, 10, 1, 3) == window_candidates(3, 1, 3)


def test_closed_loop_lets_the_agent_recover_where_open_loop_cannot(fake_env):
    """FAKE world and model (control flow): skipping 'take key' fails open loop (the door stays shut) but
    the re-planning agent takes the key itself; the intact continuation succeeds too, so closed-loop
    credit is 0 where open-loop credit is 1."""
    env, llm = fake_env(), FakeModel()
    task, gold = "fake/fetch/train/3", ["take key", "open door"]
    c = Candidate("window", (0,))
    assert replay_ablation(env, task, gold, c, 1.0)["credit"] == 1.0
    config = AgentConfig(n_examples=0)
    r = closed_loop_credit(llm, env, task, gold, c, slack=2, config=config)
    assert r["budget"] == 2 - 1 + 1 + 2
    assert r["intact_score"] == 1.0 and r["ablated_score"] == 1.0 and r["credit"] == 0.0
    assert r["intact_steps"] == 1 and r["ablated_steps"] == 2                  # open door; take key, open door
    first = next(m for m in llm.calls[-2] if m["role"] == "user")["content"]
    assert "(Actions already taken: look around.)" in first                    # the agent sees where it stands
    # a prefix that ends the episode leaves nothing to re-plan: no model call
    calls = len(llm.calls)
    done = closed_loop(llm, env, "fake/count/train/0", ["say done"], 5, config)
    assert done["ended_in_prefix"] and done["score"] == 0.0 and len(llm.calls) == calls


def test_gold_study_on_real_twx_records_resumes_and_refuses_another_judge(tmp_path):
    """Real TWX gold trajectories, the FAKE model as judge and closed-loop agent (control flow only)."""
    opts = {"twx": {"game_params": TWC}}
    tasks = gold_tasks("twx/twc,twx/arithmetic", 2, env_options=opts)
    s = GoldSettings(windows=4, max_len=2, judged_deletions=3, closed_loop=2, closed_slack=1,
                     agent=AgentConfig(n_examples=0, loop_patience=2), task_ids=tasks, env_options=opts)
    llm = FakeModel()
    study = gold_study(tmp_path, llm, s, progress=False)
    t, w = study.trajectories, study.windows
    assert t.task_id.tolist() == tasks and (t.score == 1.0).all()
    assert len(w) == 4 * 4 and w.groupby("task_id").size().eq(4).all()
    assert w.replay_neutral.notna().all() and w.replay_delete.notna().all()
    assert not w.ends_neutral.any()
    assert w.judge_neutral.eq(0.9 - 0.2).all() and w.judge_neutral_prompt_tokens.gt(0).all()
    assert w.judge_delete.notna().sum() == 3 and w.closed_credit.notna().sum() == 2
    judge_prompts = [m[0]["content"] for m in llm.calls if "p_a" in m[0]["content"]]
    assert len(judge_prompts) == 16 + 3
    # resume: nothing is recomputed, nothing written
    before = {p.name: p.read_text() for p in tmp_path.glob("*.jsonl")}
    calls = len(llm.calls)
    again = gold_study(tmp_path, llm, s, progress=False)
    assert len(llm.calls) == calls and {p.name: p.read_text() for p in tmp_path.glob("*.jsonl")} == before
    pd.testing.assert_frame_equal(again.windows, w)
    # more windows extend the records; another judge is refused
    more = gold_study(tmp_path, llm, replace(s, windows=5), progress=False)
    assert len(more.windows) > len(w)
    with pytest.raises(ValueError, match="other settings"):
        gold_study(tmp_path, llm, replace(s, judge_samples=3), progress=False)
    # a smaller plan reports only what it asked for (chapter 08 lowered closed_loop_windows from 16 to 12 and
    # its frame still held the 16 earlier closed-loop rows), though the records of the larger one stay
    fewer = gold_study(tmp_path, llm, replace(s, closed_loop=1, judged_deletions=1), progress=False)
    assert fewer.windows.closed_credit.notna().sum() == 1 and fewer.windows.judge_delete.notna().sum() == 1
    assert fewer.windows.judge_neutral.notna().all()


def test_the_gold_study_is_refused_before_any_model_call(tmp_path):
    llm = FakeModel()
    tasks = ["twx/twc/train/0"]
    with pytest.raises(TypeError, match="AgentConfig"):
        gold_study(tmp_path, llm, GoldSettings(agent={"n_examples": 0}, task_ids=tasks), progress=False)
    with pytest.raises(ValueError, match="task-level agent"):
        gold_study(tmp_path, llm, GoldSettings(agent=AgentConfig(level="subtask"), task_ids=tasks), progress=False)
    with pytest.raises(ValueError, match="needs `task_ids`"):
        gold_study(tmp_path, llm, GoldSettings(), progress=False)
    assert llm.calls == [] and not list(tmp_path.iterdir())

def test_calibration_bins_one_credit_against_the_other():
    df = pd.DataFrame({"judge": [-1.0, -0.5, 0.0, 0.1, 0.7, 0.9, 1.0], "replay": [0, 0, 0, 1, 1, 1, 0]})
    c = calibration(df, "judge", "replay").set_index("bin")
    assert c.n.tolist() == [1, 1, 2, 3] and c.y_mean.tolist() == pytest.approx([0, 0, 0.5, 2 / 3])
