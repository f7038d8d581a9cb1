"""torch.export importer: oracle tests (run_graph on the imported IR == the module), counts, bad inputs."""

import warnings

import pytest
import torch

from tensoropt_py.errors import UnsupportedOperatorError
from tensoropt_py.graph.ir import OpKind, TensorRole
from tensoropt_py.graph.torch_import import from_torch, from_torch_with_state
from tensoropt_py.graph.torch_ops import run_graph




class SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x, y):
        h = torch.relu(self.bn(self.conv1(x)))
        h = torch.nn.functional.max_pool2d(h, 2)
        h = torch.nn.functional.gelu(self.conv2(h))
        h = torch.nn.functional.adaptive_avg_pool2d(h, 1).flatten(1)
        logits = self.fc(h)
        return logits, torch.nn.functional.cross_entropy(logits, y)


def _param_count(m):
    return sum(p.numel() for p in m.parameters())  # tied weights counted once


def _linear_modules_flops(m, n_tokens):
    """2 N I O (+ N O) summed over nn.Linear and GPT-2 Conv1D modules."""
    total = 0
    for mod in m.modules():
        if isinstance(mod, torch.nn.Linear):
            total += 2 * n_tokens * mod.in_features * mod.out_features + (n_tokens * mod.out_features if mod.bias is not None else 0)
        elif type(mod).__name__ == "Conv1D":
            i, o = mod.weight.shape
            total += 2 * n_tokens * i * o + n_tokens * o
    return total


def test_small_cnn_oracle():
    torch.manual_seed(0)
    m = SmallCNN()
    with torch.no_grad():  # non-trivial running statistics
        m.bn.running_mean.uniform_(-0.5, 0.5)
        m.bn.running_var.uniform_(0.5, 2.0)
    m.eval()
    x, y = torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,))
    g, values = from_torch_with_state(m, (x, y))
    assert g.num_parameters == _param_count(m)
    kinds = g.kinds()
    assert kinds["conv2d"] == 2 and kinds["batch_norm"] == 1 and kinds["pool2d"] == 2 and kinds["loss"] == 1
    assert {t.name for t in g.tensors.values() if t.role is TensorRole.CONSTANT} >= {"bn.running_mean", "bn.running_var"}
    out = run_graph(g, {"x": x, "y": y}, values)
    ref_logits, ref_loss = m(x, y)
    assert torch.allclose(out[g.outputs[0]], ref_logits, atol=1e-5)
    assert torch.allclose(out[g.outputs[1]], ref_loss, atol=1e-6)
    conv = [op for op in g if op.kind is OpKind.CONV2D]
    assert conv[0].flops == 2 * 4 * 8 * 16 * 16 * 3 * 9 + 4 * 8 * 16 * 16


def test_unknown_op_without_parameters_warns():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)

        def forward(self, x):
            return torch.cumsum(self.fc(x), dim=1)

    m = M().eval()
    x = torch.randn(2, 4)
    with pytest.warns(UserWarning, match="cumsum"):
        g, values = from_torch_with_state(m, (x,))
    op = g.operators[-1]
    assert op.kind is OpKind.OPAQUE and not any(d.splittable for d in op.loop_dims)
    assert torch.allclose(run_graph(g, {"x": x}, values)[g.outputs[0]], m(x))


def test_unknown_op_with_parameters_raises():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(4, 4))

        def forward(self, x):
            return x @ torch.cumsum(self.w, dim=0)

    with pytest.raises(UnsupportedOperatorError, match="cumsum"):
        from_torch(M(), (torch.randn(2, 4),))


def test_transposed_conv_with_parameters_raises():
    m = torch.nn.ConvTranspose2d(3, 4, 2)
    with pytest.raises(UnsupportedOperatorError, match="conv"):
        from_torch(m, (torch.randn(1, 3, 4, 4),))


def _hf_models():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    V = 100
    return {
        "gpt2": lambda: transformers.GPT2LMHeadModel(transformers.GPT2Config(
            n_layer=2, n_embd=64, n_head=4, vocab_size=V, n_positions=32, use_cache=False)),
        "bert": lambda: transformers.BertForMaskedLM(transformers.BertConfig(
            num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128, vocab_size=V,
            max_position_embeddings=32)),
        "llama": lambda: transformers.LlamaForCausalLM(transformers.LlamaConfig(
            num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128,
            vocab_size=V, max_position_embeddings=32, use_cache=False)),
    }


