"""The records of one run directory: append-only, compact, locked, and only what the run wrote.

    <run_dir>/run.json              the settings fingerprint and the streams (task ids in order)
    <run_dir>/episodes/open.jsonl   finished episodes, one JSON line each, appended (and fsync'd) as they end
    <run_dir>/episodes/NNNNNN.jsonl.gz   sealed chunks of `CHUNK` episodes, written once, never rewritten
    <run_dir>/memory/<stream>.json  a memory stream's state after its last recorded episode
    <run_dir>/errors.jsonl          infrastructure errors (simulator, model server, sandbox), appended
    <run_dir>/sessions.jsonl        one line per invocation that ran episodes
    <run_dir>/.lock                 held while a process runs episodes here (not a record)

Why this shape: a study of thousands of episodes is committed every half hour while it runs. Files
that are only ever appended to, or written once, keep the git history linear in the data (a stream
file rewritten after every episode grew it quadratically). A line per episode is also what a killed
run can lose: at most the episode in flight.

Reading: for every (stream, position) the LAST line wins (a re-run after a crash appends a new line);
a memory stream's episodes beyond its saved memory state are ignored (the process died between the
two writes: the episode is re-run, its model calls answered by the response cache).
"""
from __future__ import annotations

import fcntl
import gzip
import json
import os
import socket
import time
from pathlib import Path

from ..io import atomic_write_bytes, atomic_write_json, read_json
from ..records import Episode

FORMAT = 2
CHUNK = 50   # episodes per sealed chunk


class RunLocked(RuntimeError):
    """Another process is running episodes in this run directory."""


class RecordError(ValueError):
    """A record file that cannot be read; the message names the file and line."""


