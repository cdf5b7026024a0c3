import gzip
import hashlib
import json
import os
import re
import sqlite3
from pathlib import Path

import pytest

from skillbook.llm import LLMError, ResponseCache, cache_key
from skillbook.llm.cache import CacheCorruptError, CacheError, CacheFormatError, CacheRebuiltWarning, canonical

REQ = {"messages": [{"role": "user", "content": "hi"}], "temperature": 0.0, "max_tokens": 8, "seed": 0,
       "stop": None, "top_p": None}


def test_key_ignores_dict_order_but_not_content():
    reordered = dict(reversed(list(REQ.items())))
    assert cache_key("m", REQ) == cache_key("m", reordered)
    assert cache_key("m", REQ) != cache_key("other-model", REQ)
    for field, value in [("temperature", 0.7), ("seed", 1), ("max_tokens", 9), ("stop", ["\n"])]:
        assert cache_key("m", REQ) != cache_key("m", {**REQ, field: value}), field
    changed = {**REQ, "messages": [{"role": "user", "content": "hi!"}]}
    assert cache_key("m", REQ) != cache_key("m", changed)


def test_get_put_counts_hits_and_misses(tmp_path):
    cache = ResponseCache(tmp_path / "c.sqlite")
    assert cache.get("m", REQ) is None
    cache.put("m", REQ, {"text": "hello"})
    assert cache.get("m", REQ) == {"text": "hello"}
    assert cache.get("m2", REQ) is None
    assert (cache.hits, cache.misses) == (1, 2)
    assert len(cache) == 1


def test_entries_survive_reopening(tmp_path):
    ResponseCache(tmp_path / "c.sqlite").put("m", REQ, {"text": "kept"})
    assert ResponseCache(tmp_path / "c.sqlite").get("m", REQ) == {"text": "kept"}


def test_jsonl_export_import_round_trip(tmp_path):
    a = ResponseCache(tmp_path / "a.sqlite")
    for i in range(5):
        a.put("m", {**REQ, "seed": i}, {"text": f"answer {i}"})
    path = a.export_jsonl(tmp_path / "responses.jsonl")
    lines = path.read_text().splitlines()
    assert len(lines) == 5
    assert [json.loads(x)["key"] for x in lines] == sorted(json.loads(x)["key"] for x in lines)
    b = ResponseCache()
    assert b.import_jsonl(path) == 5
    assert b.get("m", {**REQ, "seed": 3}) == {"text": "answer 3"}


def test_for_run_seeds_from_the_committed_text_form(tmp_path):
    a = ResponseCache(tmp_path / "a.sqlite")
    a.put("m", REQ, {"text": "from git"})
    a.export_jsonl(tmp_path / "run" / "responses.jsonl")
    run = ResponseCache.for_run(tmp_path / "run")
    assert run.get("m", REQ) == {"text": "from git"}


def test_tampered_entry_is_rejected(tmp_path):
    a = ResponseCache()
    a.put("m", REQ, {"text": "x"})
    path = a.export_jsonl(tmp_path / "r.jsonl")
    entry = json.loads(path.read_text())
    entry["request"]["seed"] = 99  # content no longer matches its key
    path.write_text(json.dumps(entry) + "\n")
    with pytest.raises(ValueError, match="does not match"):
        ResponseCache().import_jsonl(path)


# -- integrity: every export line carries a digest of its response, and import checks it -------------
def _entries(path):
    """The JSON objects of a plain or gzip export, in file order."""
    opener = gzip.open if path.read_bytes()[:2] == b"\x1f\x8b" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _write_entries(path, entries, gz=False):
    text = "".join(json.dumps(e) + "\n" for e in entries)
    path.write_bytes(gzip.compress(text.encode(), mtime=0) if gz else text.encode())
    return path


def _run_with_answers(run, n=3, start=0):
    cache = ResponseCache.for_run(run)
    for i in range(start, start + n):
        cache.put("m", {**REQ, "seed": i}, {"text": f"answer {i}"})
    return cache


def test_every_exported_entry_carries_the_digest_of_its_response(tmp_path):
    cache = _run_with_answers(tmp_path / "run")
    for path in (cache.save(), cache.export_jsonl(tmp_path / "full.jsonl")):
        for e in _entries(path):
            assert e["response_sha256"] == hashlib.sha256(canonical(e["response"]).encode()).hexdigest()


@pytest.mark.parametrize("gz", [False, True], ids=["jsonl", "chunk"])
def test_an_edited_response_with_its_key_kept_is_refused(tmp_path, gz):
    cache = _run_with_answers(tmp_path / "run")
    path = cache.save() if gz else cache.export_jsonl(tmp_path / "responses.jsonl")
    entries = _entries(path)
    entries[1]["response"]["text"] = "a better answer"   # key (model + request) and digest kept
    _write_entries(path, entries, gz=gz)
    with pytest.raises(CacheFormatError, match=rf"{re.escape(path.name)}:2: response_sha256 .* does not match") as e:
        ResponseCache().import_jsonl(path)
    assert (e.value.path, e.value.line) == (str(path), 2)


