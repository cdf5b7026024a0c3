"""Cosines that every CPU computes alike (issue 36's stop 51: CI's fresh-copy replay changed chapter 05's
claims record and chapter 03's violin plot).

The stored vectors of a chapter are the same bytes everywhere; their float32 products are not. BLAS sums
the 384 terms of a dot product in an order chosen by the CPU's kernel (and, within one matrix, by where the
row falls in it), so one skill description scored in chapter 05's libraries of 3 and of 5 skills got
abstractness 0.41633498 and 0.41633502 on one machine, and which ties between identical skills broke
depended on the CPU: on another machine chapter 05's Spearman ρ of utility with reuse moved from +0.24 to
+0.25, its permutation p from 0.49 to 0.60.

The real case is rebuilt here from chapter 05's stored vectors: another summation order is simulated by
permuting the 384 dimensions (the same cosine in exact arithmetic, other float sums), another matrix shape
by scoring a skill in libraries of different sizes."""
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from skillbook.papers.breakdown.retrieval import threshold_sweep
from skillbook.papers.breakdown.utility import score_library, score_vectors, similarity_matrices, specificity_vectors
from skillbook.skills.embeddings import DIM, cosines, read_vectors

ROOT = Path(__file__).resolve().parents[1]
VECTORS = ROOT / "runs" / "workshop" / "transfer" / "vectors-05_utility.bin.gz"


@pytest.fixture(scope="module")
def real():
    """Chapter 05's stored vectors (skill descriptions and task texts), in their record's order."""
    vecs = read_vectors(VECTORS)
    assert len(vecs) >= 46, "chapter 05's vector record is missing or short"
    return dict(sorted(vecs.items()))


class Embedder:
    """Serves recorded vectors by text; `perm` reorders their dimensions (same cosines, other float sums)."""

    def __init__(self, vectors: dict, perm=None):
        self.vectors, self.perm = vectors, perm

    def embed(self, texts):
        one = isinstance(texts, str)
        m = np.stack([self.vectors[t] for t in ([texts] if one else texts)])
        m = m[:, self.perm] if self.perm is not None else m
        return m[0] if one else m


def library(ids):
    return [SimpleNamespace(id=f"s{i}", description=i, format="text", provenance={}) for i in ids]


def test_the_float32_products_of_the_real_vectors_depend_on_the_summation_order(real):
    """The mechanism itself, so that the tests below test something: the raw products move."""
    m = np.stack(list(real.values()))
    perm = np.random.default_rng(0).permutation(DIM)
    assert not np.array_equal(m @ m.T, m[:, perm] @ m[:, perm].T)


def test_cosines_do_not_depend_on_summation_order_row_position_or_matrix_shape(real):
    m = np.stack(list(real.values()))
    perm = np.random.default_rng(0).permutation(DIM)
    c = cosines(m, m)
    assert c.dtype == np.float64 and c.shape == (len(m), len(m))
    assert np.array_equal(c, cosines(m[:, perm], m[:, perm]))
    assert np.array_equal(c[5:9], cosines(m[5:9], m))                  # a row alone or in a big matrix
    assert np.array_equal(c[7], cosines(m, m[7]))                      # matrix · vector
    assert cosines(m[3], m[7]) == c[3, 7]                              # vector · vector
    assert np.abs(c - (m.astype(np.float64) @ m.T.astype(np.float64))).max() <= 5e-7
    assert np.array_equal(c, c.T)


def test_a_skills_scores_are_the_same_whatever_the_summation_order_and_library_size(real):
    keys = list(real)
    tasks, skills = keys[:30], keys[30:46]
    base = score_library(library(skills), tasks, embedder=Embedder(real))
    perm = np.random.default_rng(1).permutation(DIM)
    other_cpu = score_library(library(skills), tasks, embedder=Embedder(real, perm))
    assert base.equals(other_cpu)
    # the same skill scored in a library of 3 and in one of 16 (the real case: libraries of 3 and 5 skills)
    small = score_library(library(skills[:3]), tasks, embedder=Embedder(real))
    assert small.equals(base.iloc[:3])
    s, t = similarity_matrices(skills, tasks, Embedder(real))
    task_m = np.stack([real[k] for k in tasks])
    assert np.array_equal(s, cosines(np.stack([real[k] for k in skills]), task_m))
    assert np.array_equal(t, cosines(task_m, task_m))


def test_catalogue_scores_are_the_same_whatever_the_summation_order(real):
    m = np.stack(list(real.values()))
    perm = np.random.default_rng(2).permutation(DIM)
    a = score_vectors(m[:20], m[20:], n_pairs=500)
    b = score_vectors(m[:20][:, perm], m[20:][:, perm], n_pairs=500)
    cols = ["specificity", "abstractness", "utility", "specificity_sampled"]
    assert a[cols].equals(b[cols])
    # the vector path and the text path agree exactly on the same skills and tasks
    keys = list(real)
    by_text = score_library(library(keys[:20]), keys[20:], embedder=Embedder(real))
    assert np.array_equal(a.specificity.to_numpy(), by_text.specificity.to_numpy())
    assert np.array_equal(a.abstractness.to_numpy(), by_text.abstractness.to_numpy())
    best = cosines(m[:20], m[20:]).max(axis=1)
    assert np.array_equal(specificity_vectors(best, m[20:], block=7), a.specificity.to_numpy())


class Library:
    """What `threshold_sweep` reads of a library: its size and its description matrix."""

    def __init__(self, m, ids):
        self.m, self.ids = m, ids

    def __len__(self):
        return len(self.ids)

    def matrix(self):
        return self.m, self.ids


def test_the_threshold_sweep_is_the_same_whatever_the_summation_order(real, monkeypatch):
    from skillbook.papers.breakdown import retrieval
    keys = list(real)
    m = np.stack([real[k] for k in keys[:10]])
    perm = np.random.default_rng(3).permutation(DIM)

    def sweep(p):
        monkeypatch.setattr(retrieval, "get_embedder", lambda: Embedder(real, p))
        lib = Library(m if p is None else m[:, p], keys[:10])
        return threshold_sweep(lib, keys[10:40], thresholds=(0.2, 0.3, 0.4), ks=(1, 3))

    assert sweep(None).equals(sweep(perm))
