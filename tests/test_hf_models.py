"""Hugging Face architectures through from_torch: tiny models built from configs (tests/mpi/hf_models.py).

For every architecture: the import succeeds without a warning about a missing rule on the data
path, the parameter count is the module's, no OPAQUE operator lies on a path from a parameter,
the imported graph computes the module's loss (run_graph), and the frontier on 8 devices has
points. Mixture-of-experts layers become dispatch / experts / combine operators whose experts
the planner can split, and every configuration of those operators is exact on local shards.
A Llama-3-8B-shaped model built on the meta device imports without its weights.
"""

import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

import tensoropt_py as to  # noqa: E402
from tensoropt_py.errors import InvalidInputError, UnsupportedOperatorError  # noqa: E402
from tensoropt_py.graph.ir import OpKind  # noqa: E402
from tensoropt_py.graph.torch_import import from_torch, from_torch_with_state  # noqa: E402
from tensoropt_py.graph.torch_ops import run_graph  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent / "mpi"))
try:
    import hf_models  # noqa: E402
finally:
    sys.path.pop(0)

ARCHS = sorted(hf_models.KINDS)


def _import(arch):
    module, inputs = hf_models.module(arch)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        graph, values = from_torch_with_state(module, inputs, name=arch)
    return module, inputs, graph, values, [str(w.message) for w in caught]


@pytest.fixture(scope="module")
def imported():
    cache = {}

    def get(arch):
        if arch not in cache:
            cache[arch] = _import(arch)
        return cache[arch]

    return get


def opaque_on_parameter_paths(graph):
    """Names of the OPAQUE operators that read a tensor computed from a parameter."""
    derived = {t.name for t in graph.parameters}
    bad = []
    for op in graph.operators:
        if any(u.tensor in derived for u in op.inputs + op.params):
            derived.update(u.tensor for u in op.outputs)
            if op.kind is OpKind.OPAQUE:
                bad.append(f"{op.name} ({op.attr('target')})")
    return bad


@pytest.mark.parametrize("arch", ARCHS)
def test_imports_exactly(imported, arch):
    module, inputs, graph, values, caught = imported(arch)
    no_rule = [w for w in caught if "no IR rule" in w]
    # rules-less operators may remain only on labels (a seq2seq model shifts its labels with
    # in-place writes into a new tensor): never on the activations
    assert opaque_on_parameter_paths(graph) == []
    assert all(any(s in w for s in ("copy_", "fill_", "new_zeros", "eq.Scalar", "cumsum", "gather", "ne.Scalar"))
               for w in no_rule), no_rule
    assert graph.num_parameters == sum(p.numel() for p in module.parameters())
    assert sum(op.kind is OpKind.LOSS for op in graph) == 1
    with torch.no_grad():
        got = run_graph(graph, inputs, values)[graph.outputs[0]]
        want = module(**inputs)
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-5), (float(got), float(want))


@pytest.mark.slow
@pytest.mark.parametrize("arch", sorted(hf_models.MORE_KINDS))
def test_more_architectures_import_exactly(arch):
    module, inputs, graph, values, caught = _import(arch)
    assert opaque_on_parameter_paths(graph) == []  # (mBART's label shift keeps two on the labels)
    assert graph.num_parameters == sum(p.numel() for p in module.parameters())
    assert (graph.kinds().get("moe_experts", 0) > 0) == (hf_models.MORE_KINDS[arch] == "moe")
    with torch.no_grad():
        got = run_graph(graph, inputs, values)[graph.outputs[0]]
        want = module(**inputs)
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-5), (float(got), float(want))


@pytest.mark.parametrize("arch", ARCHS)
def test_frontier_on_8_devices(imported, arch):
    graph = imported(arch)[2]
    # at most 8 configurations per operator keeps CI fast (the default, every configuration,
    # takes minutes on graphs of this size at 8 devices)
    fr = to.frontier(graph, "v100-2x8", devices=8, max_configs=8)
    assert len(fr) >= 2
    assert (fr.memory[1:] > fr.memory[:-1]).all() and (fr.time[1:] < fr.time[:-1]).all()
    # something beyond data parallelism: the least-memory plan splits parameters
    assert fr.memory[0] < graph.parameter_bytes * 4