@pytest.mark.parametrize("arch", ["gpt2", "bert", "llama"])
def test_hf_oracle(arch):
    m = _hf_models()[arch]().eval()
    B, S = 2, 8
    ids = torch.randint(0, 100, (B, S), generator=torch.Generator().manual_seed(1))
    labels = torch.randint(0, 100, (B, S), generator=torch.Generator().manual_seed(2))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        g, values = from_torch_with_state(m, kwargs={"input_ids": ids, "labels": labels})
    unknown = [str(w.message) for w in caught if "no IR rule" in str(w.message)]
    assert unknown == []  # the label shift of causal LMs (aten.pad) has a rule
    assert g.num_parameters == _param_count(m)
    assert len(g.parameters) == len(list(m.parameters()))
    assert sum(op.kind is OpKind.INPUT for op in g) == 1
    assert sum(op.kind is OpKind.ATTENTION for op in g) == 2
    assert sum(op.kind is OpKind.LOSS for op in g) == 1
    params_in_opaque = [u.tensor for op in g if op.kind is OpKind.OPAQUE for u in op.params
                        if g.tensors[u.tensor].role is TensorRole.PARAMETER]
    assert params_in_opaque == []
    lin = sum(op.flops for op in g if op.kind is OpKind.LINEAR)
    assert lin == _linear_modules_flops(m, B * S)
    out = run_graph(g, {"input_ids": ids, "labels": labels}, values)
    ref = m(input_ids=ids, labels=labels)
    loss, logits = out[g.outputs[0]], out[g.outputs[1]]
    assert torch.allclose(logits, ref.logits, atol=1e-5)
    assert torch.allclose(loss, ref.loss, atol=1e-6)


class _CE(torch.nn.Module):
    def __init__(self, reduction="mean", smoothing=0.0):
        super().__init__()
        self.fc = torch.nn.Linear(6, 5)
        self.reduction, self.smoothing = reduction, smoothing

    def forward(self, x, y):
        return torch.nn.functional.cross_entropy(self.fc(x), y, reduction=self.reduction,
                                                 label_smoothing=self.smoothing)


@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_mean_loss_is_a_sum_over_the_counted_labels(smoothing):
    torch.manual_seed(0)
    m = _CE(smoothing=smoothing).eval()
    x, y = torch.randn(8, 6), torch.randint(0, 5, (8,))
    y[[1, 2, 6]] = -100  # ignored: torch divides by the 5 counted labels
    g, values = from_torch_with_state(m, (x, y))
    loss_ops = [op for op in g if op.kind is OpKind.LOSS]
    assert len(loss_ops) == 1 and loss_ops[0].attr("reduction") == "sum"
    assert g.operators[-1].kind is OpKind.BINARY and g.operators[-1].attr("fn") == "div"
    out = run_graph(g, {"x": x, "y": y}, values)
    assert torch.allclose(out[g.outputs[0]], m(x, y), atol=1e-6)
    # a sum loss needs no count
    g2 = from_torch(_CE(reduction="sum"), (x, y))
    assert g2.operators[-1].kind is OpKind.LOSS and g2.kinds()["loss"] == 1


def test_in_place_updates_import_out_of_place():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 6)

        def forward(self, x):
            y = self.fc(x)
            y.mul_(3.0)  # a result, not a view: imported as a mul, later readers see it
            z = torch.relu(y) + 1.0
            z[:, :2].mul_(2.0)  # writes a view of z: the update is spliced into z
            shifted = x.new_zeros(x.shape)
            shifted[:, 1:] = x[:, :-1]  # copy_ into a slice: split + concat, no mutation
            shifted[:, 0] = 5.0  # fill_ of a select
            return z, shifted

    m = M().eval()
    x = torch.randn(3, 4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        g, values = from_torch_with_state(m, (x,))
    kinds = g.kinds()
    assert any(op.kind is OpKind.UNARY and op.attr("fn") == "mul_scalar" and op.attr("scalar") == 3.0 for op in g)
    opaque = [op.attr("target") for op in g if op.kind is OpKind.OPAQUE]
    assert not any("_." in t or "copy_" in t or "fill_" in t for t in opaque), opaque  # no in-place write left
    assert kinds["concat"] >= 3
    assert [str(w.message) for w in caught if "copy_" in str(w.message) or "fill_" in str(w.message)] == []
    out = run_graph(g, {"x": x}, values)
    ref_z, ref_shifted = m(x)
    assert torch.allclose(out[g.outputs[0]], ref_z) and torch.equal(out[g.outputs[1]], ref_shifted)