def test_legacy_entries_without_a_digest_are_imported_and_counted_as_unverified(tmp_path):
    legacy = {"key": cache_key("m", REQ), "model": "m", "request": REQ, "response": {"text": "old"}}
    (tmp_path / "run").mkdir()
    _write_entries(tmp_path / "run" / "responses.jsonl", [legacy])
    cache = ResponseCache.for_run(tmp_path / "run")
    assert cache.get("m", REQ) == {"text": "old"}
    assert cache.unverified == 1 and cache.stats()["unverified"] == 1
    cache.close()
    with pytest.raises(CacheFormatError, match=r"responses.jsonl:1: no 'response_sha256'"):
        ResponseCache.for_run(tmp_path / "run", require_digest=True)


COMMITTED = sorted((Path(__file__).parents[1] / "runs").glob("*/*/responses.jsonl"))


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.parent.name)
def test_every_committed_legacy_export_still_imports(path):
    """The book's committed caches (no digests) replay: every line passes its key check."""
    cache = ResponseCache()
    n = cache.import_jsonl(path)
    assert n == len(cache) > 0 and cache.unverified == n


# -- a failed import rolls back and leaves the store usable ------------------------------------------
BAD_LINES = {
    "bad JSON": "{not json",
    "not an object": "[1, 2]",
    "missing field": json.dumps({"key": cache_key("m", REQ), "model": "m", "request": REQ}),
    "wrong type": json.dumps({"key": cache_key("m", REQ), "model": "m", "request": REQ, "response": "text"}),
    "wrong key": json.dumps({"key": "0" * 64, "model": "m", "request": REQ, "response": {"text": "x"}}),
    "bad digest": json.dumps({"key": cache_key("m", REQ), "model": "m", "request": REQ, "response": {"text": "x"},
                              "response_sha256": "0" * 64}),
    "digest type": json.dumps({"key": cache_key("m", REQ), "model": "m", "request": REQ, "response": {"text": "x"},
                               "response_sha256": 7}),
}
EXPECTED = {"bad JSON": "not valid JSON", "not an object": "expected a JSON object",
            "missing field": "missing field 'response'",
            "wrong type": "field 'response' should be a JSON object, found str",
            "wrong key": "entry key .* does not match its model and request",
            "bad digest": "response_sha256 .* does not match",
            "digest type": "field 'response_sha256' should be 64 lowercase hex digits"}


@pytest.mark.parametrize("problem", BAD_LINES)
def test_every_malformed_line_is_refused_naming_file_and_line(tmp_path, problem):
    good = {"key": cache_key("m", {**REQ, "seed": 1}), "model": "m", "request": {**REQ, "seed": 1},
            "response": {"text": "fine"}}
    path = tmp_path / "responses.jsonl"
    path.write_text(json.dumps(good) + "\n\n" + BAD_LINES[problem] + "\n")
    with pytest.raises(CacheFormatError, match=rf"{re.escape(str(path))}:3: {EXPECTED[problem]}"):
        ResponseCache().import_jsonl(path)


def test_invalid_utf8_and_a_truncated_chunk_name_file_and_line(tmp_path):
    path = tmp_path / "responses.jsonl"
    path.write_bytes(b'{"key": "\xff"}\n')
    with pytest.raises(CacheFormatError, match=r"responses.jsonl:1: not valid JSON"):
        ResponseCache().import_jsonl(path)
    chunk = _run_with_answers(tmp_path / "run", n=40).save()
    chunk.write_bytes(chunk.read_bytes()[:-30])
    with pytest.raises(CacheFormatError, match=rf"{re.escape(str(chunk))}:\d+: cannot read the file past line"):
        ResponseCache().import_jsonl(chunk)


@pytest.mark.parametrize("problem", BAD_LINES)
def test_a_failed_import_rolls_back_and_leaves_the_cache_usable(tmp_path, problem):
    db = tmp_path / "c.sqlite"
    good = {"key": cache_key("m", {**REQ, "seed": 1}), "model": "m", "request": {**REQ, "seed": 1},
            "response": {"text": "fine"}}
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(good) + "\n" + BAD_LINES[problem] + "\n")
    cache = ResponseCache(db)
    with pytest.raises(CacheFormatError):
        cache.import_jsonl(bad)
    assert len(cache) == 0                        # the good first line went with the transaction
    cache.put("m", REQ, {"text": "after"})
    assert cache.get("m", REQ) == {"text": "after"}
    other = ResponseCache(db, timeout=0.2)       # another connection can write: no transaction left open
    other.put("m", {**REQ, "seed": 2}, {"text": "other"})
    assert other.get("m", REQ) == {"text": "after"}
    ok = _write_entries(tmp_path / "ok.jsonl", [good])
    assert cache.import_jsonl(ok) == 1 and cache.get("m", {**REQ, "seed": 1}) == {"text": "fine"}