def test_zero_size_slices_and_caches_import():
    # Phi-3's full rotary split leaves an empty pass-through half; a model with its default
    # key/value cache concatenates onto empty tensors: no zero-size tensor reaches the IR
    cfg = transformers.LlamaConfig(num_hidden_layers=1, hidden_size=32, num_attention_heads=4, intermediate_size=64,
                                   vocab_size=64, max_position_embeddings=32)  # use_cache defaults to True
    torch.manual_seed(0)
    module = hf_models.LossOf(transformers.LlamaForCausalLM(cfg)).eval()
    inputs = hf_models.example_inputs("llama")
    graph, values = from_torch_with_state(module, inputs)
    assert all(min(t.shape, default=1) >= 1 for t in graph.tensors.values())
    with torch.no_grad():
        assert torch.allclose(run_graph(graph, inputs, values)[graph.outputs[0]], module(**inputs), atol=1e-5)

    class HalfEmpty(torch.nn.Module):
        def forward(self, x):
            a, b = x[..., :4], x[..., 4:]  # b is empty
            return torch.cat([a * 2, b], dim=-1).sum()

    g, v = from_torch_with_state(HalfEmpty(), (torch.randn(2, 4),))
    assert not any(op.kind in (OpKind.OPAQUE, OpKind.CONCAT) for op in g)
    x = torch.randn(2, 4)
    assert torch.allclose(run_graph(g, {"x": x}, v)[g.outputs[0]], (x * 2).sum())


class _OldLayerDrop(torch.nn.Module):
    """LayerDrop as transformers 5.17 wrote it: a 0-d draw in training mode even when p is 0."""

    def __init__(self, p):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(3))
        self.layerdrop = p

    def forward(self, x):
        for layer in self.layers:
            if self.training:
                if torch.rand([]) < self.layerdrop:
                    continue
            x = layer(x)
        return x


@pytest.mark.parametrize("p", [0.0, 0.5])
def test_layerdrop_branches_are_resolved_with_a_warning(p):
    m = _OldLayerDrop(p).train()
    with pytest.warns(UserWarning, match="every layer") as rec:
        g = from_torch(m, (torch.randn(2, 4),))
    assert g.kinds()["linear"] == 3  # no layer skipped
    assert m.layerdrop == p and torch.rand([]).shape == ()  # restored
    msg = " ".join(str(w.message) for w in rec)
    assert ("layerdrop=0.5" in msg) == (p > 0)


def test_hf_layerdrop_in_training_mode():
    cfg = transformers.BartConfig(vocab_size=64, d_model=32, encoder_layers=2, decoder_layers=2,
                                  encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                                  decoder_ffn_dim=64, max_position_embeddings=64, use_cache=False,
                                  encoder_layerdrop=0.2, decoder_layerdrop=0.1)
    torch.manual_seed(0)
    m = hf_models.LossOf(transformers.BartForConditionalGeneration(cfg)).train()
    with pytest.warns(UserWarning, match=r"layerdrop=0.2 of model.model.encoder \(BartEncoder\)"):
        g = from_torch(m, hf_models.example_inputs("bart"))
    assert g.kinds()["attention"] == 2 + 2 * 2  # every layer: encoder self, decoder self + cross


