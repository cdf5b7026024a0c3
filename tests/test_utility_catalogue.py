"""Utility against thousands of tasks (issue 17): exact specificity without the N × N matrix, the paper's
sampled estimate, and the task catalogue's texts cached per user."""
import zlib

import numpy as np
import pandas as pd
import pytest

from skillbook.papers.breakdown.catalogue import catalogue_task_ids, catalogue_task_types, catalogue_texts, parse_splits
from skillbook.papers.breakdown.utility import (
    abstractness,
    pair_counts,
    rank_stability,
    scaling,
    scaling_summary,
    score_vectors,
    specificity,
    specificity_sampled,
    specificity_vectors,
    task_sets,
)


def unit(m):
    m = np.asarray(m, dtype=np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


# Three tasks on the plane: e1 = (1, 0), e2 = (0, 1), e3 = (−1, 0). Their ordered pairs have cosines
# e1·e2 = e2·e1 = 0, e1·e3 = e3·e1 = −1, e2·e3 = e3·e2 = 0: sorted −1, −1, 0, 0, 0, 0.
PLANE = unit([[1, 0], [0, 1], [-1, 0]])


def test_pair_counts_hand_computed():
    # pairs with cosine ≤ b: none below −1, two at −1 (ties count: ≥ in the definition), all six at 0
    assert pair_counts(PLANE, [-1.5, -1.0, -0.5, 0.0, 0.9]).tolist() == [0, 2, 2, 6, 6]
    assert pair_counts(PLANE, [0.0, -1.0, 0.0], block=1).tolist() == [6, 2, 6]   # repeated thresholds, any order


def test_exact_specificity_from_vectors_hand_computed():
    best = np.array([-1.0, -0.5, 0.0, 1.0])
    assert specificity_vectors(best, PLANE).tolist() == pytest.approx([2 / 6, 2 / 6, 1.0, 1.0])
    skills = unit([[0, -1], [1, 1]])                      # best cosines 0 (e1, e3) and 1/√2 (e1, e2)
    c = skills @ PLANE.T
    assert specificity(c, PLANE @ PLANE.T).tolist() == specificity_vectors(c.max(axis=1), PLANE).tolist() == [1, 1]


def test_sampled_specificity_with_two_tasks_is_exact():
    # N = 2: every ordered pair, (0, 1) or (1, 0), has the one cosine 0.5, so any sample gives the exact share
    tasks = unit([[1, 0], [0.5, np.sqrt(3) / 2]])
    for best, want in ((0.49, 0.0), (0.5, 1.0), (0.9, 1.0)):
        assert specificity_vectors([best], tasks, n_pairs=7, seed=3)[0] == want
        assert specificity_vectors([best], tasks)[0] == want


def test_sampled_from_vectors_draws_the_pairs_of_the_matrix_version():
    rng = np.random.default_rng(0)
    tasks, skills = unit(rng.normal(size=(50, 8))), unit(rng.normal(size=(6, 8)))
    c, t = skills @ tasks.T, tasks @ tasks.T
    sampled = specificity_vectors(c.max(axis=1), tasks, n_pairs=3_000, seed=5)
    assert sampled.tolist() == pytest.approx(specificity_sampled(c, t, n_pairs=3_000, seed=5).tolist())
    with pytest.raises(ValueError, match="n_pairs"):
        specificity_vectors(c.max(axis=1), tasks, n_pairs=0)


@pytest.mark.parametrize("block", [1, 7, 64])
def test_blocked_exact_matches_the_sorted_matrix(block):
    rng = np.random.default_rng(block)
    tasks, skills = unit(rng.normal(size=(23, 5))), unit(rng.normal(size=(9, 5)))
    c = skills @ tasks.T
    assert specificity_vectors(c.max(axis=1), tasks, block=block).tolist() == \
        pytest.approx(specificity(c, tasks @ tasks.T).tolist())


def test_scoring_thousands_of_synthetic_tasks():
    """N = 3,000 tasks (8,997,000 ordered pairs), 20 skills: exact as the matrix version, the sampled
    estimate within 4.5 standard errors of it (`make bench` times N = 24,000)."""
    rng = np.random.default_rng(1)
    centres = unit(rng.normal(size=(12, 32)))
    tasks = unit(centres[rng.integers(0, 12, 3_000)] + 0.3 * rng.normal(size=(3_000, 32)))
    skills = unit(centres[rng.integers(0, 12, 20)] + 0.5 * rng.normal(size=(20, 32)))
    r = score_vectors(skills, tasks, n_pairs=10_000, seed=0)
    c = skills @ tasks.T
    assert r.specificity.tolist() == pytest.approx(np.atleast_1d(specificity(c, tasks @ tasks.T)).tolist())
    assert r.abstractness.tolist() == pytest.approx(abstractness(c.astype(np.float64)).tolist())
    assert r.utility.tolist() == pytest.approx((r.specificity * r.abstractness).tolist())
    assert (r.specificity_sampled - r.specificity).abs().max() <= 4.5 * 0.5 / np.sqrt(10_000)
    assert r.attrs["exact_s"] >= 0 and r.attrs["sampled_s"] >= 0


class HashEmbedder:
    """Deterministic unit vectors by text (no model): similar only by chance."""

    def embed(self, texts):
        return np.stack([unit(np.random.default_rng(zlib.crc32(t.encode())).normal(size=(1, 16)))[0] for t in texts])


def test_task_sets_scaling_and_rank_stability():
    catalogue = [f"task {i}" for i in range(40)]
    sets = task_sets(catalogue[:4], catalogue, sizes=(10, 500), seed=0)
    assert list(sets) == ["stream", "random 4", "random 10", "catalogue"]   # 500 ≥ the catalogue: dropped
    assert len(sets["random 10"]) == len(set(sets["random 10"])) == 10 and set(sets["random 10"]) <= set(catalogue)
    assert sets == task_sets(catalogue[:4], catalogue, sizes=(10, 500), seed=0)
    skills = pd.DataFrame({"condition": ["a"] * 3 + ["b"] * 3, "skill_id": ["s1", "s2", "s3"] * 2,
                           "description": [f"skill {i}" for i in range(6)]})
    long = scaling(skills, sets, n_pairs=500, embedder=HashEmbedder())
    assert len(long) == 4 * 6 and set(long.task_set) == set(sets)
    summary = scaling_summary(long)
    assert summary.loc["stream", "rho_utility_vs_stream"] == pytest.approx(1.0)
    assert summary.loc["catalogue", "pairs"] == 40 * 39
    assert summary.loc["random 10", "median_perplexity"] == pytest.approx(
        (long[long.task_set == "random 10"].abstractness * 10).median())
    rho = rank_stability(long, seed=0)
    assert rho["n"] == 6 and -1 <= rho["rho"] <= 1 and 0 < rho["p"] <= 1


def test_catalogue_types_and_splits():
    stream = ["twx/twc/test/3", "sciworld/boil/test/0", "twx/simonsays/test/1", "twx/twc/test/5"]
    kept, left = catalogue_task_types("stream", stream)
    assert kept == ["twx/twc", "twx/simonsays"] and "random state" in left["sciworld"]
    kept, left = catalogue_task_types("all", stream)
    assert len(kept) == 8 and left["sciworld"].startswith("30 task type(s)")
    assert catalogue_task_types("twx/coin", stream) == (["twx/coin"], {})
    assert parse_splits("test, dev") == ("test", "dev")
    with pytest.raises(ValueError, match="valid splits"):
        parse_splits("validation")
    with pytest.raises(ValueError, match="only twx"):
        catalogue_texts(["sciworld/boil/test/0"])


@pytest.mark.integration
def test_catalogue_texts_are_read_once_then_from_the_cache(tmp_path, monkeypatch):
    from skillbook.envs import task_texts
    from skillbook.envs.jvm import JavaEnv
    monkeypatch.setenv("SKILLBOOK_CACHE", str(tmp_path))
    options = {"twx": {"game_params": {"twc": {"numLocations": 1, "numItemsToPutAway": 1}}}}
    ids = catalogue_task_ids(["twx/twc", "twx/simonsays"], "test", n=2, env_options=options)
    assert ids == ["twx/twc/test/0", "twx/twc/test/1", "twx/simonsays/test/0", "twx/simonsays/test/1"]
    first = catalogue_texts(ids, options)
    assert first == task_texts(ids, options)                       # the text a live reset gives
    files = sorted(p.name for p in (tmp_path / "catalogue").iterdir())
    assert len(files) == 2 and files[0].startswith("twx-") and "-simonsays-" in files[0]

    def no_simulator(*args, **kwargs):
        raise AssertionError("the simulator was called on a cache hit")
    monkeypatch.setattr(JavaEnv, "_call", no_simulator)
    assert catalogue_task_ids(["twx/twc", "twx/simonsays"], "test", n=2, env_options=options) == ids
    assert catalogue_texts(ids, options) == first
    assert catalogue_texts(ids, options, kind="instruction")["twx/twc/test/0"] == first["twx/twc/test/0"].split("\n")[0]
    # other game parameters are another file: the cache key includes them
    with pytest.raises(AssertionError, match="simulator was called"):
        catalogue_texts(ids[:1], {"twx": {"game_params": {"twc": {"numLocations": 2}}}})
