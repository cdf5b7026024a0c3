"""What a replay reads instead of recomputing (issue 37): each chapter's vector record and its stored
results. The real case: a fresh machine's replay embedded chapter 05's 17,089 catalogue texts for 18.7
minutes and changed `05_utility/claims.json` in the 6th decimal (embedding arithmetic on another CPU)."""
import gzip

import numpy as np
import pandas as pd
import pytest

from skillbook.io import stored
from skillbook.skills.embeddings import DIM, Embedder, _key, read_vectors, write_vectors


class CountingModel:
    """A stand-in for the sentence model (control flow only): a vector from the text's hash; counts texts."""
    def __init__(self):
        self.texts = []

    def encode(self, texts, **_):
        self.texts += list(texts)
        out = []
        for t in texts:
            v = np.random.default_rng(abs(hash(t)) % 2**32).standard_normal(DIM).astype(np.float32)
            out.append(v / np.linalg.norm(v))
        return np.stack(out)


def embedder(tmp_path, name="cache.sqlite"):
    e = Embedder(tmp_path / name)
    e._model = CountingModel()
    return e


def test_a_vector_record_round_trips_and_its_bytes_depend_on_the_vectors_only(tmp_path):
    vecs = {_key(t): np.full(DIM, i, np.float32) for i, t in enumerate(["a", "b", "c"])}
    assert write_vectors(tmp_path / "v.bin.gz", vecs)
    first = (tmp_path / "v.bin.gz").read_bytes()
    assert not write_vectors(tmp_path / "v.bin.gz", dict(reversed(list(vecs.items()))))   # unchanged
    write_vectors(tmp_path / "w.bin.gz", dict(reversed(list(vecs.items()))))
    assert (tmp_path / "w.bin.gz").read_bytes() == first                 # no time, no order in the bytes
    back = read_vectors(tmp_path / "v.bin.gz")
    assert back.keys() == vecs.keys() and all((back[k] == vecs[k]).all() for k in vecs)
    (tmp_path / "bad.bin.gz").write_bytes(gzip.compress(b"xyz"))
    with pytest.raises(ValueError, match="not a vector record"):
        read_vectors(tmp_path / "bad.bin.gz")


def test_a_recorded_vector_is_served_before_the_cache_and_the_model(tmp_path):
    other_cpu = np.full(DIM, 1 / DIM ** 0.5, np.float32)               # what another machine computed
    write_vectors(tmp_path / "rec.bin.gz", {_key("go north"): other_cpu})
    e = embedder(tmp_path)
    e.embed("go north")                                                 # this machine's vector, now cached
    e.record_to(tmp_path / "rec.bin.gz")
    assert (e.embed("go north") == other_cpu).all()
    fresh = embedder(tmp_path, "empty.sqlite")
    fresh.record_to(tmp_path / "rec.bin.gz")
    assert (fresh.embed(["go north"])[0] == other_cpu).all() and fresh._model.texts == []


def test_a_record_keeps_what_was_asked_never_shrinks_and_leaves_unrecorded_texts_out(tmp_path):
    path = tmp_path / "vectors-05.bin.gz"
    e = embedder(tmp_path)
    e.record_to(path)
    e.embed(["skill one", "task one"])
    with e.unrecorded():
        e.embed(["catalogue task"] * 2)
    assert e.save_record()
    assert set(read_vectors(path)) == {_key("skill one"), _key("task one")}
    replay = embedder(tmp_path, "other.sqlite")
    replay.record_to(path)
    replay.embed("skill one")                                           # asks less than the record holds
    assert not replay.save_record() and len(read_vectors(path)) == 2 and replay._model.texts == []
    replay.embed("a new query")
    assert replay.save_record() and len(read_vectors(path)) == 3


def test_a_stored_result_is_computed_once_per_key_with_every_digit_kept(tmp_path):
    calls = []
    frame = pd.DataFrame({"skill": ["s1", "s2"], "utility": [0.1 + 0.2, float("nan")], "n": [3, 4]})

    def compute():
        calls.append(1)
        return {"scaled": frame, "sizes": {"stream": 4}, "rho": np.float64(1 / 3)}

    path = tmp_path / "stored-05_utility-catalogue.json.gz"
    a = stored(path, {"tau": 0.1, "skills": frame}, compute)
    b = stored(path, {"tau": 0.1, "skills": frame}, compute)
    assert len(calls) == 1
    for r in (a, b):
        assert r["scaled"].utility[0] == 0.1 + 0.2 and np.isnan(r["scaled"].utility[1])
        assert r["rho"] == 1 / 3 and r["sizes"] == {"stream": 4}
    bytes_before = path.read_bytes()
    stored(path, {"tau": 0.2, "skills": frame}, compute)                # another key: computed again
    assert len(calls) == 2 and path.read_bytes() != bytes_before
