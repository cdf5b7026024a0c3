"""The Assay pipeline (the second paper): measure each skill's causal effect, restructure, mask per task.

    1. upstream library   the bare subtask-level agent runs every training task twice, hardest first;
                          its sub-trajectories are induced into text skills (never shown to it); the
                          env's five protected templates (`tpl-`) are added.
    2. random masking     K trials; trial k shows each skill — templates too (the paper's §2.1: "all
                          skills without exception take part in attribution") — with probability f; each
                          trial runs the M dev tasks → outcomes (K × M) → attribution matrix C over all
                          N skills (attribution.py).
    3. restructuring      offline, in the paper's order: split (H ≥ τ_split: the model rewrites the skill
                          into two conditional variants, guided by its C row), retire (|Ĉ| < τ_retire),
                          merge (description cosine > τ_merge: keep the best Ĉ). Each step is kept only
                          if the dev pass rate does not drop (the dev gate). Templates are never split,
                          retired or merged (protected from "all subsequent modification").
    4. test conditions    none, full, global filter (Ĉ ≥ 0), restructured, restructured + per-task
                          masking, and full + per-task masking (masking alone). Every condition with a
                          library shows all its templates: per-task masking never suppresses them (the
                          paper's protection "applies to the downstream masking stage") and the global
                          filter, a curation step, leaves them alone like restructuring does.

Every run goes through `run.run_condition` into its own directory under the chapter's run
directory, so a killed pipeline resumes where it stopped; the masks are drawn once and saved.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

import numpy as np
import pandas as pd

from ...agent import AgentConfig
from ...agent.parsing import parse_json
from ...envs import EnvPool, require_splits, task_texts
from ...io import atomic_write_json, write_json_if_changed
from ...prompts import load
from ...run import Condition, load_condition, run_condition
from ...skills.library import THRESHOLD, TOP_K, SkillLibrary
from ...skills.record import Skill
from .. import check_agent
from ..breakdown import InducedMemory, imported_library, library_of
from .attribution import attribution_matrix, global_score, heterogeneity, sample_masks
from .memory import AssayMemory, PerTaskMasking, is_template
from .templates import template_skills, with_templates

OUTCOMES = ("score", "success")


CONDITIONS = ("none", "full", "global", "restructured", "restructured+masking", "full+masking")
DEFAULT_CONDITIONS = CONDITIONS[:5]   # the paper's; full+masking (masking alone) is an extra ablation


@dataclass
class AssaySettings:
    """What defines an Assay run: the method's knobs (recorded with the masks' attribution, `method`),
    then the run's tasks, agent and benchmark."""
    K: int = 12                    # masking trials
    f: float = 0.4                 # inclusion probability
    outcome: str = "score"         # what a trial records per dev task: the benchmark's score or success
    tau_split: float = 0.5         # heterogeneity H at or above which a skill is split
    max_split: int = 3             # at most this many split candidates (highest H first)
    tau_retire: float = 0.05       # |Ĉ| below which a skill is retired
    tau_merge: float = 0.85        # description cosine above which skills are merged
    temperature: float = 0.1       # per-task masking: softmax temperature over dev-task cosines
    k_nearest: int | None = None   # per-task masking: only the k nearest dev tasks (None: all, weighted)
    min_keep: int = 1              # per-task masking: fall back to the full library below this many skills
    k: int = TOP_K                 # retrieval top-k among the visible skills (templates always shown)
    threshold: float = THRESHOLD   # retrieval threshold
    # -- the run ----------------------------------------------------------------------------------------
    tasks: dict[str, list[str]] = field(default_factory=dict)   # {"train": [...], "dev": [...], "test": [...]}
    agent: AgentConfig = field(default_factory=AgentConfig)     # the task-level agent on dev and test
    env: str = "twx"               # the benchmark whose protected templates join the library
    env_options: dict = field(default_factory=dict)
    seed: int = 0                  # the masks' draw
    conditions: tuple[str, ...] = DEFAULT_CONDITIONS
    gold_lengths: dict[str, int] | None = None   # training tasks' gold lengths (None: from the benchmark)
    skills_folder: str = ""        # Agent Skills (SKILL.md): one more test condition, `skills`

    def validate(self) -> AssaySettings:
        """The method's knobs (what every stage reads)."""
        if self.outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {self.outcome!r}; valid: {', '.join(OUTCOMES)}")
        if not isinstance(self.K, int) or self.K < 2:
            raise ValueError(f"K must be an integer ≥ 2 (each skill needs trials with and without it), got {self.K!r}")
        if not 0 < self.f < 1:
            raise ValueError(f"f must be in (0, 1), got {self.f!r}")
        return self

    def validate_run(self) -> AssaySettings:
        """The knobs and the run: splits, conditions, the agent, a benchmark with templates — before any
        model time."""
        self.validate()
        require_splits(self.tasks, ("train", "dev", "test"), "run_assay")
        check_conditions(self.conditions)
        check_agent(self.agent, "task", "Assay")
        template_skills(self.env)            # an env without templates fails here
        return self

    def method(self) -> dict:
        """The knobs, as attribution.json records them beside the masks (the run's fields are not)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name in METHOD_FIELDS}


METHOD_FIELDS = ("K", "f", "outcome", "tau_split", "max_split", "tau_retire", "tau_merge", "temperature",
                 "k_nearest", "min_keep", "k", "threshold")


def fingerprint(library: SkillLibrary) -> str:
    text = json.dumps([[s.id, s.description, s.body] for s in library], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:10]


# -- 1. upstream -------------------------------------------------------------------------------------
def upstream_library(run_dir: Path, llm, train_tasks: list[str], agent: AgentConfig, env: str,
                     env_options: dict | None = None, gold_lengths: dict[str, int] | None = None,
                     upstream_temperature: float = 0.7) -> SkillLibrary:
    """The bare subtask-level agent on every training task twice, hardest (longest gold path) first: a
    greedy pass, then a sampled one (temperature `upstream_temperature`), inducing into one library."""
    if gold_lengths is None:
        with EnvPool(env_options) as envs:
            gold_lengths = {t: len(envs.get(env).gold_actions(t)) for t in train_tasks}
    order = sorted(train_tasks, key=lambda t: (-gold_lengths.get(t, 0), t))
    # Two passes into one library: greedy, then sampled — a second greedy pass would replay the first.
    library = None
    for n, temperature in enumerate((0.0, upstream_temperature)):
        config = replace(agent, level="subtask", temperature=temperature)
        d = Path(run_dir) / "upstream" / f"pass{n + 1}"
        start = library
        bare = Condition(f"upstream-pass{n + 1}", config,
                         lambda start=start: InducedMemory(llm, "text", show=False,
                                                           library=start.filtered(lambda s: True) if start else None),
                         stream=True)
        run_condition(d, llm, bare, order, env_options, desc=f"upstream pass {n + 1} (bare agent, T={temperature})")
        library = library_of(d)
    return with_templates(library, env)


# -- 2. random masking --------------------------------------------------------------------------------
def _outcomes(run_dir: Path, tasks: list[str], outcome: str) -> np.ndarray:
    by = load_condition(run_dir).frame.set_index("task_id")[outcome].astype(float)
    return np.array([by.get(t, np.nan) for t in tasks])


def assay_condition(name: str, config: AgentConfig, library: SkillLibrary, settings: AssaySettings, include=None,
                    masking=None, label="") -> Condition:
    """The task-level agent with a frozen library seen through a mask (`AssayMemory`)."""
    return Condition(name, config, lambda: AssayMemory(library, include=include, masking=masking, k=settings.k,
                                                       threshold=settings.threshold, label=label))


MASK_PROTOCOL = "every skill"   # what masks.json's draw covers (before issue 13: templates forced in)


def mask_trials(run_dir: Path, llm, library: SkillLibrary, dev: list[str], config: AgentConfig,
                settings: AssaySettings, seed: int = 0, env_options: dict | None = None, workers: int = 1,
                progress=None) -> dict:
    """Run the K masking trials on the dev tasks (resumable). Returns skill ids, masks, outcomes, C, Ĉ and H,
    over every skill of the library (templates included).

    The masks are drawn once and saved (masks.json); a later call with another library, K, f or seed is
    refused before any model call, and so is a draw saved under the old protocol (templates in every mask)."""
    settings.validate()
    run_dir = Path(run_dir)
    ids = [s.id for s in library]
    path = run_dir / "masks.json"
    asked = {"K": settings.K, "f": settings.f, "seed": seed}
    if path.exists():
        saved = json.loads(path.read_text())
        if saved.get("masked") != MASK_PROTOCOL:
            raise ValueError(f"{path} was drawn with the templates forced into every mask (before issue 13); "
                             "the masks now cover every skill: use a new run directory")
        was = {k: saved[k] for k in asked}
        if saved["skill_ids"] != ids or was != asked:
            other = [k for k in asked if was[k] != asked[k]] + (["library"] if saved["skill_ids"] != ids else [])
            raise ValueError(f"{path} was drawn for {was} over {len(saved['skill_ids'])} skills, not {asked} over "
                             f"{len(ids)} (differs: {', '.join(other)}); use a new run directory")
        masks = np.array(saved["masks"], bool)
    else:
        masks = sample_masks(len(ids), settings.K, settings.f, seed)
        atomic_write_json(path, {"skill_ids": ids, **asked, "masked": MASK_PROTOCOL,
                                 "masks": masks.astype(int).tolist()})
    outcomes = np.zeros((settings.K, len(dev)))
    for k in range(settings.K):
        include = {i for i, m in zip(ids, masks[k]) if m}
        d = run_dir / "masks" / f"k{k:02d}"
        run_condition(d, llm, assay_condition(f"mask{k:02d}", config, library, settings, include, label=f"mask{k:02d}"),
                      dev, env_options, workers, desc=f"mask {k + 1}/{settings.K}")
        outcomes[k] = _outcomes(d, dev, settings.outcome)
        if progress:
            progress(k)
    C = attribution_matrix(masks, outcomes)
    return {"skill_ids": ids, "masks": masks, "outcomes": outcomes, "C": C, "global": global_score(C),
            "heterogeneity": heterogeneity(C)}


# -- 3. restructuring ---------------------------------------------------------------------------------
class DevGate:
    """Dev-set pass rate of a library (all its skills visible), each distinct library run once."""

    def __init__(self, run_dir: Path, llm, dev: list[str], config: AgentConfig, settings: AssaySettings,
                 env_options: dict | None = None, workers: int = 1):
        self.run_dir, self.llm, self.dev, self.config = Path(run_dir), llm, dev, config
        self.settings, self.env_options, self.workers = settings, env_options, workers

    def pass_rate(self, library: SkillLibrary, label: str) -> float:
        d = self.run_dir / "gate" / f"{label}-{fingerprint(library)}"
        run_condition(d, self.llm, assay_condition(f"gate-{label}", self.config, library, self.settings,
                                                   label=f"gate-{label}"), self.dev,
                      env_options=self.env_options, workers=self.workers, desc=f"dev gate: {label}")
        return float(np.nanmean(_outcomes(d, self.dev, self.settings.outcome)))


def accept(rate_before: float, rate_after: float) -> bool:
    """The dev gate: a change is kept only if the dev pass rate does not drop."""
    return rate_after >= rate_before


def split_skill(llm, skill: Skill, c_row: np.ndarray, dev_texts: list[str], new_id) -> list[Skill] | None:
    """Two conditional variants of `skill`, written by the model from where it helped and hurt; None when
    the reply is not two usable variants (the skill then stays as it is)."""
    order = np.argsort(np.nan_to_num(c_row, nan=0.0))
    helped = [dev_texts[i][:200] for i in order[::-1] if c_row[i] > 0][:2] or ["(none)"]
    hurt = [dev_texts[i][:200] for i in order if c_row[i] < 0][:2] or ["(none)"]
    prompt = load("skillbook.papers.assay", "split").strip().format(description=skill.description, body=skill.body,
                                      helped="\n".join(f"- {h}" for h in helped),
                                      hurt="\n".join(f"- {h}" for h in hurt))
    c = llm.chat([{"role": "user", "content": prompt}], max_tokens=400, temperature=0.0)
    variants = parse_variants(c.text)
    if variants is None:
        return None
    return [Skill(id=new_id(), description=v["description"], body=v["body"], format="text",
                  provenance={"split_from": skill.id, "induction_level": skill.provenance.get("induction_level", "")})
            for v in variants]


def parse_variants(text: str) -> list[dict] | None:
    """The two {description, body} objects of a split reply, or None."""
    obj = parse_json(text, list)
    if obj is None or len(obj) != 2:
        return None
    out = []
    for v in obj:
        if not isinstance(v, dict) or not str(v.get("description", "")).strip() or not str(v.get("body", "")).strip():
            return None
        out.append({"description": str(v["description"]).strip(), "body": str(v["body"]).strip()})
    return out


def merge_clusters(library: SkillLibrary, ids: list[str], tau_merge: float) -> list[list[str]]:
    """Greedy clusters of skills whose description cosine exceeds `tau_merge` (single link, in library order)."""
    if len(ids) < 2:
        return [[i] for i in ids]
    emb = library.embedder.embed([library.get(i).description for i in ids])
    sims = emb @ emb.T
    parent = list(range(len(ids)))

    def root(a):
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for a in range(len(ids)):
        for b in range(a + 1, len(ids)):
            if sims[a, b] > tau_merge:
                parent[root(b)] = root(a)
    groups: dict[int, list[str]] = {}
    for a, i in enumerate(ids):
        groups.setdefault(root(a), []).append(i)
    return list(groups.values())


def split_candidates(ids: list[str], het, settings: AssaySettings) -> list[str]:
    """The skills to split: H ≥ τ_split, highest H first, at most `max_split`; never a template."""
    h = dict(zip(ids, het))
    cands = [i for i in ids if not is_template(i) and not np.isnan(h[i]) and h[i] >= settings.tau_split]
    return sorted(cands, key=lambda i: -h[i])[: settings.max_split]


def retire_candidates(ids: list[str], score, settings: AssaySettings) -> list[str]:
    """The skills to retire: |Ĉ| < τ_retire; never a template (a NaN Ĉ, no estimate, is kept)."""
    g = dict(zip(ids, score))
    return [i for i in ids if not is_template(i) and not np.isnan(g[i]) and abs(g[i]) < settings.tau_retire]


def restructure(library: SkillLibrary, attribution: dict, dev_texts: list[str], llm, gate: DevGate,
                settings: AssaySettings) -> tuple[SkillLibrary, pd.DataFrame]:
    """Split → retire → merge, each step kept only if it passes the dev gate. Returns the new library and
    a log (one row per step)."""
    ids, C = attribution["skill_ids"], attribution["C"]
    score = dict(zip(ids, attribution["global"]))
    log = []
    current = library
    rate = gate.pass_rate(current, "original")

    def step(name: str, candidate: SkillLibrary, changed: list[str], note: str = ""):
        nonlocal current, rate
        if not changed:
            log.append({"step": name, "changed": [], "rate_before": rate, "rate_after": rate, "accepted": False,
                        "note": note or "no candidates"})
            return
        after = gate.pass_rate(candidate, name)
        ok = accept(rate, after)
        log.append({"step": name, "changed": changed, "rate_before": rate, "rate_after": after, "accepted": ok,
                    "note": note})
        if ok:
            current, rate = candidate, after

    # split
    cands = split_candidates(ids, attribution["heterogeneity"], settings)
    candidate = current.filtered(lambda s: True)
    changed, failed = [], []
    for sid in cands:
        variants = split_skill(llm, current.get(sid), C[ids.index(sid)], dev_texts, lambda: candidate.new_id("v"))
        if variants is None:
            failed.append(sid)
            continue
        candidate.remove(sid)
        for v in variants:
            candidate.add(v)
        changed.append(sid)
    step("split", candidate, changed, f"unusable rewrites: {failed}" if failed else "")
    # retire
    retire = [i for i in retire_candidates(ids, attribution["global"], settings) if i in current]
    step("retire", current.filtered(lambda s: s.id not in retire), retire)
    # merge
    live = [s.id for s in current if not is_template(s)]
    drop = []
    for group in merge_clusters(current, live, settings.tau_merge):
        if len(group) > 1:
            best = max(group, key=lambda i: score.get(i, np.nan) if not np.isnan(score.get(i, np.nan)) else -np.inf)
            drop += [i for i in group if i != best]
    step("merge", current.filtered(lambda s: s.id not in drop), drop)
    return current, pd.DataFrame(log)


# -- 4. test conditions -------------------------------------------------------------------------------


def masking_for(library: SkillLibrary, attribution: dict, dev_texts: list[str],
                settings: AssaySettings) -> PerTaskMasking:
    """Per-task masking over the library's non-template skills; skills without a C row (e.g. split
    variants) get a NaN row and are kept."""
    rows = {i: r for i, r in zip(attribution["skill_ids"], attribution["C"])}
    ids = [s.id for s in library if not is_template(s)]
    C = np.array([rows.get(i, np.full(len(dev_texts), np.nan)) for i in ids]).reshape(len(ids), len(dev_texts))
    return PerTaskMasking(C, ids, dev_texts, temperature=settings.temperature, k_nearest=settings.k_nearest,
                          min_keep=settings.min_keep)


def check_conditions(conditions) -> list[str]:
    bad = [c for c in conditions if c not in CONDITIONS]
    if bad:
        raise ValueError(f"unknown Assay condition(s) {bad}; valid: {', '.join(CONDITIONS)}")
    return list(conditions)


def assay_conditions(config: AgentConfig, full: SkillLibrary, restructured: SkillLibrary, attribution: dict,
                    dev_texts: list[str], settings: AssaySettings, conditions=CONDITIONS) -> list[Condition]:
    check_conditions(conditions)
    keep = {i for i, g in zip(attribution["skill_ids"], attribution["global"]) if np.isnan(g) or g >= 0}
    keep |= {s.id for s in full if is_template(s)}              # protected: no curation step drops them
    make = {"none": lambda: Condition("none", config),
            "full": lambda: assay_condition("full", config, full, settings, label="full"),
            "global": lambda: assay_condition("global", config, full, settings, include=keep, label="global"),
            "restructured": lambda: assay_condition("restructured", config, restructured, settings,
                                                    label="restructured"),
            "restructured+masking": lambda: assay_condition(
                "restructured+masking", config, restructured, settings,
                masking=masking_for(restructured, attribution, dev_texts, settings), label="restructured-masked"),
            "full+masking": lambda: assay_condition(
                "full+masking", config, full, settings, masking=masking_for(full, attribution, dev_texts, settings),
                label="full-masked")}
    return [make[c]() for c in conditions]


def sign_flips(attribution: dict, margin: float = 0.0) -> list[str]:
    """Skills whose effect is above +margin on some dev task and below −margin on another."""
    out = []
    for sid, row in zip(attribution["skill_ids"], attribution["C"]):
        if np.nanmax(row, initial=-np.inf) > margin and np.nanmin(row, initial=np.inf) < -margin:
            out.append(sid)
    return out


def half_width_by_k(masks: np.ndarray, outcomes: np.ndarray, z: float = 1.96) -> pd.DataFrame:
    """Mean 95% half-width of the C cells using only the first k trials, k = 2..K: from the variance bound
    and from the data (Welch standard error of the two trial groups)."""
    rows = []
    for k in range(2, len(masks) + 1):
        m, o = masks[:k].astype(bool), outcomes[:k]
        n_in = m.sum(axis=0).astype(float)
        n_out = k - n_in
        ok = (n_in > 0) & (n_out > 0)
        if not ok.any():
            continue
        bound = z * np.sqrt(0.25 * (1 / n_in[ok] + 1 / n_out[ok]))
        se = []
        for j in np.flatnonzero(ok):
            a, b = o[m[:, j]], o[~m[:, j]]
            va = a.var(axis=0, ddof=1) if len(a) > 1 else np.full(o.shape[1], 0.25)
            vb = b.var(axis=0, ddof=1) if len(b) > 1 else np.full(o.shape[1], 0.25)
            se.append(z * np.sqrt(va / len(a) + vb / len(b)))
        rows.append({"K": k, "bound": float(bound.mean()), "data": float(np.mean(se))})
    return pd.DataFrame(rows)


@dataclass
class AssayRun:
    library: SkillLibrary
    attribution: dict
    restructured: SkillLibrary
    log: pd.DataFrame
    dev_texts: list[str]
    test: pd.DataFrame


def run_assay(run_dir: str | Path, llm, settings: AssaySettings, *, workers: int = 1) -> AssayRun:
    """The whole pipeline on one benchmark (`settings.tasks`: train, dev and test). Every stage resumes
    from its records. The agent on dev and test tasks is the task-level agent; `settings.skills_folder`
    (a folder of Agent Skills) adds the test condition `skills`: that library, retrieved as Assay retrieves."""
    s = settings.validate_run()
    run_dir = Path(run_dir)
    tasks, env_options = s.tasks, s.env_options
    skills_library = imported_library(s.skills_folder) if s.skills_folder else None
    library = upstream_library(run_dir, llm, tasks["train"], s.agent, s.env, env_options, s.gold_lengths)
    config = s.agent
    attribution = mask_trials(run_dir, llm, library, tasks["dev"], config, s, s.seed, env_options, workers)
    save_attribution(run_dir / "attribution.json", attribution, s)
    dev_texts = list(task_texts(tasks["dev"], env_options, kind="observation+instruction", llm=llm).values())
    gate = DevGate(run_dir, llm, tasks["dev"], config, s, env_options, workers)
    restructured, log = restructure(library, attribution, dev_texts, llm, gate, s)
    # the libraries it tested, kept whole (the conditions' settings record only their content hash), so
    # that they can be read, exported as Agent Skills (`skillbook.libraries`) or used elsewhere
    write_json_if_changed(run_dir / "libraries" / "upstream.json", {"library": library.state()}, indent=1)
    write_json_if_changed(run_dir / "libraries" / "restructured.json", {"library": restructured.state()}, indent=1)
    frames = []
    tested = assay_conditions(config, library, restructured, attribution, dev_texts, s, s.conditions)
    if skills_library is not None:
        tested.append(assay_condition("skills", config, skills_library, s, label="skills"))
    for c in tested:
        frames.append(run_condition(run_dir / "test" / c.name, llm, c, tasks["test"], env_options, workers,
                                    desc=f"test: {c.name}").frame)
    return AssayRun(library, attribution, restructured, log, dev_texts, pd.concat(frames, ignore_index=True))


def save_attribution(path: Path, attribution: dict, settings: AssaySettings) -> None:
    # a replay derives the same file from the records: it writes nothing (read-only records replay too)
    write_json_if_changed(Path(path), {"settings": settings.method(), "masked": MASK_PROTOCOL,
                                       "skill_ids": attribution["skill_ids"],
                                       "masks": attribution["masks"].astype(int).tolist(),
                                       "outcomes": attribution["outcomes"].tolist(),
                                       "C": [[None if np.isnan(v) else v for v in row]
                                             for row in attribution["C"]]})


__all__ = ["AssaySettings", "OUTCOMES", "CONDITIONS", "DEFAULT_CONDITIONS", "MASK_PROTOCOL", "fingerprint",
           "upstream_library", "mask_trials", "DevGate", "accept", "split_candidates", "retire_candidates",
           "split_skill", "parse_variants", "merge_clusters", "restructure", "masking_for", "check_conditions",
           "assay_conditions", "save_attribution", "assay_condition", "sign_flips", "half_width_by_k", "AssayRun",
           "run_assay"]
