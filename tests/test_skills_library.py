"""Skill library: retrieval, threshold, hygiene and persistence, on hand-made embeddings with known answers."""
import json
import multiprocessing as mp
import os
import signal
import time

import numpy as np
import pytest

from skillbook.papers.breakdown.hygiene import add_with_hygiene, delete_cascade
from skillbook.skills import Skill
from skillbook.skills.library import SkillLibrary


class HandMadeEmbedder:
    """Unit vectors chosen by hand: each text maps to a known direction (test double for the encoder)."""

    def __init__(self, table):
        self.table = {k: np.asarray(v, np.float32) / np.linalg.norm(v) for k, v in table.items()}
        self.hits = self.misses = 0

    def embed(self, texts):
        if isinstance(texts, str):
            return self.table[texts]
        return np.stack([self.table[t] for t in texts]) if texts else np.zeros((0, 3), np.float32)


E = HandMadeEmbedder({
    "open the fridge": [1, 0, 0], "open a fridge door": [0.95, 0.31, 0], "take the coin": [0, 1, 0],
    "read the book": [0, 0, 1], "query fridge": [1, 0.05, 0], "query coin-ish": [0.2, 1, 0],
    "query nothing": [-1, -1, -1], "fetch item": [0.6, 0.8, 0], "fetch thing": [0.62, 0.78, 0],
})


def lib_with(*skills):
    lib = SkillLibrary(E)
    for s in skills:
        lib.add(s)
    return lib


def test_top_k_and_threshold():
    lib = lib_with(Skill("a", "open the fridge", "1. open fridge"), Skill("b", "take the coin", "1. take coin"),
                   Skill("c", "read the book", "1. read book"))
    hits = lib.search("query fridge", k=5, threshold=0.3)
    assert [s.id for s, _ in hits] == ["a"]  # b has cosine 0.05, c 0: under the threshold
    assert hits[0][1] == pytest.approx(1 / np.sqrt(1.0025), rel=1e-4)
    assert [s.id for s, _ in lib.search("query coin-ish", k=2, threshold=0.0)] == ["b", "a"]
    assert [s.id for s, _ in lib.search("query coin-ish", k=1, threshold=0.0)] == ["b"]
    assert lib.search("query nothing") == []
    assert lib.top_k_ids(E.embed("query coin-ish"), k=2, threshold=0.0) == ["b", "a"]
    with pytest.raises(ValueError, match="positive"):
        lib.search("query fridge", k=0)


def test_text_duplicates_are_merged_not_added():
    lib = lib_with(Skill("a", "open the fridge", "1. open fridge"))
    new = Skill("n", "open a fridge door", "1. go to kitchen\n2. open fridge")  # cosine 0.95 ≥ 0.85
    kept, event = add_with_hygiene(lib, new, merge_bodies=lambda old, new: old.body + " | " + new.body)
    assert event == "merged" and kept.id == "a" and len(lib) == 1
    assert lib.get("a").body == "1. open fridge | 1. go to kitchen\n2. open fridge"
    other, event = add_with_hygiene(lib, Skill("m", "take the coin", "1. take coin"), merge_bodies=None)
    assert event == "added" and len(lib) == 2
    assert [e["event"] for e in lib.events] == ["merged", "added"]


CODE_A = "def fetch(env, item):\n    return env.step('take ' + item)\n"
CODE_A2 = "def fetch(env, item):\n    env.step('look around')\n    return env.step('take ' + item)\n"
CODE_B = "def fetch_two(env, a, b):\n    fetch(env, a)\n    return fetch(env, b)\n"
CODE_BROKEN = "def fetch(env, item):\n    return env.step(item)\nraise RuntimeError('broken at load')\n"


def test_code_overwrite_drop_and_cascade_delete():
    ok = lambda defs: ""  # noqa: E731 — the sandbox itself is tested in test_sandbox.py
    lib = SkillLibrary(E)
    a, ev = add_with_hygiene(lib, Skill("a", "fetch item", CODE_A, "code"), load_check=ok)
    assert ev == "added"
    b, ev = add_with_hygiene(lib, Skill("b", "take the coin", CODE_B, "code"), load_check=ok)
    assert ev == "added"
    # same function name: overwrites, whatever the description — as a new version of skill "a"
    a2, ev = add_with_hygiene(lib, Skill("a2", "read the book", CODE_A2, "code"), load_check=ok)
    assert ev == "overwritten" and a2.id == "a" and "a2" not in lib and lib.get("a").body == CODE_A2
    # a new name with a near-duplicate description of a skill now reading 'read the book'? no: added
    c, ev = add_with_hygiene(lib, Skill("c", "fetch thing", "def other(env):\n    return env.step('x')\n", "code"),
                             load_check=ok)
    assert ev == "added"
    d, ev = add_with_hygiene(lib, Skill("d", "fetch item", "def third(env):\n    return env.step('y')\n", "code"),
                             load_check=ok)
    assert ev == "dropped" and d is None and "d" not in lib  # 'fetch item' ~ 'fetch thing' (c)
    # deleting the function others call removes them too
    gone = delete_cascade(lib, "a", "test")
    assert set(gone) == {"a", "b"} and set(lib.skills) == {"c"}


