"""The first paper's experiments: {task, subtask} × {none, text, code} on one ordered task stream, and
the follow-ups that reuse its final libraries on held-out tasks (E.2, E.3, E.4, the L1–L3 ablation).

Each memory condition solves the stream in order with one shared, growing skill library (skills
written after each task or subtask, retrieved before); each is compared, task by task, with the
no-memory agent of its own level. The run lives in `<root>/transfer/` (root = the profile's records):
chapter 02 runs it, chapters 03–05 and 08 read it with `load_transfer(root)` and add their runs
beside it (`e2/`, `e3/`, `ablation/`, `e4/`).
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import pandas as pd

from ...agent import AgentConfig
from ...envs import sample_tasks
from ...io import atomic_write_json, read_json
from ...memory import NoMemory, PlaceboMemory
from ...run import Condition, Result, final_memory, frame, load_condition, run_condition, run_conditions
from ...skills.library import SkillLibrary
from .memory import InducedMemory

CONDITIONS = ("task-none", "task-text", "task-code", "subtask-none", "subtask-text", "subtask-code")
# The noise floor of a prompt-changing memory: the text memory with every retrieved skill shown as an
# irrelevant text of the same length (memory.PlaceboMemory).
PLACEBOS = ("task-placebo", "subtask-placebo")
RECORDS = "transfer"   # the run directory of the experiment, under the profile's records


def parse_conditions(spec: str | list[str]) -> list[str]:
    items = [c.strip() for c in (spec.split(",") if isinstance(spec, str) else spec) if c.strip()]
    bad = [c for c in items if c not in CONDITIONS + PLACEBOS]
    if bad or not items:
        raise ValueError(f"unknown condition(s) {bad}; valid: {', '.join(CONDITIONS + PLACEBOS)}")
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


def condition(name: str, llm, agent: dict, prompt_level: str = "L3", k: int = 5, threshold: float = 0.3) -> Condition:
    """One of the six conditions: '<level>-<format>'; memory conditions form one ordered stream."""
    level, fmt = parse_conditions([name])[0].split("-")
    if fmt == "none":
        return Condition(name, AgentConfig(level=level, **agent))
    if fmt == "placebo":
        return Condition(name, AgentConfig(level=level, **agent),
                         lambda: PlaceboMemory(InducedMemory(llm, format="text", prompt_level=prompt_level, k=k,
                                                             threshold=threshold)), stream=True)
    return Condition(name, AgentConfig(level=level, **agent),
                     lambda: InducedMemory(llm, format=fmt, prompt_level=prompt_level, k=k, threshold=threshold),
                     stream=True)


def frozen(llm, library: SkillLibrary, k: int, threshold: float, **options):
    """A factory of the read-only memory over a fixed library (E.2–E.4)."""
    return lambda: InducedMemory(llm, "text", library=library, frozen=True, k=k, threshold=threshold, **options)


def library_of(run_dir: str | Path, stream: str = "stream") -> SkillLibrary:
    """The skill library a memory condition ended with (from its last checkpoint)."""
    return SkillLibrary().load_state(final_memory(run_dir, stream).get("library", {}))


@dataclass
class TransferSpec:
    """What defines the transfer run (saved as experiment.json for the chapters that read it)."""
    stream: list[str]
    conditions: list[str]
    agent: dict
    env_options: dict
    prompt_level: str
    k: int
    threshold: float
    task_types: str
    split: str
    n_tasks: int
    seed: int
    backend: str


def run_transfer(root: str | Path, llm, spec: TransferSpec, workers: int = 1) -> "Transfer":
    """Run (or resume) every condition on the stream in `<root>/transfer/<condition>/`; save the spec."""
    run_dir = Path(root) / RECORDS
    conditions = [condition(c, llm, spec.agent, spec.prompt_level, spec.k, spec.threshold) for c in spec.conditions]
    run_conditions(run_dir, llm, conditions, spec.stream, spec.env_options, workers)
    atomic_write_json(run_dir / "experiment.json", spec.__dict__, indent=1)
    return load_transfer(root)


@dataclass
class Transfer:
    """The transfer experiment's records: its spec, each condition's episodes, the final libraries."""
    root: Path
    spec: TransferSpec
    results: dict[str, Result] = field(default_factory=dict)

    @property
    def run_dir(self) -> Path:
        return self.root / RECORDS

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
        return [c for c in self.spec.conditions if not c.endswith("-none")]

    @cached_property
    def libraries(self) -> dict[str, SkillLibrary]:
        return {c: library_of(self.run_dir / c) for c in self.memory_conditions}

    def heldout(self, n: int, seed: int) -> list[str]:
        """Held-out tasks of the stream's task types (drawn with `seed`, none of them in the stream)."""
        s = self.spec
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

    # -- follow-ups on held-out tasks --------------------------------------------------------------------
    def e2(self, llm, heldout: list[str], workers: int = 1) -> dict[str, Result]:
        """E.2: the task-level agent with no memory, its own (task-induced) library, and the subtask-induced one."""
        s = self.spec
        conds = [Condition("task-none", AgentConfig(level="task", **s.agent))]
        for c in ("task-text", "subtask-text"):
            if c in self.libraries:
                conds.append(Condition(f"task+{c}-library", AgentConfig(level="task", **s.agent),
                                       frozen(llm, self.libraries[c], s.k, s.threshold)))
        return run_conditions(self.run_dir / "e2", llm, conds, heldout, s.env_options, workers, prefix="E.2 ")

    def e3(self, llm, heldout: list[str], workers: int = 1) -> tuple[dict[str, Result], dict[str, int]]:
        """E.3: the subtask-level text library split by its skills' source outcome, frozen, at subtask level."""
        s = self.spec
        config = AgentConfig(level="subtask", **s.agent)
        conds, sizes = [], {}
        if "subtask-text" in self.libraries:
            full = self.libraries["subtask-text"]
            for label, want in (("from-successes", True), ("from-failures", False)):
                part = full.filtered(lambda sk, want=want: bool(sk.provenance.get("source_success")) == want)
                sizes[label] = len(part)
                conds.append(Condition(label, config, frozen(llm, part, s.k, s.threshold)))
        conds.append(Condition("subtask-none", config))
        return run_conditions(self.run_dir / "e3", llm, conds, heldout, s.env_options, workers, prefix="E.3 "), sizes

    def prompt_ablation(self, llm, n: int) -> dict[str, Result]:
        """The subtask-level text condition on the first `n` stream tasks with the L1 and L2 induction prompts."""
        s = self.spec
        config = AgentConfig(level="subtask", **s.agent)
        conds = [Condition(level, config, lambda level=level: InducedMemory(llm, "text", prompt_level=level, k=s.k,
                                                                             threshold=s.threshold), stream=True)
                 for level in ("L1", "L2")]
        return run_conditions(self.run_dir / "ablation", llm, conds, s.stream[:n], s.env_options, 1, prefix="prompt ")

    def e4(self, llm, heldout: list[str], halves: dict[str, tuple], workers: int = 1) -> dict[str, Result]:
        """E.4: per level, no memory / the full library / its high- and low-utility halves, frozen.
        `halves[level] = (full, high, low)` libraries."""
        s = self.spec
        out = {}
        for level, (full, high, low) in halves.items():
            config = AgentConfig(level=level, **s.agent)
            for half, lib in (("none", None), ("full", full), ("high", high), ("low", low)):
                memory = NoMemory if lib is None else frozen(llm, lib, s.k, s.threshold)
                name = f"{level}-{half}"
                out[name] = run_condition(self.run_dir / "e4" / name, llm, Condition(name, config, memory), heldout,
                                          s.env_options, workers, desc=f"E.4 {name}")
        return out


def transfer_library(root: str | Path, condition: str = "subtask-text") -> SkillLibrary | None:
    """The final library of one memory condition of the transfer experiment, or None when it was not run."""
    run_dir = Path(root) / RECORDS / condition
    return library_of(run_dir) if (run_dir / "run.json").exists() else None


def load_transfer(root: str | Path) -> Transfer:
    """The transfer experiment recorded under a profile's records (`<root>/transfer/`)."""
    run_dir = Path(root) / RECORDS
    path = run_dir / "experiment.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: execute chapter 02_induction (which runs the transfer "
                                "stream) with this profile first")
    spec = TransferSpec(**read_json(path, "experiment spec"))
    return Transfer(Path(root), spec, {c: load_condition(run_dir / c) for c in spec.conditions})


__all__ = ["CONDITIONS", "RECORDS", "parse_conditions", "interleave", "condition", "frozen", "library_of",
           "TransferSpec", "run_transfer", "Transfer", "load_transfer", "transfer_library"]