class RunDir:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock_fd: int | None = None

    # -- the lock --------------------------------------------------------------------------------------
    def lock(self) -> "RunDir":
        """Hold the directory's lock (fcntl); a second process gets RunLocked naming the holder."""
        self.path.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise RunLocked(f"{self.path} is being run by {holder}; wait for it to finish (or stop it) "
                            "before running here again") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S')}"
                  .encode(), 0)
        self._lock_fd = fd
        return self

    def unlock(self) -> None:
        if self._lock_fd is not None:
            os.ftruncate(self._lock_fd, 0)
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> "RunDir":
        return self.lock()

    def __exit__(self, *exc) -> None:
        self.unlock()

    # -- the manifest ----------------------------------------------------------------------------------
    def manifest(self) -> dict | None:
        path = self.path / "run.json"
        if not path.exists():
            return None
        m = read_json(path, "run manifest")
        if not isinstance(m, dict) or m.get("format") != FORMAT:
            raise RecordError(f"{path}: not a run manifest of format {FORMAT} (found {m.get('format') if isinstance(m, dict) else m!r})")
        return m

    def check_or_start(self, settings: dict, streams: dict[str, list[str]]) -> None:
        """Refuse to resume under other settings or other tasks; record the run's streams.

        A stream may be extended (its recorded tasks are a prefix of the requested ones); anything else
        that differs is an error naming what changed."""
        m = self.manifest()
        if m is not None:
            self.check_settings(settings, m)
            for name, ids in streams.items():
                old = m["streams"].get(name)
                if old is not None and ids[: len(old)] != old and old[: len(ids)] != ids:
                    raise ValueError(f"{self.path}: stream {name!r} was recorded for other tasks; use a new run "
                                     "directory (e.g. another profile name)")
            merged = dict(m["streams"])
            for name, ids in streams.items():
                if len(ids) > len(merged.get(name, [])):
                    merged[name] = list(ids)
            if merged == m["streams"]:
                return
            streams = merged
        atomic_write_json(self.path / "run.json", {"format": FORMAT, "settings": settings, "streams": streams},
                          indent=1, sort_keys=True)

    def check_settings(self, settings: dict, manifest: dict | None = None) -> None:
        """Refuse records made with other settings (also when nothing is left to run: a replay must not
        relabel old records with new parameters)."""
        m = manifest if manifest is not None else self.manifest()
        if m is None:
            return
        recorded = m["settings"]
        if "legacy" in recorded:
            # Records converted from the first record format, which fingerprinted only these fields; they
            # were made by the first agent loop (revision 1), so a later loop never takes them for its own.
            if settings.get("agent_code", {}).get("revision", 1) != 1:
                raise ValueError(f"{self.path} was recorded by an earlier agent loop (revision 1, now "
                                 f"{settings['agent_code']['revision']}); use a new run directory or delete it")
            old = recorded["legacy"]
            settings = {"agent": settings["agent"], "backend": settings["backend"], "seed": settings["seed"],
                        "memory": settings["memory"].get("name"), "env_options": settings["env_options"]}
            recorded = {k: old.get(k) for k in settings}
        if recorded != settings:
            changed = _diff(recorded, settings)
            raise ValueError(f"{self.path} was recorded with other settings ({', '.join(changed)}); resume only "
                             "with the same settings, or use a new run directory (e.g. another profile name)")

    # -- episodes -----------------------------------------------------------------------------------------
    def _chunks(self) -> list[Path]:
        return sorted((self.path / "episodes").glob("[0-9]*.jsonl.gz"))

    def _lines(self):
        for chunk in self._chunks():
            with gzip.open(chunk, "rt", encoding="utf-8") as f:
                yield from ((chunk, i, line) for i, line in enumerate(f, 1))
        open_path = self.path / "episodes" / "open.jsonl"
        if open_path.exists():
            with open(open_path, encoding="utf-8") as f:
                yield from ((open_path, i, line) for i, line in enumerate(f, 1))

    def episode_dicts(self) -> dict[tuple[str, int], dict]:
        """(stream, position) → the last recorded episode there, as a dict."""
        out: dict[tuple[str, int], dict] = {}
        for path, lineno, line in self._lines():
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                key = (d["stream"], int(d["position"]))
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
                if path.name == "open.jsonl" and not line.endswith("\n"):
                    continue   # a line cut by a crash mid-write: that episode was not recorded
                raise RecordError(f"{path}:{lineno}: not an episode record ({type(e).__name__}: {e})") from None
            out[key] = d
        return out

    def append_episode(self, ep: Episode) -> None:
        """Append one finished episode (a line, flushed to disk); seal a chunk when the open file is full."""
        folder = self.path / "episodes"
        folder.mkdir(parents=True, exist_ok=True)
        open_path = folder / "open.jsonl"
        with open(open_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(ep.to_dict(), ensure_ascii=False, separators=(",", ":")) + "\n")
            f.flush()
            os.fsync(f.fileno())
        lines = open_path.read_text(encoding="utf-8").splitlines(keepends=True)
        if len(lines) >= CHUNK:
            n = len(self._chunks()) + 1
            data = gzip.compress("".join(lines).encode("utf-8"), compresslevel=9, mtime=0)
            atomic_write_bytes(folder / f"{n:06d}.jsonl.gz", data)
            atomic_write_bytes(open_path, b"")   # a crash before this line leaves duplicates; the last copy wins

    # -- memory state --------------------------------------------------------------------------------------
    def memory_state(self, stream: str) -> tuple[int, dict]:
        """(episodes the state includes, the state) of a memory stream; (0, {}) before its first episode."""
        path = self.path / "memory" / f"{stream}.json"
        if not path.exists():
            return 0, {}
        d = read_json(path, "memory state")
        return int(d["after"]), d["memory"]

    def save_memory(self, stream: str, after: int, state: dict) -> None:
        atomic_write_json(self.path / "memory" / f"{stream}.json", {"after": after, "memory": state})

    # -- logs -------------------------------------------------------------------------------------------------
    def log_error(self, **entry) -> None:
        with open(self.path / "errors.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps({"time": time.strftime("%Y-%m-%dT%H:%M:%S"), **entry}) + "\n")

    def errors(self) -> list[dict]:
        path = self.path / "errors.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []

    def log_session(self, line: dict) -> None:
        with open(self.path / "sessions.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")


def _diff(old: dict, new: dict, prefix: str = "") -> list[str]:
    """Dotted names of the settings that differ (nested mappings compared key by key)."""
    out = []
    for k in sorted(set(old) | set(new)):
        a, b = old.get(k), new.get(k)
        if isinstance(a, dict) and isinstance(b, dict):
            out += _diff(a, b, f"{prefix}{k}.")
        elif a != b:
            out.append(f"{prefix}{k}")
    return out
