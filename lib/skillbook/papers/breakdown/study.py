"""The study: the first paper's central claim on a run large enough to resolve it on a laptop (chapter 09).

The claim is an interaction: skills induced and retrieved at the TASK level hurt (text −1.2 pp), at the
SUBTASK level they help (+1.9 pp). The design is fixed in `profiles/<profile>.yml` under `study:` before
any test episode runs (the pre-registration):

    conditions   task-none, task-text, subtask-none, subtask-text, subtask-placebo — each one ordered
                 stream over the same test tasks in the same order (the none conditions as independent
                 tasks: without memory the order does not matter)
    primary      subtask-text − subtask-none; task-text − task-none; their difference (the interaction)
    secondary    subtask-text − subtask-placebo; utility vs success on these records (Holm)
    exploratory  subtask-placebo − subtask-none, named after the results (`decomposition`; no verdict)
    benchmark    chosen on the DEV split by `calibrate` (no-memory success 30–60%)
    n            fixed before the run from the calibration's discordance (`plan`); no interim stopping

Running for hours across sittings: `run_study` advances the five streams together, `chunk` tasks at a
time, so that an interrupted study has every condition at (nearly) the same n; every episode is recorded
as it ends (append-only) and a resumed study re-runs only the episode in flight. The code that runs the
study is pinned: `start` records the commit it first ran from (`<root>/code.txt`) and later sittings run
that commit from a worktree, so no change to the library moves under a run that lasts days.

    python -m skillbook.papers.breakdown.study calibrate [--settings ...]   # dev split, no-memory agents
    python -m skillbook.papers.breakdown.study start   [--profile study]    # start or resume, in the background
    python -m skillbook.papers.breakdown.study status  [--profile study]    # progress, live hours, ETA
    python -m skillbook.papers.breakdown.study run     [--profile study]    # the same, in the foreground
    python -m skillbook.papers.breakdown.study stop    [--profile study]    # stop, then save its answers
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from datetime import datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from ...agent import AgentConfig
from ...analysis import Claim, paired_difference
from ...analysis.claims import format_number, format_p, measured_text
from ...analysis.stats import halfwidth_paired_binary, mde_paired_binary, n_for_halfwidth
from ...envs import sample_tasks, task_texts, units
from ...io import atomic_write_bytes
from ...llm import DEFAULT_BACKEND, ResponseCache, get_llm
from ...profiles import ProfileError, load_profile, project_root
from ...run import Condition, Interrupted, frame, interruptible, load_condition, run_condition, run_conditions
from ...skills.library import THRESHOLD, TOP_K
from .health import retrievals, skill_table, stream_health
from .hygiene import identities
from .pipeline import condition, interleave, library_of
from .utility import retrieved_scores, score_library, success_slope

# -- calibration (DEV split) ------------------------------------------------------------------------------
# Candidate benchmarks: TextWorldExpress games whose first observation differs from task to task.
CALIBRATION_SETTINGS = {
    "peckingorder": {"peckingorder": {}},
    "coin-L1": {"coin": {"numLocations": 1, "numDistractorItems": 0, "includeDoors": 0, "limitInventorySize": 0}},
    "coin-L2": {"coin": {"numLocations": 2, "numDistractorItems": 0, "includeDoors": 0, "limitInventorySize": 0}},
    "twc-L1-I1": {"twc": {"numLocations": 1, "numItemsToPutAway": 1, "includeDoors": 0, "limitInventorySize": 0}},
    "twc-L1-I2": {"twc": {"numLocations": 1, "numItemsToPutAway": 2, "includeDoors": 0, "limitInventorySize": 0}},
    "twc-L2-I1": {"twc": {"numLocations": 2, "numItemsToPutAway": 1, "includeDoors": 0, "limitInventorySize": 0}},
    "cookingworld-L1-I1": {"cookingworld": {"numLocations": 1, "numIngredients": 1, "numDistractorItems": 0,
                                            "includeDoors": 0, "limitInventorySize": 0}},
}
LEVELS = ("task", "subtask")


def calibrate(root: str | Path, llm, settings: list[str], n: int = 8, max_steps: int = 30,
              max_subtask_steps: int = 10, levels=LEVELS) -> pd.DataFrame:
    """Both no-memory agents on the first `n` dev tasks of each candidate setting, recorded under
    `<root>/calibration/<setting>/<level>/`; one row per episode (columns `setting`, `condition`)."""
    bad = [s for s in settings if s not in CALIBRATION_SETTINGS]
    if bad:
        raise ValueError(f"unknown calibration setting(s) {bad}; valid: {', '.join(CALIBRATION_SETTINGS)}")
    frames = []
    for label in settings:
        game_params = CALIBRATION_SETTINGS[label]
        tasks = [f"twx/{g}/dev/{i}" for g in game_params for i in range(n)]
        conditions = [Condition(level, AgentConfig(level=level, max_steps=max_steps,
                                                   max_subtask_steps=max_subtask_steps)) for level in levels]
        results = run_conditions(Path(root) / "calibration" / label, llm, conditions, tasks,
                                 {"twx": {"game_params": game_params}}, prefix=f"{label} ")
        frames.append(frame(results).assign(setting=label))
        llm.cache.save()
    return pd.concat(frames, ignore_index=True)


def load_calibration(root: str | Path) -> pd.DataFrame:
    """Every recorded calibration episode (columns `setting`, `condition` = agent level)."""
    base = Path(root) / "calibration"
    frames = [load_condition(d / level, level).frame.assign(setting=d.name)
              for d in sorted(base.iterdir()) if d.is_dir() for level in LEVELS if (d / level / "run.json").exists()] \
        if base.exists() else []
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def calibration_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per setting: tasks, success of each no-memory agent, their discordance (the planning value), the
    longest successful episode (for the step budget) and seconds per episode."""
    rows = []
    for setting, g in df.groupby("setting"):
        wide = g.pivot_table(index="task_id", columns="condition", values="success", aggfunc="mean")
        both = wide.dropna()
        rows.append({"setting": setting, "tasks": len(wide),
                     **{f"success {c}": float(wide[c].mean()) for c in wide.columns},
                     "discordance": float((both["task"] != both["subtask"]).mean())
                     if len(both.columns) == 2 else np.nan,
                     "longest success (steps)": int(g.loc[g.success.astype(bool), "steps"].max())
                     if g.success.any() else np.nan,
                     "seconds per episode": float(g["wall_s"].mean())})
    return pd.DataFrame(rows).set_index("setting")


