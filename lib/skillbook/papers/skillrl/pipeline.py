"""SkillRL without weight updates (the third paper, §3.1–3.3): distil, build the SkillBank, evolve it.

    collect      the base agent (no skills) on training tasks; successes AND failures are kept
    distil       a teacher model (any backend; default the agent's) turns successes of each category into
                 task-specific strategy skills, a sample of all runs into general skills, and each failure
                 into a lesson (failure point, wrong reasoning, what should have been done, general
                 principle), which becomes a common mistake
    evolve       after each validation round on dev tasks, every category with success below δ (0.4)
                 gets its failed runs sampled — stratified by category, most severe (lowest score)
                 first, round-robin; at most 10 analysed, 5 in the prompt, the last 5 steps of each,
                 observations cut to 200 characters — and the teacher, shown the existing titles,
                 proposes 1–3 new skills (ids dyn_NNN); the bank grows

Cold-start SFT and GRPO (weight updates) are not here. A teacher reply that is not valid JSON is asked
again once (sampled, with a reminder) and then skipped with the error recorded.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ...agent import AgentConfig
from ...agent.parsing import parse_json
from ...envs import require_splits
from ...io import atomic_write_json
from ...prompts import load
from ...records import Episode, render_steps
from ...run import Condition, collect, load_episodes, run_condition
from ...skills.library import SkillLibrary
from .bank import bank_from_json, bank_skill, bank_to_json, kind, mistake, render_bank
from .memory import RawTrajectoryMemory, SkillBankMemory

DELTA = 0.4


def _t(name: str) -> str:
    """A prompt of SkillRL (`papers/skillrl/prompts/<name>.txt`)."""
    return load("skillbook.papers.skillrl", name).strip()


# -- teacher replies ----------------------------------------------------------------------------------
@dataclass
class Teacher:
    """A model that writes JSON; every failure to do so is recorded in `errors`."""
    llm: object
    max_tokens: int = 500
    errors: list = field(default_factory=list)
    calls: list = field(default_factory=list)

    def ask(self, prompt: str, expect: type, what: str):
        messages = [{"role": "user", "content": prompt}]
        c = self.llm.chat(messages, temperature=0.0, max_tokens=self.max_tokens)
        self.calls.append(c)
        value = parse_json(c.text, expect)
        if value is not None:
            return value
        retry = messages + [{"role": "assistant", "content": c.text},
                            {"role": "user", "content": "That was not valid JSON. Reply with the JSON only."}]
        c2 = self.llm.chat(retry, temperature=0.3, max_tokens=self.max_tokens)
        self.calls.append(c2)
        value = parse_json(c2.text, expect)
        if value is None:
            self.errors.append({"what": what, "reply": c.text[:500], "retry": c2.text[:500]})
        return value


def _items(value, fields: tuple[str, ...]) -> list[dict]:
    """The well-formed entries of a teacher's JSON array (strings for every field)."""
    out = []
    for v in value or []:
        if isinstance(v, dict) and all(isinstance(v.get(f), str) and v[f].strip() for f in fields):
            out.append({f: v[f].strip() for f in fields} | {k: v[k] for k in v if k not in fields})
    return out


# -- rendering trajectories for the teacher -------------------------------------------------------------
def render_run(episode: Episode, last_steps: int | None = None, obs_chars: int = 200) -> str:
    steps = episode.steps[-last_steps:] if last_steps else episode.steps
    lines = [f"Task ({episode.task_type}): {episode.instruction}"]
    if steps:
        lines.append(render_steps(steps, obs_chars))
    lines.append("Outcome: success." if episode.success else f"Outcome: failure (score {episode.score:.2f}).")
    return "\n".join(lines)


def _prefix(category: str) -> str:
    return re.sub(r"[^a-z]", "", category.lower())[:3] or "cat"


