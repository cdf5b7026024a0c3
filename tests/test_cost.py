import pytest

from skillbook.analysis import dependency


def test_dependency_by_hand():
    # one call, p = 100, o = 10: (200 + 10) * 10 / 2 = 1050 token²
    assert dependency([100], [10]) == pytest.approx(1050 / 1e9)
    # sums over calls: (2*1000+50)*50/2 + (2*10+2)*2/2 = 51250 + 22
    assert dependency([1000, 10], [50, 2]) == pytest.approx(51272 / 1e9)
    assert dependency([], []) == 0.0


def test_dependency_rejects_bad_input():
    with pytest.raises(ValueError, match="shape"):
        dependency([1, 2], [1])
    with pytest.raises(ValueError, match="non-negative"):
        dependency([-1], [1])