# -- the design -----------------------------------------------------------------------------------------
CONDITIONS = ("task-none", "task-text", "subtask-none", "subtask-text", "subtask-placebo")


@dataclass
class StudyDesign:
    """The pre-registered design (profiles/<profile>.yml, key `study`)."""
    task_types: str                        # '<env>/<task type>,...' chosen on the dev split
    n_tasks: int                           # test tasks per stream, fixed before the run
    twx_params: dict = field(default_factory=dict)
    split: str = "test"
    max_steps: int = 20
    max_subtasks: int = 15
    max_subtask_steps: int = 10
    conditions: tuple = CONDITIONS
    prompt_level: str = "L3"
    k: int = TOP_K
    threshold: float = THRESHOLD
    seed: int = 0
    chunk: int = 10                        # tasks every stream advances by before the next stream runs
    planning_discordance: float = 0.3      # ψ used to fix n (from the calibration)
    target_halfwidth: float = 0.08
    alpha: float = 0.05

    @classmethod
    def from_profile(cls, profile: str, root: Path | None = None) -> StudyDesign:
        spec = load_profile(profile, root).get("study")
        if not isinstance(spec, dict):
            raise ProfileError(f"profile {profile!r} has no `study:` section (the study's pre-registered design)")
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(spec) - known)
        if unknown:
            raise ProfileError(f"profile {profile}: unknown study setting(s) {unknown}; "
                               f"valid: {', '.join(sorted(known))}")
        d = cls(**{**spec, "conditions": tuple(spec.get("conditions", CONDITIONS))})
        bad = [c for c in d.conditions if c not in CONDITIONS]
        if bad:
            raise ProfileError(f"profile {profile}: unknown study condition(s) {bad}; valid: {', '.join(CONDITIONS)}")
        return d

    @property
    def env_options(self) -> dict:
        return {"twx": {"game_params": dict(self.twx_params)}}

    @property
    def agent(self) -> AgentConfig:
        """The agent of every condition (each sets its level)."""
        return AgentConfig(max_steps=self.max_steps, max_subtasks=self.max_subtasks,
                           max_subtask_steps=self.max_subtask_steps)

    def tasks(self) -> list[str]:
        """The test stream: n tasks (spread evenly over the task types), interleaved, seeded."""
        types = [t for t in self.task_types.split(",") if t.strip()]
        per_type = -(-self.n_tasks // len(types))
        ids = sample_tasks(self.task_types, self.split, per_type, seed=self.seed, env_options=self.env_options)
        return interleave(ids, seed=self.seed)[: self.n_tasks]


def plan(discordance: float, target: float = 0.08, alpha: float = 0.05, contrast: str = "") -> dict:
    """n for a 95% half-width ≤ `target` of each simple paired difference at discordance ψ, and what that n
    buys: the expected half-widths (simple contrast; the interaction, whose per-task value is the
    difference of two paired differences, ≈ √2 wider), and the exact McNemar MDE at 80% power.

    n counts independent units — distinct games, one test seed each (`check_units` refuses fewer) — and
    ψ must be the discordance of the contrast being planned (`contrast` records which: memory vs none, not,
    as chapter 09's plan used, the task-level vs the subtask-level agent)."""
    n = int(n_for_halfwidth(target, discordance))
    return {"contrast": contrast or "(not named)", "discordance": discordance, "n": n,
            "halfwidth": float(halfwidth_paired_binary(n, discordance)),
            "halfwidth_interaction": float(np.sqrt(2) * halfwidth_paired_binary(n, discordance)),
            "mde": float(mde_paired_binary(n, discordance, alpha=alpha))}


# -- running ----------------------------------------------------------------------------------------------
def study_conditions(design: StudyDesign, llm) -> list[Condition]:
    return [condition(c, llm, design.agent, design.prompt_level, design.k, design.threshold)
            for c in design.conditions]


def run_study(root: str | Path, llm, design: StudyDesign, until: int | None = None) -> None:
    """Advance every stream `chunk` tasks at a time until each has `until` (default n) tasks recorded."""
    root = Path(root)
    tasks = design.tasks()
    check_units(design)           # before any test episode: n seeds must be n games
    until = min(until or design.n_tasks, design.n_tasks)
    conditions = study_conditions(design, llm)
    for end in range(design.chunk, until + design.chunk, design.chunk):
        end = min(end, until)
        for c in conditions:
            run_condition(root / "streams" / c.name, llm, c, tasks[:end], design.env_options,
                          desc=f"{c.name} ({end}/{design.n_tasks})")
            llm.cache.save()


def load_study(root: str | Path, design: StudyDesign) -> pd.DataFrame:
    """One row per recorded test episode (column `condition`), restricted to the design's task stream."""
    tasks = set(design.tasks())
    frames = [load_condition(Path(root) / "streams" / c, c).frame for c in design.conditions
              if (Path(root) / "streams" / c / "run.json").exists()]
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["task_id", "condition"])
    return df[df.task_id.isin(tasks)]


