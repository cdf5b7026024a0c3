"""The first paper's experiments: {task, subtask} × {none, text, code} on one ordered task stream, and
the follow-ups that reuse its final libraries on held-out tasks (E.2, E.3, E.4, the L1–L3 ablation).

Each memory condition solves the stream in order with one shared, growing skill library (skills
written after each task or subtask, retrieved before); each is compared, task by task, with the
no-memory agent of its own level. The run lives in `<root>/transfer/` (root = the profile's records):
chapter 02 runs it (`run_transfer(run_dir, llm, TransferSettings(...))`, the shape of every paper's
pipeline), chapters 03–05 and 08 read it with `load_transfer(run_dir)` and add their runs beside it
(`e2/`, `e3/`, `ablation/`, `e4/`).

Besides the paper's six conditions there are two placebo conditions, `task-placebo` and
`subtask-placebo` (`memory.PlaceboMemory` around the text memory): the same induction and retrieval,
but every retrieved skill is shown as an irrelevant text of the same shape in the same prompt slot.
A text memory that beats no memory but not its placebo helps because its prompt changed, not
because of what its skills say. They are not in `DEFAULT_CONDITIONS` (each is one more full stream).
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

import pandas as pd

from ...agent import AgentConfig
from ...envs import sample_tasks
from ...io import read_json, write_json_if_changed
from ...memory import NoMemory, PlaceboMemory, content_hash
from ...profiles import project_root
from ...run import (
    Condition,
    Result,
    final_memory,
    frame,
    live_minutes,
    load_condition,
    run_condition,
    run_conditions,
    run_sessions,
)
from ...skills.agentskills import import_skills
from ...skills.library import THRESHOLD, TOP_K, SkillLibrary
from .. import check_agent
from .hygiene import identities
from .induction import PROMPT_LEVELS
from .memory import InducedMemory, label_from_episodes, outcome_of, source_outcome
from .utility import retrieved_scores, score_library, split_at_median

DEFAULT_CONDITIONS = ("task-none", "task-text", "task-code", "subtask-none", "subtask-text", "subtask-code")
CONDITIONS = DEFAULT_CONDITIONS + ("task-placebo", "subtask-placebo", "task-skills", "subtask-skills")
RECORDS = "transfer"   # the run directory of the experiment, under the profile's records
# E.3's two halves of the subtask-level text library, by the final outcome of their source tasks. (Runs
# recorded before final outcomes were labelled split by the subtask's end state and live under other
# names, from-successes / from-failures, which this code no longer reads.)
E3_HALVES = {"from-successful-tasks": "success", "from-failed-tasks": "failure"}


def parse_conditions(spec: str | list[str]) -> list[str]:
    items = [c.strip() for c in (spec.split(",") if isinstance(spec, str) else spec) if c.strip()]
    bad = [c for c in items if c not in CONDITIONS]
    if bad or not items:
        raise ValueError(f"unknown condition(s) {bad}; valid: {', '.join(CONDITIONS)}")
    return items


def interleave(task_ids: list[str], seed: int = 0) -> list[str]:
    """A stream that alternates task types (seeded order within each type), so later tasks of a type
    come after earlier ones of every type: the setting in which skills can transfer."""
    by_type: dict[str, list[str]] = {}
    for t in task_ids:
        by_type.setdefault("/".join(t.split("/")[:2]), []).append(t)
    rng = random.Random(seed)
    for ids in by_type.values():
        rng.shuffle(ids)
    out = []
    for i in range(max(len(v) for v in by_type.values())):
        for key in sorted(by_type):
            if i < len(by_type[key]):
                out.append(by_type[key][i])
    return out


def imported_library(folder: str | Path) -> SkillLibrary:
    """A folder of Agent Skills (`skills.agentskills.import_skills`; relative to the project) as a library:
    refused whole, every fault named, before any model time."""
    path = Path(folder) if Path(folder).is_absolute() else project_root() / folder
    library = SkillLibrary()
    for skill in import_skills(path):
        library.add(skill)
    return library


def condition(name: str, llm, agent: AgentConfig, prompt_level: str = "L3", k: int = TOP_K,
              threshold: float = THRESHOLD, skills_folder: str = "") -> Condition:
    """One condition, '<level>-<format>' (format none, text, code, placebo or skills); memory conditions
    form one ordered stream; `agent` at the condition's level. The agent's prompt version (`agent.prompts`) is
    its memory's too. A
    `skills` condition retrieves, the same way, from a fixed library: the Agent Skills of `skills_folder`
    (a reader's own or another run's export), shown as text; a code skill's script is shown, never run."""
    level, fmt = parse_conditions([name])[0].split("-")
    config = replace(agent, level=level).validate()
    if fmt == "none":
        return Condition(name, config)
    options = {"prompt_level": prompt_level, "k": k, "threshold": threshold, "prompts": config.prompts}
    if fmt == "skills":
        if not skills_folder:
            raise ValueError(f"condition {name!r} needs `skills_folder`: a folder of Agent Skills (SKILL.md)")
        library = imported_library(skills_folder)
        # one ordered stream like the other memory conditions, so its library reads as theirs do
        return Condition(name, config, frozen(llm, library, k, threshold, prompt_level=prompt_level,
                                              prompts=config.prompts), stream=True)
    if fmt == "placebo":
        return Condition(name, config, lambda: PlaceboMemory(InducedMemory(llm, "text", **options)), stream=True)
    return Condition(name, config, lambda: InducedMemory(llm, format=fmt, **options), stream=True)


