"""Property tests of the frontier algebra: reduce (Alg. 1), product, union, thin."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tensoropt_py.errors import InvalidInputError
from tensoropt_py.engine import product, reduce, thin, union

# small integer costs: many exact ties, exact sums
coord = st.integers(min_value=0, max_value=12).map(float)
point = st.tuples(coord, coord)
point_sets = st.lists(point, min_size=0, max_size=25).map(lambda p: np.array(p, dtype=float).reshape(-1, 2))
nonempty_sets = st.lists(point, min_size=1, max_size=15).map(lambda p: np.array(p, dtype=float).reshape(-1, 2))


def dominates_all(front, pts):
    """Every point of pts is weakly dominated by a point of front."""
    for m, t in pts:
        if not np.any((front[:, 0] <= m) & (front[:, 1] <= t)):
            return False
    return True


def is_frontier(front):
    return bool(np.all(np.diff(front[:, 0]) > 0) and np.all(np.diff(front[:, 1]) < 0))


def as_set(front):
    return sorted(map(tuple, front.tolist()))


@given(point_sets)
def test_reduce_is_pareto_minimal_sorted_and_dominating(pts):
    f = reduce(pts)
    assert is_frontier(f)
    assert dominates_all(f, pts)
    # Pareto-minimal: no input point strictly dominates a kept point
    for m, t in f:
        better = (pts[:, 0] <= m) & (pts[:, 1] <= t) & ((pts[:, 0] < m) | (pts[:, 1] < t))
        assert not better.any()
    # kept points are input points
    assert set(as_set(f)) <= set(map(tuple, pts.tolist()))


@given(point_sets)
def test_reduce_matches_quadratic_definition(pts):
    expect = set()
    for m, t in pts.tolist():
        dominated = any((m2 <= m and t2 <= t and (m2 < m or t2 < t)) for m2, t2 in pts.tolist())
        if not dominated:
            expect.add((m, t))
    assert set(as_set(reduce(pts))) == expect


@given(point_sets)
def test_reduce_idempotent(pts):
    f = reduce(pts)
    assert np.array_equal(reduce(f), f)


@given(point_sets)
def test_reduce_index_points_back(pts):
    f, idx = reduce(pts, return_index=True)
    assert np.array_equal(pts[idx], f)


@given(nonempty_sets, nonempty_sets)
def test_product_commutative(a, b):
    assert np.array_equal(product(a, b), product(b, a))


@given(nonempty_sets)
def test_product_with_zero_point_is_identity(a):
    assert np.array_equal(product(a, [[0.0, 0.0]]), reduce(a))


@given(nonempty_sets, nonempty_sets)
def test_product_equals_brute_force_and_indices(a, b):
    f, idx = product(a, b, return_index=True)
    sums = np.array([[x[0] + y[0], x[1] + y[1]] for x in a for y in b])
    assert np.array_equal(f, reduce(sums))
    assert np.array_equal(a[idx[:, 0]] + b[idx[:, 1]], f)


@given(nonempty_sets, nonempty_sets)
def test_product_of_reduced_inputs_is_the_same(a, b):
    assert np.array_equal(product(reduce(a), reduce(b)), product(a, b))


@given(nonempty_sets, nonempty_sets, nonempty_sets)
def test_union_associative_and_commutative_after_reduce(a, b, c):
    left = union(union(a, b), c)
    right = union(a, union(b, c))
    assert np.array_equal(left, right)
    assert np.array_equal(union(a, b), union(b, a))
    assert np.array_equal(union(a, b, c), left)


@given(nonempty_sets, nonempty_sets)
def test_union_index(a, b):
    f, idx = union(a, b, return_index=True)
    src = [a, b]
    back = np.array([src[w][i] for w, i in idx])
    assert np.array_equal(back, f)


@given(nonempty_sets, nonempty_sets, nonempty_sets)
def test_product_distributes_over_union(a, b, c):
    assert np.array_equal(product(a, union(b, c)), union(product(a, b), product(a, c)))


@given(st.lists(st.tuples(st.floats(1.0, 1e3), st.floats(0.0, 1e3)), min_size=1, max_size=40),
       st.sampled_from([0.0, 1e-3, 0.05, 0.5]))
def test_thin_covers_within_epsilon(raw, eps):
    pts = np.array(raw)
    f = reduce(pts)
    th, idx = thin(pts, eps, return_index=True)
    assert is_frontier(th)
    assert np.array_equal(pts[idx], th)
    assert th[-1, 1] == f[-1, 1]  # min-time point kept
    for m, t in f:
        assert np.any((th[:, 1] <= t) & (th[:, 0] <= (1 + eps) * m))
    if eps == 0:
        assert np.array_equal(th, f)


def test_reduce_examples_ties():
    pts = [[1, 1], [1, 1], [1, 2], [0, 3], [2, 0.5]]
    f, idx = reduce(pts, return_index=True)
    assert f.tolist() == [[0, 3], [1, 1], [2, 0.5]]
    assert idx.tolist() == [3, 0, 4]  # first of the identical points


def test_empty_reduce():
    assert reduce(np.zeros((0, 2))).shape == (0, 2)


@pytest.mark.parametrize("bad", [[[1.0, np.nan]], [[np.inf, 1.0]], [[1.0, 2.0, 3.0]], [1.0, 2.0]])
def test_algebra_rejects_bad_input(bad):
    with pytest.raises(InvalidInputError):
        reduce(bad)


def test_union_needs_an_argument():
    with pytest.raises(InvalidInputError, match="at least one"):
        union()


@pytest.mark.parametrize("eps", [-0.1, float("nan"), "x", True])
def test_thin_rejects_bad_epsilon(eps):
    with pytest.raises(InvalidInputError, match="epsilon"):
        thin([[1.0, 1.0]], eps)