def common_tasks(df: pd.DataFrame, conditions) -> list[str]:
    """Tasks recorded in every condition (an interim analysis uses only these)."""
    sets = [set(df.loc[df.condition == c, "task_id"]) for c in conditions]
    return sorted(set.intersection(*sets)) if sets else []


def status(root: str | Path, design: StudyDesign) -> pd.DataFrame:
    """Per stream: episodes done of n, the hours its episodes took, seconds per episode over all of them
    and over the last chunk (`recent_s`), and the ETA: remaining episodes × the recent pace — a sitting
    that shared the cores with another model server ran several times slower, and the mean over all
    sittings would carry that into every later estimate. The last row sums the streams."""
    rows = []
    for c in design.conditions:
        d = Path(root) / "streams" / c
        walls = [e.wall_s for e in load_condition(d).episodes] if (d / "run.json").exists() else []
        per = sum(walls) / len(walls) if walls else np.nan
        recent = walls[-design.chunk:]
        pace = sum(recent) / len(recent) if recent else np.nan
        rows.append({"condition": c, "done": len(walls), "n": design.n_tasks, "hours": sum(walls) / 3600,
                     "s_per_episode": per, "recent_s": pace, "eta_hours": (design.n_tasks - len(walls)) * pace / 3600})
    df = pd.DataFrame(rows).set_index("condition")
    # The total ETA is unknown (NaN) until every stream has a measured pace: streams differ several-fold.
    done = max(df.done.sum(), 1)
    df.loc["all"] = [df.done.sum(), df.n.sum(), df.hours.sum(), df.hours.sum() * 3600 / done, np.nan,
                     df.eta_hours.sum(skipna=False)]
    return df.round({"hours": 2, "s_per_episode": 1, "recent_s": 1, "eta_hours": 1})


# -- analysis -----------------------------------------------------------------------------------------------
PAPER = {  # the first paper's averages over 11 models and three benchmarks (percentage points)
    "subtask-text − subtask-none": "+1.9 pp", "task-text − task-none": "−1.2 pp",
    "interaction (subtask effect − task effect)": "+3.1 pp", "subtask-text − subtask-placebo": "(no placebo)",
}


PAPER_LARGEST = 0.031  # the largest of the paper's primary effects above, as a share
# what the paper's averages range over (its benchmarks and models; papers digest)
PAPER_SCOPE = "11 models on three other benchmarks (AppWorld, OfficeBench, KramaBench)"


def effects(df: pd.DataFrame) -> pd.DataFrame:
    """Per task, the text memory's effect at each level (memory − none, in {−1, 0, 1}); rows: task_id,
    level, effect — the interaction is the paired difference of the two levels' effects."""
    wide = df.pivot_table(index="task_id", columns="condition", values="success", aggfunc="mean")
    rows = []
    for level in ("task", "subtask"):
        if {f"{level}-none", f"{level}-text"} <= set(wide.columns):
            d = (wide[f"{level}-text"] - wide[f"{level}-none"]).dropna()
            rows += [{"task_id": t, "level": level, "effect": float(v)} for t, v in d.items()]
    return pd.DataFrame(rows, columns=["task_id", "level", "effect"])


def claims(df: pd.DataFrame, utility: dict | None = None, units: pd.Series | None = None) -> list:
    """The study's claims: three primary contrasts named in the pre-registration, then the secondary ones.
    `df` must hold only tasks recorded in every condition (`common_tasks`).

    `units` (task → game, `units_of`): every contrast is tested over games (`paired_difference(units=)`),
    which is what the verdicts rest on. Without it the contrasts are the pre-registered per-seed tests,
    which treat repeated games as independent draws: shown as what was registered, never as the verdict."""
    unit = {} if units is None else {"units": units}
    tasks = "tasks" if units is None else ""
    out = [
        Claim("subtask-text − subtask-none", PAPER["subtask-text − subtask-none"], +1, True,
              paired_difference(df, "condition", "subtask-none", "subtask-text", **unit), unit=tasks),
        Claim("task-text − task-none", PAPER["task-text − task-none"], -1, True,
              paired_difference(df, "condition", "task-none", "task-text", **unit), unit=tasks),
        Claim("interaction (subtask effect − task effect)", PAPER["interaction (subtask effect − task effect)"], +1,
              True, paired_difference(effects(df), "level", "task", "subtask", "effect", **unit), unit=tasks),
    ]
    if "subtask-placebo" in set(df.condition):
        out.append(Claim("subtask-text − subtask-placebo", PAPER["subtask-text − subtask-placebo"], +1, False,
                         paired_difference(df, "condition", "subtask-placebo", "subtask-text", **unit),
                         unit=tasks))
    if utility is not None:
        clustered = "game" if units is not None else "task"
        out.append(Claim(f"success rises with retrieved utility (slope per SD, clustered by {clustered})",
                         "§6.1: yes", +1, False, utility, note=utility.get("note", ""), unit="episodes"))
    return out


def units_of(design: StudyDesign) -> pd.Series:
    """task id → the game it generates (`envs.units`), for the design's test stream."""
    return units(design.tasks(), design.env_options, progress=False)


class StudyDesignError(ValueError):
    """A design that cannot answer what it asks (e.g. fewer distinct games than tasks per stream)."""


