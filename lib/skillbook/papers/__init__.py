"""The four papers, one folder each, with the same inner names: `memory.py` (the paper's memory policy),
`pipeline.py` (its experiment), `prompts/` (its prompt templates), and what is particular to it.

    breakdown   Break it down, pass it on — task vs subtask induction, text vs code skills, utility
    assay       Assay — each skill's causal effect by random masking, restructuring, per-task masking
    skillrl     SkillRL — a hierarchical SkillBank distilled from successes and failures, evolved
    skillc      SKILLC — contrastive credit assignment over the steps of a success, macro skills
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field

from ..agent import AgentConfig


@dataclass(frozen=True)
class Paper:
    """What the book needs to know about a paper, in one place (docs/HOWTO.md: how to add one).

    `key` is its folder under `papers/` and its key in `references.bib`; `chapters` are the chapters whose
    claims records are its claims (chapter 10 groups them under `title`); `shared` names, per chapter, the
    run folders it reads that another chapter wrote (`make rerun` copies them with the chapter)."""
    key: str
    title: str
    chapters: tuple[str, ...]
    shared: dict[str, tuple[str, ...]] = field(default_factory=dict)
    pipeline: str = ""        # "module:function" of its experiment: run(run_dir, llm, settings, *, …) -> <Paper>Run
    settings: str = ""        # "module:Class" of that experiment's typed settings (`validate`, `record`)

    def run(self):
        """The paper's pipeline function, imported on first use (the registry is read by code that must not
        import every paper)."""
        return _resolve(self.pipeline, f"paper {self.key!r} has no pipeline registered")

    def settings_class(self) -> type:
        return _resolve(self.settings, f"paper {self.key!r} has no settings registered")


def _resolve(ref: str, missing: str):
    if not ref:
        raise LookupError(missing)
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def check_agent(agent, level: str | None, paper: str) -> AgentConfig:
    """`agent` as a pipeline's settings must hold it: an AgentConfig at the level the paper's agent runs at
    (`level` None: any, where each condition sets its own)."""
    if not isinstance(agent, AgentConfig):
        raise TypeError(f"{paper}: `agent` must be an AgentConfig (skillbook.agent.AgentConfig(max_steps=…)), "
                        f"got {type(agent).__name__}")
    if level is not None and agent.level != level:
        raise ValueError(f"{paper} runs the {level}-level agent; got AgentConfig(level={agent.level!r})")
    return agent.validate()


PAPERS: dict[str, Paper] = {}


def register_paper(paper: Paper) -> Paper:
    """Add `paper` to the registry (its key once; a chapter belongs to one paper)."""
    if paper.key in PAPERS:
        raise ValueError(f"a paper with key {paper.key!r} is registered already: {PAPERS[paper.key].title}")
    taken = {c: p.key for p in PAPERS.values() for c in p.chapters}
    clash = [c for c in paper.chapters if c in taken]
    if clash:
        raise ValueError(f"chapter(s) {clash} belong to paper {taken[clash[0]]!r} already")
    PAPERS[paper.key] = paper
    return paper


def paper_of(chapter: str) -> str:
    """The key of the paper whose claims `chapter` measures ("" for a chapter of no paper)."""
    return next((p.key for p in PAPERS.values() if chapter in p.chapters), "")


# The transfer run (chapter 02's) is read by the first paper's later chapters and by SKILLC's.
register_paper(Paper("breakdown", "Break it down, pass it on",
                     ("01_agents", "02_induction", "03_retrieval", "04_transfer", "05_utility", "09_study",
                      "11_ceiling"),
                     {c: ("transfer",) for c in ("02_induction", "03_retrieval", "04_transfer", "05_utility")},
                     "skillbook.papers.breakdown.pipeline:run_transfer",
                     "skillbook.papers.breakdown.pipeline:TransferSettings"))
register_paper(Paper("assay", "Assay", ("06_assay",), {}, "skillbook.papers.assay.pipeline:run_assay",
                     "skillbook.papers.assay.pipeline:AssaySettings"))
register_paper(Paper("skillrl", "SkillRL", ("07_skillrl",), {}, "skillbook.papers.skillrl.pipeline:run_skillrl",
                     "skillbook.papers.skillrl.pipeline:SkillRLSettings"))
register_paper(Paper("skillc", "SKILLC", ("08_credit",), {"08_credit": ("transfer",)},
                     "skillbook.papers.skillc.pipeline:run_skillc", "skillbook.papers.skillc.pipeline:SkillCSettings"))
