"""Assay's attribution matrix on synthetic trials with planted effects."""
import numpy as np
import pytest

from skillbook.papers.assay.attribution import (
    attribution_matrix,
    expected_half_width,
    global_score,
    heterogeneity,
    sample_masks,
    variance_bound,
)


def planted(k=400, seed=0):
    """Skill 0 helps on every task (+0.4); skill 1 helps tasks 0-1 and hurts tasks 2-3 (±0.4); 2-4 are inert."""
    rng = np.random.default_rng(seed)
    masks = sample_masks(5, k=k, f=0.4, seed=seed)
    base = np.full((k, 4), 0.3)
    base += 0.4 * masks[:, [0]]
    base += 0.4 * masks[:, [1]] * np.array([1, 1, -0.5, -0.5])
    outcomes = (rng.random((k, 4)) < base).astype(float)
    return masks, outcomes


def test_recovers_a_planted_positive_and_a_sign_flipping_skill():
    masks, outcomes = planted()
    c = attribution_matrix(masks, outcomes)
    assert c.shape == (5, 4)
    assert (c[0] > 0.25).all()                                   # positive everywhere
    assert (c[1, :2] > 0.25).all() and (c[1, 2:] < -0.1).all()   # the sign flips across tasks
    assert np.abs(c[2:]).max() < 0.15                            # inert skills stay near zero
    g, h = global_score(c), heterogeneity(c)
    assert g.argmax() == 0 and h.argmax() == 1 and h[1] > 0.4


def test_hand_computed_cell_and_nan_for_skills_always_in_or_out():
    masks = np.array([[1, 1, 0], [1, 0, 0], [0, 1, 0], [1, 0, 0]], bool)
    outcomes = np.array([[1.0], [1.0], [0.0], [0.0]])
    c = attribution_matrix(masks, outcomes)
    assert c[0, 0] == pytest.approx(2 / 3 - 0.0)        # in: trials 0,1,3 → 2/3; out: trial 2 → 0
    assert c[1, 0] == pytest.approx(0.5 - 0.5)
    assert np.isnan(c[2, 0])                            # never included: no estimate
    assert np.isnan(global_score(c)[2]) and np.isnan(heterogeneity(c)[2])


def test_variance_bound_and_half_width():
    masks = np.array([[1, 0], [1, 0], [0, 0], [0, 0]], bool)
    vb = variance_bound(masks)
    assert vb[0] == pytest.approx(0.25 * (1 / 2 + 1 / 2)) and np.isinf(vb[1])
    assert expected_half_width(12, 0.4) == pytest.approx(1.96 * np.sqrt(0.25 * (1 / 4.8 + 1 / 7.2)))
    assert expected_half_width(48, 0.4) == pytest.approx(expected_half_width(12, 0.4) / 2)


def test_the_bound_holds_on_the_data():
    """Across many repeats the empirical variance of a C cell stays below the bound."""
    cells = []
    for seed in range(300):
        masks, outcomes = planted(k=12, seed=seed)
        cells.append(attribution_matrix(masks, outcomes)[3, 0])
    assert np.nanvar(cells) <= 0.25 * (1 / (0.4 * 12) + 1 / (0.6 * 12)) * 1.2


def test_sample_masks_draw_every_skill_and_give_each_both_arms():
    """Issue 13: no skill is forced in (the paper's §2.1 masks every skill, templates too)."""
    m = sample_masks(4, k=6, f=0.4, seed=3)
    assert m.shape == (6, 4)
    assert ((m.sum(axis=0) > 0) & (m.sum(axis=0) < 6)).all()
    assert (sample_masks(4, k=6, f=0.4, seed=3) == m).all()                     # seeded
    with pytest.raises(TypeError):
        sample_masks(4, k=6, f=0.4, seed=3, protected=[True, False, False, False])
    with pytest.raises(ValueError, match="0 < f < 1"):
        sample_masks(3, k=4, f=1.0)


def test_bad_shapes_are_named():
    with pytest.raises(ValueError, match="same number of trials"):
        attribution_matrix(np.zeros((3, 2), bool), np.zeros((4, 5)))
    with pytest.raises(ValueError, match="K×N"):
        attribution_matrix(np.zeros(3, bool), np.zeros((3, 5)))
