"""tools/capacity.py, the numbers of cluster.md's "Capacity on paper": per-step costs by agent level from
recorded run folders (a run being written is left out), the executor prompt's growth with the step
index, time outside model calls, and the episodes a profile's chapters run — task draws that are
`sample_tasks`'s own, split caps, replayed runs that cost no model time. No model, no JVM."""
import importlib.util
import math

import pytest

from skillbook.profiles import project_root
from skillbook.records import Call, Episode, Step
from skillbook.run import RunDir

ROOT = project_root()
_spec = importlib.util.spec_from_file_location("capacity", ROOT / "tools" / "capacity.py")
cap = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cap)


def _call(role, prompt, new, out, latency=1.0, cached=False):
    return Call(role=role, prompt_tokens=prompt, completion_tokens=out, latency_s=latency, cached=cached,
                new_prompt_tokens=new)


def _episode(task_id, agent, stream, position, executor_calls, extra_calls=(), wall_s=0.0):
    env, task_type, split, _ = task_id.split("/")
    steps = [Step(thought="", action="look", observation="ok", score=0.0, call=c) for c in executor_calls]
    return Episode(task_id=task_id, env=env, task_type=task_type, split=split, agent=agent, memory="none",
                   stream=stream, position=position, steps=steps, calls=list(executor_calls) + list(extra_calls),
                   wall_s=wall_s)


def _run(path, settings, episodes):
    store = RunDir(path)
    streams = {}
    for e in episodes:
        streams.setdefault(e.stream, []).append(e.task_id)
    store.check_or_start(settings, streams)
    for e in episodes:
        store.append_episode(e)
    return path


def _records(root):
    """A task-level run (2 episodes, 3 steps), a subtask-level run (1 episode, 2 steps, a planner and a
    summarizer call), a first-format run (no level in its settings: the episodes' own), a locked run."""
    task = [_episode("twx/coin/test/0", "task", "t0", 0,
                     [_call("executor", 100, 100, 10, 2.0), _call("executor", 200, 50, 20, 2.0)], wall_s=5.0),
            _episode("twx/coin/test/1", "task", "t1", 0, [_call("executor", 300, 60, 30, cached=True)],
                     [_call("induction", 400, 400, 40)], wall_s=1.0)]
    _run(root / "a" / "task", {"agent": {"level": "task"}}, task)
    sub = [_episode("sciworld/boil/test/0", "subtask", "s0", 0,
                    [_call("executor", 500, 100, 10, 1.0), _call("executor", 700, 80, 10, 1.0)],
                    [_call("planner", 300, 300, 50, 1.0), _call("summarizer", 200, None, 30, 1.0)], wall_s=5.0)]
    _run(root / "a" / "subtask", {"agent": {"level": "subtask"}}, sub)
    legacy = [_episode("twx/twc/dev/0", "task", "l0", 0, [_call("executor", 100, 20, 10, 1.0)], wall_s=1.5)]
    _run(root / "b" / "legacy", {"legacy": None}, legacy)
    locked = _run(root / "b" / "busy", {"agent": {"level": "task"}},
                  [_episode("twx/coin/test/5", "task", "x0", 0, [_call("executor", 9999, 9999, 999)])])
    (locked / ".lock").write_text("pid 1 on elsewhere since 2024-01-01 00:00:00")
    # a lock file left behind by a finished run is empty: its records count
    (root / "a" / "task" / ".lock").write_text("")


def test_per_level_counts_every_call_by_level_and_leaves_a_run_being_written_out(tmp_path):
    _records(tmp_path)
    counts, skipped = cap.per_level([tmp_path / "a", tmp_path / "b"])
    assert len(skipped) == 1 and "busy" in skipped[0] and "pid 1" in skipped[0]
    assert set(counts) == {"task", "subtask"}
    t = cap.rates(counts["task"])
    # task: 3 episodes (2 + the first-format one), 4 steps, 5 calls; prompt 100+200+300+400+100
    assert counts["task"]["runs"] == 2 and t["episodes"] == 3 and t["steps_per_episode"] == pytest.approx(4 / 3)
    assert t["calls"] == pytest.approx(5 / 4) and t["prompt"] == pytest.approx(1100 / 4)
    assert t["new"] == pytest.approx((100 + 50 + 60 + 400 + 20) / 4)
    assert t["output"] == pytest.approx(110 / 4) and t["cached_share"] == pytest.approx(1 / 5)
    assert t["roles"] == {"executor": 1.0, "induction": 0.25}
    s = cap.rates(counts["subtask"])
    assert s["calls"] == 2.0 and s["roles"] == {"executor": 1.0, "planner": 0.5, "summarizer": 0.5}
    # a call without a prompt-cache report counts as prefilled in full
    assert s["new"] == pytest.approx((100 + 80 + 300 + 200) / 2) and s["prompt"] == pytest.approx(850)