def check_units(design: StudyDesign, units: pd.Series | None = None, *, allow_repeats: bool = False) -> int:
    """The number of distinct games in the design's test stream; StudyDesignError, before any test episode,
    when it is smaller than n: a deterministic agent repeats its outcome on a repeated game, so n seeds of
    fewer games are fewer observations than planned (chapter 09: 223 seeds of 16 games). `allow_repeats`
    only for re-rendering a study that ran before this check existed."""
    units = units_of(design) if units is None else units
    g = int(units.nunique())
    if g < design.n_tasks and not allow_repeats:
        raise StudyDesignError(
            f"{design.task_types} with {design.twx_params or 'default parameters'} gives only {g} distinct games "
            f"among the {design.n_tasks} {design.split} tasks of the stream: plan n in games (one seed per game), "
            "or choose a setting with more games (count them with skillbook.envs.units over the split)")
    return g


DECOMPOSITION = (("memory effect Δ_sub", "subtask-none", "subtask-text", "primary"),
                 ("content (text − placebo)", "subtask-placebo", "subtask-text", "secondary"),
                 ("prompt slot (placebo − none)", "subtask-none", "subtask-placebo", "exploratory"))


def decomposition(df: pd.DataFrame, units: pd.Series | None = None) -> pd.DataFrame:
    """The subtask-level memory effect split per task into what the skills say and what filling their
    prompt slot does: s_text − s_none = (s_text − s_placebo) + (s_placebo − s_none), so the three estimates
    add up exactly on the tasks all three streams ran. The first two are the pre-registered primary and
    secondary contrasts; the slot part was named after the results were seen (exploratory: no verdict, not
    in the Holm family). Each with `paired_difference` (with `units`: over games). Empty without a placebo
    stream."""
    names = ("subtask-none", "subtask-text", "subtask-placebo")
    cols = ["part", "contrast", "role", "n", "estimate", "ci_low", "ci_high", "p", "test"]
    if not set(names) <= set(df.condition):
        return pd.DataFrame(columns=cols)
    df = df[df.task_id.isin(common_tasks(df, names))]
    rows = []
    for part, a, b, role in DECOMPOSITION:
        r = paired_difference(df, "condition", a, b, **({} if units is None else {"units": units}))
        rows.append({"part": part, "contrast": f"{b} − {a}", "role": role, "n": r.get("n_units", r["n_tasks"]),
                     "estimate": r["difference"], "ci_low": r["ci_low"], "ci_high": r["ci_high"], "p": r["p"],
                     "test": r["test"]})
    return pd.DataFrame(rows, columns=cols)


def situations(design: StudyDesign) -> pd.Series:
    """task id → its situation: the tasks whose instruction and first observation are the same text share
    one (numbered in stream order). Coin with two rooms has few: many test seeds start the same way."""
    tasks = design.tasks()
    texts = task_texts(tasks, design.env_options)
    codes = pd.factorize(pd.Series([texts[t] for t in tasks]))[0]
    return pd.Series(codes, index=pd.Index(tasks, name="task_id"), name="situation")


def library_growth(root: str | Path, design: StudyDesign) -> pd.DataFrame:
    """Skills in each memory stream's library after each recorded task (from the episodes' writes and the
    final library: merged skills count once, at their first write)."""
    rows = []
    for c in design.conditions:
        d = Path(root) / "streams" / c
        if c.endswith("-none") or not (d / "run.json").exists():
            continue
        born: dict[str, int] = {}
        for e in load_condition(d).episodes:
            for sid in e.written:
                born.setdefault(sid, e.position)
            rows.append({"condition": c, "position": e.position, "skills": len(born)})
    return pd.DataFrame(rows, columns=["condition", "position", "skills"])


def library_health(root: str | Path, design: StudyDesign) -> pd.DataFrame:
    """Per memory stream, whether the mechanism was exercised (`health.stream_health`: the final library's
    size against k, the writes behind it, the share of retrievals that chose a strict subset of the library
    as it stood, the skills' length, the share of writes from a successful span). A library no larger than
    k is retrieved whole: retrieval then selects nothing. The placebo's row is its hidden library (the one
    its placebo texts are shaped after)."""
    rows = []
    for c in design.conditions:
        d = Path(root) / "streams" / c
        if c.endswith("-none") or not (d / "run.json").exists():
            continue
        rows.append({"condition": c, **stream_health(load_condition(d).episodes,
                                                     library_of(d).state()["skills"], design.k)})
    return pd.DataFrame(rows).set_index("condition") if rows else pd.DataFrame()


def final_library(root: str | Path, condition: str) -> pd.DataFrame:
    """The final library of one memory stream, a row per skill (`health.skill_table`)."""
    return skill_table(library_of(Path(root) / "streams" / condition).state()["skills"])


def library_text(health: pd.Series, library: pd.DataFrame) -> str:
    """What one memory stream's library was, in words, from its `library_health` row and `final_library`."""
    if library.empty:
        return "**What the library was.** No skill was kept."
    top = library.sort_values("writes", ascending=False).iloc[0]
    return (f"**What the library was.** {int(health['writes'])} writes became {int(health['skills'])} skills: a "
            "new skill whose description has cosine ≥ 0.85 with a kept one is merged into it (the paper's "
            f"appendix-B rule). The largest, \"{top['description']}\", absorbed {int(top['writes'])} writes, "
            f"{int(top['from successes'])} of them from successful spans, and has {int(top['lines'])} lines. "
            f"{health['strict subset']:.1%} of the retrievals chose fewer skills than the library held. Whether "
            "merging as implemented is the paper's rule or a defect is for the next study to settle, which "
            "registers these figures in advance.")


