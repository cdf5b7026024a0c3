"""Content-addressed response cache: the same model and the same request give the same answer.

The key is the SHA-256 of the model identity (the GGUF digest, or the served model id) and the full
request (messages and every sampling parameter). Entries live in SQLite while a run is going
(`<run_dir>/.responses.sqlite`, local, never committed), so a killed run keeps every answer it paid
for. Their committed text form lives beside the run's records and is append-only:

* `<run_dir>/responses/000001.jsonl.gz`, `000002.jsonl.gz`, … — one chunk per `save()` that found
  entries not yet exported. A chunk is written once (temporary file, then a hard link to a name that
  must not exist yet) and never rewritten, so committing progress adds only the new chunk to git
  history. Content is deterministic: one canonical JSON object per line, sorted by (model, request,
  key) — which puts the turns of one conversation next to each other, so gzip compresses their shared
  prefixes — and a gzip header without name or time, so identical runs give byte-identical chunks.
* `<run_dir>/responses.jsonl` — the legacy form (one sorted file holding every entry), written by
  earlier versions. It is still read, before the chunks, and never written by `save()`.

Each line is `{"key", "model", "request", "response", "response_sha256"}`. Import checks that `key`
is the key of (model, request) and that `response_sha256` is the SHA-256 of the canonical JSON of
the response, and refuses the file otherwise, naming file, line and what does not match. Lines
without `response_sha256` (every legacy export) are accepted — their key still covers model and
request — and counted in `unverified` (`stats()["unverified"]`); `require_digest=True` refuses them.

Errors are `CacheError` (a subclass of RuntimeError, *not* of LLMError): the SQLite file is damaged,
locked or gone (`CacheCorruptError` when damaged), or an export line is malformed or fails its checks
(`CacheFormatError`, also a ValueError). A run must stop on a CacheError rather than record it as a
failed episode: without its cache the run can no longer replay or keep what it paid for.
`ResponseCache.for_run` moves a damaged SQLite file aside (warning `CacheRebuiltWarning`) and
rebuilds it from the run's exports; only answers that were never saved are lost (asked again).

Read-only records (a workshop copy on a read-only share, a USB kit): when the run directory cannot be
written, `for_run` loads the exports into an in-memory SQLite store and writes nothing anywhere. Such a
cache (`read_only`) answers every recorded request; a new answer could not be kept, so `put` raises
`CacheError` and the client refuses a miss with `ReplayMiss` before asking the model.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import sqlite3
import tempfile
import threading
import warnings
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ..io import atomic_write_text

SQLITE_NAME = ".responses.sqlite"
LEGACY_NAME = "responses.jsonl"
CHUNK_DIR = "responses"
_CHUNK = re.compile(r"^(\d{6,})\.jsonl\.gz$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_CORRUPT_CODES = {sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB}


class CacheError(RuntimeError):
    """The response cache cannot be used; the run must stop (this is not one episode's failure)."""


class ReplayMiss(CacheError):
    """SKILLBOOK_REPLAY_ONLY is set and a request is not in the response cache. It stops the run like a
    broken cache — never recorded as an episode's outcome — so a replay that would need the model leaves
    no record it would not have left with the model (`python -m skillbook.book rerun` relies on it)."""


class CacheCorruptError(CacheError):
    """The SQLite file is damaged. `ResponseCache.for_run` rebuilds it from the run's exports."""

    def __init__(self, path: str | os.PathLike[str], reason: str) -> None:
        self.path, self.reason = str(path), reason
        super().__init__(
            f"response cache {path} is damaged ({reason}). It is a local, uncommitted file: stop the run and "
            "reopen it with ResponseCache.for_run(run_dir), which moves the file aside and rebuilds the cache "
            "from the run's exports (answers never saved are asked again), or move the file and its -wal/-shm "
            "files away yourself.")


class CacheFormatError(CacheError, ValueError):
    """A line of an export is malformed or fails its key or digest check; names file and line."""

    def __init__(self, path: str | os.PathLike[str], line: int | None, problem: str) -> None:
        self.path, self.line, self.problem = str(path), line, problem
        super().__init__(f"{path}:{line}: {problem}" if line else f"{path}: {problem}")


class CacheRebuiltWarning(UserWarning):
    """A damaged SQLite file was moved aside and the cache rebuilt from the run's exports."""


def canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def cache_key(model_identity: str, request: dict[str, Any]) -> str:
    return hashlib.sha256(canonical({"model": model_identity, "request": request}).encode()).hexdigest()


def response_digest(response: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of a response: what an export line's `response_sha256` holds."""
    return hashlib.sha256(canonical(response).encode()).hexdigest()


def export_files(run_dir: str | os.PathLike[str]) -> list[Path]:
    """A run's committed text form, in import order: the legacy responses.jsonl, then the chunks."""
    run_dir = Path(run_dir)
    files = [run_dir / LEGACY_NAME] if (run_dir / LEGACY_NAME).is_file() else []
    return files + [p for _, p in _chunks(run_dir / CHUNK_DIR)]


def _chunks(directory: Path) -> list[tuple[int, Path]]:
    if not directory.is_dir():
        return []
    return sorted((int(m.group(1)), directory / name) for name in os.listdir(directory)
                  if (m := _CHUNK.match(name)))


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes) of a plain or gzip-compressed export; read errors name the file and line."""
    n = 0
    try:
        with open(path, "rb") as raw:
            gz = raw.read(2) == b"\x1f\x8b"
            raw.seek(0)
            f = gzip.GzipFile(fileobj=raw, mode="rb") if gz else raw
            for n, line in enumerate(f, 1):
                yield n, line
    except (OSError, EOFError, zlib.error) as e:
        # gzip.BadGzipFile is an OSError; a truncated chunk raises EOFError
        if n == 0 and isinstance(e, OSError) and not isinstance(e, gzip.BadGzipFile):
            raise CacheFormatError(path, None, f"cannot read it ({type(e).__name__}: {e})") from e
        raise CacheFormatError(path, n + 1, f"cannot read the file past line {n} ({type(e).__name__}: {e}); "
                               "restore it from git (a chunk is never rewritten)") from e


def _entry(path: str | os.PathLike[str], n: int, line: bytes) -> tuple[dict[str, Any], bool]:
    """The checked entry of one export line and whether its response digest was verified."""
    try:
        e = json.loads(line)
    except (UnicodeDecodeError, ValueError) as err:
        raise CacheFormatError(path, n, f"not valid JSON ({err})") from err
    if not isinstance(e, dict):
        raise CacheFormatError(path, n, f"expected a JSON object, found {type(e).__name__}")
    for field, kind in (("key", str), ("model", str), ("request", dict), ("response", dict)):
        if field not in e:
            raise CacheFormatError(path, n, f"missing field {field!r}")
        if not isinstance(e[field], kind):
            raise CacheFormatError(path, n, f"field {field!r} should be a JSON "
                                   f"{'string' if kind is str else 'object'}, found {type(e[field]).__name__}")
    key = cache_key(e["model"], e["request"])
    if key != e["key"]:
        raise CacheFormatError(path, n, f"entry key {e['key'][:12]}… does not match its model and request "
                               f"(they give {key[:12]}…): the request or model was edited, or the line damaged")
    digest = e.get("response_sha256")
    if digest is None:
        return e, False
    if not isinstance(digest, str) or not _HEX64.match(digest):
        raise CacheFormatError(path, n, f"field 'response_sha256' should be 64 lowercase hex digits, found {digest!r}")
    actual = response_digest(e["response"])
    if digest != actual:
        raise CacheFormatError(path, n, f"response_sha256 {digest[:12]}… does not match the response "
                               f"(its digest is {actual[:12]}…): the response was edited or damaged")
    return e, True


def read_export(path: str | os.PathLike[str], require_digest: bool = False) -> Iterator[dict[str, Any]]:
    """The checked entries of one export file (plain or gzip JSONL); raises CacheFormatError."""
    path = Path(path)
    for n, line in _lines(path):
        if line.strip():
            e, verified = _entry(path, n, line)
            if require_digest and not verified:
                raise CacheFormatError(path, n, "no 'response_sha256' (an export written before response "
                                       "digests); its response cannot be verified")
            yield e


def _gzip(data: bytes) -> bytes:
    """gzip with a fixed header (no file name, mtime 0, OS 'unknown'): the same bytes for the same data."""
    c = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    body = c.compress(data) + c.flush()
    return (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff" + body
            + zlib.crc32(data).to_bytes(4, "little") + (len(data) & 0xFFFFFFFF).to_bytes(4, "little"))


def _write_new(directory: Path, data: bytes) -> Path:
    """Write `data` to the next free chunk name; an existing chunk is never replaced."""
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".chunk.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        number = max((n for n, _ in _chunks(directory)), default=0) + 1
        while True:
            path = directory / f"{number:06d}.jsonl.gz"
            try:
                os.link(tmp, path)   # fails if the name exists: another writer took it
                return path
            except FileExistsError:
                number += 1
            except OSError:          # no hard links on this file system: check, then rename
                if path.exists():
                    number += 1
                    continue
                os.replace(tmp, path)
                return path
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


class ResponseCache:
    """SQLite store of responses with hit/miss counters and an append-only, verified text form."""

    jsonl_path: Path | None = None   # the run's legacy single-file export (read by for_run, if present)
    export_dir: Path | None = None   # where save() appends chunks (set by for_run)
    read_only = False                # over records this process may not write (for_run): no new answer

    def __init__(self, path: str | os.PathLike[str] = ":memory:", *, timeout: float = 5.0) -> None:
        """Open (or create) the SQLite store; raises CacheCorruptError if the file is damaged."""
        self.path = str(path)
        self._lock = threading.Lock()
        self._save_lock = threading.Lock()   # one save at a time: two would write the same entries twice
        self.hits = 0
        self.misses = 0
        self.unverified = 0   # imported entries whose export line had no response digest
        self._db = self._open(timeout)

    def _open(self, timeout: float) -> sqlite3.Connection:
        memory = self.path == ":memory:"
        if not memory:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        db = None
        try:
            db = sqlite3.connect(self.path, timeout=timeout, check_same_thread=False, isolation_level=None)
            db.execute("PRAGMA journal_mode=MEMORY" if memory else "PRAGMA journal_mode=WAL")
            if not memory:
                problems = [r[0] for r in db.execute("PRAGMA quick_check").fetchall()]
                if problems != ["ok"]:
                    found = "; ".join(problems)[:300].replace("\n", " ")
                    raise CacheCorruptError(self.path, f"PRAGMA quick_check: {found}")
            db.execute("CREATE TABLE IF NOT EXISTS responses "
                       "(key TEXT PRIMARY KEY, model TEXT, request TEXT, response TEXT)")
            # keys present in the run's exports (rebuilt by for_run): save() writes the others
            db.execute("CREATE TABLE IF NOT EXISTS exported (key TEXT PRIMARY KEY) WITHOUT ROWID")
            return db
        except BaseException as e:
            if db is not None:
                db.close()
            if isinstance(e, sqlite3.Error):
                raise self._error(e, "opening") from e
            raise

    def _error(self, e: Exception, doing: str) -> CacheError:
        """The CacheError for a failure of SQLite (or of a stored row's JSON) while `doing` something."""
        code = getattr(e, "sqlite_errorcode", None)
        if isinstance(e, ValueError) or (code is not None and code & 0xFF in _CORRUPT_CODES):
            return CacheCorruptError(self.path, f"{doing}: {type(e).__name__}: {e}")
        hint = (" Another process may be writing to it (two runs in one run directory?)."
                if "locked" in str(e) or "busy" in str(e) else "")
        return CacheError(f"response cache {self.path}: {doing} failed ({type(e).__name__}: {e}).{hint} "
                          "The run cannot go on without its cache: stop it and fix the cause; "
                          "answers saved so far are in the run's exports.")

    @classmethod
    def for_run(cls, run_dir: str | os.PathLike[str], *, require_digest: bool = False,
                timeout: float = 5.0, read_only: bool | None = None) -> ResponseCache:
        """The cache of one chapter run: SQLite beside the records, seeded from the committed exports.

        A damaged SQLite file is moved aside (`.responses.sqlite.damaged-N`, with its -wal/-shm) with a
        CacheRebuiltWarning, and the cache rebuilt from the exports. Raises CacheFormatError for an
        invalid export line, CacheError when the store cannot be opened even after that.

        `read_only` (default: whether `run_dir` cannot be written, `writable`): the exports are loaded
        into an in-memory store and nothing is written — not the SQLite file, not a chunk. A SQLite file
        found there is not read: it is local and uncommitted, and the exports are what a copy of the
        records carries (`Lab.finish` saves every answer a live execution asked for).
        """
        run_dir = Path(run_dir)
        if read_only is None:
            read_only = not writable(run_dir)
        if read_only:
            return cls._over_read_only(run_dir, require_digest)
        db = run_dir / SQLITE_NAME
        damage = None
        for attempt in (1, 2):
            cache = None
            try:
                cache = cls(db, timeout=timeout)
                cache.export_dir, cache.jsonl_path = run_dir / CHUNK_DIR, run_dir / LEGACY_NAME
                files = cache._load_exports(run_dir, require_digest)
                break
            except CacheCorruptError as e:
                if cache is not None:
                    cache.close()
                if attempt == 2:
                    raise CacheError(f"{db} is still unusable after rebuilding it from the exports in {run_dir}"
                                     f" ({e}); check the disk, and delete {db} to start over") from e
                damage = (e, _move_aside(db))
            except BaseException:
                if cache is not None:
                    cache.close()
                raise
        assert cache is not None   # the loop ends by its break (cache opened) or raises
        if damage is not None:
            error, aside = damage
            warnings.warn(f"response cache {db} was damaged ({error.reason}); moved it to {aside.name} and rebuilt "
                          f"the cache from {len(files)} export file(s) in {run_dir} ({len(cache)} entries). "
                          "Answers that were never saved will be asked of the model again.",
                          CacheRebuiltWarning, stacklevel=2)
        return cache

    @classmethod
    def _over_read_only(cls, run_dir: Path, require_digest: bool) -> ResponseCache:
        cache = cls(":memory:")
        cache.read_only = True
        cache.export_dir, cache.jsonl_path = run_dir / CHUNK_DIR, run_dir / LEGACY_NAME
        try:
            cache._load_exports(run_dir, require_digest)
        except BaseException:
            cache.close()
            raise
        return cache

    def _load_exports(self, run_dir: Path, require_digest: bool) -> list[Path]:
        self._execute("forgetting the previous export state", "DELETE FROM exported")
        files = export_files(run_dir)
        for path in files:
            self.import_jsonl(path, require_digest=require_digest, exported=True)
        return files

    def _execute(self, doing: str, sql: str, args: tuple[Any, ...] = ()) -> list[Any]:
        with self._lock:
            try:
                return self._db.execute(sql, args).fetchall()
            except sqlite3.Error as e:
                raise self._error(e, doing) from e

    def get(self, model_identity: str, request: dict[str, Any], count: bool = True) -> dict[str, Any] | None:
        """The recorded response, or None (a miss); raises CacheError if the store fails."""
        key = cache_key(model_identity, request)
        rows = self._execute("reading an entry", "SELECT response FROM responses WHERE key=?", (key,))
        with self._lock:
            if not rows:
                self.misses += count
                return None
            self.hits += count
        try:
            return json.loads(rows[0][0])
        except ValueError as e:
            raise self._error(e, f"decoding entry {key[:12]}…") from e

    def put(self, model_identity: str, request: dict[str, Any], response: dict[str, Any]) -> None:
        """Record a response; the first one recorded for a request stays (it is what the exports hold).
        Raises CacheError on a read-only cache: the answer could be neither saved nor replayed."""
        if self.read_only:
            raise CacheError(f"response cache of {self.export_dir.parent if self.export_dir else self.path}: "
                             "the records are read-only, so a new answer cannot be kept. Replay only what "
                             "is recorded, or copy the records to a folder you may write (e.g. `python -m "
                             "skillbook.book rerun <chapter> --into mine`)")
        self._execute("writing an entry", "INSERT OR IGNORE INTO responses VALUES (?,?,?,?)",
                      (cache_key(model_identity, request), model_identity, canonical(request), canonical(response)))

    def __len__(self) -> int:
        return self._execute("counting entries", "SELECT COUNT(*) FROM responses")[0][0]

    def stats(self) -> dict[str, int | float]:
        total = self.hits + self.misses
        unsaved = self._execute("counting unsaved entries", "SELECT COUNT(*) FROM responses "
                                "WHERE key NOT IN (SELECT key FROM exported)")[0][0]
        return {"entries": len(self), "hits": self.hits, "misses": self.misses,
                "hit_rate": self.hits / total if total else float("nan"),
                "unverified": self.unverified, "unsaved": unsaved}

    def _lines_of(self, rows: list[tuple[str, str, str, str]]) -> list[str]:
        out = []
        for key, model, request, response in rows:
            try:
                response = json.loads(response)
                out.append(canonical({"key": key, "model": model, "request": json.loads(request),
                                      "response": response, "response_sha256": response_digest(response)}) + "\n")
            except ValueError as e:
                raise self._error(e, f"decoding entry {key[:12]}…") from e
        return out

    def save(self, directory: str | os.PathLike[str] | None = None) -> Path | None:
        """Append the entries not yet in the run's exports as one new chunk; returns it, or None if none.

        `directory` defaults to `<run_dir>/responses` of a cache opened with `for_run`.
        """
        directory = Path(directory) if directory is not None else self.export_dir
        if directory is None:
            raise CacheError(f"response cache {self.path}: save() needs a directory for its chunks; open the "
                             "cache with ResponseCache.for_run(run_dir) or call save(directory)")
        with self._save_lock:
            return self._save(directory)

    def _save(self, directory: Path) -> Path | None:
        rows = self._execute("reading unsaved entries", "SELECT key, model, request, response FROM responses "
                             "WHERE key NOT IN (SELECT key FROM exported)")
        if not rows:
            return None
        rows.sort(key=lambda r: (r[1], r[2], r[0]))   # a conversation's turns side by side: gzip shares them
        try:
            path = _write_new(directory, _gzip("".join(self._lines_of(rows)).encode()))
        except OSError as e:
            raise CacheError(f"response cache {self.path}: could not write a chunk to {directory} ({e}); "
                             "the entries stay in the SQLite file and the next save() writes them") from e
        with self._lock:
            try:
                self._db.execute("BEGIN")
                self._db.executemany("INSERT OR IGNORE INTO exported VALUES (?)", [(r[0],) for r in rows])
                self._db.execute("COMMIT")
            except sqlite3.Error as e:
                self._rollback()
                raise self._error(e, f"marking the entries of {path} as saved") from e
        return path

    def export_jsonl(self, path: str | os.PathLike[str] | None = None) -> Path:
        """Write every entry to one plain JSONL file sorted by key, atomically (a full snapshot, e.g. to
        inspect or hand over a cache). Runs commit `save()`'s chunks instead: this file is rewritten whole."""
        path = Path(path or self.jsonl_path or LEGACY_NAME)
        rows = self._execute("reading entries", "SELECT key, model, request, response FROM responses ORDER BY key")
        return atomic_write_text(path, "".join(self._lines_of(rows)))

    def import_jsonl(self, path: str | os.PathLike[str], *, require_digest: bool = False,
                     exported: bool = False) -> int:
        """Add the entries of an export (plain or gzip JSONL; existing keys win); returns how many lines were read.

        All or nothing: a line that fails its checks raises CacheFormatError (file:line: what is wrong) and
        nothing of the file is kept. `exported=True` records the keys as already in this run's exports, so
        `save()` does not write them again.
        """
        path = Path(path)
        return self._import(path, _lines(path), require_digest=require_digest, exported=exported)

    def take_new_lines(self) -> list[str]:
        """The entries not yet exported, as export lines (with their digests), marked as exported.

        A Ray worker's cache hands what its episodes added to the driver this way (`merge_lines` there),
        instead of writing chunks: only the driver writes a run's files."""
        rows = self._execute("reading unsaved entries", "SELECT key, model, request, response FROM responses "
                             "WHERE key NOT IN (SELECT key FROM exported)")
        lines = self._lines_of(sorted(rows, key=lambda r: (r[1], r[2], r[0])))
        with self._lock:   # only the keys read above: an entry added meanwhile goes with the next call
            try:
                self._db.executemany("INSERT OR IGNORE INTO exported VALUES (?)", [(r[0],) for r in rows])
            except sqlite3.Error as e:
                raise self._error(e, "marking entries as handed over") from e
        return lines

    def merge_lines(self, lines: list[str], source: str) -> int:
        """Add entries handed over by another cache (`take_new_lines`), checked exactly as an import checks
        a file (key of model and request, response digest required); existing keys win. They are new to
        this run's exports, so the next `save()` writes them. `source` names the sender in errors."""
        return self._import(source, enumerate((line.encode() for line in lines), 1), require_digest=True,
                            exported=False)

    def put_known(self, model_identity: str, request: dict[str, Any], response: dict[str, Any]) -> None:
        """Record a response that another cache already holds (it is not handed over again)."""
        key = cache_key(model_identity, request)
        self._execute("writing an entry", "INSERT OR IGNORE INTO responses VALUES (?,?,?,?)",
                      (key, model_identity, canonical(request), canonical(response)))
        self._execute("writing an entry", "INSERT OR IGNORE INTO exported VALUES (?)", (key,))

    def _import(self, path: str | os.PathLike[str], numbered_lines: Iterable[tuple[int, bytes]], *,
                require_digest: bool, exported: bool) -> int:
        n = unverified = 0
        with self._lock:
            try:
                self._db.execute("BEGIN")
                for lineno, line in numbered_lines:
                    if not line.strip():
                        continue
                    e, verified = _entry(path, lineno, line)
                    if require_digest and not verified:
                        raise CacheFormatError(path, lineno, "no 'response_sha256' (an export written before "
                                               "response digests); its response cannot be verified")
                    self._db.execute("INSERT OR IGNORE INTO responses VALUES (?,?,?,?)",
                                     (e["key"], e["model"], canonical(e["request"]), canonical(e["response"])))
                    if exported:
                        self._db.execute("INSERT OR IGNORE INTO exported VALUES (?)", (e["key"],))
                    n += 1
                    unverified += not verified
                self._db.execute("COMMIT")
            except sqlite3.Error as e:
                self._rollback()
                raise self._error(e, f"importing {path}") from e
            except BaseException:
                self._rollback()
                raise
            self.unverified += unverified
        return n

    def _rollback(self) -> None:
        try:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
        except sqlite3.Error:
            pass   # the original error is the one to report

    def close(self) -> None:
        with self._lock:
            self._db.close()


def writable(run_dir: str | os.PathLike[str]) -> bool:
    """Can this process keep a run's SQLite cache in `run_dir`: the folder (or, not made yet, its nearest
    existing parent) can be written and an existing SQLite file too. `os.access` also reports a
    read-only file system (EROFS) to root, who would otherwise pass every check of file modes."""
    folder = Path(run_dir)
    while not folder.exists():
        if folder.parent == folder:
            return False
        folder = folder.parent
    if not os.access(folder, os.W_OK | os.X_OK):
        return False
    db = Path(run_dir) / SQLITE_NAME
    return not db.exists() or os.access(db, os.W_OK)


def _move_aside(db: Path) -> Path:
    """Rename a damaged SQLite file and its -wal/-shm (a stale WAL must not meet a new file) out of the way."""
    n = 1
    while any(Path(f"{db}.damaged-{n}{s}").exists() for s in ("", "-wal", "-shm")):
        n += 1
    aside = Path(f"{db}.damaged-{n}")
    try:
        for suffix in ("", "-wal", "-shm"):
            if Path(f"{db}{suffix}").exists():
                os.replace(f"{db}{suffix}", f"{aside}{suffix}")
    except OSError as e:
        raise CacheError(f"{db} is damaged and could not be moved aside ({e}); delete it (and its -wal/-shm "
                         "files) to rebuild the cache from the run's exports") from e
    return aside
