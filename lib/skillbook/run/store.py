"""The records of one run directory: append-only, compact, locked, and only what the run wrote.

    <run_dir>/run.json              the settings fingerprint, the streams (task ids in order), and where
                                    earlier versions sealed chunks, `legacy_chunks` listing them (below)
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

What a crash loses — at most the episode in flight, at any moment:
* while a line is appended: the cut line (no final newline) is not a record; the next append cuts the file
  back to its last newline first (warning `RecordWarning`), so a kill or a full disk never joins two lines.
* between the append and the memory state: the episode is re-run (see Reading).
* while a chunk is sealed: its lines are written to a temporary file, fsync'd, and linked to the next free
  name (the highest chunk number + 1; a link refuses an existing name, so no chunk is ever replaced —
  also after a chunk went missing); only then is open.jsonl emptied (atomically). A crash before the link
  loses nothing, one after it leaves the lines twice (the last copy wins, and they are equal).

Only the run's own chunks are read. A chunk sealed by this version is signed: its gzip header's comment
field (which every gzip reader skips, so its lines read as before) holds the SHA-256 of the run's settings
and the chunk's number, and a chunk whose signature names other settings or another number (a chunk
copied from another run, or renamed) is refused, naming it. Chunks sealed by earlier versions carry no
signature: the first run of this version in a directory that has some lists them in run.json
(`legacy_chunks`, name → SHA-256), each checked as below first, and from then on an unsigned chunk is read
only if it is listed with its digest. Without a list, an unsigned chunk is refused where this version
sealed a chunk; where it sealed none (a directory no run of this version has written — every committed
one until it is resumed — or a new one before its first `CHUNK` episodes) it is read only if each of its
lines is one of this run's tasks at its position, with the run's agent level and memory name, so a chunk
copied from another condition is refused. Residual risk: there, an unsigned chunk copied from a run with
the same settings and tasks (a replication) cannot be told from the directory's own; nor, anywhere, can a
signed chunk copied from such a twin run, whose settings are the same. (A new directory's run.json gets no
list: it would differ from what earlier versions wrote, and `run.compare` compares run.json.)

Damage (a truncated or non-gzip chunk) is a `RecordError` naming the file: restore it from git. A missing
chunk is a `RecordWarning`: its episodes count as not recorded and a run here runs them again.

Reading: for every (stream, position) the LAST line wins (a re-run after a crash appends a new line);
a memory stream's episodes beyond its saved memory state are ignored (the process died between the
two writes: the episode is re-run, its model calls answered by the response cache).
"""
from __future__ import annotations

import errno
import fcntl
import fnmatch
import gzip
import hashlib
import json
import os
import re
import socket
import threading
import time
import warnings
import zlib
from pathlib import Path

from ..io import atomic_write_bytes, atomic_write_json, read_json
from ..llm.backends import backend_fingerprint
from ..records import Episode

FORMAT = 2
CHUNK = 50   # episodes per sealed chunk
SIGNATURE = "skillbook-episodes "   # how a signed chunk's gzip comment begins; a JSON object follows
_CHUNK_NAME = re.compile(r"^(\d{6,})\.jsonl\.gz$")
_LIKE_A_CHUNK = "[0-9]*.jsonl.gz"   # what earlier versions read as a chunk: every such file is checked


class RunLocked(RuntimeError):
    """Another process is running episodes in this run directory."""


class RecordError(ValueError):
    """A record file that cannot be read, or is not this run's; the message names the file and line."""


class RecordWarning(UserWarning):
    """Records a crash or a user left incomplete (a cut line dropped, a chunk missing): those episodes
    count as not recorded, and a run here runs them again."""