# -- distillation -----------------------------------------------------------------------------------------
def distil(teacher: Teacher, episodes: list, n_specific: int = 3, n_general: int = 4, max_lessons: int = 10,
           per_prompt: int = 3, last_steps: int = 12) -> SkillLibrary:
    """The initial SkillBank from the base agent's runs."""
    bank = SkillLibrary()
    by_cat: dict[str, list] = {}
    for e in episodes:
        by_cat.setdefault(e.task_type, []).append(e)
    for cat, eps in sorted(by_cat.items()):
        wins = [e for e in eps if e.success][:per_prompt]
        if not wins:
            continue
        prompt = _t("specific").format(category=cat, n=n_specific,
                                               trajectories="\n\n".join(render_run(e, last_steps) for e in wins))
        for i, v in enumerate(_items(teacher.ask(prompt, list, f"task-specific skills for {cat}"),
                                     ("title", "principle", "when_to_apply"))[:n_specific]):
            bank.add(bank_skill(f"{_prefix(cat)}_{i + 1:03d}", v["title"], v["principle"], v["when_to_apply"],
                                category=cat, source=[e.task_id for e in wins]))
    # one success and one failure per category at most, so the prompt stays short enough for a small teacher
    wins = [next(e for e in eps if e.success) for eps in by_cat.values() if any(e.success for e in eps)][:per_prompt]
    losses = [next(e for e in eps if not e.success) for eps in by_cat.values() if any(not e.success for e in eps)][:per_prompt]
    if wins or losses:
        prompt = _t("general").format(
            n=n_general, successes="\n\n".join(render_run(e, 6) for e in wins) or "(none)",
            failures="\n\n".join(render_run(e, 6) for e in losses) or "(none)")
        for i, v in enumerate(_items(teacher.ask(prompt, list, "general skills"),
                                     ("title", "principle", "when_to_apply"))[:n_general]):
            bank.add(bank_skill(f"gen_{i + 1:03d}", v["title"], v["principle"], v["when_to_apply"],
                                source=[e.task_id for e in wins + losses]))
    n = 0
    for e in [e for e in episodes if not e.success][:max_lessons]:
        lesson = teacher.ask(_t("lesson").format(trajectory=render_run(e, last_steps)), dict, f"lesson from {e.task_id}")
        fields = ("failure_point", "wrong_reasoning", "what_should_have_been_done", "general_principle")
        if lesson is None or not all(isinstance(lesson.get(f), str) and lesson[f].strip() for f in fields):
            continue
        n += 1
        bank.add(mistake(f"err_{n:03d}", lesson["failure_point"], lesson["wrong_reasoning"],
                         f"{lesson['what_should_have_been_done']} {lesson['general_principle']}",
                         source=[e.task_id], category=e.task_type))
    return bank


# -- recursive evolution ----------------------------------------------------------------------------------
def category_success(episodes) -> dict[str, float]:
    df = pd.DataFrame([{"category": e.task_type, "success": float(e.success)} for e in episodes])
    return df.groupby("category")["success"].mean().to_dict() if len(df) else {}


def triggered(success: dict[str, float], delta: float = DELTA) -> list[str]:
    """The categories whose validation success is below δ (the only ones evolution works on)."""
    return sorted(c for c, a in success.items() if a < delta)


def sample_failures(episodes, categories: list[str], max_analysed: int = 10) -> list:
    """Failed runs of the given categories: grouped by category, most severe (lowest score) first within
    each, taken round-robin across categories, at most `max_analysed`."""
    groups = {c: sorted([e for e in episodes if e.task_type == c and not e.success], key=lambda e: (e.score, e.task_id))
              for c in sorted(categories)}
    out = []
    while len(out) < max_analysed and any(groups.values()):
        for c in list(groups):
            if groups[c] and len(out) < max_analysed:
                out.append(groups[c].pop(0))
    return out


