"""Assay's pipeline end to end on the FAKE world and model (tests/fakes.py): upstream library → random masks
→ C → split/retire/merge behind the dev gate → test conditions; the masks' resume rules; the dev gate.
Control flow only: the planted rule below decides every outcome, so what each stage must produce is known.

The planted rule (by the ZAP… markers in the skills the agent is shown):
    count task solved  iff  ZAPCOUNT or ZAPCOUNT_ON_COUNTERS is shown and ZAPFETCH is not
    fetch task solved  iff  the unconditional ZAPCOUNT is not shown
so ZAPCOUNT helps on count tasks and hurts on fetch tasks (a sign flip: the split candidate), ZAPFETCH hurts
on count tasks only, and ZAPNOTE and the templates change nothing.
"""
import json
import re
from pathlib import Path

import numpy as np
import pytest

from fakes import FakeModel, solve
from skillbook.agent import AgentConfig
from skillbook.papers.assay import is_template
from skillbook.papers.assay.attribution import attribution_matrix
from skillbook.papers.assay.pipeline import (
    AssaySettings,
    DevGate,
    mask_trials,
    retire_candidates,
    run_assay,
    split_candidates,
)
from skillbook.papers.assay.templates import TEMPLATES
from skillbook.run import load_episodes
from skillbook.skills.library import SkillLibrary
from skillbook.skills.record import Skill

DATA = Path(__file__).parent / "data" / "assay_workshop_twx.json"
TASKS = {"train": ["fake/count/train/2", "fake/count/train/0", "fake/fetch/train/0"],
         "dev": ["fake/count/dev/0", "fake/count/dev/1", "fake/fetch/dev/0", "fake/fetch/dev/1"],
         "test": ["fake/count/test/0", "fake/fetch/test/0", "fake/count/test/1", "fake/fetch/test/1"]}
AGENT = AgentConfig(max_steps=6, max_subtasks=2, max_subtask_steps=6, n_examples=0)   # the task-level agent
SETTINGS = dict(K=8, f=0.4, outcome="success", tau_split=0.5, max_split=1, tau_retire=0.05, tau_merge=0.85,
                k=20, threshold=-1.0)
RUN = dict(tasks=TASKS, agent=AGENT, env="fake", seed=0)      # the run's fields of AssaySettings
FAKE_TEMPLATES = [("tpl-calm", "Stay calm", "Breathe."), ("tpl-read", "Read the room", "Look first."),
                  ("tpl-one", "One action per turn", "Write one action."),
                  ("tpl-stop", "Stop when done", "Say done at the end."),
                  ("tpl-retry", "Retry differently", "Change what failed.")]


def planted(observation: str) -> str:
    shown = set(re.findall(r"ZAP\w+", observation))
    if re.search(r"Goal \d+", observation):
        ok = bool(shown & {"ZAPCOUNT", "ZAPCOUNT_ON_COUNTERS"}) and "ZAPFETCH" not in shown
        if ok:
            return solve(observation)
        return "look around" if "Goal 3" in observation else "say done"   # (a third kind of training record)
    return "look around" if "ZAPCOUNT" in shown else solve(observation)


def solved(task_id: str, shown: set[str]) -> float:
    """The planted rule, for a set of shown markers."""
    if "/count/" in task_id:
        return float(bool(shown & {"ZAPCOUNT", "ZAPCOUNT_ON_COUNTERS"}) and "ZAPFETCH" not in shown)
    return float("ZAPCOUNT" not in shown)


class AssayFake(FakeModel):
    """The FAKE model with one skill per kind of training task, body merges that keep the old note, and a
    split reply that makes ZAPCOUNT conditional on a counter."""

    def __init__(self):
        super().__init__(policy=planted)

    def reply(self, messages) -> str:
        last = messages[-1]["content"]
        if "Write ONE reusable skill" in last:
            if "key" in last:
                return "Description: ZAPFETCH take the key and open the door\nSkill: 1. take key\nCaveats: none"
            if "> look around" in last:
                return "Description: ZAPNOTE note the room number\nSkill: 1. look around\nCaveats: none"
            return "Description: ZAPCOUNT count up to the goal\nSkill: 1. add one until the goal\nCaveats: none"
        if "Two notes describe the same skill" in last:
            return last.split("Note A:\n", 1)[1].split("\nNote B:", 1)[0]
        if "Rewrite it as two variants" in last:
            return json.dumps([{"description": "When a counter shows a goal, count up to it",
                                "body": "ZAPCOUNT_ON_COUNTERS add one until the goal"},
                               {"description": "When a door is locked, leave counting alone", "body": "1. look"}])
        return super().reply(messages)

    def kinds(self) -> list[str]:
        return ["split" if "Rewrite it as two variants" in m[-1]["content"] else "other" for m in self.calls]


