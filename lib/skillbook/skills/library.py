"""The one skill store: add, remove, search by description embedding, persist atomically.

Every paper's memory keeps its skills here (a SkillRL bank and a SKILLC library are views and
extensions of the same records). Retrieval is cosine similarity on the description field only:

    sim(q, s) = e(q) · e(desc(s))      (unit-norm all-MiniLM-L6-v2 vectors)
    retrieve(q) = the top-k skills with sim ≥ threshold, best first (paper: k = 5, threshold = 0.3)
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..io import atomic_write_json, read_json
from .embeddings import DIM, Embedder, get_embedder
from .record import Skill

LIBRARY_FORMAT = 1


# Retrieval as the first paper's appendix B sets it (top 5 by cosine of descriptions, at least 0.3): the
# book's default wherever a paper retrieves from a SkillLibrary, defined here once.
TOP_K = 5
THRESHOLD = 0.3


class SkillLibrary:
    def __init__(self, embedder: Embedder | None = None):
        self._embedder = embedder
        self.skills: dict[str, Skill] = {}
        self.events: list[dict] = []       # what hygiene did: added, merged, overwritten, dropped, deleted
        self._matrix: np.ndarray | None = None
        self._ids: list[str] = []
        self._counter = 0

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            self._embedder = get_embedder()
        return self._embedder

    # -- records ------------------------------------------------------------------------------------
    def new_id(self, prefix: str = "s") -> str:
        self._counter += 1
        return f"{prefix}{self._counter:04d}"

    def add(self, skill: Skill) -> Skill:
        if skill.id in self.skills:
            raise ValueError(f"skill id {skill.id!r} already in the library")
        self.skills[skill.id] = skill
        self._append_vector(skill)
        return skill

    def replace(self, skill_id: str, skill: Skill) -> Skill:
        """Put `skill` in place of `skill_id` (same position in retrieval order)."""
        if skill_id not in self.skills:
            raise KeyError(skill_id)
        self.skills = {(skill.id if k == skill_id else k): (skill if k == skill_id else v)
                       for k, v in self.skills.items()}
        self._matrix = None
        return skill

    def remove(self, skill_id: str) -> Skill:
        skill = self.skills.pop(skill_id)
        self._matrix = None
        return skill

    def get(self, skill_id: str) -> Skill:
        return self.skills[skill_id]

    def __len__(self) -> int:
        return len(self.skills)

    def __iter__(self):
        return iter(list(self.skills.values()))

    def __contains__(self, skill_id: str) -> bool:
        return skill_id in self.skills

    def log(self, event: str, **details) -> None:
        self.events.append({"event": event, **details})

    def filtered(self, where) -> SkillLibrary:
        """A new library holding the skills for which `where(skill)` is true (copies of the records)."""
        lib = SkillLibrary(self._embedder)
        for s in self.skills.values():
            if where(s):
                lib.add(Skill.from_dict(s.to_dict()))
        lib._counter = self._counter
        return lib

    def with_first(self, skills: list[Skill]) -> SkillLibrary:
        """A new library holding `skills` first, then this library's skills whose ids are not among them (the
        same records, not copies), with this library's embedder and id counter: e.g. Assay's protected
        templates ahead of an induced library."""
        lib = SkillLibrary(self._embedder)
        for s in skills:
            lib.add(s)
        for s in self.skills.values():
            if s.id not in lib:
                lib.add(s)
        lib._counter = self._counter
        return lib

    # -- retrieval ----------------------------------------------------------------------------------
    def _append_vector(self, skill: Skill) -> None:
        if self._matrix is None:
            return  # rebuilt lazily on the next search
        v = self.embedder.embed(skill.description)[None, :]
        self._matrix = np.vstack([self._matrix, v])
        self._ids.append(skill.id)

    def matrix(self) -> tuple[np.ndarray, list[str]]:
        """The (n, 384) description embeddings, in library order, and their skill ids."""
        if not self.skills:
            self._matrix, self._ids = None, []
            return np.zeros((0, DIM), np.float32), []
        if self._matrix is None or len(self._ids) != len(self.skills):
            self._ids = list(self.skills)
            self._matrix = self.embedder.embed([self.skills[i].description for i in self._ids])
        return self._matrix, self._ids

    def similarities(self, query: str | np.ndarray) -> tuple[np.ndarray, list[str]]:
        m, ids = self.matrix()
        if not ids:
            return np.zeros(0, np.float32), ids
        q = self.embedder.embed(query) if isinstance(query, str) else np.asarray(query, np.float32)
        return m @ q, ids

    def search(self, query: str | np.ndarray, k: int = TOP_K, threshold: float = THRESHOLD,
               where=None) -> list[tuple[Skill, float]]:
        """Top-k skills with cosine ≥ threshold, best first; `where(skill)` filters candidates."""
        if k < 1:
            raise ValueError(f"k must be a positive integer, got {k!r}")
        sims, ids = self.similarities(query)
        if len(ids) == 0:
            return []
        order = np.argsort(-sims, kind="stable")
        out = []
        for i in order:
            if sims[i] < threshold:
                break
            s = self.skills[ids[i]]
            if where is None or where(s):
                out.append((s, float(sims[i])))
                if len(out) == k:
                    break
        return out

    def top_k_ids(self, query_vec: np.ndarray, k: int = TOP_K, threshold: float = THRESHOLD) -> list[str]:
        """The fast path (no filter): argpartition over the whole matrix."""
        m, ids = self.matrix()
        sims = m @ query_vec
        if len(ids) <= k:
            top = np.argsort(-sims)
        else:
            part = np.argpartition(-sims, k)[:k]
            top = part[np.argsort(-sims[part])]
        return [ids[i] for i in top if sims[i] >= threshold]

    # -- persistence --------------------------------------------------------------------------------
    def state(self) -> dict:
        return {"format": LIBRARY_FORMAT, "counter": self._counter,
                "skills": [s.to_dict() for s in self.skills.values()], "events": self.events}

    def load_state(self, state: dict, where: str = "skill library") -> SkillLibrary:
        if state and state.get("format") != LIBRARY_FORMAT:
            raise ValueError(f"{where}: unknown skill library format {state.get('format')!r}")
        skills = [Skill.from_dict(d) for d in (state or {}).get("skills", [])]
        ids = [s.id for s in skills]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise ValueError(f"{where}: duplicate skill id(s) {dup}; every skill id must be unique")
        self.skills = {s.id: s for s in skills}
        self.events = list((state or {}).get("events", []))
        self._counter = (state or {}).get("counter", len(self.skills))
        self._matrix = None
        return self

    def save(self, path: str | Path) -> Path:
        """Write the whole library atomically: a killed write leaves the previous version intact."""
        return atomic_write_json(path, self.state(), indent=1)

    @classmethod
    def load(cls, path: str | Path, embedder: Embedder | None = None) -> SkillLibrary:
        return cls(embedder).load_state(read_json(path, "skill library"), where=str(path))