def test_a_code_overwrite_is_a_new_version_of_the_same_skill():
    """The real case (issue 13): in the workshop's subtask-code stream `pick_up_and_place` was written 8
    times and got 8 ids (c0003 … c0020), so its retrievals and reuse restarted at every version and the
    stream "wrote" 17 skills where it had 7. An overwrite keeps the id, the statistics and the birth, and
    keeps the earlier versions as lineage."""
    ok = lambda defs: ""  # noqa: E731
    lib = SkillLibrary(E)
    first = Skill("c0003", "fetch item", CODE_A, "code", provenance={"source_task": "t2"}, created_at=2)
    add_with_hygiene(lib, first, load_check=ok)
    lib.get("c0003").stats["retrievals"] = 2
    second = Skill("c0004", "fetch thing", CODE_A2, "code", provenance={"source_task": "t5"}, created_at=5)
    kept, ev = add_with_hygiene(lib, second, load_check=ok)
    assert ev == "overwritten" and kept.id == "c0003" and list(lib.skills) == ["c0003"]
    assert kept.stats["retrievals"] == 2 and kept.created_at == 2          # identity: stats and birth
    assert kept.body == CODE_A2 and kept.description == "fetch thing" and kept.extra["version"] == 2
    assert kept.extra["written_at"] == 5 and kept.provenance == {"source_task": "t5"}
    (v1,) = kept.extra["lineage"]
    assert v1 == {"version": 1, "description": "fetch item", "body": CODE_A, "provenance": {"source_task": "t2"},
                  "written_at": 2}
    third = Skill("c0005", "fetch item", CODE_A, "code", created_at=7)
    kept, _ = add_with_hygiene(lib, third, load_check=ok)
    assert kept.id == "c0003" and kept.extra["version"] == 3 and [v["version"] for v in kept.extra["lineage"]] == [1, 2]
    assert lib.events[-1] == {"event": "overwritten", "skill": "c0003", "version": 3, "function": "fetch"}
    from skillbook.papers.breakdown.hygiene import description_at, identities
    assert identities(lib) == {}                                           # nothing to map in new records
    assert [description_at(kept, p) for p in (2, 3, 5, 6, 8)] == ["fetch item", "fetch item", "fetch item",
                                                                  "fetch thing", "fetch item"]
    back = SkillLibrary(E).load_state(lib.state())                         # the lineage survives a checkpoint
    assert back.get("c0003").extra == kept.extra


def test_code_skill_that_fails_to_load_is_deleted_with_its_dependents():
    lib = SkillLibrary(E)
    add_with_hygiene(lib, Skill("a", "fetch item", CODE_A, "code"))
    add_with_hygiene(lib, Skill("b", "take the coin", CODE_B, "code"))
    assert set(lib.skills) == {"a", "b"}
    kept, ev = add_with_hygiene(lib, Skill("x", "read the book", CODE_BROKEN, "code"))  # overwrites fetch, fails
    assert kept is None and ev == "deleted"
    assert set(lib.skills) == set()  # fetch_two depended on fetch
    deleted = [e for e in lib.events if e["event"] == "deleted"]
    assert "broken at load" in deleted[0]["reason"] and "depends on deleted fetch" in deleted[1]["reason"]


def test_library_round_trips_and_save_is_atomic(tmp_path):
    lib = lib_with(Skill("a", "open the fridge", "1. open fridge", provenance={"source_task": "t"}),
                   Skill("b", "fetch item", CODE_A, "code"))
    path = lib.save(tmp_path / "lib.json")
    back = SkillLibrary.load(path, E)
    assert [s.to_dict() for s in back] == [s.to_dict() for s in lib]
    assert [s.id for s, _ in back.search("query fridge")] == ["a", "b"]  # cosines 1.0 and 0.64


def _writer(path, n):
    lib = SkillLibrary(HandMadeEmbedder({f"d{i}": [1, i, 0] for i in range(10_000)}))
    for i in range(n):
        lib.add(Skill(f"s{i}", f"d{i}", "x" * 2000))
        lib.save(path)


def test_library_killed_mid_write_is_complete_up_to_its_last_checkpoint(tmp_path):
    path = tmp_path / "lib.json"
    p = mp.get_context("fork").Process(target=_writer, args=(path, 10_000))
    p.start()
    deadline = time.time() + 120        # a loaded machine may take a while to write the first checkpoint
    while not path.exists() and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    os.kill(p.pid, signal.SIGKILL)
    p.join()
    state = json.loads(path.read_text())  # never a torn file
    ids = [s["id"] for s in state["skills"]]
    assert ids and ids == [f"s{i}" for i in range(len(ids))]
    assert not [f for f in os.listdir(tmp_path) if f != "lib.json" and not f.startswith(".lib.json.")]


@pytest.mark.integration
def test_a_vector_depends_on_its_text_only(tmp_path):
    # Real case: chapter 05 replayed on a machine with an empty embedding cache changed its claims record
    # in the third decimal (utility ties broken otherwise): batched vectors differed by up to 1e-7 with
    # the batch's other texts.
    from skillbook.skills.embeddings import Embedder
    texts = ["take the coin", "open the door to the north and then go through it into the pantry " * 4,
             "look around", "put the apple in the fridge"]
    together = Embedder(tmp_path / "a.sqlite").embed(texts)
    alone = Embedder(tmp_path / "b.sqlite")
    assert all((alone.embed(t) == v).all() for t, v in zip(texts, together))