@pytest.fixture
def fake_templates(monkeypatch):
    monkeypatch.setitem(TEMPLATES, "fake", FAKE_TEMPLATES)


def markers(skill_ids, library) -> set[str]:
    return set(re.findall(r"ZAP\w+", " ".join(library.get(i).description + " " + library.get(i).body
                                               for i in skill_ids)))


def test_run_assay_end_to_end_on_the_fake_world(tmp_path, fake_env, fake_templates):
    llm = AssayFake()
    settings = AssaySettings(**SETTINGS, **RUN)
    r = run_assay(tmp_path, llm, settings)
    ids = [s.id for s in r.library]
    by_marker = {m: s.id for s in r.library for m in re.findall(r"ZAP\w+", s.description)}
    # 1. upstream: one skill per kind of training task (the second pass merged into the first), templates added
    assert set(by_marker) == {"ZAPCOUNT", "ZAPFETCH", "ZAPNOTE"}
    assert [i for i in ids if is_template(i)] == [t[0] for t in FAKE_TEMPLATES]
    # the tested libraries are kept whole, so they can be read and exported (issue 39)
    from skillbook.libraries import libraries_in
    kept = libraries_in(tmp_path / "libraries")
    assert ([s.id for s in kept["upstream"]] == ids
            and [s.id for s in kept["restructured"]] == [s.id for s in r.restructured])
    # 2. masks over every skill, templates too; each trial ran with exactly its mask; C from those outcomes
    a = r.attribution
    assert a["skill_ids"] == ids and a["masks"].shape == (8, len(ids))
    assert all(0 < n < 8 for n in a["masks"].sum(axis=0))
    expected = np.array([[solved(t, markers([i for i, x in zip(ids, m) if x], r.library)) for t in TASKS["dev"]]
                         for m in a["masks"]])
    assert (a["outcomes"] == expected).all()
    np.testing.assert_array_equal(a["C"], attribution_matrix(a["masks"], expected))
    for k, m in enumerate(a["masks"]):
        for e in load_episodes(tmp_path / "masks" / f"k{k:02d}"):
            assert set(e.retrieved) == {i for i, x in zip(ids, m) if x}
    c = dict(zip(ids, a["C"]))
    assert (c[by_marker["ZAPCOUNT"]][2:] < 0).all()                     # hurts fetch wherever it can
    assert (c[by_marker["ZAPFETCH"]][:2] < 0).all()                     # hurts count
    saved = json.loads((tmp_path / "attribution.json").read_text())
    assert saved["skill_ids"] == ids and saved["masked"] == "every skill"
    assert saved["settings"] == settings.method() and list(saved["settings"]) == list(settings.method())
    assert "tasks" not in saved["settings"] and "agent" not in saved["settings"]   # the knobs, not the run
    # 3. restructuring: the sign-flipping skill is split (the gate sees 0 → 0.5), templates are untouched
    log = r.log.set_index("step")
    assert log.loc["split", "changed"] == [by_marker["ZAPCOUNT"]] == split_candidates(ids, a["heterogeneity"],
                                                                                     settings)
    assert any(is_template(i) and h >= settings.tau_split for i, h in zip(ids, a["heterogeneity"]))  # by chance
    assert (log.loc["split", "accepted"]
            and (log.loc["split", "rate_before"], log.loc["split", "rate_after"]) == (0, 0.5))
    assert log.loc["retire", "changed"] == [i for i in retire_candidates(ids, a["global"], settings)
                                            if i != by_marker["ZAPCOUNT"]] or log.loc["retire", "note"]
    new = {s.id for s in r.restructured}
    assert {t[0] for t in FAKE_TEMPLATES} <= new and by_marker["ZAPCOUNT"] not in new
    assert sum(s.provenance.get("split_from") == by_marker["ZAPCOUNT"] for s in r.restructured) == 2
    for d in (tmp_path / "gate").iterdir():                              # the gate shows the whole library
        assert all(set(e.retrieved) >= {t[0] for t in FAKE_TEMPLATES} for e in load_episodes(d))
    # 4. the test conditions, on the same four tasks, with the planted outcomes
    t = r.test.pivot_table(index="task_id", columns="condition", values="success")
    assert list(t.columns) == sorted(["none", "full", "global", "restructured", "restructured+masking"])
    assert list(t["none"]) == [0, 0, 1, 1] and list(t["full"]) == [0, 0, 0, 0]
    assert list(t["restructured"]) == [0, 0, 1, 1]                       # ZAPFETCH still hurts count tasks
    assert list(t["restructured+masking"]) == [1, 1, 1, 1]               # ... until per-task masking drops it
    for cond in ("full", "global", "restructured", "restructured+masking"):
        for e in load_episodes(tmp_path / "test" / cond):
            assert {t[0] for t in FAKE_TEMPLATES} <= set(e.retrieved)    # templates shown in every condition
    # resume: the same call replays every stage; the only model calls are the split rewrites
    again = AssayFake()
    r2 = run_assay(tmp_path, again, settings)
    assert set(again.kinds()) <= {"split"} and r2.test.equals(r.test)
    np.testing.assert_array_equal(r2.attribution["C"], a["C"])