def frozen(llm, library: SkillLibrary, k: int, threshold: float, **options):
    """A factory of the read-only memory over a fixed library (E.2–E.4). Each memory gets its own copy:
    retrieval counts its skills' uses, and on the shared library those counts would change the content
    that fingerprints every later run drawing on it (a replay would then be refused as 'recorded with
    other settings')."""
    return lambda: InducedMemory(llm, "text", library=library.filtered(lambda sk: True), frozen=True, k=k,
                                 threshold=threshold, **options)


def library_of(run_dir: str | Path, stream: str = "stream") -> SkillLibrary:
    """The skill library a memory condition ended with (from its last checkpoint)."""
    return SkillLibrary().load_state(final_memory(run_dir, stream).get("library", {}))


@dataclass
class TransferSettings:
    """What defines the transfer run: its typed settings, saved as `experiment.json` (`record`) for the
    chapters that read it. `agent` is the agent of every condition; each condition sets its level."""
    stream: list[str]
    conditions: list[str]
    agent: AgentConfig
    env_options: dict
    prompt_level: str             # the induction prompt (L1-L3; the paper's is L3)
    k: int                        # retrieval (the paper's: skills.library.TOP_K, THRESHOLD)
    threshold: float
    task_types: str
    split: str
    n_tasks: int
    seed: int
    backend: str
    skills_folder: str = ""       # the Agent Skills of the task-/subtask-skills conditions

    def validate(self) -> TransferSettings:
        check_agent(self.agent, None, "the transfer run")     # each condition sets the level
        parse_conditions(self.conditions)
        if self.prompt_level not in PROMPT_LEVELS:
            raise ValueError(f"unknown prompt_level {self.prompt_level!r}; valid: {', '.join(PROMPT_LEVELS)}")
        return self

    def record(self) -> dict:
        """What experiment.json holds: the agent as it fingerprints its runs, without the level each
        condition sets; `skills_folder` only when set (records made before it existed replay unchanged)."""
        out = {k: v for k, v in self.__dict__.items() if k != "skills_folder" or v}
        out["agent"] = {k: v for k, v in self.agent.record().items() if k != "level"}
        return out

    @classmethod
    def from_record(cls, record: dict) -> TransferSettings:
        """The settings `record` wrote (an `agent` recorded with only the fields it set, as experiment.json
        held before issue 38, reads as the AgentConfig those fields make)."""
        return cls(**{**record, "agent": AgentConfig(**record["agent"])})