def slot_size(root: str | Path, design: StudyDesign, conditions=("subtask-text", "subtask-placebo")) -> pd.DataFrame:
    """What filled the skill slot, per retrieval query: skills shown and their characters (description +
    body of each skill's final version — the records keep ids, not the text shown at the time). The
    placebo shows texts shaped line by line after its own hidden library's skills, so its slot is as long
    as those, not as long as what subtask-text retrieved."""
    rows = []
    for c in conditions:
        d = Path(root) / "streams" / c
        if c not in design.conditions or not (d / "run.json").exists():
            continue
        size = {sk["id"]: len(sk["description"]) + len(sk["body"]) for sk in library_of(d).state()["skills"]}
        per = [(len(ids), sum(size.get(i.removeprefix("placebo-"), 0) for i in ids))
               for e in load_condition(d).episodes for ids in retrievals(e)]
        if per:
            rows.append({"condition": c, "queries": len(per), "skills shown": float(np.mean([a for a, _ in per])),
                         "characters": float(np.mean([b for _, b in per]))})
    return pd.DataFrame(rows).set_index("condition") if rows else pd.DataFrame()


# -- the registration and its amendments --------------------------------------------------------------------
REGISTRATION_COMMIT = "4a78529bd6e7d3c251765409ee1c22c3ce27c014"   # profiles/study.yml and chapter 09, 2026-12-01
REGISTERED_CELLS = (0, 3, 5, 7)      # chapter 09's markdown cells that stated the design at that commit


@dataclass(frozen=True)
class Registration:
    """Where a pre-registered design was stated: its commit, its profile and its chapter's design cells
    (their Markdown source at that commit). Chapter 09's study and the second study (chapter 11) each
    have one."""
    commit: str
    profile_file: str
    chapter_file: str
    cells: tuple


STUDY_REGISTRATION = Registration(REGISTRATION_COMMIT, "profiles/study.yml", "chapters/09_study.ipynb",
                                  REGISTERED_CELLS)


def registration_markdown(project: str | Path, commit: str | Registration = REGISTRATION_COMMIT) -> str:
    """The pre-registration as committed: the profile and the chapter's design cells, verbatim from the
    commit (read with git); `commit` is chapter 09's commit or a `Registration`. `freeze_registration`
    keeps it beside the records, so that a copy of the book without git history shows the same text."""
    reg = commit if isinstance(commit, Registration) else replace(STUDY_REGISTRATION, commit=commit)
    project = Path(project)
    profile = _git("show", f"{reg.commit}:{reg.profile_file}", cwd=project)
    nb = json.loads(_git("show", f"{reg.commit}:{reg.chapter_file}", cwd=project))
    cells = ["".join(nb["cells"][i]["source"]) for i in reg.cells]
    date = _git("show", "-s", "--format=%ad", "--date=iso-strict", reg.commit, cwd=project)
    chapter = Path(reg.chapter_file).stem.split("_")[0]
    # The design text as its Markdown source, not rendered: verbatim, and its headings stay out of the page's
    # table of contents.
    return (f"Registered in commit `{reg.commit[:12]}` ({date}).\n\n**`{reg.profile_file}`**\n\n```yaml\n{profile}\n```"
            f"\n\n**Chapter {chapter}'s design text** (its Markdown source)\n\n````markdown\n" + "\n\n".join(cells)
            + "\n````\n")


def freeze_registration(project: str | Path, root: str | Path,
                        commit: str | Registration = REGISTRATION_COMMIT) -> Path:
    """Write `registration_markdown` to `<root>/registration/preregistration.md` (checked by a test against
    git whenever the history is there)."""
    path = registration_path(root)
    atomic_write_bytes(path, registration_markdown(project, commit).encode("utf-8"))
    return path


def registration_path(root: str | Path) -> Path:
    """`<root>/registration/preregistration.md`, the registration as `freeze_registration` kept it."""
    return Path(root) / "registration" / "preregistration.md"


def amendments(root: str | Path) -> pd.DataFrame:
    """The dated log of every change to the study's design or its reading after registration
    (`<root>/registration/amendments.yml`): date, commit, what changed, when (relative to the data)."""
    path = Path(root) / "registration" / "amendments.yml"
    rows = yaml.safe_load(path.read_text(encoding="utf-8")) if path.exists() else []
    return pd.DataFrame(rows or [], columns=["date", "commit", "when", "change"])


def seconds_per_call(root: str | Path, design: StudyDesign) -> pd.DataFrame:
    """Per stream: the model seconds of its live calls (the ones the response cache did not answer) —
    median, 90th percentile and largest. Wall seconds depend on what else ran on the machine in each
    sitting; this shows how much, so the cost table can say how far its seconds can be compared."""
    rows = []
    for c in design.conditions:
        d = Path(root) / "streams" / c
        if not (d / "run.json").exists():
            continue
        lat = [x.latency_s for e in load_condition(d).episodes for x in e.calls if not x.cached]
        if lat:
            q = np.quantile(lat, [0.5, 0.9])
            rows.append({"condition": c, "live_calls": len(lat), "median_s": q[0], "p90_s": q[1],
                         "max_s": max(lat)})
    return pd.DataFrame(rows, columns=["condition", "live_calls", "median_s", "p90_s", "max_s"]
                        ).set_index("condition")