def test_data_dependent_branch_is_a_clear_error():
    class Branchy(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x * 2
            return x

    with pytest.raises(UnsupportedOperatorError, match=r"Branchy branches on a value computed from tensor data"):
        from_torch(Branchy(), (torch.randn(2, 4),))


def test_pad_where_and_topk_rules():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(6, 6)

        def forward(self, x, labels):
            h = self.fc(x)
            h = torch.nn.functional.pad(h, (1, 2), value=0.5)
            h = torch.where(h > 0, h, -1.0)
            v, i = torch.topk(h, 3, dim=-1)
            v = v / v.sum(-1, keepdim=True)
            lab = torch.nn.functional.pad(labels, (0, 1), value=-100)
            return v, i, lab

    m = M().eval()
    x, labels = torch.randn(4, 6), torch.randint(0, 6, (4, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "no IR rule" warning
        g, v = from_torch_with_state(m, (x, labels))
    kinds = g.kinds()
    assert kinds["pad"] == 2 and kinds["topk"] == 1 and "opaque" not in kinds
    pad = next(op for op in g if op.kind is OpKind.PAD)
    assert [d.name for d in pad.loop_dims if not d.splittable] == ["in1", "out1"]  # the padded axis only
    out = run_graph(g, {"x": x, "labels": labels}, v)
    for name, ref in zip(g.outputs, m(x, labels)):
        assert torch.equal(out[name], ref) if not ref.is_floating_point() else torch.allclose(out[name], ref)
    with pytest.raises(InvalidInputError, match="negative pads"):
        from tensoropt_py.graph.builder import GraphBuilder

        g2 = GraphBuilder("p")
        (t,) = g2.input([("t", (2, 3), "float32")])
        g2.pad(t, (-1, 0))


# ----------------------------------------------------------------------------------------------
# mixture of experts
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ["mixtral", "qwen2_moe"])
def test_moe_layers_are_dispatch_experts_combine(imported, arch):
    module, inputs, graph, values, _ = imported(arch)
    kinds = graph.kinds()
    assert kinds["moe_dispatch"] == kinds["moe_experts"] == kinds["moe_combine"] == hf_models.LAYERS
    assert kinds["topk"] == hf_models.LAYERS
    experts = next(op for op in graph if op.kind is OpKind.MOE_EXPERTS)
    e = experts.loop_dim("e")
    assert e.splittable and e.kind.value == "parameter" and e.size == 4
    # every expert weight is split with its experts: parameters indexed by "e" first
    assert all(u.dims[0] == ("e",) for u in experts.params)
    # dropless import: one group per sequence, capacity = the sequence, no token dropped
    dispatch = next(op for op in graph if op.kind is OpKind.MOE_DISPATCH)
    assert dispatch.attr("capacity") == hf_models.S and dispatch.loop_dim("g").size == hf_models.B
    # FLOPs count routed tokens (k of E experts per token), not every capacity slot
    T, k, H = hf_models.B * hf_models.S, 2, hf_models.HIDDEN
    inter = graph.tensors[experts.params[1].tensor].shape[2]
    assert experts.flops == pytest.approx(2 * T * k * H * 2 * inter + 2 * T * k * inter * H + 6 * T * k * inter)


def test_moe_experts_without_the_late_marker_import_as_experts():
    # transformers releases before _is_expert_parallel (5.17: its experts loop over the experts
    # hit, eagerly) mark their experts modules with the same decorator attributes: they must
    # import as experts too, not as hundreds of traced operators. An experts module that is
    # already expert-parallel holds only its local experts and is left alone, with a warning.
    module, inputs = hf_models.module("mixtral")
    experts = [m for m in module.modules() if hasattr(m, "has_gate")]
    assert len(experts) == hf_models.LAYERS
    for m in experts:
        vars(m).pop("_is_expert_parallel", None)
    kinds = from_torch(module, inputs).kinds()
    assert kinds["moe_dispatch"] == kinds["moe_experts"] == kinds["moe_combine"] == hf_models.LAYERS
    experts[0]._is_expert_parallel = True
    with pytest.warns(UserWarning, match="already expert-parallel"):
        kinds = from_torch(module, inputs).kinds()
    assert kinds["moe_experts"] == hf_models.LAYERS - 1


def test_moe_capacity_factor_shrinks_the_slots():
    module, inputs = hf_models.module("mixtral")
    with pytest.warns(UserWarning, match="capacity factor 1.25"):
        g = from_torch(module, inputs, moe_capacity_factor=1.25)
    dispatch = next(op for op in g if op.kind is OpKind.MOE_DISPATCH)
    assert dispatch.attr("capacity") == math.ceil(1.25 * hf_models.S * 2 / 4)  # 5 of 8 slots
    with pytest.raises(InvalidInputError, match="moe_capacity_factor"):
        from_torch(module, inputs, moe_capacity_factor=0)


def test_moe_reference_matches_dropless_routing():
    # the dispatch -> experts -> combine operators on one device == HF's dropless experts
    from tensoropt_py.graph.torch_moe import moe_experts_reference

    module, inputs = hf_models.module("mixtral")
    block = module.model.model.layers[0].mlp
    x = torch.randn(hf_models.B * hf_models.S, hf_models.HIDDEN)
    with torch.no_grad():
        _, w, idx = block.gate(x)
        want = block.experts(x, idx, w)
        got = moe_experts_reference(x, idx, w, block.experts.gate_up_proj, block.experts.down_proj, "silu", True, False)
    assert torch.allclose(got, want, atol=1e-6)


def test_moe_expert_parallel_plans_are_on_the_frontier(imported):
    graph = imported("mixtral")[2]
    fr = to.frontier(graph, "v100-2x8", devices=8, max_configs=8)
    mcg = fr.model_cost_graph
    idx = [i for i, op in enumerate(graph.operators) if op.kind is OpKind.MOE_EXPERTS]
    e = [j for j, d in enumerate(graph.operators[idx[0]].loop_dims) if d.name == "e"][0]
    split = [p for p in range(len(fr)) if any(mcg.configs[i][fr.choices[p][i]].assignment[e] >= 0 for i in idx)]
    assert split, "no frontier point splits the experts"
    # an expert-parallel plan moves tokens between a token split and an expert split: all-to-all
    kinds = {c.kind for p in split[:: max(1, len(split) // 10)] for e_ in fr.plan(p).edges
             for c in e_.forward + e_.backward if "moe" in e_.consumer or "moe" in e_.producer}
    assert "all_to_all" in kinds, kinds


@pytest.mark.parametrize("n", [2, 4])
def test_every_moe_config_is_exact_on_local_shards(imported, n):
    # every configuration of the routing and MoE operators on n virtual ranks: local outputs and
    # gradients assemble to the full operator's
    from tensoropt_py.exec.runner import synthetic_batch
    from tensoropt_py.exec.testing import check_local_shards
    from tensoropt_py.graph.torch_ops import init_params

    graph = imported("mixtral")[2]
    params = init_params(graph, seed=1)
    env = {k: v.detach() for k, v in {**params, **run_graph(graph, synthetic_batch(graph, 1, 0), params)}.items()}
    gen = torch.Generator().manual_seed(5)
    kinds = (OpKind.MOE_DISPATCH, OpKind.MOE_EXPERTS, OpKind.MOE_COMBINE, OpKind.TOPK, OpKind.PAD)
    checked = set()
    for op in [o for o in graph.operators if o.kind in kinds][:5]:
        checked |= {(op.kind, cfg) for cfg in check_local_shards(graph, op, env, n, gen)}
    split_experts = {c for k, c in checked if k is OpKind.MOE_EXPERTS and c != f"mesh[{n}] map[-1,-1,-1,-1,-1,-1]"}
    assert {k for k, _ in checked} >= {OpKind.MOE_DISPATCH, OpKind.MOE_EXPERTS, OpKind.MOE_COMBINE, OpKind.TOPK}
    assert split_experts


# ----------------------------------------------------------------------------------------------
# models larger than the machine: the meta device
# ----------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_llama3_8b_shaped_model_on_the_meta_device_imports():
    cfg = transformers.LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                                   num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                                   max_position_embeddings=8192, use_cache=False, rope_theta=500000.0)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(cfg)
    module = hf_models.LossOf(model).eval()
    ids = torch.randint(0, cfg.vocab_size, (1, 16), device="meta")
    graph, values = from_torch_with_state(module, {"input_ids": ids, "labels": ids})
    assert graph.num_parameters == sum(p.numel() for p in model.parameters()) > 8.0e9
    assert graph.kinds()["attention"] == 32 and opaque_on_parameter_paths(graph) == []
    assert all(v.is_meta for v in values.values() if isinstance(v, torch.Tensor))
    # running it needs the weights: a clear error, not a meta-tensor crash deep in torch
    with pytest.raises(InvalidInputError, match=r"meta device.*real weights"):
        run_graph(graph, {"input_ids": torch.zeros(1, 16, dtype=torch.long),
                          "labels": torch.zeros(1, 16, dtype=torch.long)}, values)


# ----------------------------------------------------------------------------------------------
# the executor under MPI: -n 2 trains like one process
# ----------------------------------------------------------------------------------------------
MPIEXEC = shutil.which("mpiexec")
needs_mpi = pytest.mark.skipif(MPIEXEC is None or importlib.util.find_spec("mpi4py") is None,
                               reason="needs mpiexec and mpi4py")
EXEC_MODELS = ("llama", "bert", "t5", "vit", "mixtral")  # decoder, encoder, encoder-decoder, vision, MoE


@needs_mpi
@pytest.mark.mpi
def test_executor_at_2_processes_trains_like_one(tmp_path):
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")])
    env.setdefault("OMP_NUM_THREADS", "1")
    out = tmp_path / "summary.json"
    cmd = [MPIEXEC, "-n", "2", sys.executable, "-m", "mpi4py", str(root / "tests" / "mpi" / "hf_exec.py"), str(out),
           "--models", ",".join(EXEC_MODELS)]
    r = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"hf_exec failed:\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    summary = json.loads(out.read_text())
    assert summary["devices"] == 2 and set(summary["models"]) == set(EXEC_MODELS)
    assert {m["kind"] for m in summary["models"].values()} == {"decoder", "encoder", "encoder-decoder", "vision",
                                                                "moe"}
    for arch, res in summary["models"].items():
        assert len(res["plans"]) >= 2, arch
        for p in res["plans"]:  # the script already compared; check the summary too
            np.testing.assert_allclose(p["losses"], p["reference"], rtol=1e-4, atol=1e-6)
            assert p["max_param_error"] < 2e-4, (arch, p)
        assert any(p["collectives"] for p in res["plans"]), arch  # something was communicated
    moe = summary["models"]["mixtral"]["plans"]
    # an expert-parallel plan ran and communicated (its dispatch is an all-to-all when the cost model
    # prefers one to gathering the tokens; hf_exec.py picks such a plan when the frontier has it)
    assert any(p["expert_split"] and p["collectives"] for p in moe)


def test_mixtral_8x7b_shaped_layers_on_the_meta_device_import_as_experts():
    # two layers of Mixtral-8x7B's shape (8 experts of 4096 x 14336, top-2), no weights in memory
    cfg = transformers.MixtralConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=2,
                                     num_attention_heads=32, num_key_value_heads=8, vocab_size=32000,
                                     num_local_experts=8, num_experts_per_tok=2, use_cache=False)
    with torch.device("meta"):
        model = transformers.MixtralForCausalLM(cfg)
    ids = torch.zeros(2, 32, dtype=torch.long, device="meta")
    graph = from_torch(hf_models.LossOf(model).eval(), {"input_ids": ids, "labels": ids})
    assert graph.num_parameters == sum(p.numel() for p in model.parameters())
    experts = [op for op in graph if op.kind is OpKind.MOE_EXPERTS]
    assert len(experts) == 2 and all(op.loop_dim("e").size == 8 for op in experts)
    assert opaque_on_parameter_paths(graph) == []
