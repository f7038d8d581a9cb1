"""Layouts: canonical equality across meshes, config output/input/gradient layouts."""

from tensoropt_py.graph.ir import DimKind, LoopDim, Operator, OpKind, TensorUse
from tensoropt_py.space.configs import enumerate_configs
from tensoropt_py.space.layout import PARTIAL, REPLICATE, Layout


def test_canonical_equality():
    assert Layout((2, 2, 2), (0, REPLICATE, REPLICATE)) == Layout((2, 2, 2), (0, REPLICATE, REPLICATE))
    assert Layout((2, 3), (REPLICATE, REPLICATE)) == Layout((3, 2), (REPLICATE, REPLICATE))
    assert Layout((2, 2), (0, 1)) != Layout((2, 2), (1, 0))
    assert Layout((2, 2), (0, 0)) != Layout((2, 2), (0, REPLICATE))
    assert str(Layout((2, 2, 2), (0, 0, PARTIAL))) == "layout[S0:4,P:2]"


def test_local_numel_and_fits():
    lay = Layout((2, 2, 2), (0, 1, PARTIAL))
    assert lay.local_numel((8, 6)) == 12 and lay.fits((8, 6)) and not lay.fits((8, 3))


def test_config_layouts():
    dims = (LoopDim("b", 8, DimKind.SAMPLE), LoopDim("k", 4, DimKind.REDUCTION), LoopDim("n", 4, DimKind.PARAMETER))
    op = Operator("fc", OpKind.LINEAR, dims, inputs=(TensorUse("x", (("b",), ("k",))),),
                  params=(TensorUse("w", (("k",), ("n",))),), outputs=(TensorUse("y", (("b",), ("n",))),))
    c = [c for c in enumerate_configs(op, 4) if str(c) == "mesh[2,2] map[-1,0,1]"][0]
    assert c.layout(op, 2) == Layout((2, 2), (PARTIAL, 1))  # y partial over k, sharded on n
    assert c.layout(op, 0) == Layout((2, 2), (1, REPLICATE))  # x sharded on k, needed whole along n
    assert c.layout(op, 0, gradient=True) == Layout((2, 2), (1, PARTIAL))  # dx partial over n