def retrieved_utility(root: str | Path, design: StudyDesign, conditions=("task-text", "subtask-text"),
                      embedder=None) -> pd.DataFrame:
    """Per recorded episode of each text-memory stream that retrieved a scored skill: success and the mean
    specificity, abstractness and utility (§6 of the first paper) of the skills it retrieved, each
    stream's final library scored against the design's task texts (instruction + first observation;
    `utility.score_library`). Skills hygiene deleted before the end have no score and are left out."""
    tasks = design.tasks()
    texts = task_texts(tasks, design.env_options)
    frames = []
    for c in conditions:
        d = Path(root) / "streams" / c
        if c not in design.conditions or not (d / "run.json").exists():
            continue
        library = library_of(d)
        eps = [e for e in load_condition(d).episodes if e.task_id in texts]
        scores = score_library(library, [texts[t] for t in tasks], embedder=embedder)
        frames.append(retrieved_scores(eps, scores, identities(library)).assign(condition=c))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def utility_claim(scored: pd.DataFrame, units: pd.Series | None = None) -> dict:
    """The secondary claim's estimate: the slope of success on the retrieved skills' mean utility (per SD),
    within task types, clustered by task (`utility.success_slope`), or by game with `units`."""
    cluster = "task_id"
    if units is not None and len(scored):
        scored, cluster = scored.assign(game=scored.task_id.map(units)), "game"
    within = "task_type" if len(scored) and scored.task_type.nunique() > 1 else None
    if len(scored) and scored.utility.nunique() == 1:
        # Nothing to regress on: a claim with no test ("not tested"), and the table says why.
        note = f"utility is {scored.utility.iloc[0]:.3g} for every retrieved skill"
        if (scored.specificity == 0).all():
            note += (" (specificity 0: every pair of study tasks is more alike than any skill is to its nearest "
                     "task)")
        return {"score": "utility", "n": len(scored), "n_clusters": scored[cluster].nunique(),
                "estimate": float("nan"), "note": note + "; success cannot be regressed on a constant"}
    return success_slope(scored, "utility", within=within, cluster=cluster)


def _duration(hours: float) -> str:
    if pd.isna(hours):
        return "an unknown time"
    return f"{hours * 60:.0f} minutes" if hours < 1 else f"{hours:.1f} hours"


def _p_phrase(shown: str) -> str:
    """'= 0.21' or '< 0.001' from the claims table's p ('0.21', '<0.001'): never 'p = <0.001'."""
    return f"< {shown[1:]}" if shown.startswith("<") else f"= {shown}"


def _measured(r) -> str:
    """A claims-table row's measurement in prose: as the table prints it, then its p ("p = 0.21")."""
    return measured_text(r["estimate"], r["ci_low"], r["ci_high"]) + (
        f", p {_p_phrase(format_p(r['p']))}" if pd.notna(r["p"]) else "")


def _decomposition_text(claims: pd.DataFrame, split: pd.DataFrame, final: bool) -> str:
    """The exploratory split of the subtask effect (`decomposition`), with no verdict, and what the
    placebo it rests on was (`PlaceboMemory`): fragments of fixed texts cut to the line lengths of its
    own hidden library's skills, so the "slot" part is the effect of that text, not of an irrelevant skill."""
    del claims, final     # no sentence of interpretation rests on it: the placebo does not isolate the slot
    slot = split[split.role == "exploratory"].iloc[0]
    return (f"**Exploratory** (named after the results were seen; no verdict, not Holm-corrected): "
            f"{slot['contrast']}, {_measured(slot)}. The placebo's slot held fragments of fixed texts cut to the "
            "line lengths of its own hidden library's skills (words broken across lines), not well-formed "
            "skills and not matched to what subtask-text retrieved: this part measures that text, not the cost "
            "of a filled prompt slot as such.")


def _per_seed_text(per_seed: pd.DataFrame) -> str:
    """The registered per-seed tests in one sentence, labelled as what they are."""
    parts = [f"{r['claim']} p {_p_phrase(format_p(r['p']))}" for _, r in per_seed.iterrows() if pd.notna(r["p"])]
    return ("**As registered, per seed.** The registration tested each contrast over the test seeds as if they "
            f"were independent ({'; '.join(parts)}). The seeds repeat a few games and the agents are "
            "deterministic, so those p-values count copies of one observation as new evidence: they are shown "
            "as what was registered, not as verdicts.")


def _health_text(health: pd.DataFrame, k: int) -> str:
    """Whether retrieval selected anything, from `library_health`."""
    out = []
    for c, r in health.iterrows():
        if c.endswith("placebo"):
            continue
        out.append(f"{c} ended with {int(r['skills'])} skills from {int(r['writes'])} writes "
                   f"({r['writes from successes']:.0%} of them from successful spans); "
                   f"{r['strict subset']:.1%} of its {int(r['retrievals'])} retrievals chose fewer skills than "
                   "the library held")
    if not out:
        return ""
    return (f"**Was the mechanism exercised?** {'; '.join(out)}. With a library no larger than k = {k}, "
            "retrieval returns all of it: the treatment was one library trajectory (one stream order), "
            "not a replicated one.")