def evolution_round(teacher: Teacher, bank: SkillLibrary, episodes, delta: float = DELTA, max_analysed: int = 10,
                    in_prompt: int = 5, last_steps: int = 5, obs_chars: int = 200, max_new: int = 3) -> dict:
    """One round: returns {success, triggered, failures, added} and adds the new skills to `bank`."""
    success = category_success(episodes)
    cats = triggered(success, delta)
    out = {"success": success, "triggered": cats, "failures": [], "added": []}
    if not cats:
        return out
    failures = sample_failures(episodes, cats, max_analysed)
    out["failures"] = [e.task_id for e in failures]
    if not failures:
        return out
    titles = [s.extra.get("title") or s.extra.get("description") for s in bank if kind(s)]
    prompt = _t("evolve").format(
        failures="\n\n".join(render_run(e, last_steps, obs_chars) for e in failures[:in_prompt]),
        titles="; ".join(titles) or "(none)", categories=", ".join(cats))
    proposals = _items(teacher.ask(prompt, list, f"evolution ({', '.join(cats)})"), ("title", "principle", "when_to_apply"))
    n = sum(1 for s in bank if s.id.startswith("dyn_"))
    existing = {t.lower() for t in titles if t}
    for v in proposals[:max_new]:
        if v["title"].lower() in existing:
            continue
        n += 1
        cat = v.get("category") if v.get("category") in cats else (cats[0] if len(cats) == 1 else None)
        s = bank_skill(f"dyn_{n:03d}", v["title"], v["principle"], v["when_to_apply"], category=cat,
                       source=out["failures"][:in_prompt])
        bank.add(s)
        out["added"].append(s.id)
    return out


def save_bank(path: Path, bank: SkillLibrary, metadata: dict | None = None) -> None:
    atomic_write_json(Path(path), bank_to_json(bank, metadata), indent=1)


def load_bank(path: Path) -> tuple[SkillLibrary, dict]:
    return bank_from_json(json.loads(Path(path).read_text()))


def footprint(texts_skills: list[str], texts_raw: list[str]) -> dict:
    """Tokens of the injected skills vs the raw trajectories they came from (MiniLM's WordPiece tokenizer:
    a ratio, not a count in the agent model's own tokens)."""
    from ...skills.embeddings import get_embedder
    tok = get_embedder()._load_model().tokenizer
    count = lambda ts: int(sum(len(tok(t, add_special_tokens=False)["input_ids"]) for t in ts))  # noqa: E731
    s, r = count(texts_skills), count(texts_raw)
    return {"skill_tokens": s, "raw_tokens": r, "compression": (r / s) if s else np.nan}


# -- the experiment ------------------------------------------------------------------------------------------
CONDITIONS = ("none", "skillbank", "skillbank+evolution", "no-hierarchy", "raw-trajectories")


@dataclass
class SkillRLRun:
    banks: list                  # the bank after each round; banks[0] is the distilled one
    history: pd.DataFrame        # per round and category: validation success, triggered, skills added
    test: pd.DataFrame           # one row per test episode and condition
    train_episodes: list
    footprint: dict
    teacher_errors: list