def test_time_outside_model_calls_per_env_skips_episodes_with_cache_hits(tmp_path):
    _records(tmp_path)
    times = cap.step_times([tmp_path / "a", tmp_path / "b"])
    # twx: episode t0 (5 s wall, 4 s in calls, 2 steps) and the first-format one (1.5 s, 1 s, 1 step);
    # t1 had a response-cache hit, the locked run is left out
    assert times["twx"]["steps"] == 3 and times["twx"]["other_s"] == pytest.approx(1.0 + 0.5)
    assert times["sciworld"]["steps"] == 2 and times["sciworld"]["other_s"] == pytest.approx(1.0)
    assert times["sciworld"]["model_s"] == pytest.approx(4.0)


def test_executor_prompt_growth_is_fitted_and_capped_at_the_context_limit(tmp_path):
    calls = [_call("executor", 400 + 100 * i, 50, 10) for i in range(5)]       # exactly 400 + 100 × i
    _run(tmp_path / "r", {"agent": {"level": "task"}}, [_episode("twx/coin/test/0", "task", "t0", 0, calls)])
    k = cap.rates(cap.per_level([tmp_path])[0]["task"])
    assert k["intercept"] == pytest.approx(400) and k["slope"] == pytest.approx(100)
    assert k["executor_prompt"] == pytest.approx(600)
    # 10 steps: mean of 400..1300 = 850; capped at 1000: (400..1000, then 3 × 1000) / 10
    assert cap.prompt_growth(k, 10, context_limit=10**6) == pytest.approx(850 / 600)
    assert cap.prompt_growth(k, 10, context_limit=1000) == pytest.approx((sum(range(400, 1001, 100)) + 3000) / 10 / 600)


class _FakeEnv:
    def __init__(self, sizes):
        self.sizes = sizes

    def split_ids(self, task_type, split):
        return list(range(self.sizes[task_type][split]))


class _FakePool:
    def __init__(self, sizes):
        self.sizes = sizes

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def get(self, name):
        return _FakeEnv({t.split("/", 1)[1]: v for t, v in self.sizes.items() if t.startswith(name + "/")})


def test_draw_is_the_draw_of_sample_tasks(monkeypatch):
    from skillbook.envs import tasks
    sizes = {"twx/coin": {"test": 1000, "train": 1000}, "sciworld/boil": {"test": 9, "train": 14},
             "sciworld/melt": {"test": 9, "train": 14}}
    monkeypatch.setattr(tasks, "EnvPool", lambda options=None: _FakePool(sizes))
    for spec, split, n, seed in [("twx/coin,sciworld/boil,sciworld/melt", "test", 30, 0),
                                 ("sciworld/boil,twx/coin", "train", 5, 1), ("twx/coin", "test", 20, 7)]:
        assert cap.draw(spec, split, n, seed, sizes) == tasks.sample_tasks(spec, split, n, seed=seed)
    # a split smaller than n gives all of its tasks
    assert len(cap.draw("sciworld/boil", "test", 30, 0, sizes)) == 9


SIZES = {"twx/coin": {"train": 50, "dev": 50, "test": 4}, "sciworld/boil": {"train": 5, "dev": 5, "test": 3},
         "tau2/retail": {"train": 10, "dev": 3, "test": 2}}


def _params(conditions="task-none,task-text,task-code,subtask-none,subtask-text,subtask-code"):
    shared = {"seed": 0, "max_steps": 20}
    return {"01_agents": {**shared, "task_types": "twx/coin,sciworld/boil", "split": "test", "n_tasks": 2},
            "02_induction": {**shared, "task_types": "twx/coin,sciworld/boil", "split": "test", "n_tasks": 2,
                             "conditions": conditions},
            "04_transfer": {**shared, "n_heldout": 4, "n_ablation": 10},
            "05_utility": {**shared, "n_heldout": 4},
            "06_assay": {**shared, "assay_envs": "twx,tau2", "assay_task_types": "twx/coin,sciworld/boil",
                         "n_train": 1, "n_dev": 2, "n_test": 1, "K": 3, "tau2_domain": "retail",
                         "tau2_n_train": 2, "tau2_n_dev": 5, "tau2_n_test": 1, "tau2_K": 2, "tau2_max_steps": 6,
                         "tau2_user_backend": ""},
            "07_skillrl": {**shared, "skillrl_task_types": "twx/coin", "n_train": 3, "n_dev": 2, "n_test": 2,
                           "rounds": 2, "train_base": "", "train_conditions": "base,sft+grpo"},
            "08_credit": {**shared, "skillc_task_types": "twx/coin,sciworld/boil", "n_train": 1, "n_test": 2,
                          "gold_task_types": "twx/coin", "n_gold": 2, "gold_windows": 3, "judged_deletions": 4,
                          "closed_loop_windows": 100, "judge_samples": 2, "max_candidates": 5}}


def _by(rows, chapter):
    return {r["part"]: r for r in rows if r["chapter"] == chapter}


