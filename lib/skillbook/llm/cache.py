"""Content-addressed response cache: the same model and the same request give the same answer.

The key is the SHA-256 of the model identity (the GGUF digest, or the served model id) and the full
request (messages and every sampling parameter). Entries live in SQLite while a run is going, so a
killed run keeps every answer it paid for, and export to sorted JSONL that is committed under runs/
so that re-executing a chapter on a fresh clone replays the same answers without a model.
"""
from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

from ..io import atomic_write_text


def canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def cache_key(model_identity: str, request: dict) -> str:
    return hashlib.sha256(canonical({"model": model_identity, "request": request}).encode()).hexdigest()


class ResponseCache:
    """SQLite store of responses with hit/miss counters and a JSONL text form."""

    def __init__(self, path: str | os.PathLike = ":memory:"):
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL" if self.path != ":memory:" else "PRAGMA journal_mode=MEMORY")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, model TEXT, request TEXT, response TEXT)")
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @classmethod
    def for_run(cls, run_dir: str | os.PathLike) -> "ResponseCache":
        """The cache of one chapter run: SQLite beside the records, seeded from the committed JSONL."""
        run_dir = Path(run_dir)
        cache = cls(run_dir / ".responses.sqlite")
        jsonl = run_dir / "responses.jsonl"
        if jsonl.exists():
            cache.import_jsonl(jsonl)
        cache.jsonl_path = jsonl
        return cache

    jsonl_path: Path | None = None

    def get(self, model_identity: str, request: dict, count: bool = True) -> dict | None:
        key = cache_key(model_identity, request)
        with self._lock:
            row = self._db.execute("SELECT response FROM responses WHERE key=?", (key,)).fetchone()
            if row is None:
                self.misses += count
                return None
            self.hits += count
        return json.loads(row[0])

    def put(self, model_identity: str, request: dict, response: dict) -> None:
        key = cache_key(model_identity, request)
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO responses VALUES (?,?,?,?)",
                             (key, model_identity, canonical(request), canonical(response)))

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]

    def stats(self) -> dict:
        total = self.hits + self.misses
        return {"entries": len(self), "hits": self.hits, "misses": self.misses,
                "hit_rate": self.hits / total if total else float("nan")}

    def export_jsonl(self, path: str | os.PathLike | None = None) -> Path:
        """Write every entry, sorted by key (stable diffs), atomically."""
        path = Path(path or self.jsonl_path or "responses.jsonl")
        with self._lock:
            rows = self._db.execute("SELECT key, model, request, response FROM responses ORDER BY key").fetchall()
        return atomic_write_text(path, "".join(
            canonical({"key": key, "model": model, "request": json.loads(request),
                       "response": json.loads(response)}) + "\n" for key, model, request, response in rows))

    save = export_jsonl

    def import_jsonl(self, path: str | os.PathLike) -> int:
        """Add the entries of a JSONL export (existing keys win); returns how many lines were read."""
        n = 0
        with open(path, encoding="utf-8") as f, self._lock:
            self._db.execute("BEGIN")
            for line in f:
                if not line.strip():
                    continue
                e = json.loads(line)
                key = cache_key(e["model"], e["request"])
                if key != e["key"]:
                    raise ValueError(f"{path}: entry key {e['key'][:12]}… does not match its content")
                self._db.execute("INSERT OR IGNORE INTO responses VALUES (?,?,?,?)",
                                 (key, e["model"], canonical(e["request"]), canonical(e["response"])))
                n += 1
            self._db.execute("COMMIT")
        return n

    def close(self) -> None:
        self._db.close()