def run_skillrl(run_dir: Path, llm, teacher_llm, tasks: dict[str, list[str]], agent: dict, rounds: int = 2,
                delta: float = DELTA, retrieval_delta: float = 0.3, top_k: int = 6, env_options: dict | None = None,
                workers: int = 1, conditions=CONDITIONS) -> SkillRLRun:
    """Collect → distil → validate and evolve `rounds` times → the test conditions. Every stage resumes:
    runs from their records, banks from `bank/roundN.json`."""
    bad = [c for c in conditions if c not in CONDITIONS]
    if bad:
        raise ValueError(f"unknown SkillRL condition(s) {bad}; valid: {', '.join(CONDITIONS)}")
    require_splits(tasks, ("train", "dev", "test"), "run_skillrl")
    run_dir = Path(run_dir)
    config = AgentConfig(level="task", **agent)
    train = collect(run_dir / "collect", llm, tasks["train"], config, env_options, workers)
    teacher = Teacher(teacher_llm)
    path = run_dir / "bank" / "round0.json"
    if path.exists():
        bank, meta = load_bank(path)
    else:
        bank = distil(teacher, train)
        dist = {c: {"success": int(sum(e.success for e in train if e.task_type == c)),
                    "failure": int(sum(not e.success for e in train if e.task_type == c))}
                for c in sorted({e.task_type for e in train})}
        meta = {"source": f"skillbook distillation by {teacher_llm.backend}", "total_memories_analyzed": len(train),
                "task_distribution": dist, "teacher_errors": list(teacher.errors)}
        save_bank(path, bank, meta)
    errors = list(meta.get("teacher_errors", []))
    def with_bank(name: str, b: SkillLibrary, **kw) -> Condition:
        return Condition(name, config, lambda: SkillBankMemory(b, delta=retrieval_delta, top_k=top_k, **kw))

    banks, rows = [bank], []
    for r in range(rounds):
        d = run_dir / "validation" / f"round{r}"
        run_condition(d, llm, with_bank(f"round{r}", bank, label=f"round{r}"), tasks["dev"], env_options, workers,
                      desc=f"validation round {r}")
        nxt = run_dir / "bank" / f"round{r + 1}.json"
        if nxt.exists():
            bank, meta = load_bank(nxt)
            info = meta["evolution"]
        else:
            bank = bank.filtered(lambda s: True)
            teacher.errors.clear()
            info = evolution_round(teacher, bank, load_episodes(d), delta)
            errors += teacher.errors
            save_bank(nxt, bank, {"round": r + 1, "evolution": info, "teacher_errors": list(teacher.errors)})
            info = json.loads(json.dumps(info))
        banks.append(bank)
        for cat, acc in info["success"].items():
            rows.append({"round": r, "category": cat, "success": acc, "triggered": cat in info["triggered"],
                         "added": len(info["added"]) if cat in info["triggered"] else 0})
    raw: dict[str, list[str]] = {}
    for e in train:
        raw.setdefault(e.task_type, []).append(render_run(e))
    make = {"none": lambda: Condition("none", config),
            "skillbank": lambda: with_bank("skillbank", banks[0], label="initial"),
            "skillbank+evolution": lambda: with_bank("skillbank+evolution", banks[-1], label="evolved"),
            "no-hierarchy": lambda: with_bank("no-hierarchy", banks[-1], general=False, mistakes=False,
                                              label="no-hierarchy"),
            "raw-trajectories": lambda: Condition("raw-trajectories", config, lambda: RawTrajectoryMemory(raw))}
    frames = []
    for name in conditions:
        eps = run_condition(run_dir / "test" / name, llm, make[name](), tasks["test"], env_options, workers,
                            desc=f"test: {name}").episodes
        df = pd.DataFrame([e.row() | {"executor_prompt_tokens": float(np.mean([c.prompt_tokens for c in e.calls
                                                                                if c.role == "executor"] or [np.nan]))}
                           for e in eps]).assign(condition=name)
        frames.append(df)
    fp = footprint([render_bank(list(banks[-1]), max_chars=10**9)], [render_run(e) for e in train])
    return SkillRLRun(banks, pd.DataFrame(rows), pd.concat(frames, ignore_index=True), train, fp, errors)


def citations(episode, skills) -> list[list[str]]:
    """Per step, the skills its reply names (by id, or by title, case-insensitive): the paper's figure 6."""
    out = []
    for s in episode.steps:
        text = f"{s.thought} {s.raw}".lower()
        out.append([k.id for k in skills if k.id.lower() in text
                    or (k.extra.get("title") and k.extra["title"].lower() in text)])
    return out


__all__ = ["CONDITIONS", "SkillRLRun", "run_skillrl", "citations", "DELTA", "parse_json", "Teacher", "render_run", "distil", "category_success", "triggered",
           "sample_failures", "evolution_round", "save_bank", "load_bank", "footprint"]