def closing_paragraph(claims: pd.DataFrame, design: StudyDesign, progress: pd.DataFrame, final: bool,
             model: str = "the profile's model", per_seed: pd.DataFrame | None = None,
             decomposition: pd.DataFrame | None = None, health: pd.DataFrame | None = None) -> str:
    """The chapter's closing paragraph, written from the claims table (tested over games: its n is games,
    its n_tasks the seeds behind them), the progress table, the registered per-seed claims (`per_seed`,
    never stated as verdicts), the exploratory `decomposition` (no verdict) and `library_health`. `model`
    is the backend that answered the recorded episodes. Numbers are formatted as the claims table formats
    them; no sentence says more than a table above it."""
    primary = claims[claims["role"] == "primary"] if len(claims) else claims
    games = int(primary["n"].dropna().max()) if len(primary) and primary["n"].notna().any() else 0
    seeds = primary["n_tasks"].dropna().max() if "n_tasks" in primary and primary["n_tasks"].notna().any() \
        else games
    seeds = int(seeds)
    hours = float(progress.loc["all", "hours"]) if "all" in progress.index else float("nan")
    lines = [f"**What was asked.** Does text-skill memory help at the subtask level and hurt at the task "
             f"level (the interaction), on {design.task_types} with {model}?",
             f"**What ran.** {len(design.conditions)} streams over the same {seeds} {design.split} seeds "
             f"({'the pre-registered n' if final else f'interim: {seeds} of the pre-registered {design.n_tasks}'}),"
             f" which are {games} distinct games; {design.max_steps} steps per episode, {_duration(hours)} of "
             "episodes in all."]
    found = []
    for _, r in claims.iterrows():
        if pd.isna(r["estimate"]):      # e.g. no retrieved skill had a score: say so, never "+nan"
            note = r.get("note") if isinstance(r.get("note"), str) and r.get("note") else "no estimate"
            est = f"n/a ({note})"
        else:
            est = _measured(r)
        verdict = r["verdict"] if final else "no verdict before n is reached"
        found.append(f"- {r['claim']} ({r['role']}; paper {r['paper']}): {est} — {verdict}.")
    lines.append(f"**What it found, tested over the {games} games.**\n" + "\n".join(found))
    if per_seed is not None and len(per_seed):
        lines.append(_per_seed_text(per_seed[per_seed["role"] == "primary"]))
    if decomposition is not None and len(decomposition):
        lines.append(_decomposition_text(claims, decomposition, final))
    if health is not None and len(health):
        lines.append(_health_text(health, design.k))
    mde = primary["mde"].dropna() if "mde" in primary else pd.Series(dtype=float)
    mde = mde[mde < float("inf")]
    if len(mde):
        span = format_number(mde.min(), signed=False) if mde.min() == mde.max() else \
            f"{format_number(mde.min(), signed=False)} to ±{format_number(mde.max(), signed=False)}"
        sure = (f"**How sure.** Over {games} games the primary contrasts could detect effects of ±{span} with "
                "80% power (each 'not resolved' names its own).")
        if mde.min() > PAPER_LARGEST:
            sure += (f" The paper's effects are at most {PAPER_LARGEST * 100:.1f} pp, far smaller: this study "
                     "can find a larger effect or rule out effects beyond its interval; it cannot confirm the "
                     "paper's average.")
        lines.append(sure)
    else:
        lines.append("**How sure.** No primary contrast has a minimum detectable effect at this n yet.")
    lines.append(f"**What it can and cannot show.** One model ({model}) on one setting ({design.task_types}) "
                 f"with {design.max_steps} steps, whose generator has only these {games} games, and one library "
                 f"trajectory per memory condition; the paper's numbers are averages over {PAPER_SCOPE}. It "
                 "cannot say whether the paper's averages hold for other models, larger ones especially, or on "
                 "the paper's benchmarks.")
    return "\n\n".join(lines)


# -- the pinned code and the background process ----------------------------------------------------------
def _git(*args, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def pinned_checkout(project: Path, root: Path) -> Path:
    """The checkout the study runs from: the commit recorded at its first start (`<root>/code.txt`), as a
    worktree under `.study-code/` (created on first use)."""
    pin = root / "code.txt"
    if not pin.exists():
        head = _git("rev-parse", "HEAD", cwd=project)
        if _git("status", "--porcelain", "--untracked-files=no", "lib", cwd=project):
            raise RuntimeError("the library has uncommitted changes: commit them before starting the study, "
                               "so that the code it runs from is recorded")
        pin.parent.mkdir(parents=True, exist_ok=True)
        pin.write_text(head + "\n")
    commit = pin.read_text().strip()
    # Always a worktree, even when the project is at that commit: the run imports modules lazily for
    # hours, and edits to the project's own files must never reach it.
    tree = project / ".study-code" / commit[:12]
    if not tree.exists():
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), commit], cwd=project, check=True,
                       capture_output=True)
    return tree


def machine() -> dict:
    """What a sitting ran on, as far as it can change the model's answers: llama.cpp's arithmetic depends
    on the CPU's vector instructions and on its own build, so a study run over several machines is
    several machines' answers (each episode still replays from its own records)."""
    cpu, flags = platform.processor() or platform.machine(), ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                cpu = value.strip()
            if key.strip() in ("flags", "Features") and not flags:
                flags = " ".join(sorted(value.split()))
    except OSError:
        pass
    try:
        llama = version("xllamacpp")
    except PackageNotFoundError:
        llama = ""
    return {"cpu": cpu, "cpu_flags": hashlib.sha256(flags.encode()).hexdigest()[:12] if flags else "",
            "cpus": os.cpu_count(), "python": platform.python_version(), "xllamacpp": llama}


def record_sitting(root: str | Path, commit: str) -> dict:
    """Append this sitting (its start, the pinned commit, `machine()`) to `<root>/sittings.jsonl`."""
    line = {"started": datetime.now().isoformat(timespec="seconds"), "commit": commit[:12], **machine()}
    with open(Path(root) / "sittings.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")
    return line


def sittings(root: str | Path) -> pd.DataFrame:
    """The recorded sittings, one row each, with `machine` numbering the distinct configurations."""
    path = Path(root) / "sittings.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    df = pd.DataFrame(rows, columns=["started", "commit", "cpu", "cpu_flags", "cpus", "python", "xllamacpp"])
    if df.empty:
        return df.assign(machine=pd.Series(dtype=int))
    key = df[["cpu", "cpu_flags", "cpus", "xllamacpp"]].astype(str).agg(" | ".join, axis=1)
    return df.assign(machine=pd.factorize(key)[0] + 1)


