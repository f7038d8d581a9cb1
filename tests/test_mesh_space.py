"""The ``meshes`` option: hierarchical meshes are a machine-aligned subset of every mesh.

Oracles: the hierarchical configurations are exactly the union of the single-mesh
enumerations (the Mesh-TensorFlow path) over the hierarchical meshes, and a subset of the
full space; a frontier of the smaller space is dominated by the full space's exact frontier.
"""

import json
import warnings

import numpy as np
import pytest

import tensoropt_py as to
from tensoropt_py import api, cli
from tensoropt_py.cluster import Cluster
from tensoropt_py.cost.builder import build_cost_graph
from tensoropt_py.errors import InvalidInputError, SearchSpaceWarning
from tensoropt_py.graph import zoo
from tensoropt_py.graph.ir import OpKind
from tensoropt_py.model_frontier import Frontier
from tensoropt_py.plan import Plan
from tensoropt_py.space.configs import enumerate_configs
from tensoropt_py.space.mesh import (AUTO_ALL_MAX_DEVICES, check_meshes, hierarchical_meshes, mesh_space, meshes,
                                     resolve_meshes)

CASES = [("cpu-1x4", 2), ("cpu-1x4", 4), ("v100-2x8", 8), ("v100-2x8", 16), ("h100-4x8", 32), ("h100-8x8", 64)]


def _inner_groups_in_one_machine(shape, cluster):
    """Every group of the last mesh axis (row-major devices) lies on one machine."""
    grid = np.arange(int(np.prod(shape))).reshape(shape)
    rows = grid.reshape(-1, shape[-1])
    return all(len({cluster.machine_of(int(d)) for d in row}) == 1 for row in rows)


@pytest.mark.parametrize("preset,n", CASES)
def test_hierarchical_meshes_are_aligned_meshes_of_n(preset, n):
    cl = Cluster.preset(preset)
    hier = hierarchical_meshes(n, cl.devices_per_machine)
    assert set(hier) <= set(meshes(n))
    assert hier[0].shape == (n,)
    for m in hier[1:]:
        assert m.ndim == 2 and _inner_groups_in_one_machine(m.shape, cl)
    # every two-axis mesh whose inner axis stays in a machine is there
    aligned = {m for m in meshes(n) if m.ndim == 2 and _inner_groups_in_one_machine(m.shape, cl)}
    assert aligned == set(hier[1:])


def _ops():
    ops = {op.name: op for op in zoo.transformer(layers=1).operators}
    ops.update({op.name: op for op in zoo.mlp().operators})
    return list(ops.values())


@pytest.mark.parametrize("preset,n", CASES[:5])
def test_hierarchical_configs_are_the_single_mesh_configs_of_its_meshes(preset, n):
    dpm = Cluster.preset(preset).devices_per_machine
    allowed = set(hierarchical_meshes(n, dpm))
    for op in _ops():
        full = {c.key for c in enumerate_configs(op, n)}
        hier = enumerate_configs(op, n, meshes="hierarchical", devices_per_machine=dpm)
        keys = [c.key for c in hier]
        assert len(keys) == len(set(keys))  # one config per canonical key
        assert set(keys) <= full
        if op.kind is OpKind.INPUT:  # data loading: its one data-parallel config in every space
            assert hier == enumerate_configs(op, n)
            continue
        oracle = set()
        for m in allowed:
            oracle |= {c.key for c in enumerate_configs(op, n, mesh_tensorflow=m.shape)}
        assert set(keys) == oracle, op.name
        for c in hier:
            assert c.mesh in allowed
            for d, f in zip(op.loop_dims, c.split_factors()):
                assert d.size % f == 0


@pytest.mark.parametrize("n", [1, 2, 4])
def test_hierarchical_equals_all_on_one_small_machine(n):
    assert hierarchical_meshes(n, 4) == meshes(n)
    for op in _ops():
        assert enumerate_configs(op, n, meshes="hierarchical", devices_per_machine=4) == enumerate_configs(op, n)


def test_hierarchical_leaves_meshes_out_on_eight_devices():
    assert len(hierarchical_meshes(8, 8)) < len(meshes(8))  # [2, 2, 2] is not there
    mcg = build_cost_graph(zoo.mlp(), Cluster.preset("v100-2x8"), 8, meshes="hierarchical")
    assert mcg.meshes == "hierarchical" and mcg.meshes_restricted


def test_auto_resolves_by_device_count():
    assert resolve_meshes("auto", AUTO_ALL_MAX_DEVICES) == "all"
    assert resolve_meshes("auto", AUTO_ALL_MAX_DEVICES * 2) == "hierarchical"
    assert mesh_space(16, "auto", 8) == meshes(16)
    assert mesh_space(32, "auto", 8) == hierarchical_meshes(32, 8)