def run_transfer(run_dir: str | Path, llm, settings: TransferSettings, *, workers: int = 1) -> Transfer:
    """Run (or resume) every condition on the stream in `<run_dir>/<condition>/`; save the settings."""
    settings.validate()
    run_dir = Path(run_dir)
    s = settings
    conditions = [condition(c, llm, s.agent, s.prompt_level, s.k, s.threshold, s.skills_folder)
                  for c in s.conditions]
    run_conditions(run_dir, llm, conditions, s.stream, s.env_options, workers)
    # A replay writes nothing, also over records whose experiment.json holds the agent in its older form
    # (only the fields the chapter set): equal settings are left as they were written.
    path = run_dir / "experiment.json"
    if not (path.exists() and TransferSettings.from_record(read_json(path, "experiment settings")) == s):
        write_json_if_changed(path, s.record(), indent=1)
    return load_transfer(run_dir)


@dataclass
class Transfer:
    """The transfer experiment's records: its settings, each condition's episodes, the final libraries."""
    run_dir: Path
    settings: TransferSettings
    results: dict[str, Result] = field(default_factory=dict)

    @property
    def episodes(self) -> dict[str, list]:
        return {c: r.episodes for c, r in self.results.items()}

    @cached_property
    def df(self) -> pd.DataFrame:
        df = frame(self.results)
        df["level"] = df["condition"].str.split("-").str[0]
        df["format"] = df["condition"].str.split("-").str[1]
        return df

    @property
    def memory_conditions(self) -> list[str]:
        """The conditions with a memory (their streams grow a library), placebos included."""
        return [c for c in self.settings.conditions if not c.endswith("-none")]

    @property
    def skill_conditions(self) -> list[str]:
        """The memory conditions whose agents were shown their own skills (not the placebos)."""
        return [c for c in self.memory_conditions if not c.endswith("-placebo")]

    @cached_property
    def libraries(self) -> dict[str, SkillLibrary]:
        return {c: library_of(self.run_dir / c) for c in self.memory_conditions}

    def heldout(self, n: int, seed: int) -> list[str]:
        """Held-out tasks of the stream's task types (drawn with `seed`, none of them in the stream)."""
        s = self.settings
        return [t for t in sample_tasks(s.task_types, s.split, n, seed=seed, env_options=s.env_options)
                if t not in s.stream]

    def library(self, path: str) -> SkillLibrary:
        """The final library of a memory run under the experiment's folder (e.g. 'ablation/L1')."""
        return library_of(self.run_dir / path)

    def runs(self, folder: str) -> dict[str, Result]:
        """The recorded follow-up runs under `<transfer>/<folder>/` (e.g. 'e2'), by name."""
        base = self.run_dir / folder
        return {d.name: load_condition(d) for d in sorted(base.iterdir()) if (d / "run.json").exists()} \
            if base.exists() else {}

    def live_minutes(self, *folders: str) -> float:
        """Minutes of live model time the stream's conditions (no folder), or the runs under the given
        folders (e.g. 'e2', 'e3'), took when they were recorded (`run.live_minutes`; a replay adds none)."""
        if folders:
            dirs = [d for f in folders if (self.run_dir / f).exists() for d in sorted((self.run_dir / f).iterdir())]
        else:
            dirs = [self.run_dir / c for c in self.settings.conditions]
        sessions = [run_sessions(d) for d in dirs if (d / "run.json").exists()]
        sessions = [x for x in sessions if len(x)]
        return live_minutes(pd.concat(sessions, ignore_index=True)) if sessions else 0.0

    # -- follow-ups on held-out tasks --------------------------------------------------------------------
    def e2(self, llm, heldout: list[str], workers: int = 1) -> dict[str, Result]:
        """E.2: the task-level agent with no memory, its own (task-induced) library, and the subtask-induced one."""
        s = self.settings
        conds = [Condition("task-none", replace(s.agent, level="task"))]
        for c in ("task-text", "subtask-text"):
            if c in self.libraries:
                conds.append(Condition(f"task+{c}-library", replace(s.agent, level="task"),
                                       frozen(llm, self.libraries[c], s.k, s.threshold)))
        return run_conditions(self.run_dir / "e2", llm, conds, heldout, s.env_options, workers, prefix="E.2 ")

    def e3_libraries(self) -> tuple[dict[str, SkillLibrary], dict[str, int]]:
        """E.3's halves of the subtask-level text library (name → frozen library) and their sizes.

        A skill belongs to a half when every write that shaped it — its own and those merged into it —
        came from a task with that final outcome (`memory.outcome_of`); skills with sources of both
        outcomes are left out (`mixed`). Libraries recorded before `finish()` labelled final outcomes
        are labelled here from the stream's episode records (`labelled from records` says how many
        writes), never from their `source_success`, which was the subtask's end state."""
        if "subtask-text" not in self.libraries:
            return {}, {}
        lib = self.libraries["subtask-text"].filtered(lambda sk: True)   # a copy: labels go on it only
        filled = label_from_episodes(lib, self.episodes["subtask-text"])
        outcome = {sk.id: outcome_of(sk) for sk in lib}
        halves = {name: lib.filtered(lambda sk, want=want: outcome[sk.id] == want) for name, want in E3_HALVES.items()}
        sizes = {**{name: len(h) for name, h in halves.items()},
                 "mixed (left out)": sum(v == "mixed" for v in outcome.values()),
                 "unknown (left out)": sum(v == "unknown" for v in outcome.values()),
                 "labelled from records": filled}
        return halves, sizes

    def e3(self, llm, heldout: list[str], workers: int = 1) -> tuple[dict[str, Result], dict[str, int]]:
        """E.3: the subtask-level text library split by its skills' source-task outcome (`e3_libraries`),
        frozen, at subtask level, beside the subtask-level agent without memory."""
        s = self.settings
        config = replace(s.agent, level="subtask")
        halves, sizes = self.e3_libraries()
        conds = [Condition(name, config, frozen(llm, lib, s.k, s.threshold)) for name, lib in halves.items()]
        conds.append(Condition("subtask-none", config))
        return run_conditions(self.run_dir / "e3", llm, conds, heldout, s.env_options, workers, prefix="E.3 "), sizes

    def prompt_ablation(self, llm, n: int) -> dict[str, Result]:
        """The subtask-level text condition on the first `n` stream tasks with each induction prompt the main
        run did not use (L1 and L2 when it used L3, the paper's): the main run is the third arm, under its
        own level's name."""
        s = self.settings
        config = replace(s.agent, level="subtask")
        conds = [Condition(level, config, lambda level=level: InducedMemory(llm, "text", prompt_level=level, k=s.k,
                                                                             threshold=s.threshold), stream=True)
                 for level in PROMPT_LEVELS if level != s.prompt_level]
        return run_conditions(self.run_dir / "ablation", llm, conds, s.stream[:n], s.env_options, 1, prefix="prompt ")

    def e4_halves(self, scores: pd.DataFrame) -> dict[str, dict[str, SkillLibrary | None]]:
        """E.4's libraries per level: none, the level's final text library (full) and its halves above and
        below the median utility (`utility.split_at_median` on `scores`, rows of that condition)."""
        out = {}
        for level in ("task", "subtask"):
            source = f"{level}-text"
            if source in self.libraries:
                full = self.libraries[source]
                high, low = split_at_median(full, scores[scores["condition"] == source])
                out[level] = {"none": None, "full": full, "high": high, "low": low}
        return out

    def e4(self, llm, heldout: list[str], scores: pd.DataFrame, workers: int = 1) -> dict[str, Result]:
        """E.4: per level, no memory / the full text library / its high- and low-utility halves, frozen, on
        the held-out tasks; runs named '<level>-<half>'."""
        s = self.settings
        out = {}
        for level, halves in self.e4_halves(scores).items():
            config = replace(s.agent, level=level)
            for half, lib in halves.items():
                memory = NoMemory if lib is None else frozen(llm, lib, s.k, s.threshold)
                name = f"{level}-{half}"
                out[name] = run_condition(self.run_dir / "e4" / name, llm, Condition(name, config, memory), heldout,
                                          s.env_options, workers, desc=f"E.4 {name}")
        return out

    # -- every run that retrieved skills, once -----------------------------------------------------------
    def skill_runs(self, scores: pd.DataFrame) -> list[RetrievingRun]:
        """Every recorded run whose agent retrieved skills of this experiment: the memory streams, the
        prompt ablation's streams, and the frozen-library runs of E.2, E.3 and E.4 (`scores` rebuilds
        E.4's halves). Each with the library its skills are scored from and what it could retrieve."""
        out = [RetrievingRun(c, r, c, f"stream:{c}") for c, r in self.results.items() if c in self.skill_conditions]
        out += [RetrievingRun(f"ablation/{n}", r, f"ablation/{n}", f"stream:ablation/{n}")
                for n, r in self.runs("ablation").items()]
        e2 = self.runs("e2")
        for source in ("task-text", "subtask-text"):
            name = f"task+{source}-library"
            if name in e2 and source in self.libraries:
                out.append(RetrievingRun(f"e2/{name}", e2[name], source, _content(self.libraries[source])))
        e3 = self.runs("e3")
        for name, lib in self.e3_libraries()[0].items():
            if name in e3:
                out.append(RetrievingRun(f"e3/{name}", e3[name], "subtask-text", _content(lib)))
        e4 = self.runs("e4")
        for level, halves in self.e4_halves(scores).items():
            for half, lib in halves.items():
                if lib is not None and f"{level}-{half}" in e4:
                    out.append(RetrievingRun(f"e4/{level}-{half}", e4[f"{level}-{half}"], f"{level}-text",
                                             _content(lib)))
        return out

    def retrieval_episodes(self, scores: pd.DataFrame) -> tuple[list[tuple[RetrievingRun, object]], int]:
        """(run, episode) for every episode of `skill_runs`, each distinct episode once, and how many
        repeats were dropped. Two records are one episode when task, agent configuration and what the
        agent could retrieve (a frozen library's content, or the stream) are the same: e.g. E.2's
        task+task-text-library and E.4's task-full run the same agent with the same library on the same
        tasks, and a deterministic model replays the same episodes (the first in `skill_runs` order is
        kept)."""
        seen, out, dropped = set(), [], 0
        for run in self.skill_runs(scores):
            for e in run.result.episodes:
                key = (e.task_id, content_hash(e.config), run.content)
                if key in seen:
                    dropped += 1
                    continue
                seen.add(key)
                out.append((run, e))
        return out, dropped

    def pooled_retrievals(self, scores: pd.DataFrame, task_texts: list[str], tau: float) -> tuple[pd.DataFrame, int]:
        """One row per distinct episode (`retrieval_episodes`) that retrieved at least one scored skill:
        success and the mean specificity, abstractness and utility of the distinct skills it retrieved
        (`utility.retrieved_scores`), with its run and library; and the number of repeated episodes
        dropped. `scores` holds the stream libraries' skills (column `condition`); the ablation's own
        libraries are scored here against the same `task_texts` with the same `tau`. A code skill is
        scored by its final version."""
        runs, dropped = self.retrieval_episodes(scores)
        by_library = {c: scores[scores["condition"] == c] for c in self.skill_conditions}
        libraries = dict(self.libraries)
        rows = []
        for run in dict.fromkeys(r for r, _ in runs):
            if run.library not in by_library:
                libraries[run.library] = self.library(run.library)
                by_library[run.library] = score_library(libraries[run.library], task_texts, tau=tau)
            eps = [e for r, e in runs if r is run]
            rows.append(retrieved_scores(eps, by_library[run.library], identities(libraries[run.library]))
                        .assign(run=run.name, library=run.library))
        return (pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()), dropped

    def skill_uses(self, scores: pd.DataFrame) -> pd.DataFrame:
        """Every distinct retrieval of a stream library's skill (by its identity) in any run: condition
        (the library), skill_id, run, task_id, position, success."""
        runs, _ = self.retrieval_episodes(scores)
        ident = {c: identities(lib) for c, lib in self.libraries.items()}
        rows = [{"condition": r.library, "skill_id": ident[r.library].get(sid, sid), "run": r.name,
                 "task_id": e.task_id, "position": e.position, "success": e.success}
                for r, e in runs if r.library in ident for sid in dict.fromkeys(e.retrieved)]
        return pd.DataFrame(rows, columns=["condition", "skill_id", "run", "task_id", "position", "success"])

    def skills(self) -> pd.DataFrame:
        """One row per skill of every final library: what it is, how many versions it had (code
        overwrites; from the event log for records made before overwrites kept the id), how many writes
        were merged into it, where it came from, the state when its span ended and its source task's
        final outcome (labelled from the episode records for libraries
        recorded before `finish()` did it: column `labelled_from_records`), how many of its writes
        (its own and merged ones) ended a span unsuccessful in a task that then succeeded
        (`solved_after_failed_span`: the writes an end-of-span label files under failures), retrievals."""
        rows = []
        for c, recorded in self.libraries.items():
            lib = recorded.filtered(lambda sk: True)
            before = {sk.id: _outcome_or_none(sk.provenance) for sk in lib}
            earlier = pd.Series(list(identities(recorded).values()), dtype=object).value_counts()  # old records
            label_from_episodes(lib, self.episodes[c])
            for sk in lib:
                p = sk.provenance
                rows.append({"condition": c, "id": sk.id, "level": p.get("induction_level"), "format": sk.format,
                             "versions": sk.extra.get("version", 1 + int(earlier.get(sk.id, 0))),
                             "merged": len(p.get("merged_from", [])),
                             "description_words": len(sk.description.split()),
                             "body_lines": len(sk.body.strip().splitlines()), "created_at": sk.created_at,
                             "source_task": p.get("source_task"),
                             "span_success": p.get("span_success", p.get("source_success")),
                             "task_success": p.get("task_success"), "outcome": outcome_of(sk),
                             "solved_after_failed_span": sum(
                                 w.get("span_success", w.get("source_success")) is False
                                 and w.get("task_success") is True for w in [p] + p.get("merged_from", [])),
                             "labelled_from_records": before[sk.id] is None and "task_success" in p,
                             "retrievals": sk.stats.get("retrievals", 0)})
        return pd.DataFrame(rows, columns=SKILL_COLUMNS)