def test_run_assay_refuses_before_model_time(tmp_path, fake_env):
    llm = AssayFake()
    with pytest.raises(ValueError, match="no Assay templates for env 'fake'; valid: twx, sciworld, tau2"):
        run_assay(tmp_path, llm, AssaySettings(**SETTINGS, **RUN))
    twx = {**RUN, "env": "twx"}
    with pytest.raises(ValueError, match="valid: none, full"):
        run_assay(tmp_path, llm, AssaySettings(**SETTINGS, **{**twx, "conditions": ["oracle"]}))
    with pytest.raises(ValueError, match="missing: \\['dev'\\]"):
        run_assay(tmp_path, llm, AssaySettings(**SETTINGS, **{**twx, "tasks": {**TASKS, "dev": []}}))
    with pytest.raises(TypeError, match="AgentConfig"):
        run_assay(tmp_path, llm, AssaySettings(**SETTINGS, **{**twx, "agent": dict(max_steps=6)}))
    with pytest.raises(ValueError, match="task-level agent"):
        run_assay(tmp_path, llm, AssaySettings(**SETTINGS, **{**twx, "agent": AgentConfig(level="subtask")}))
    assert llm.calls == [] and not list(tmp_path.iterdir())


def real_library() -> SkillLibrary:
    lib = SkillLibrary()
    for s in json.loads(DATA.read_text())["skills"]:
        lib.add(Skill(**s))
    return lib


def test_real_case_templates_are_masked_and_measured(tmp_path, fake_env):
    """Issue 13, from the real case: chapter 06's workshop run (tests/data/assay_workshop_twx.json) drew its
    masks with the five templates in every trial, so C had no row for them. The paper's §2.1: every skill
    takes part in attribution. The same library, K, f and seed now mask the templates like the rest."""
    real = json.loads(DATA.read_text())
    lib = real_library()
    ids = [s.id for s in lib]
    legacy = np.array(real["masks.json"]["masks"], bool)
    tpl = [j for j, i in enumerate(ids) if is_template(i)]
    assert legacy[:, tpl].all()                                           # the bug, as recorded
    # a policy under which one template matters: count tasks are solved only when "Look before acting" is shown
    llm = FakeModel(policy=lambda obs: solve(obs) if "Look before acting" in obs or "Goal" not in obs else "say done")
    settings = AssaySettings(K=6, f=0.4, outcome="success", k=10, threshold=-1.0)
    a = mask_trials(tmp_path, llm, lib, TASKS["dev"], AGENT, settings, seed=0)
    assert a["skill_ids"] == ids and a["C"].shape == (10, 4)
    assert all(0 < a["masks"][:, j].sum() < 6 for j in tpl)              # each template in some trials, out of others
    for k, m in enumerate(a["masks"]):                                    # a trial shows a template iff its mask does
        for e in load_episodes(tmp_path / "masks" / f"k{k:02d}"):
            assert {i for i in e.retrieved if is_template(i)} == {ids[j] for j in tpl if m[j]}
    look = ids.index("tpl-look")
    assert (a["C"][look, :2] == 1).all() and (a["C"][look, 2:] == 0).all()  # its effect is measured: +1 on count
    # the recorded draw (templates forced in) is refused, not reused
    other = tmp_path / "legacy"
    other.mkdir()
    (other / "masks.json").write_text(json.dumps(real["masks.json"]))
    n = len(llm.calls)
    with pytest.raises(ValueError, match="templates forced into every mask"):
        mask_trials(other, llm, lib, TASKS["dev"], AGENT, settings, seed=0)
    assert len(llm.calls) == n


