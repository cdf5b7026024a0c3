"""The first paper's memory: induce a skill from each (sub-)trajectory, retrieve by description.

The level is the agent's (it hands over whole trajectories or sub-trajectories); this policy fixes
the format (text | code), the induction prompt level (L1–L3), retrieval (top-k, threshold) and which
source outcomes it learns from (all, or only successes / failures for the E.3 check).

Outcome labels in a skill's provenance (and in each entry of `merged_from`, one per merged write):

    span_success, span_score   the episode's state when the (sub)trajectory the skill was induced from
                               ended — for a subtask, not the task's outcome
    task_success, task_score   the source task's final outcome, set by `finish()` when its episode ends

Libraries recorded before these names hold only `source_success` / `source_score`, which meant the
span's state; `source_outcome` refuses to read a task outcome from them, and `label_from_episodes`
fills the final outcome in from the stream's episode records (see the E.3 follow-up in pipeline.py).
"""
from __future__ import annotations

from ...llm.backends import backend_fingerprint
from ...memory import MemoryPolicy, content_hash
from ...prompts import check_version, version_files
from ...records import Trajectory
from ...skills.library import THRESHOLD, TOP_K, SkillLibrary
from ...skills.record import FORMATS, Skill
from .hygiene import add_with_hygiene, code_name, definitions
from .induction import InductionError, induce, prompt, stop_of

SOURCES = ("all", "success", "failure")


class InducedMemory(MemoryPolicy):
    def __init__(self, llm, format: str = "text", prompt_level: str = "L3", k: int = TOP_K,
                 threshold: float = THRESHOLD, source: str = "all", library: SkillLibrary | None = None,
                 frozen: bool = False, min_steps: int = 1, show: bool = True, prompts: str = "v1"):
        if format not in FORMATS:
            raise ValueError(f"unknown skill format {format!r}; valid: {', '.join(FORMATS)}")
        if source not in SOURCES:
            raise ValueError(f"unknown induction source {source!r}; valid: {', '.join(SOURCES)}")
        self.llm, self.format, self.prompt_level = llm, format, prompt_level
        self.k, self.threshold, self.source, self.frozen, self.min_steps = k, threshold, source, frozen, min_steps
        self.library = library if library is not None else SkillLibrary()
        self.prompts = check_version(prompts)   # prompt version (skillbook.prompts), the agent's
        self.show = show   # False: induce but never show skills (Assay's bare upstream agent)
        self.name = (f"{format}" + ("" if source == "all" else f"-{source}") + ("-frozen" if frozen else "")
                     + ("" if show else "-bare"))
        self.failures: list[dict] = []   # replies that were not usable skills
        self._pending: list[dict] = []   # provenance of this episode's writes, labelled in finish()

    def retrieve(self, query: str, context: dict) -> list[Skill]:
        if not self.show:
            return []
        hits = self.library.search(query, k=self.k, threshold=self.threshold)
        for skill, sim in hits:
            skill.stats["retrievals"] = skill.stats.get("retrievals", 0) + 1
            skill.stats.setdefault("retrieved_by", []).append(
                {"task_id": context.get("task_id"), "position": context.get("position"), "similarity": round(sim, 4)})
        return [s for s, _ in hits]

    def write(self, trajectory: Trajectory, context: dict) -> list[Skill]:
        if self.frozen or len(trajectory.steps) < self.min_steps:
            return []
        # `source` can only see the span's state: the task's outcome is not known yet when a subtask's
        # skill is written. E.3 splits a finished library by the final outcome instead (`outcome_of`).
        if self.source == "success" and not trajectory.success or self.source == "failure" and trajectory.success:
            return []
        try:
            skill, c = induce(self.llm, trajectory, self.format, self.prompt_level, self.library.new_id(self.format[0]),
                             prompts=self.prompts)
        except InductionError as e:
            self.record_call("induction", e.completion)
            self.failures.append({"task_id": trajectory.task_id, "error": str(e)})
            self.library.log("rejected", task_id=trajectory.task_id, reason=str(e))
            return []
        self.record_call("induction", c)
        skill.created_at = context.get("position", 0)
        skill.provenance["stream_position"] = context.get("position", 0)
        # The same dict ends up as the skill's provenance, a new version's, or an entry of a merged skill's
        # `merged_from`: labelling it in finish() labels exactly this write.
        self._pending.append(skill.provenance)
        kept, event = add_with_hygiene(self.library, skill, merge_bodies=self._merge)
        return [kept] if kept is not None else []

    def finish(self, episode, context: dict) -> None:
        """Label what this episode wrote with the task's final outcome (a subtask's skill was written
        before the task ended)."""
        for provenance in self._pending:
            provenance["task_success"], provenance["task_score"] = bool(episode.success), float(episode.score)
        self._pending = []

    def _merge(self, old: Skill, new: Skill) -> str:
        text = prompt("merge_text", self.prompts).format(a=old.body, b=new.body)
        c = self.llm.chat([{"role": "user", "content": text}], max_tokens=200, temperature=0.0,
                          stop=stop_of("text", self.prompts), role="merge")
        self.record_call("merge", c)
        return c.text.strip() or old.body

    def settings(self) -> dict:
        return {**super().settings(), "format": self.format, "prompt_level": self.prompt_level, "k": self.k,
                "threshold": self.threshold, "source": self.source, "frozen": self.frozen, "min_steps": self.min_steps,
                "show": self.show, "library": content_hash(self.library.state()["skills"]) if len(self.library) else "",
                "llm": backend_fingerprint(self.llm.backend),   # the model, not where it is served
                # a later setting, recorded only where it is not the value earlier records had
                **({"prompts": self.prompts,
                    "prompt_files": content_hash(version_files("skillbook.papers.breakdown", self.prompts))}
                   if self.prompts != "v1" else {})}

    def callable_code(self, name: str) -> list[str] | None:
        for s in self.library:
            if s.format == "code" and code_name(s) == name:
                return definitions(self.library, s)
        return None

    def state(self) -> dict:
        return {"library": self.library.state(), "failures": self.failures}

    def load_state(self, state: dict) -> None:
        if state:
            self.library.load_state(state.get("library", {}))
            self.failures = list(state.get("failures", []))