SKILL_COLUMNS = ["condition", "id", "level", "format", "versions", "merged", "description_words", "body_lines",
                 "created_at", "source_task", "span_success", "task_success", "outcome", "solved_after_failed_span",
                 "labelled_from_records", "retrievals"]


@dataclass(frozen=True, eq=False)
class RetrievingRun:
    """A recorded run whose agent retrieved skills: its name under the experiment's folder, its
    episodes, the library its skills are scored from (a stream condition or 'ablation/<level>'), and
    what it could retrieve ('stream:<name>' for a growing stream library, else a frozen library's
    content hash)."""
    name: str
    result: Result
    library: str
    content: str


def _content(library: SkillLibrary) -> str:
    """What an agent can retrieve from a frozen library: its skills' ids, formats, descriptions and bodies
    (not their statistics or provenance)."""
    return content_hash([[sk.id, sk.format, sk.description, sk.body] for sk in library])


def _outcome_or_none(provenance: dict) -> bool | None:
    """`memory.source_outcome`, None for records that hold only the old `source_success`."""
    try:
        return source_outcome(provenance)
    except ValueError:
        return None


def transfer_library(run_dir: str | Path, condition: str = "subtask-text") -> SkillLibrary | None:
    """The final library of one memory condition of the transfer run in `run_dir`, or None when it was not
    run."""
    path = Path(run_dir) / condition
    return library_of(path) if (path / "run.json").exists() else None


def load_transfer(run_dir: str | Path) -> Transfer:
    """The transfer experiment recorded in `run_dir` (a profile's `<root>/transfer/`)."""
    run_dir = Path(run_dir)
    path = run_dir / "experiment.json"
    if not path.exists():
        inner = run_dir / RECORDS / "experiment.json"
        raise FileNotFoundError(
            f"{path} does not exist: " + (f"pass the transfer run's own folder, {run_dir / RECORDS}"
                                          if inner.exists() else "execute chapter 02_induction (which runs "
                                          "the transfer stream) with this profile first"))
    settings = TransferSettings.from_record(read_json(path, "experiment settings"))
    return Transfer(run_dir, settings, {c: load_condition(run_dir / c) for c in settings.conditions})


__all__ = ["CONDITIONS", "DEFAULT_CONDITIONS", "E3_HALVES", "RECORDS", "parse_conditions", "interleave",
           "condition", "frozen", "library_of", "TransferSettings", "run_transfer", "Transfer", "RetrievingRun",
           "load_transfer", "transfer_library"]
