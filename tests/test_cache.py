import json

import pytest

from skillbook.llm import ResponseCache, cache_key

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
