"""The lowest layer: where files go and how they are written.

* `cache_dir()` — the per-user cache (joined model files, split lists, embeddings, server logs).
* Atomic writes: a reader (or a resumed run) sees the old file or the new one, never half of one.
* `stored(path, key, compute)` — a result kept with the inputs it was computed from (`Lab.stored`).
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any


def cache_dir() -> Path:
    """Per-user cache: $SKILLBOOK_CACHE, else $XDG_CACHE_HOME/skillbook, else ~/.cache/skillbook."""
    root = os.environ.get("SKILLBOOK_CACHE")
    if root:
        path = Path(root)
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        path = (Path(xdg) if xdg else Path.home() / ".cache") / "skillbook"
    path.mkdir(parents=True, exist_ok=True)
    return path


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)   # mkstemp makes 0600 files; records are ordinary files
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


# Read once at import: os.umask can only be read by setting it, which is not safe while threads run.
_UMASK = os.umask(0o022)
os.umask(_UMASK)


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: Any, **dump_kw) -> Path:
    return atomic_write_text(path, json.dumps(obj, **dump_kw) + "\n")


def write_json_if_changed(path: str | os.PathLike, obj: Any, **dump_kw) -> bool:
    """`atomic_write_json`, skipped when the file already holds exactly these bytes: a replay that derives
    the same file from the records writes nothing, so it also runs over read-only records. Written?"""
    return write_bytes_if_changed(path, (json.dumps(obj, **dump_kw) + "\n").encode("utf-8"))


def write_bytes_if_changed(path: str | os.PathLike, data: bytes) -> bool:
    """`atomic_write_bytes`, skipped when the file already holds exactly these bytes. Written?"""
    path = Path(path)
    if path.is_file() and path.read_bytes() == data:
        return False
    atomic_write_bytes(path, data)
    return True


def gzip_bytes(data: bytes) -> bytes:
    """gzip with no file name and no time in it: the bytes depend on `data` only (committed records)."""
    return gzip.compress(data, compresslevel=9, mtime=0)


def read_json(path: str | os.PathLike, what: str = "file") -> Any:
    """JSON from a file; a malformed file is an error naming the file, line and column."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{e.lineno}:{e.colno}: malformed {what} ({e.msg})") from None


def _encode(value: Any) -> Any:
    """JSON for a stored result: plain values as they are, a DataFrame as its columns and rows (Python
    floats, so every digit survives: pandas' own JSON keeps 10)."""
    # deferred: pandas takes ~0.5 s to import; only stored results need it, and io is imported by modules
    # that use neither (skillbook.llm, the model server's process)
    import numpy as np
    import pandas as pd
    if isinstance(value, pd.DataFrame):
        rows = [[_encode(v) for v in row] for row in value.itertuples(index=False, name=None)]
        return {"__frame__": {"columns": [str(c) for c in value.columns], "rows": rows}}
    if isinstance(value, dict):
        return {str(k): _encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and value != value:
        return {"__nan__": True}
    return value


def _decode(value: Any) -> Any:
    import pandas as pd  # deferred: ~0.5 s; see _encode
    if isinstance(value, dict):
        if "__frame__" in value:
            f = value["__frame__"]
            return pd.DataFrame([[_decode(v) for v in row] for row in f["rows"]], columns=f["columns"])
        if value == {"__nan__": True}:
            return float("nan")
        return {k: _decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def stored(path: str | os.PathLike, key: Any, compute) -> Any:
    """`compute()`'s result, kept in `path` (gzip'd JSON, no time in it) with a digest of `key` (what it
    was computed from): with the same key it is read, not computed, so a costly result or one whose last
    digits depend on the CPU is the same on every machine; another key computes it again and replaces
    the file. Values: JSON types, numpy scalars and DataFrames (at any depth of dicts and lists)."""
    path = Path(path)
    digest = hashlib.sha256(json.dumps(_encode(key), sort_keys=True).encode()).hexdigest()[:16]
    if path.is_file():
        saved = json.loads(gzip.decompress(path.read_bytes()))
        if saved.get("key") == digest:
            return _decode(saved["value"])
    value = compute()
    data = json.dumps({"key": digest, "value": _encode(value)}).encode("utf-8")
    atomic_write_bytes(path, gzip_bytes(data))
    return _decode(_encode(value))


def write_text_if_changed(path: str | os.PathLike, text: str) -> bool:
    """`atomic_write_text`, skipped when the file already holds exactly this text. Written?"""
    return write_bytes_if_changed(path, text.encode("utf-8"))