def test_masks_are_drawn_once_and_a_changed_draw_is_refused(tmp_path, fake_env):
    lib = real_library()
    llm = FakeModel()
    settings = AssaySettings(K=4, f=0.4, outcome="success")
    config = AGENT
    a = mask_trials(tmp_path, llm, lib, TASKS["dev"][:2], config, settings, seed=1)
    saved = (tmp_path / "masks.json").read_text()
    n = len(llm.calls)
    b = mask_trials(tmp_path, llm, lib, TASKS["dev"][:2], config, settings, seed=1)     # resume: a replay
    assert len(llm.calls) == n and (b["masks"] == a["masks"]).all() and (tmp_path / "masks.json").read_text() == saved
    for changed, what in ((dict(K=5), "K"), (dict(f=0.2), "f")):
        with pytest.raises(ValueError, match=rf"\(differs: {what}\); use a new run directory"):
            mask_trials(tmp_path, llm, lib, TASKS["dev"][:2], config, AssaySettings(**{**settings.__dict__, **changed}),
                        seed=1)
    with pytest.raises(ValueError, match="differs: seed"):
        mask_trials(tmp_path, llm, lib, TASKS["dev"][:2], config, settings, seed=2)
    with pytest.raises(ValueError, match="differs: library"):
        mask_trials(tmp_path, llm, lib.filtered(lambda s: s.id != "t0007"), TASKS["dev"][:2], config, settings, seed=1)
    assert len(llm.calls) == n and (tmp_path / "masks.json").read_text() == saved
    with pytest.raises(ValueError, match="K must be an integer ≥ 2"):
        mask_trials(tmp_path / "new", llm, lib, TASKS["dev"][:2], config, AssaySettings(K=1))
    assert not (tmp_path / "new").exists()


def test_dev_gate_runs_each_library_once_with_every_skill_shown(tmp_path, fake_env, fake_templates):
    llm = AssayFake()
    lib = SkillLibrary()
    for i, (desc, body) in enumerate((("ZAPCOUNT count", "1. add one"), ("ZAPFETCH fetch", "1. take key"))):
        lib.add(Skill(f"t{i}", desc, body))
    from skillbook.papers.assay.templates import with_templates
    lib = with_templates(lib, "fake")
    gate = DevGate(tmp_path, llm, TASKS["dev"], AGENT, AssaySettings(**SETTINGS))
    assert gate.pass_rate(lib, "original") == 0.0                           # count: ZAPFETCH; fetch: ZAPCOUNT
    n = len(llm.calls)
    assert gate.pass_rate(lib, "original") == 0.0 and len(llm.calls) == n   # the same library: a replay
    fixed = lib.filtered(lambda s: s.id != "t0")
    assert gate.pass_rate(fixed, "retire") == 0.5 and len(llm.calls) > n    # fetch tasks now solved
    dirs = sorted(d.name for d in (tmp_path / "gate").iterdir())
    assert len(dirs) == 2 and dirs[0].startswith("original-") and dirs[1].startswith("retire-")
    for d in (tmp_path / "gate").iterdir():
        assert all(set(e.retrieved) == {s.id for s in (lib if "original" in d.name else fixed)}
                   for e in load_episodes(d))


def test_a_folder_of_agent_skills_is_one_more_assay_test_condition(tmp_path, fake_env, fake_templates):
    # issue 39: chapter 06's `skills_folder` adds the test condition `skills`
    folder = tmp_path / "skills" / "count-then-say-done"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text("---\nname: count-then-say-done\ndescription: Make the counter show the "
                                     "goal, then say done.\n---\n\nSay add one until the goal, then say done.\n")
    llm = AssayFake()
    run = run_assay(tmp_path / "run", llm, AssaySettings(**SETTINGS, **RUN, skills_folder=str(tmp_path / "skills")))
    assert "skills" in set(run.test.condition)
    assert (tmp_path / "run" / "test" / "skills" / "run.json").exists()
