"""SkillRL without weight updates (the third paper, §3.1–3.3): distil, build the SkillBank, evolve it.

    collect      the base agent (no skills) on training tasks; successes AND failures are kept
    distil       a teacher model (any backend; default the agent's) turns successes of each category into
                 task-specific strategy skills, a sample of all runs into general skills, and each failure
                 into a lesson (failure point, wrong reasoning, what should have been done, general
                 principle), which becomes a common mistake of that run's category
    evolve       after each validation round on dev tasks, every category with success below δ (0.4)
                 gets its failed runs sampled — stratified by category, most severe (lowest score)
                 first, round-robin; at most 10 analysed, 5 in the prompt, the last 5 steps of each,
                 observations cut to 200 characters — and the teacher, shown the existing titles,
                 proposes 1–3 new skills (ids dyn_NNN); the bank grows

    test         the conditions on test tasks; `prompt_footprint` says what each prompt carried

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
from ...memory import NoMemory
from ...prompts import load
from ...records import Episode, render_steps
from ...run import Condition, collect, run_condition
from ...skills.embeddings import get_embedder
from ...skills.library import SkillLibrary
from .. import check_agent
from ..breakdown import frozen, imported_library
from .bank import bank_from_json, bank_skill, bank_to_json, kind, mistake
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
    losses = [next(e for e in eps if not e.success) for eps in by_cat.values()
              if any(not e.success for e in eps)][:per_prompt]
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
        lesson = teacher.ask(_t("lesson").format(trajectory=render_run(e, last_steps)), dict,
                             f"lesson from {e.task_id}")
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
    proposals = _items(teacher.ask(prompt, list, f"evolution ({', '.join(cats)})"),
                       ("title", "principle", "when_to_apply"))
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


def evolution_rows(r: int, info: dict, bank: SkillLibrary) -> list[dict]:
    """One row per category of an evolution round: its validation success, whether it triggered evolution,
    and how many of the round's new skills are that category's (a new skill without a category — several
    categories triggered at once — counts as `added_general` on every triggered row, not as each one's)."""
    new = [bank.skills.get(i) for i in info["added"]]
    cats = [s.extra.get("category") for s in new if s is not None]
    return [{"round": r, "category": c, "success": acc, "triggered": c in info["triggered"],
             "added": sum(1 for x in cats if x == c),
             "added_general": sum(1 for x in cats if x is None) if c in info["triggered"] else 0}
            for c, acc in info["success"].items()]


def save_bank(path: Path, bank: SkillLibrary, metadata: dict | None = None) -> None:
    atomic_write_json(Path(path), bank_to_json(bank, metadata), indent=1)


def load_bank(path: Path) -> tuple[SkillLibrary, dict]:
    return bank_from_json(json.loads(Path(path).read_text()))


# -- resuming from records and bank files -------------------------------------------------------------------
class StaleRecords(ValueError):
    """Records or a bank file that were made under something other than what is asked now; the message
    names what to remove so that it is made again."""


def task_distribution(episodes) -> dict:
    """{category: {success, failure}} of runs, as the public layout's metadata writes it."""
    return {c: {"success": int(sum(e.success for e in episodes if e.task_type == c)),
                "failure": int(sum(not e.success for e in episodes if e.task_type == c))}
            for c in sorted({e.task_type for e in episodes})}


def evolution_inputs(episodes, delta: float = DELTA, max_analysed: int = 10) -> dict:
    """What an evolution round reads from validation runs: success by category and the failures it samples."""
    success = category_success(episodes)
    cats = triggered(success, delta)
    return {"success": success, "failures": [e.task_id for e in sample_failures(episodes, cats, max_analysed)]}


def check_retrieval(episodes, memory, where) -> None:
    """Every recorded (sub)task retrieved what `memory` retrieves now for the query it recorded.

    The run store compares settings; records converted from the first record format kept only the
    memory's name, so a changed retrieval would replay them unnoticed. This compares what matters. A
    record without its query (made before queries were recorded) cannot be checked and is refused too,
    unless the memory is none (whose prompt no query changes)."""
    for e in episodes:
        for sub in e.subtasks:
            if not sub.query and not isinstance(memory, NoMemory):
                raise StaleRecords(
                    f"{where}: {e.task_id} was recorded without the query its memory was asked with (records "
                    f"made before the task-level query); remove {where} and everything computed from it (later "
                    "bank files, later runs) to run it again")
            context = {"task_id": e.task_id, "task_type": e.task_type, "env": e.env, "level": e.agent,
                       "instruction": e.instruction}
            now = [s.id for s in memory.retrieve(sub.query, context)]
            if now != list(sub.retrieved):
                raise StaleRecords(
                    f"{where}: {e.task_id} was recorded retrieving {sub.retrieved} for the query {sub.query[:80]!r}, "
                    f"but this memory retrieves {now}: the records were made with another retrieval. Remove {where} "
                    "and everything computed from it (later bank files, later runs) to run it again")


# -- tokens per prompt ---------------------------------------------------------------------------------------
def wordpiece_tokens(text: str) -> int:
    """Tokens of `text` in the embedder's WordPiece vocabulary (the same counter on both sides of a ratio)."""
    return len(get_embedder()._load_model().tokenizer(text, add_special_tokens=False)["input_ids"])


def prompt_footprint(episodes: dict[str, list], memories: dict, raw: dict[str, list[str]], count=None) -> pd.DataFrame:
    """What one prompt carries, per test episode and condition (the paper's 10–20× is per prompt).

    From the records, in the agent model's own tokens:
        prompt_tokens        mean prompt of the episode's executor calls
        first_prompt_tokens  its first executor prompt, the one that carries the memory block
        block_tokens         first_prompt_tokens minus the same task's without memory (condition "none"): the
                             block itself, everything else in that prompt being the same; NaN without "none"
    Re-rendered from the recorded retrieval (`check_retrieval` has made sure it is the recorded one), counted
    with `count` (default: WordPiece, a ratio rather than the model's count):
        retrieved            the ids of what the prompt showed; other_category: how many of them belong to
                             another task category than the episode's
        block                the memory block as the prompt showed it
        block_count          its tokens
        experience_count     the raw training runs of the task's category in full: the experience the block
                             stands for, uncompressed
        compression          experience_count / block_count (NaN for an empty block)
    """
    count = count or wordpiece_tokens
    everything = RawTrajectoryMemory(raw, max_chars=None)
    experience = {c: count(everything.render(everything.retrieve("", {"task_type": c}))) for c in raw}
    rows = []
    for name, eps in episodes.items():
        memory = memories.get(name)
        for e in eps:
            prompts = [c.prompt_tokens for c in e.calls if c.role == "executor"]
            skills = []
            if memory is not None and e.subtasks:
                context = {"task_id": e.task_id, "task_type": e.task_type, "env": e.env, "level": e.agent,
                           "instruction": e.instruction}
                skills = memory.retrieve(e.subtasks[0].query, context)
            block = memory.render(skills) if skills else ""
            n = count(block) if block else 0
            rows.append({"condition": name, "task_id": e.task_id, "category": e.task_type,
                         "retrieved": [s.id for s in skills],
                         "other_category": sum(s.extra.get("category") not in (None, e.task_type) for s in skills),
                         "prompt_tokens": float(np.mean(prompts)) if prompts else np.nan,
                         "first_prompt_tokens": float(prompts[0]) if prompts else np.nan,
                         "block": block, "block_count": n, "experience_count": experience.get(e.task_type, 0),
                         "compression": experience.get(e.task_type, 0) / n if n else np.nan})
    df = pd.DataFrame(rows, columns=["condition", "task_id", "category", "retrieved", "other_category",
                                     "prompt_tokens", "first_prompt_tokens", "block", "block_count",
                                     "experience_count", "compression"])
    base = df[df.condition == "none"].set_index("task_id")["first_prompt_tokens"]
    df.insert(7, "block_tokens", df["first_prompt_tokens"] - df["task_id"].map(base))
    return df


# -- the experiment ------------------------------------------------------------------------------------------
CONDITIONS = ("none", "skillbank", "skillbank+evolution", "no-hierarchy", "raw-trajectories")


@dataclass
class SkillRLRun:
    banks: list                  # the bank after each round; banks[0] is the distilled one
    history: pd.DataFrame        # per round and category: validation success, triggered, skills added
    test: pd.DataFrame           # one row per test episode and condition
    train_episodes: list
    prompts: pd.DataFrame        # per test episode and condition: what its prompt carried (`prompt_footprint`)
    teacher_errors: list
    raw: dict = field(default_factory=dict)   # category → the rendered training runs (the raw-trajectory memory)


@dataclass
class SkillRLSettings:
    """What defines a SkillRL run (the bank's distillation, its evolution and the test conditions)."""
    tasks: dict[str, list[str]] = field(default_factory=dict)   # {"train": [...], "dev": [...], "test": [...]}
    agent: AgentConfig = field(default_factory=AgentConfig)     # the task-level policy's agent
    rounds: int = 2                # validation → evolution rounds
    delta: float = DELTA           # evolution trigger: a category's validation success below δ
    retrieval_delta: float = 0.3   # cosine threshold of task-specific skills (the paper's δ_s)
    top_k: int = 6                 # K task-specific skills
    mode: str = "embedding"        # retrieval mode (`SkillBankMemory`): embedding or template
    conditions: tuple[str, ...] = CONDITIONS
    env_options: dict = field(default_factory=dict)
    skills_folder: str = ""        # Agent Skills (SKILL.md): one more test condition, `skills`

    def validate(self) -> SkillRLSettings:
        bad = [c for c in self.conditions if c not in CONDITIONS]
        if bad:
            raise ValueError(f"unknown SkillRL condition(s) {bad}; valid: {', '.join(CONDITIONS)}")
        require_splits(self.tasks, ("train", "dev", "test"), "run_skillrl")
        check_agent(self.agent, "task", "SkillRL")
        if not isinstance(self.rounds, int) or self.rounds < 0:
            raise ValueError(f"rounds must be a non-negative integer, got {self.rounds!r}")
        SkillBankMemory(SkillLibrary(), mode=self.mode, top_k=self.top_k)   # its own parameter checks
        return self


def run_skillrl(run_dir: str | Path, llm, settings: SkillRLSettings, *, teacher=None, workers: int = 1,
                count=None) -> SkillRLRun:
    """Collect → distil → validate and evolve `rounds` times → the test conditions; `teacher` (default:
    `llm`) distils and evolves the bank.

    Every stage resumes: runs from their records, banks from `bank/roundN.json` (a bank in the public
    layout placed at `bank/round0.json` is used as the distilled one). A bank is always used as read back
    from its file, so a fresh and a resumed run hold the same records in the same order (the file's:
    general, task-specific by category, mistakes) and their memories the same settings. A bank file is
    checked against the runs it was made from (round 0: the training runs' task distribution, when this
    book distilled it; round N + 1: validation round N's success by category and sampled failures), and
    every SkillBank or raw-trajectory run against the retrieval asked for (`check_retrieval`): what does
    not match is refused (`StaleRecords`), never silently reused. `count` counts tokens for the
    compression ratio (`prompt_footprint`). `settings.skills_folder` adds the test condition `skills`:
    that library, retrieved by description (top_k, at `retrieval_delta`)."""
    s = settings.validate()
    tasks, env_options, conditions = s.tasks, s.env_options, list(s.conditions)
    rounds, delta, retrieval_delta, top_k, mode = s.rounds, s.delta, s.retrieval_delta, s.top_k, s.mode
    teacher_llm = teacher or llm
    skills_library = imported_library(s.skills_folder) if s.skills_folder else None
    run_dir = Path(run_dir)
    config = s.agent
    train = collect(run_dir / "collect", llm, tasks["train"], config, env_options, workers)
    teacher = Teacher(teacher_llm)
    path = run_dir / "bank" / "round0.json"
    if path.exists():
        bank, meta = load_bank(path)
        if str(meta.get("source", "")).startswith("skillbook distillation") and \
                meta.get("task_distribution") != task_distribution(train):
            raise StaleRecords(f"{path} was distilled from other training runs ({meta.get('task_distribution')}, now "
                               f"{task_distribution(train)}); remove the bank files to distil again")
    else:
        bank = distil(teacher, train)
        meta = {"source": f"skillbook distillation by {teacher_llm.backend}", "total_memories_analyzed": len(train),
                "task_distribution": task_distribution(train), "teacher_errors": list(teacher.errors)}
        save_bank(path, bank, meta)
        bank, meta = load_bank(path)      # the file is the bank: a resumed run sees the same records, in its order
    errors = list(meta.get("teacher_errors", []))

    def memory(b: SkillLibrary, **kw):
        return lambda: SkillBankMemory(b, mode=mode, delta=retrieval_delta, top_k=top_k, **kw)

    def checked(d: Path, c: Condition, ids: list[str], desc: str) -> list:
        eps = run_condition(d, llm, c, ids, env_options, workers, desc=desc).episodes
        check_retrieval(eps, c.memory(), d)
        return eps

    banks, rows = [bank], []
    for r in range(rounds):
        d = run_dir / "validation" / f"round{r}"
        val = checked(d, Condition(f"round{r}", config, memory(bank, label=f"round{r}")), tasks["dev"],
                      f"validation round {r}")
        nxt = run_dir / "bank" / f"round{r + 1}.json"
        if nxt.exists():
            bank, meta = load_bank(nxt)
            info = meta["evolution"]
            seen = {"success": info.get("success"), "failures": info.get("failures")}
            if seen != evolution_inputs(val, delta):
                raise StaleRecords(f"{nxt} was evolved from other validation runs than {d} holds ({seen} vs "
                                   f"{evolution_inputs(val, delta)}); remove it and the later bank files and runs")
        else:
            bank = bank.filtered(lambda s: True)
            teacher.errors.clear()
            info = evolution_round(teacher, bank, val, delta)
            errors += teacher.errors
            save_bank(nxt, bank, {"round": r + 1, "evolution": info, "teacher_errors": list(teacher.errors)})
            bank, meta = load_bank(nxt)
            info = meta["evolution"]
        banks.append(bank)
        rows += evolution_rows(r, info, bank)
    raw: dict[str, list[str]] = {}
    for e in train:
        raw.setdefault(e.task_type, []).append(render_run(e))
    make = {"none": lambda: Condition("none", config),
            "skillbank": lambda: Condition("skillbank", config, memory(banks[0], label="initial")),
            "skillbank+evolution": lambda: Condition("skillbank+evolution", config, memory(banks[-1], label="evolved")),
            "no-hierarchy": lambda: Condition("no-hierarchy", config, memory(banks[-1], general=False, mistakes=False,
                                                                             label="no-hierarchy")),
            "raw-trajectories": lambda: Condition("raw-trajectories", config, lambda: RawTrajectoryMemory(raw))}
    if skills_library is not None:
        make["skills"] = lambda: Condition("skills", config, frozen(llm, skills_library, top_k, retrieval_delta))
        conditions = [*conditions, "skills"]
    frames, episodes, memories = [], {}, {}
    for name in conditions:
        c = make[name]()
        eps = checked(run_dir / "test" / name, c, tasks["test"], f"test: {name}")
        episodes[name], memories[name] = eps, c.memory()
        df = pd.DataFrame([e.row() | {"executor_prompt_tokens": float(np.mean([c.prompt_tokens for c in e.calls
                                                                                if c.role == "executor"] or [np.nan]))}
                           for e in eps]).assign(condition=name)
        frames.append(df)
    prompts = prompt_footprint(episodes, {k: v for k, v in memories.items() if k != "none"}, raw, count)
    return SkillRLRun(banks, pd.DataFrame(rows), pd.concat(frames, ignore_index=True), train, prompts, errors, raw)


def citations(episode, skills) -> list[list[str]]:
    """Per step, the skills its reply names (by id, or by title, case-insensitive): the paper's figure 6."""
    out = []
    for s in episode.steps:
        text = f"{s.thought} {s.raw}".lower()
        out.append([k.id for k in skills if k.id.lower() in text
                    or (k.extra.get("title") and k.extra["title"].lower() in text)])
    return out


__all__ = ["CONDITIONS", "SkillRLRun", "SkillRLSettings", "run_skillrl", "citations", "DELTA", "parse_json", "Teacher",
           "render_run",
           "distil", "category_success", "triggered", "sample_failures", "evolution_round", "save_bank", "load_bank",
           "StaleRecords", "task_distribution", "evolution_inputs", "check_retrieval", "wordpiece_tokens",
           "prompt_footprint"]