# -- a damaged SQLite file is rebuilt from the exports, or refused clearly ----------------------------
DAMAGE = {
    "header overwritten": lambda p: p.write_bytes(b"this is no sqlite" * 8 + p.read_bytes()[136:]),
    "truncated": lambda p: os.truncate(p, p.stat().st_size // 2),
    "page scribbled": lambda p: p.write_bytes(p.read_bytes()[:4096 * 3 + 100] + bytes(range(256)) * 8
                                              + p.read_bytes()[4096 * 3 + 100 + 2048:]),
}


def _checkpointed_run(tmp_path):
    """A run with 40 saved answers and one never saved, its SQLite file closed and fully written."""
    run = tmp_path / "run"
    cache = _run_with_answers(run, n=40)
    cache.save()
    cache.put("m", {**REQ, "seed": 99}, {"text": "never saved"})
    cache._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    cache.close()
    return run


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_sqlite_file_is_rebuilt_from_the_exports(tmp_path, damage):
    run = _checkpointed_run(tmp_path)
    DAMAGE[damage](run / ".responses.sqlite")
    with pytest.warns(CacheRebuiltWarning, match=r"\.responses\.sqlite was damaged .*rebuilt the cache from 1 export"):
        cache = ResponseCache.for_run(run)
    assert cache.get("m", {**REQ, "seed": 7}) == {"text": "answer 7"} and len(cache) == 40
    assert cache.get("m", {**REQ, "seed": 99}) is None      # never saved: asked again
    assert (run / ".responses.sqlite.damaged-1").exists()    # kept for inspection, ignored by git
    assert cache.save() is None                              # the rebuilt entries are known to be saved


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_sqlite_file_outside_a_run_is_a_clear_error(tmp_path, damage):
    run = _checkpointed_run(tmp_path)
    DAMAGE[damage](run / ".responses.sqlite")
    with pytest.raises(CacheCorruptError, match=r"\.responses\.sqlite is damaged .*ResponseCache\.for_run"):
        ResponseCache(run / ".responses.sqlite")


class _FailingDB:
    def __init__(self, error):
        self.error = error

    def execute(self, *args):
        raise self.error


@pytest.mark.parametrize("error", [sqlite3.DatabaseError("database disk image is malformed"),
                                   sqlite3.OperationalError("database is locked")])
def test_a_database_error_during_a_run_is_a_cache_error_not_an_episode_failure(tmp_path, error):
    cache = ResponseCache(tmp_path / "c.sqlite")
    cache._db = _FailingDB(error)
    for call in (lambda: cache.get("m", REQ), lambda: cache.put("m", REQ, {"text": "x"})):
        with pytest.raises(CacheError, match=re.escape(str(tmp_path / "c.sqlite"))) as e:
            call()
        assert not isinstance(e.value, LLMError) and isinstance(e.value.__cause__, sqlite3.Error)


def test_a_damaged_row_during_a_run_is_a_cache_error(tmp_path):
    cache = ResponseCache(tmp_path / "c.sqlite")
    cache.put("m", REQ, {"text": "x"})
    cache._db.execute("UPDATE responses SET response = '{broken'")
    with pytest.raises(CacheCorruptError, match="decoding entry"):
        cache.get("m", REQ)
    cache.close()
    with pytest.raises(CacheError, match="c.sqlite"):
        cache.get("m", REQ)


# -- compact, append-only text form ---------------------------------------------------------------------
def _chunk_files(run):
    return sorted(p.name for p in (run / "responses").iterdir())


def test_two_saves_write_two_chunks_with_disjoint_entries(tmp_path):
    run = tmp_path / "run"
    cache = _run_with_answers(run, n=3)
    first = cache.save()
    before = first.read_bytes()
    for i in range(3, 5):
        cache.put("m", {**REQ, "seed": i}, {"text": f"answer {i}"})
    second = cache.save()
    assert _chunk_files(run) == ["000001.jsonl.gz", "000002.jsonl.gz"]
    assert first.read_bytes() == before                      # a chunk is never rewritten
    a, b = {e["key"] for e in _entries(first)}, {e["key"] for e in _entries(second)}
    assert len(a) == 3 and len(b) == 2 and not a & b
    assert not (run / "responses.jsonl").exists()
    cache.close()
    (run / ".responses.sqlite").unlink()                     # a fresh clone: only the committed chunks
    clone = ResponseCache.for_run(run)
    assert [clone.get("m", {**REQ, "seed": i}) for i in range(5)] == [{"text": f"answer {i}"} for i in range(5)]
    assert clone.unverified == 0


def test_a_replay_writes_no_chunk(tmp_path):
    run = tmp_path / "run"
    _run_with_answers(run).save()
    before = {p: p.read_bytes() for p in (run / "responses").iterdir()}
    for fresh_clone in (False, True):
        if fresh_clone:
            for p in run.glob(".responses.sqlite*"):
                p.unlink()
        cache = ResponseCache.for_run(run)
        assert all(cache.get("m", {**REQ, "seed": i}) for i in range(3)) and cache.misses == 0
        assert cache.save() is None
        cache.close()
    assert {p: p.read_bytes() for p in (run / "responses").iterdir()} == before


def test_identical_runs_give_byte_identical_chunks(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    ca = _run_with_answers(a, n=5)
    cb = ResponseCache.for_run(b)
    for i in reversed(range(5)):
        cb.put("m", {**REQ, "seed": i}, {"text": f"answer {i}"})
    pa, pb = ca.save(), cb.save()
    assert pa.read_bytes() == pb.read_bytes()
    assert pa.read_bytes()[4:8] == b"\0\0\0\0"             # gzip mtime 0
    keys = [e["key"] for e in _entries(pa)]
    assert len(keys) == 5


def test_answers_of_a_killed_run_are_saved_by_the_next_one(tmp_path):
    run = tmp_path / "run"
    _run_with_answers(run, n=2).close()                      # killed before save()
    cache = ResponseCache.for_run(run)
    assert cache.stats()["unsaved"] == 2
    assert len(_entries(cache.save())) == 2 and cache.stats()["unsaved"] == 0


def test_a_deleted_chunk_is_written_again(tmp_path):
    run = tmp_path / "run"
    cache = _run_with_answers(run, n=2)
    chunk = cache.save()
    cache.close()
    chunk.unlink()                                           # e.g. a checkout without it
    again = ResponseCache.for_run(run).save()
    assert len(_entries(again)) == 2


def test_a_legacy_file_is_still_imported_and_never_rewritten(tmp_path):
    run = tmp_path / "run"
    old = ResponseCache()
    old.put("m", REQ, {"text": "from the book"})
    legacy = old.export_jsonl(run / "responses.jsonl")
    entries = _entries(legacy)
    for e in entries:
        del e["response_sha256"]                             # as every committed export is today
    _write_entries(legacy, entries)
    before = legacy.read_bytes()
    cache = ResponseCache.for_run(run)
    assert cache.get("m", REQ) == {"text": "from the book"} and cache.unverified == 1
    assert cache.save() is None                              # nothing new: nothing written
    cache.put("m", {**REQ, "seed": 5}, {"text": "new"})
    chunk = cache.save()
    assert [e["response"] for e in _entries(chunk)] == [{"text": "new"}]
    assert legacy.read_bytes() == before
    cache.close()
    for p in run.glob(".responses.sqlite*"):
        p.unlink()
    clone = ResponseCache.for_run(run)
    assert clone.get("m", REQ) and clone.get("m", {**REQ, "seed": 5}) and len(clone) == 2


def test_save_never_replaces_an_existing_chunk(tmp_path, monkeypatch):
    import skillbook.llm.cache as cache_module
    run = tmp_path / "run"
    cache = _run_with_answers(run, n=2)
    taken = run / "responses" / "000001.jsonl.gz"
    real_chunks = cache_module._chunks

    def racing(directory):                                   # another writer takes 000001 meanwhile
        found = real_chunks(directory)
        if not taken.exists():
            taken.write_bytes(b"someone else's")
        return found
    monkeypatch.setattr(cache_module, "_chunks", racing)
    assert cache.save().name == "000002.jsonl.gz" and taken.read_bytes() == b"someone else's"
    assert not [p for p in (run / "responses").iterdir() if p.name.startswith(".")]   # no temp file left


def test_save_without_a_run_directory_is_a_clear_error(tmp_path):
    cache = ResponseCache()
    cache.put("m", REQ, {"text": "x"})
    with pytest.raises(CacheError, match=r"save\(\) needs a directory"):
        cache.save()
    assert cache.save(tmp_path / "chunks").name == "000001.jsonl.gz"


def test_the_first_answer_recorded_for_a_request_stays(tmp_path):
    cache = ResponseCache()
    cache.put("m", REQ, {"text": "first"})
    cache.put("m", REQ, {"text": "second"})   # a racing duplicate: the exports already hold the first
    assert cache.get("m", REQ) == {"text": "first"}
