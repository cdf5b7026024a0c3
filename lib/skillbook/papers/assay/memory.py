"""Assay (the second paper): a curated, frozen library whose skills are shown through a mask.

`AssayMemory(library, include=..., masking=...)` retrieves like the first paper's memory — top-k by
description cosine above a threshold — but only among the skills the mask lets through:

* `include`: exactly the ids a random-masking trial (or a filter) shows, templates too (None: the whole
  library). The paper's §2.1 masks every skill, the protected templates (id prefix `tpl-`) included, so
  a trial shows a template only when its mask draws it; a filter that keeps templates lists them.
* `masking`: per-task causal masking. Our reconstruction (the paper's §2.3 is cut off in our copy, so
  this is a stated design choice): embed the test task; weight the dev tasks by a temperature softmax of
  their cosine to it (optionally only the k nearest); predict skill j's effect as the weighted mean of
  its row of the attribution matrix C (NaN cells left out); suppress skills predicted negative; keep
  the protected templates whatever their row says (the paper: protection applies to this stage);
  if fewer than `min_keep` non-template skills survive, fall back to the full library.

The library never changes while tasks run (Assay restructures it offline, between runs).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...memory import MemoryPolicy, content_hash
from ...skills.embeddings import get_embedder
from ...skills.library import THRESHOLD, TOP_K, SkillLibrary
from ...skills.record import Skill

TEMPLATE_PREFIX = "tpl-"


def is_template(skill: Skill | str) -> bool:
    return (skill if isinstance(skill, str) else skill.id).startswith(TEMPLATE_PREFIX)


@dataclass
class PerTaskMasking:
    """Predict each skill's effect on a new task from its effects on similar dev tasks."""
    C: np.ndarray                      # N skills × M dev tasks
    skill_ids: list[str]
    dev_texts: list[str]
    temperature: float = 0.1
    k_nearest: int | None = None
    min_keep: int = 1
    _dev: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self):
        self.C = np.asarray(self.C, dtype=float)
        if self.C.shape != (len(self.skill_ids), len(self.dev_texts)):
            raise ValueError(f"C must be {len(self.skill_ids)} skills × {len(self.dev_texts)} dev tasks, "
                             f"got {self.C.shape}")
        if self.temperature <= 0:
            raise ValueError(f"temperature must be positive, got {self.temperature!r}")

    def weights(self, task_text: str) -> np.ndarray:
        emb = get_embedder()
        if self._dev is None:
            self._dev = emb.embed(list(self.dev_texts))
        sims = self._dev @ emb.embed(task_text)
        z = sims / self.temperature
        if self.k_nearest is not None and self.k_nearest < len(z):
            cut = np.sort(z)[-self.k_nearest]
            z = np.where(z >= cut, z, -np.inf)
        w = np.exp(z - z.max())
        return w / w.sum()

    def predicted_effects(self, task_text: str) -> dict[str, float]:
        w = self.weights(task_text)
        out = {}
        for sid, row in zip(self.skill_ids, self.C):
            ok = ~np.isnan(row)
            out[sid] = float((w[ok] * row[ok]).sum() / w[ok].sum()) if ok.any() and w[ok].sum() > 0 else float("nan")
        return out

    def keep(self, skills: list[Skill], task_text: str) -> tuple[list[Skill], dict]:
        """The skills to show for this task, and what was decided (for the records)."""
        effects = self.predicted_effects(task_text)
        kept = [s for s in skills if is_template(s) or not effects.get(s.id, 0.0) < 0]   # unknown or NaN: kept
        n_real = sum(not is_template(s) for s in kept)
        fallback = n_real < self.min_keep
        decision = {"suppressed": [s.id for s in skills if s not in kept], "fallback": fallback}
        return (skills if fallback else kept), decision


class AssayMemory(MemoryPolicy):
    def __init__(self, library: SkillLibrary, include: set[str] | list[str] | None = None,
                 masking: PerTaskMasking | None = None, k: int = TOP_K, threshold: float = THRESHOLD, label: str = ""):
        self.library = library
        self.include = None if include is None else set(include)
        self.masking = masking
        self.k, self.threshold = k, threshold
        self.name = "assay" + (f"-{label}" if label else "")
        self.decisions: list[dict] = []

    def visible(self, context: dict | None = None) -> list[Skill]:
        skills = [s for s in self.library if self.include is None or s.id in self.include]
        if self.masking is not None and context is not None:
            skills, decision = self.masking.keep(skills, task_text(context))
            self.decisions.append({"task_id": context.get("task_id"), **decision})
        return skills

    def retrieve(self, query: str, context: dict) -> list[Skill]:
        """The visible templates (always shown, first), then the top-k visible other skills."""
        visible = self.visible(context)
        allowed = {s.id for s in visible}
        templates = [s for s in visible if is_template(s)]
        hits = self.library.search(query, k=self.k, threshold=self.threshold,
                                   where=lambda s: s.id in allowed and not is_template(s))
        return templates + [s for s, _ in hits]

    def settings(self) -> dict:
        masking = None if self.masking is None else {
            "C": content_hash(self.masking.C.tolist()), "skill_ids": self.masking.skill_ids,
            "dev_texts": content_hash(self.masking.dev_texts), "temperature": self.masking.temperature,
            "k_nearest": self.masking.k_nearest, "min_keep": self.masking.min_keep}
        return {**super().settings(), "library": content_hash(self.library.state()["skills"]),
                "include": sorted(self.include) if self.include is not None else None, "masking": masking,
                "k": self.k, "threshold": self.threshold}

    def state(self) -> dict:
        return {"decisions": self.decisions}

    def load_state(self, state: dict) -> None:
        self.decisions = list((state or {}).get("decisions", []))


def task_text(context: dict) -> str:
    """What stands for the task when it is compared with dev tasks: its first observation, then its
    instruction (observation first: a τ²-bench instruction is the long domain policy, the same for every
    task, and the embedder reads only the first 256 word pieces). Same as
    `experiment.task_texts(kind="observation+instruction")`."""
    return (context.get("observation", "").strip() + "\n" + context.get("instruction", "").strip()).strip()


__all__ = ["AssayMemory", "PerTaskMasking", "is_template", "task_text", "TEMPLATE_PREFIX"]