@pytest.mark.parametrize("bad", ["flat", "ALL", "", None, 3, ("all",)])
def test_bad_mesh_space_names_the_value_and_the_choices(bad):
    with pytest.raises(InvalidInputError, match=r"unknown mesh space .*valid: 'all', 'hierarchical', 'auto'"):
        check_meshes(bad)
    with pytest.raises(InvalidInputError, match="unknown mesh space"):
        to.frontier("mlp", "cpu-1x4", devices=4, meshes=bad, cache=False)
    with pytest.raises(InvalidInputError, match="unknown mesh space"):
        build_cost_graph(zoo.mlp(), Cluster.preset("cpu-1x4"), 4, meshes=bad)


def test_hierarchical_needs_devices_per_machine():
    op = zoo.mlp().operators[1]
    with pytest.raises(InvalidInputError, match="devices_per_machine=None"):
        enumerate_configs(op, 8, meshes="hierarchical")
    with pytest.raises(InvalidInputError, match="devices_per_machine=0"):
        enumerate_configs(op, 32, meshes="auto", devices_per_machine=0)


def test_auto_warns_when_it_restricts_and_says_so_in_the_result():
    cl = Cluster.preset("h100-4x8")
    with pytest.warns(SearchSpaceWarning, match="meshes='auto' searches the hierarchical meshes on 32 devices"):
        mcg = build_cost_graph(zoo.mlp(), cl, 32)
    assert mcg.meshes == "hierarchical" and mcg.meshes_restricted
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        full = build_cost_graph(zoo.mlp(), cl, 32, meshes="all")
        small = build_cost_graph(zoo.mlp(), Cluster.preset("v100-2x8"), 16)  # auto keeps every mesh here
    assert full.meshes == "all" and not full.meshes_restricted
    assert small.meshes == "all" and not small.meshes_restricted
    assert all(len(h) <= len(f) for h, f in zip(mcg.configs, full.configs))


def test_restricted_frontier_is_dominated_by_the_full_one_and_records_its_space(tmp_path):
    kw = dict(devices=8, exact=True, cache=False)
    full = to.frontier("mlp", "v100-2x8", meshes="all", **kw)
    hier = to.frontier("mlp", "v100-2x8", meshes="hierarchical", **kw)
    assert (full.meshes, full.meshes_restricted, full.exact) == ("all", False, True)
    assert (hier.meshes, hier.meshes_restricted, hier.exact) == ("hierarchical", True, False)
    assert "hierarchical meshes only" in hier.accuracy
    for m, t in zip(hier.memory, hier.time):
        assert np.any((full.memory <= m * (1 + 1e-12)) & (full.time <= t * (1 + 1e-12)))
    back = Frontier.from_json(hier.to_json())
    assert (back.meshes, back.meshes_restricted) == ("hierarchical", True)
    plan = hier.plan(0)
    assert plan.meshes == "hierarchical" and Plan.from_json(plan.to_json()).meshes == "hierarchical"
    assert full.plan(0).meshes == "all"


def test_cache_key_is_the_space_searched(tmp_path):
    api.clear_cache()
    auto8 = to.frontier("mlp", "v100-2x8", devices=8)
    assert to.frontier("mlp", "v100-2x8", devices=8, meshes="all") is auto8  # auto is every mesh at 8
    hier = to.frontier("mlp", "v100-2x8", devices=8, meshes="hierarchical")
    assert hier is not auto8 and hier.meshes == "hierarchical"
    assert to.frontier("mlp", "v100-2x8", devices=8, meshes="hierarchical") is hier
    # on disk: a frontier of one space is not read back for the other
    api.clear_cache()
    a = to.frontier("mlp", "v100-2x8", devices=8, meshes="all", cache_dir=tmp_path)
    h = to.frontier("mlp", "v100-2x8", devices=8, meshes="hierarchical", cache_dir=tmp_path)
    assert len(list(tmp_path.glob("frontier-*.json"))) == 2
    assert (a.meshes, h.meshes) == ("all", "hierarchical")


def test_cli_meshes_option(capsys, tmp_path):
    js = tmp_path / "f.json"
    code = cli.main(["frontier", "--model", "mlp", "--cluster", "v100-2x8", "--devices", "8", "--meshes",
                     "hierarchical", "--json", str(js), "-q"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "hierarchical meshes searched" in out
    assert json.loads(js.read_text())["meshes"] == "hierarchical"
    with pytest.raises(SystemExit) as exc:
        cli.main(["frontier", "--model", "mlp", "--cluster", "cpu-1x4", "--meshes", "flat"])
    assert exc.value.code == 2
    assert "--meshes: invalid choice: 'flat'" in capsys.readouterr().err


def test_find_strategy_passes_the_space_on():
    plan = to.find_strategy("mlp", "v100-2x8", devices=8, meshes="hierarchical")
    assert plan.meshes == "hierarchical"
    assert to.find_strategy("mlp", "v100-2x8", devices=8, meshes="all").meshes == "all"
    with pytest.raises(InvalidInputError, match="unknown mesh space 'flat'"):
        to.find_strategy("mlp", "v100-2x8", devices=8, meshes="flat")