def sittings_text(df: pd.DataFrame) -> str:
    """One paragraph for the chapter: how many sittings were recorded and on how many machine configurations."""
    if df.empty:
        return "No sitting of this study was recorded (`start` records each one in `sittings.jsonl`)."
    configs = df.drop_duplicates("machine")
    named = "; ".join(f"{r.cpu}, {r.cpus} cores, CPU flags {r.cpu_flags or '?'}, xllamacpp {r.xllamacpp or '?'}"
                      for r in configs.itertuples())
    n, m = len(df), len(configs)
    return (f"Sittings recorded since {df.started.iloc[0].replace('T', ' ')} (earlier ones were not): {n}, on "
            f"{m} machine configuration{'s' * (m != 1)} ({named}). llama.cpp's arithmetic depends on the CPU's "
            "instructions and its own build, so episodes run on different configurations are different "
            "machines' answers; every episode replays from its own record either way.")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m skillbook.papers.breakdown.study", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    cal = sub.add_parser("calibrate", help="the no-memory agents on dev tasks of each candidate setting")
    cal.add_argument("--settings", default=",".join(CALIBRATION_SETTINGS))
    cal.add_argument("--n", type=int, default=8)
    cal.add_argument("--max-steps", type=int, default=30)
    for name in ("start", "run", "status", "stop"):
        p = sub.add_parser(name)
        p.add_argument("--profile", default="study")
        p.add_argument("--until", type=int, default=None, help="stop when every stream has this many tasks")
    sub.choices["stop"].add_argument("--wait", type=float, default=600.0,
                                     help="seconds to wait for the study to end before saving its answers")
    cal.add_argument("--backend", default=DEFAULT_BACKEND)
    for p in sub.choices.values():
        p.add_argument("--runs-root", default=None, help="default: runs/<profile> of the checkout")
    args = ap.parse_args(argv)
    interruptible()                # `stop` and Ctrl-C reach it, however it was started
    project = project_root()
    profile = getattr(args, "profile", "study")
    root = Path(args.runs_root) if args.runs_root else project / "runs" / profile
    try:
        if args.cmd == "calibrate":
            llm = get_llm(args.backend, ResponseCache.for_run(root / "calibration"))
            df = calibrate(root, llm, [s for s in args.settings.split(",") if s], n=args.n, max_steps=args.max_steps)
            print(calibration_table(df).round(2).to_string())
            return
        design = StudyDesign.from_profile(profile)
        if args.cmd == "status":
            print(status(root, design).to_string())
            print(background_state(root))
            return
        if args.cmd == "stop":
            stop_background(root, args.wait)
            return
        if args.cmd == "start":
            print(start_background(project, root, "skillbook.papers.breakdown.study", profile, args.until))
            return
        # run (foreground)
        backend = load_profile(profile).get("backend")
        llm = get_llm(backend, ResponseCache.for_run(root / "streams"))
        try:
            run_study(root, llm, design, until=args.until)
        except Interrupted as e:       # `stop` sends SIGINT: an expected end, not a crash with a traceback
            print(f"\n{e}", flush=True)
            sys.exit(130)
        print(status(root, design).to_string())
    except ProfileError as e:
        sys.exit(f"error: {e}")


# -- a study in the background (this study's and the second's CLI) ------------------------------------------
def background_state(root: Path) -> str:
    pid = root / "study.pid"
    if not pid.exists():
        return "no background process was started"
    state = "running" if alive(int(pid.read_text())) else "not running"
    return f"background process {pid.read_text().strip()}: {state} (log: {root / 'study.log'})"


def start_background(project: Path, root: Path, module: str, profile: str, until: int | None = None) -> str:
    """`python -m <module> run --profile <profile>` in the background, from the pinned commit's worktree
    (`pinned_checkout`), logged to `<root>/study.log`, its pid in `<root>/study.pid`; the sitting recorded."""
    pid = root / "study.pid"
    if pid.exists() and alive(int(pid.read_text())):
        return f"the study is already running (pid {pid.read_text().strip()}); see `status`"
    checkout = pinned_checkout(project, root)
    cmd = [sys.executable, "-m", module, "run", "--profile", profile, "--runs-root", str(root)] + \
        (["--until", str(until)] if until else [])
    log = open(root / "study.log", "ab")
    env = {**os.environ, "PYTHONPATH": str(checkout / "lib"), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(cmd, cwd=checkout, stdout=log, stderr=log, env=env, start_new_session=True)
    pid.write_text(f"{proc.pid}\n")
    commit = (root / "code.txt").read_text().strip()
    record_sitting(root, commit)
    return (f"the study runs in the background from {checkout} (commit {commit[:12]}), pid {proc.pid}; "
            f"log: {root / 'study.log'}")


def stop_background(root: Path, wait: float) -> None:
    """SIGINT to the background study (it stops within one agent step; nothing is lost), then its
    unsaved answers saved as a committed chunk (`save_pending_answers`)."""
    pid = root / "study.pid"
    if pid.exists() and alive(int(pid.read_text())):
        os.killpg(int(pid.read_text()), signal.SIGINT)
        print("stopping; finished episodes are recorded", flush=True)
        if not wait_for_exit(int(pid.read_text()), wait):
            print(f"the study has not ended after {wait:.0f} s; run `stop` again to save its answers")
            return
    else:
        print("no study is running")
    save_pending_answers(root)


def save_pending_answers(root: str | Path) -> Path | None:
    """Write the answers a stopped study left only in its SQLite cache as one new committed chunk.

    The run saves its answers after each chunk of episodes; one stopped mid-chunk leaves the rest in
    `streams/.responses.sqlite`, which is not committed (a new machine starts without it), so they would
    be lost with the machine, and the first replay would write them instead of only reading.
    """
    streams = Path(root) / "streams"
    if not streams.is_dir():
        return None
    cache = ResponseCache.for_run(streams)
    try:
        chunk = cache.save()
    finally:
        cache.close()
    print(f"saved the study's unsaved answers as {chunk.relative_to(Path(root))}" if chunk
          else "every answer of the study is in its committed chunks")
    return chunk


def wait_for_exit(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(1)
    return True


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:   # an exited process nobody has reaped yet (a container's init may never reap) is not running
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


if __name__ == "__main__":
    main()