def source_outcome(provenance: dict) -> bool | None:
    """The final outcome of the task one write was induced from, or None when it was not recorded.

    A provenance with only the old `source_success` (libraries recorded before `task_success` existed)
    raises: that field is the state when the subtask ended, and reading it as the task's outcome is the
    error this label corrects. Fill such libraries in with `label_from_episodes` first."""
    if "task_success" in provenance:
        return provenance["task_success"]
    if "source_success" in provenance:
        raise ValueError(f"skill from {provenance.get('source_task')!r} has only `source_success` (the state when "
                         "its subtask ended, recorded before final outcomes were): label it with "
                         "label_from_episodes(library, episodes) first")
    return None


def outcome_of(skill: Skill) -> str:
    """'success' / 'failure' when every write that shaped the skill (its own and those merged into it)
    came from a task that succeeded / failed; 'mixed' otherwise; 'unknown' without labels."""
    labels = {source_outcome(p) for p in [skill.provenance] + skill.provenance.get("merged_from", [])}
    if None in labels:
        return "unknown"
    return "mixed" if len(labels) > 1 else ("success" if labels == {True} else "failure")


def label_from_episodes(library: SkillLibrary, episodes) -> int:
    """Give every write in `library` that lacks a final outcome the outcome its source task had in
    `episodes` (the records of the stream that wrote the library: each task appears once in a stream);
    returns how many writes were labelled. For libraries recorded before `finish()` labelled them."""
    outcome = {e.task_id: (bool(e.success), float(e.score)) for e in episodes}
    n = 0
    for skill in library:
        for p in [skill.provenance] + skill.provenance.get("merged_from", []):
            if "task_success" not in p and p.get("source_task") in outcome:
                p["task_success"], p["task_score"] = outcome[p["source_task"]]
                n += 1
    return n


__all__ = ["InducedMemory", "SOURCES", "source_outcome", "outcome_of", "label_from_episodes"]