class RunDir:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock_fd: int | None = None
        # worker threads append concurrently: one append (and seal) at a time, or a seal empties open.jsonl
        # under a line another thread just appended
        self._write_lock = threading.Lock()

    # -- the lock --------------------------------------------------------------------------------------
    def lock(self) -> RunDir:
        """Hold the directory's lock (fcntl); a second process gets RunLocked naming the holder."""
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            if e.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise
            # A read-only copy (a workshop share, a USB kit) replays without the lock; running needs one.
            raise RecordError(f"{self.path} cannot be written ({e.strerror}): records replay read-only, but "
                              "this run has episodes left to run; run it in a writable copy") from None
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

    def __enter__(self) -> RunDir:
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
            raise RecordError(f"{path}: not a run manifest of format {FORMAT} "
                              f"(found {m.get('format') if isinstance(m, dict) else m!r})")
        legacy = m.get("legacy_chunks")
        if legacy is not None and not (isinstance(legacy, dict)
                                       and all(isinstance(v, str) for v in legacy.values())):
            raise RecordError(f"{path}: 'legacy_chunks' should map chunk names to SHA-256 digests, found "
                              f"{legacy!r}; restore run.json from git")
        return m

    def check_or_start(self, settings: dict, streams: dict[str, list[str]]) -> None:
        """Refuse to resume under other settings or other tasks; record the run's streams.

        A stream may be extended (its recorded tasks are a prefix of the requested ones); anything else
        that differs is an error naming what changed. In a directory where earlier versions sealed chunks,
        the first call also lists them (`legacy_chunks`, see the module docstring). Hold the lock."""
        m = self.manifest()
        if m is None:
            manifest = {"format": FORMAT, "settings": settings, "streams": streams}
            atomic_write_json(self.path / "run.json", manifest, indent=1, sort_keys=True)
            return
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
        if merged != m["streams"]:
            # everything else stays as recorded, the settings too (they equal these, or are the legacy
            # record these were checked against): chunk signatures are made from them
            atomic_write_json(self.path / "run.json", {**m, "streams": merged}, indent=1, sort_keys=True)
        self._list_legacy_chunks()

    def _list_legacy_chunks(self) -> dict | None:
        """The manifest, after listing in it (once) the unsigned chunks earlier versions sealed here, each
        checked to be this run's first (the module docstring says how). A directory without any, the
        case of every new one, is left as it is."""
        m = self.manifest()
        if m is None or "legacy_chunks" in m:
            return m
        unsigned = {path.name: digest for path, _, digest, signed in self._sealed(m) if not signed}
        if unsigned:
            m = {**m, "legacy_chunks": unsigned}
            atomic_write_json(self.path / "run.json", m, indent=1, sort_keys=True)
        return m

    def check_settings(self, settings: dict, manifest: dict | None = None) -> None:
        """Refuse records made with other settings (also when nothing is left to run: a replay must not
        relabel old records with new parameters)."""
        m = manifest if manifest is not None else self.manifest()
        if m is None:
            return
        recorded = _served_anywhere(m["settings"])
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
            changed = settings_diff(recorded, settings)
            raise ValueError(f"{self.path} was recorded with other settings ({', '.join(changed)}); resume only "
                             "with the same settings, or use a new run directory (e.g. another profile name)")

    # -- episodes -----------------------------------------------------------------------------------------
    def _sealed(self, manifest: dict | None) -> list[tuple[Path, list[str], str, bool]]:
        """(path, lines, sha256, signed) of every sealed chunk in number order, each checked to be this
        run's (the module docstring says how); RecordError naming the file otherwise."""
        folder = self.path / "episodes"
        names = sorted(fnmatch.filter(os.listdir(folder), _LIKE_A_CHUNK)) if folder.is_dir() else []
        if not names and not (manifest or {}).get("legacy_chunks"):
            return []
        move = f"move it out of {folder} (nothing of it is read while it is there)"
        if manifest is None:
            raise RecordError(f"{folder}: sealed chunks ({names[0]}, …) but no {self.path / 'run.json'} "
                              "saying whose they are; restore run.json from git")
        numbered = []
        for name in names:
            if not (m := _CHUNK_NAME.match(name)):
                raise RecordError(f"{folder / name}: named like a chunk of episodes, but not one a run seals "
                                  f"(NNNNNN.jsonl.gz); {move}")
            numbered.append((int(m.group(1)), folder / name))
        numbered.sort()
        run = fingerprint(manifest["settings"])
        legacy = manifest.get("legacy_chunks")
        chunks = []
        for number, path in numbered:
            raw = path.read_bytes()
            chunks.append((number, path, hashlib.sha256(raw).hexdigest(), *_read_chunk(path, raw)))
        # without a list, unsigned chunks can be an earlier version's only where this version sealed none
        legacy_rules = legacy is None and all(signature is None for *_, signature, _ in chunks)
        out = []
        for number, path, digest, signature, lines in chunks:
            if signature is not None:
                if signature.get("run") != run:
                    raise RecordError(f"{path}: a chunk sealed by another run (its settings fingerprint "
                                      f"{str(signature.get('run'))[:12]}… is not this run's {run[:12]}…), "
                                      f"e.g. copied from another run directory; {move}")
                if signature.get("chunk") != number:
                    raise RecordError(f"{path}: this is chunk {signature.get('chunk')} of this run under "
                                      f"another name (a copy?); {move}")
            elif not legacy_rules:
                if path.name not in (legacy or {}):
                    raise RecordError(f"{path}: not one of this run's chunks: it has no signature of this "
                                      "run and is not among the chunks earlier versions sealed here "
                                      f"(run.json's legacy_chunks); {move}")
                assert legacy is not None   # None (no list) raised just above: no name is in {}
                if legacy[path.name] != digest:
                    raise RecordError(f"{path}: not the chunk an earlier version sealed under this name (its "
                                      "SHA-256 differs from the one in run.json's legacy_chunks); restore it "
                                      "from git (git checkout -- <file>): a chunk is never rewritten")
            else:   # no run of this version has sealed a chunk here: the lines themselves must be this run's
                for lineno, line in enumerate(lines, 1):
                    if line.strip() and (problem := _not_of_run(_record(path, lineno, line), manifest)):
                        raise RecordError(f"{path}:{lineno}: {problem}, so this chunk is not this run's "
                                          f"(copied from another run?); {move}")
            out.append((path, lines, digest, signature is not None))
        present = {n for n, _ in numbered}
        listed = {int(m.group(1)) for n in legacy or {} if (m := _CHUNK_NAME.match(n))}
        highest = max(present | listed, default=0)
        missing = [f"{n:06d}.jsonl.gz" for n in range(1, highest + 1) if n not in present]
        if missing:
            warnings.warn(RecordWarning(
                f"{folder}: sealed chunk {', '.join(missing)} is missing (a run never deletes a chunk): its "
                "episodes are not recorded unless a later run here re-ran them (a run here runs them again); "
                "restore it from git (git checkout -- <file>) to keep the original records"), stacklevel=3)
        return out

    def episode_dicts(self) -> dict[tuple[str, int], dict]:
        """(stream, position) → the last recorded episode there, as a dict."""
        out: dict[tuple[str, int], dict] = {}
        for path, lines, _, _ in self._sealed(self.manifest()):
            for lineno, line in enumerate(lines, 1):
                if line.strip():
                    d = _record(path, lineno, line)
                    out[(d["stream"], int(d["position"]))] = d
        open_path = self.path / "episodes" / "open.jsonl"
        if open_path.exists():
            with open(open_path, encoding="utf-8") as f:
                for lineno, line in enumerate(f, 1):
                    # a line without its newline was cut by a crash mid-write: that episode was not recorded
                    # (and the next append cuts it off)
                    if line.strip() and line.endswith("\n"):
                        d = _record(open_path, lineno, line)
                        out[(d["stream"], int(d["position"]))] = d
        return out

    def append_episode(self, ep: Episode) -> None:
        """Append one finished episode (a line, flushed to disk); seal a chunk when the open file is full."""
        folder = self.path / "episodes"
        open_path = folder / "open.jsonl"
        line = (json.dumps(ep.to_dict(), ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")
        if not (self.path / "run.json").exists():   # say so now, not at the seal after CHUNK episodes
            raise RecordError(f"{self.path / 'run.json'} is missing: RunDir.check_or_start records the run's "
                              "settings and streams before its first episode")
        with self._write_lock:
            folder.mkdir(parents=True, exist_ok=True)
            _drop_partial_line(open_path)
            with open(open_path, "ab") as f:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())
            data = open_path.read_bytes()
            if data.count(b"\n") >= CHUNK:
                self._seal(folder, data)
                # a crash before this line leaves the lines twice (equal copies; the last one wins)
                atomic_write_bytes(open_path, b"")

    def _seal(self, folder: Path, data: bytes) -> Path:
        """Write `data` as a signed chunk under the next free number; an existing chunk is never replaced."""
        manifest = self._list_legacy_chunks()   # before the first signed chunk, which ends the legacy rules
        # manifest is None only if run.json was removed after append_episode checked it: a TypeError then
        run = fingerprint(manifest["settings"])  # type: ignore[index]
        taken = [int(m.group(1)) for n in [*os.listdir(folder), *(manifest.get("legacy_chunks") or {})]  # type: ignore[union-attr]
                 if (m := _CHUNK_NAME.match(n))]
        number = max(taken, default=0) + 1   # after the highest, also one that went missing: never reused
        # One writer at a time (the locks). A crash may leave this name behind, even as a second link to a
        # chunk: atomic_write_bytes replaces the name, never writes into the file, so the chunk is untouched.
        tmp = folder / ".sealing.tmp"
        while True:
            path = folder / f"{number:06d}.jsonl.gz"
            atomic_write_bytes(tmp, _signed_gzip(data, {"chunk": number, "run": run}))
            try:
                os.link(tmp, path)   # fails if the name exists: a chunk (or a stray file) is never replaced
            except FileExistsError:
                number += 1
                continue
            except OSError:          # a file system without hard links: check, then rename
                if path.exists():
                    number += 1
                    continue
                os.replace(tmp, path)
            break
        tmp.unlink(missing_ok=True)
        fd = os.open(folder, os.O_RDONLY)   # the new name on disk before open.jsonl is emptied
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        return path

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


def _served_anywhere(settings: dict) -> dict:
    """Recorded settings with every backend named as fingerprints name it now (`llm.backend_fingerprint`:
    the model, not its address), so records made before that change by a served model still resume when
    only the server's address changed. Embedded backends, the only ones committed, are unchanged."""
    out = json.loads(json.dumps(settings))
    if isinstance(out.get("backend"), str):
        out["backend"] = backend_fingerprint(out["backend"])
    memory = out.get("memory")
    if isinstance(memory, dict) and isinstance(memory.get("llm"), str):
        memory["llm"] = backend_fingerprint(memory["llm"])
    tau2 = (out.get("env_options") or {}).get("tau2")
    if isinstance(tau2, dict) and isinstance(tau2.get("user_backend"), str) and tau2["user_backend"]:
        tau2["user_backend"] = backend_fingerprint(tau2["user_backend"])
    return out


def settings_diff(old: dict, new: dict, prefix: str = "") -> list[str]:
    """Dotted names of the settings that differ (nested mappings compared key by key)."""
    out = []
    for k in sorted(set(old) | set(new)):
        a, b = old.get(k), new.get(k)
        if isinstance(a, dict) and isinstance(b, dict):
            out += settings_diff(a, b, f"{prefix}{k}.")
        elif a != b:
            out.append(f"{prefix}{k}")
    return out


def fingerprint(settings: dict) -> str:
    """SHA-256 of the canonical JSON of a run's recorded settings: what its chunks are signed with."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
                          .encode("utf-8")).hexdigest()


def _signed_gzip(data: bytes, signature: dict) -> bytes:
    """gzip of `data` with a fixed header (no name, mtime 0, OS unknown: the same bytes for the same data)
    whose comment field (FCOMMENT) holds SIGNATURE + the signature's JSON."""
    comment = (SIGNATURE + json.dumps(signature, sort_keys=True, separators=(",", ":"))).encode("ascii")
    c = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    body = c.compress(data) + c.flush()
    return (b"\x1f\x8b\x08\x10\x00\x00\x00\x00\x02\xff" + comment + b"\x00" + body
            + zlib.crc32(data).to_bytes(4, "little") + (len(data) & 0xFFFFFFFF).to_bytes(4, "little"))


def _gzip_comment(raw: bytes) -> bytes | None:
    """The comment field of a gzip header (RFC 1952), None without one; ValueError if not gzip."""
    if raw[:3] != b"\x1f\x8b\x08":
        raise ValueError(f"not a gzip file (it begins {raw[:8]!r})")
    flags, pos = raw[3], 10
    if flags & 0x04:   # FEXTRA: a two-byte length, then that many bytes
        pos += 2 + int.from_bytes(raw[pos:pos + 2], "little")
    if flags & 0x08:   # FNAME: zero-terminated
        pos = raw.index(b"\x00", pos) + 1
    return raw[pos:raw.index(b"\x00", pos)] if flags & 0x10 else None


def _read_chunk(path: Path, raw: bytes) -> tuple[dict | None, list[str]]:
    """(signature or None, lines) of a chunk; one that cannot be read is a RecordError saying what to do."""
    try:
        comment = _gzip_comment(raw)
        lines = gzip.decompress(raw).decode("utf-8").splitlines(keepends=True)
    except (ValueError, OSError, EOFError, zlib.error) as e:
        # truncated: EOFError; not gzip: BadGzipFile (an OSError); damaged inside: zlib.error or a CRC
        # BadGzipFile; not UTF-8: UnicodeDecodeError (a ValueError)
        raise RecordError(
            f"{path}: a damaged chunk of sealed episodes ({type(e).__name__}: {e}). A chunk is written once "
            "and never rewritten, so the committed copy is the right one: restore it from git (git checkout "
            "-- <file>) or from a backup of this run directory. Without a copy, move it out of the folder "
            "(keep it) and run again: its episodes are then run again.") from None
    if comment is None or not comment.startswith(SIGNATURE.encode()):
        return None, lines   # sealed by an earlier version (or by another gzip writer): unsigned
    try:
        signature = json.loads(comment[len(SIGNATURE):])
    except ValueError:
        signature = None
    if not isinstance(signature, dict):
        raise RecordError(f"{path}: its gzip comment begins like a chunk signature but is not one "
                          f"({comment[:120]!r}); restore it from git (git checkout -- <file>)")
    return signature, lines


def _record(path: Path, lineno: int, line: str) -> dict:
    """The episode dict of one record line; RecordError naming file and line otherwise."""
    try:
        d = json.loads(line)
        d["stream"], int(d["position"])   # what every reader keys an episode by
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise RecordError(f"{path}:{lineno}: not an episode record ({type(e).__name__}: {e})") from None
    return d


def _not_of_run(d: dict, manifest: dict) -> str | None:
    """Why an episode line cannot be one of this run's (None if it can): another task at its position,
    another agent level or memory than the run's settings name. Used for unsigned chunks no list covers."""
    ids = (manifest.get("streams") or {}).get(d["stream"])
    position = int(d["position"])
    if ids is None or not 0 <= position < len(ids) or ids[position] != d.get("task_id"):
        return (f"an episode of task {d.get('task_id')!r} at position {position} of stream {d['stream']!r}, "
                "which is not this run's task there")
    settings = manifest.get("settings") or {}
    if isinstance(settings.get("legacy"), dict):   # converted from the first record format
        settings = settings["legacy"]
    agent, memory = settings.get("agent"), settings.get("memory")
    expected = {"agent": agent.get("level") if isinstance(agent, dict) else None,
                "memory": memory.get("name") if isinstance(memory, dict) else memory}
    for field, value in expected.items():
        if isinstance(value, str) and d.get(field) != value:
            return f"an episode with {field} {d.get(field)!r} (this run's is {value!r})"
    return None


def _drop_partial_line(path: Path) -> None:
    """Cut `path` back to its last newline: a line without one was cut by a crash (a kill, a full disk) and
    would otherwise be joined to the next line appended."""
    if not path.exists():
        return
    with open(path, "r+b") as f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return
        f.seek(0)
        keep = f.read().rfind(b"\n") + 1
        f.truncate(keep)
        f.flush()
        os.fsync(f.fileno())
    warnings.warn(RecordWarning(f"{path}: dropped a partial record (its last {size - keep} bytes, a line cut "
                                "by a crash or a full disk; that episode was not recorded and runs again)"),
                  stacklevel=3)
