"""Configuration space: counts vs an independent enumeration, exact division, canonical merging, Mesh-TF subset."""

import itertools
import math

import pytest

from tensoropt_py.errors import InvalidInputError
from tensoropt_py.graph.ir import DimKind, LoopDim, Operator, OpKind, TensorUse
from tensoropt_py.space.configs import config_key, enumerate_configs, splittable_dims
from tensoropt_py.space.mesh import Mesh, ordered_factorisations, prime_factors


def linear_op(b=8, k=4, n=6, merged=False):
    dims = (LoopDim("b", b, DimKind.SAMPLE), LoopDim("k", k, DimKind.REDUCTION), LoopDim("n", n, DimKind.PARAMETER))
    out = (TensorUse("y", (("b",), ("n",))),)
    if merged:  # y stored as [b*n]: n is an inner factor and cannot be split
        out = (TensorUse("y", (("b", "n"),)),)
    return Operator("fc", OpKind.LINEAR, dims, inputs=(TensorUse("x", (("b",), ("k",))),),
                    params=(TensorUse("w", (("k",), ("n",))),), outputs=out, flops=1.0)


def independent_count(sizes, splittable, n):
    """Count canonical configs directly: labels per prime fine axis, each loop dim on one contiguous block."""
    primes = prime_factors(n)
    orders = set(itertools.permutations(primes))
    keys = set()
    for order in orders:
        for labels in itertools.product([-1] + list(splittable), repeat=len(order)):
            ok = True
            for l in set(labels) - {-1}:
                pos = [i for i, x in enumerate(labels) if x == l]
                if pos != list(range(pos[0], pos[-1] + 1)):
                    ok = False
                    break
                if sizes[l] % math.prod(order[i] for i in pos):
                    ok = False
                    break
            if ok:
                keys.add(config_key(order, labels))
    return len(keys)


@pytest.mark.parametrize("n", [1, 2, 4, 6, 8, 12, 16])
def test_counts_match_independent_enumeration(n):
    op = linear_op(b=48, k=16, n=24)
    cfgs = enumerate_configs(op, n)
    sizes = [d.size for d in op.loop_dims]
    assert len(cfgs) == independent_count(sizes, splittable_dims(op), n)
    assert len({c.key for c in cfgs}) == len(cfgs)  # canonical duplicates removed


def test_shards_divide_exactly_and_tensor_maps():
    op = linear_op(b=12, k=8, n=6)
    for n in (2, 4, 8):
        for c in enumerate_configs(op, n):
            for d, f in zip(op.loop_dims, c.split_factors()):
                assert d.size % f == 0
            assert math.prod(c.mesh.shape) == n
            axes = [a for a in c.assignment if a >= 0]
            assert len(axes) == len(set(axes))
            # tensor maps follow the assignment: x = (b, k), w = (k, n), y = (b, n)
            b, k, nn = c.assignment
            assert c.tensor_maps == ((b, k), (k, nn), (b, nn))


def test_canonical_duplicates_collapse():
    op = linear_op(b=16, k=4, n=4)
    cfgs = enumerate_configs(op, 16)
    # mesh [2,8] with axis 1 replicating == mesh [2,2,4] with axes 1, 2 replicating
    k1 = config_key(Mesh((2, 8)).fine_sizes, (0, -1, -1, -1))
    k2 = config_key(Mesh((2, 2, 4)).fine_sizes, (0, -1, -1, -1))
    assert k1 == k2
    assert sum(c.key == k1 for c in cfgs) == 1
    naive = sum(1 for _ in ordered_factorisations(16))
    assert len(cfgs) > naive  # sanity: more than one config per mesh survives


def test_inner_factor_and_unsplittable_never_split():
    op = linear_op(merged=True)
    assert 2 not in splittable_dims(op)
    assert all(c.assignment[2] == -1 for c in enumerate_configs(op, 4))
    dims = (LoopDim("b", 8, DimKind.SAMPLE), LoopDim("h", 8, DimKind.ATTRIBUTE, splittable=False))
    sm = Operator("sm", OpKind.SOFTMAX, dims, inputs=(TensorUse("x", (("b",), ("h",))),),
                  outputs=(TensorUse("y", (("b",), ("h",))),))
    assert all(c.assignment[1] == -1 for c in enumerate_configs(sm, 8))


def test_mesh_tensorflow_is_subset():
    op = linear_op(b=16, k=8, n=8)
    full = {c.key for c in enumerate_configs(op, 8)}
    for mesh in ((2, 4), (8,), (2, 2, 2)):
        mtf = enumerate_configs(op, 8, mesh_tensorflow=mesh)
        assert all(c.mesh.shape == mesh for c in mtf)
        assert {c.key for c in mtf} <= full
        assert len(mtf) < len(full)
    with pytest.raises(InvalidInputError, match="does not have 8 devices"):
        enumerate_configs(op, 8, mesh_tensorflow=(3, 3))


def test_input_op_is_data_parallel():
    dims = (LoopDim("b", 32, DimKind.SAMPLE), LoopDim("f", 8, DimKind.ATTRIBUTE))
    load = Operator("load", OpKind.INPUT, dims, outputs=(TensorUse("x", (("b",), ("f",))),))
    (c,) = enumerate_configs(load, 8)
    assert c.split_factors() == (8, 1)
    (c,) = enumerate_configs(load, 64)  # batch 32 < 64: split as much as divides, replicate the rest
    assert c.split_factors() == (32, 1)


def test_config_str_and_bad_count():
    op = linear_op()
    assert str(enumerate_configs(op, 4)[0]) == "mesh[4] map[-1,-1,-1]"
    with pytest.raises(InvalidInputError):
        enumerate_configs(op, 0)
