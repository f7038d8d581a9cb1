"""IR validation, helpers and the Graph queries."""

import pytest

from tensoropt_py.errors import InvalidInputError
from tensoropt_py.graph import GraphBuilder, zoo
from tensoropt_py.graph.ir import DimKind, Graph, LoopDim, Operator, OpKind, TensorRole, TensorSpec, TensorUse


def _load(name="load", out="x", size=8):
    return Operator(name, OpKind.INPUT, (LoopDim("b", size, DimKind.SAMPLE),), outputs=(TensorUse(out, (("b",),)),))


def _relu(name, src, dst, size=8):
    return Operator(name, OpKind.UNARY, (LoopDim("b", size, DimKind.SAMPLE),), inputs=(TensorUse(src, (("b",),)),),
                    outputs=(TensorUse(dst, (("b",),)),), saved=(dst,))


def test_valid_graph_and_queries():
    ts = [TensorSpec("x", (8,), role=TensorRole.INPUT), TensorSpec("y", (8,)), TensorSpec("z", (8,))]
    g = Graph(ts, [_load(), _relu("r1", "x", "y"), _relu("r2", "y", "z")])
    assert g.edges() == (("load", "r1", "x"), ("r1", "r2", "y"))
    assert g.outputs == ("z",)
    assert g.producer("y") == "r1" and g.consumers("y") == ("r2",)
    assert g.saved_bytes == 2 * 8 * 4
    assert g.kinds() == {"input": 1, "unary": 2}



@pytest.mark.parametrize("build", [zoo.transformer, zoo.small_cnn, zoo.wide_resnet], ids=["transformer", "cnn", "wrn"])
def test_consumers_are_the_readers_of_each_tensor_in_order(build):
    g = build()
    for name in g.tensors:
        readers = tuple(op.name for op in g.operators if any(u.tensor == name for u in op.inputs))
        assert g.consumers(name) == readers


def test_an_operator_reading_a_tensor_twice_is_one_consumer():
    square = Operator("square", OpKind.BINARY, (LoopDim("b", 8, DimKind.SAMPLE),),
                      inputs=(TensorUse("x", (("b",),)), TensorUse("x", (("b",),))), outputs=(TensorUse("y", (("b",),)),))
    g = Graph([TensorSpec("x", (8,), role=TensorRole.INPUT), TensorSpec("y", (8,)), TensorSpec("z", (8,))],
              [_load(), square, _relu("r", "x", "z")])
    assert g.consumers("x") == ("square", "r")
    assert g.consumers("z") == () and g.consumers("y") == ()

def test_bad_extent():
    ts = [TensorSpec("x", (8,), role=TensorRole.INPUT), TensorSpec("y", (9,))]
    with pytest.raises(InvalidInputError, match="dimension 0"):
        Graph(ts, [_load(), _relu("r1", "x", "y")])


def test_bad_loop_dim_size():
    with pytest.raises(InvalidInputError, match="positive int"):
        LoopDim("b", 0, DimKind.SAMPLE)


def test_undefined_tensor():
    with pytest.raises(InvalidInputError, match="undefined tensor 'y'"):
        Graph([TensorSpec("x", (8,), role=TensorRole.INPUT)], [_load(), _relu("r1", "x", "y")])


def test_not_topological():
    ts = [TensorSpec("x", (8,), role=TensorRole.INPUT), TensorSpec("y", (8,)), TensorSpec("z", (8,))]
    with pytest.raises(InvalidInputError, match="topological"):
        Graph(ts, [_load(), _relu("r2", "y", "z"), _relu("r1", "x", "y")])


def test_produced_twice_and_bad_param_role():
    ts = [TensorSpec("x", (8,), role=TensorRole.INPUT), TensorSpec("y", (8,))]
    with pytest.raises(InvalidInputError, match="produced by both"):
        Graph(ts, [_load(), _relu("r1", "x", "y"), _relu("r2", "x", "y")])
    op = Operator("p", OpKind.UNARY, (LoopDim("b", 8, DimKind.SAMPLE),), params=(TensorUse("x", (("b",),)),),
                  outputs=(TensorUse("y", (("b",),)),))
    with pytest.raises(InvalidInputError, match="role"):
        Graph(ts, [_load(), op])


def test_builder_checks():
    gb = GraphBuilder("t")
    (x,) = gb.input([("x", (4, 3), "float32")])
    with pytest.raises(InvalidInputError, match="no tensor"):
        gb.relu("nope")
    with pytest.raises(InvalidInputError, match="inner dimensions"):
        gb.matmul(x, x)
    with pytest.raises(InvalidInputError, match="cannot reshape"):
        gb.reshape(x, (5, 2))
    with pytest.raises(InvalidInputError, match="dtype"):
        GraphBuilder(dtype="complex64")


def test_shared_parameters_and_memory_estimate():
    g = zoo.rnn(batch=2, seq_len=3, layers=1, hidden=4, vocab=5)
    users = g.parameter_users()
    assert len(users["lstm0.weight_ih"]) == 3  # shared over the 3 time steps
    assert len(users["lstm0.weight_hh"]) == 2  # step 0 has a zero state
    est = g.memory_estimate()
    assert est == g.parameter_bytes * 4 + g.saved_bytes + sum(
        t.nbytes for t in g.tensors.values() if t.role is TensorRole.CONSTANT)
    for op in g:
        assert not any(g.tensors[t].role in (TensorRole.PARAMETER, TensorRole.CONSTANT) for t in op.saved)
    assert "rnn" in g.summary(max_ops=3)