def test_episodes_per_chapter_follow_the_parameters():
    rows, calls = cap.paper_episodes(_params(), SIZES)
    def total(ch, level=None):
        return sum(r["episodes"] for r in rows if r["chapter"] == ch and level in (None, r["level"]))
    # 01: 2 coin + 2 boil tasks, both agents
    assert total("01", "task") == total("01", "subtask") == 4
    # 02: the same 4 tasks under 3 conditions per level
    assert total("02", "task") == total("02", "subtask") == 12
    # held out: the draw with seed 1 of 4 per type (4 coin, all 3 boil) minus the 4 stream tasks = 3
    held = [t for t in cap.draw("twx/coin,sciworld/boil", "test", 4, 1, SIZES)
            if t not in cap.draw("twx/coin,sciworld/boil", "test", 2, 0, SIZES)]
    assert len(held) == 3
    ch04 = _by(rows, "04")
    assert [r["episodes"] for r in ch04.values()] == [9, 9, 8]     # E.2 3 × 3, E.3 3 × 3, ablation 2 × 4
    # 05: E.4, 4 libraries per level; task-none, task-full (E.2's) and subtask-none (E.3's) are replays
    ch05 = [r for r in rows if r["chapter"] == "05"]
    assert sum(r["episodes"] for r in ch05) == 24
    assert sum(r["episodes"] for r in ch05 if r["replayed"]) == 9
    assert all(r["exact"] for r in rows if r["chapter"] in ("01", "02", "04", "05", "07"))
    # 06, twx: 2 types × (1 train, 2 dev, 1 test); tau2: 2 train, 3 dev (the split's size), 1 test
    ch06 = [r["episodes"] for r in rows if r["chapter"] == "06"]
    assert ch06 == [4, 3 * 4, 4 * 4, 5 * 2, 4, 2 * 3, 4 * 3, 5 * 1]
    gates = [r for r in rows if "dev gate" in r["part"]]
    assert gates and not any(r["exact"] for r in gates)
    assert {r["max_steps"] for r in rows if r["part"].startswith("tau2")} == {6}
    assert all("plays the user" in r["note"] for r in rows if r["part"].startswith("tau2"))
    # 07: 3 train + 2 rounds × 2 dev + 5 conditions × 2 test, task level
    assert total("07") == total("07", "task") == 3 + 4 + 10
    # 08: 2 train + 3 × 4 test + closed loop ≤ 2 × min(100, 2 gold × 3 windows)
    assert total("08") == 2 + 12 + 12
    judge = {c["what"].split(":")[0]: c["calls"] for c in calls if c["chapter"] == "08"}
    assert judge == {"judge, own runs": 2 * 5 * 2, "judge, gold": (6 + 4) * 2}


def test_without_text_conditions_the_follow_ups_shrink():
    rows, _ = cap.paper_episodes(_params("task-none,subtask-none"), SIZES)
    follow = [r for r in rows if r["chapter"] in ("04", "05")]
    # E.2 without libraries: task-none only; no E.3 (no subtask-text library), no E.4; the ablation stays
    assert [(r["part"].split(":")[0], r["episodes"]) for r in follow] == [("E.2", 3), ("prompt ablation", 8)]


def test_costs_scale_by_level_and_replays_cost_nothing():
    rates = {"task": {"steps_per_episode": 10, "prompt": 1000, "new": 100, "output": 20, "executor_prompt": 0},
             "subtask": {"steps_per_episode": 20, "prompt": 800, "new": 200, "output": 40, "executor_prompt": 0}}
    rows = [cap._row("01", "a", "task", 3, 50), cap._row("01", "b", "subtask", 2, 50),
            cap._row("05", "c", "task", 7, 50, replayed=True)]
    rec = cap.costs(rows, rates)
    assert [r["steps"] for r in rec] == [30, 40, 0]
    assert rec[0]["prompt"] == 30_000 and rec[1]["new"] == 8_000 and rec[1]["output"] == 1_600
    assert rec[2]["prompt"] == rec[2]["output"] == 0
    limit = cap.costs(rows, rates, at_limit=True)
    assert [r["steps"] for r in limit] == [150, 100, 0]
    # 1 GPU-hour = 3.6 M output tokens at 1,000/s, or 36 M prefilled at 10,000/s
    assert cap.gpu_hours(3.6e6, 36e6, 1000, 10000) == pytest.approx(2.0)


def test_paper_profile_counts_from_the_chapters_and_the_split_sizes():
    params = cap.chapter_parameters("paper")
    rows, _ = cap.paper_episodes(params)
    per = {}
    for r in rows:
        per[r["chapter"]] = per.get(r["chapter"], 0) + r["episodes"]
    # 14 task types × 30, but boil and melt have 9 test variations each: 12 × 30 + 2 × 9 = 378 tasks
    assert per["01"] == 2 * 378 and per["02"] == 6 * 378
    # 07: 6 games × (5 train + 5 rounds × 5 dev + 5 conditions × 20 test), then the trained policies
    # (train_conditions "base,sft+grpo") each on the same 120 test tasks
    assert per["07"] == 30 + 150 + 600 + 2 * 120
    assert all(not math.isnan(r["episodes"]) and r["episodes"] > 0 for r in rows)


def test_report_names_what_it_left_out_and_prints_the_profile_tables(tmp_path, capsys):
    _records(tmp_path)
    cap.main([str(tmp_path / "a"), str(tmp_path / "b"), "--profile", "paper"])
    out = capsys.readouterr().out
    assert "left out:" in out and "busy" in out
    assert "| all |" in out and "every episode at its step limit" in out
