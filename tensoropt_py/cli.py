"""The ``tensoropt-py`` command (also ``python -m tensoropt_py``).

Subcommands: ``frontier``, ``find``, ``profile``, ``calibrate``, ``show`` and ``run``.
Bad input ends with a one-line ``tensoropt-py: error: ...`` and exit status 2, no traceback;
a request nothing satisfies (no strategy fits under the memory cap) ends the same way with
exit status 1, so that scripts can tell "fix the command" from "nothing fits".
"""

from __future__ import annotations

import argparse
import sys

from .cost.optimizer import OPTIMIZERS
from .cost.training import PRECISIONS
from .engine.track import parse_epsilon
from .errors import InfeasibleError, InvalidInputError, TensorOptError
from .inputs import load_cluster, parse_memory_cap
from .space.mesh import AUTO_ALL_MAX_DEVICES, MESH_SPACES

__all__ = ["main"]


def _epsilon(text):
    try:
        return parse_epsilon(text)
    except InvalidInputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_common(p, *, devices_many=False):
    p.add_argument("--model", required=True,
                   help="zoo name (optionally name:key=value,...) or package.module:factory")
    p.add_argument("--cluster", default="v100-2x8", help="preset name or cluster JSON file (default v100-2x8)")
    p.add_argument("--calibration", default=None,
                   help="calibration file written by `tensoropt-py calibrate`: its measured collective and "
                        "operator tables replace the cluster's roofline")
    if devices_many:
        p.add_argument("--devices", default=None, help="comma-separated device counts (default: all valid counts)")
    else:
        p.add_argument("--devices", type=int, default=None,
                       help="device count (default: the devices of one machine; several machines take longer)")
    p.add_argument("--memory-cap", default=None, help='memory per device, e.g. "14.5GB" (default: memory / 1.1)')
    p.add_argument("--method", choices=("ldp", "elimination"), default="ldp")
    p.add_argument("--exact", action="store_true", help="no heuristic elimination: the exact frontier")
    p.add_argument("--epsilon", type=_epsilon, default="auto",
                   help="epsilon-Pareto thinning: a number >= 0 (0 = off) or 'auto' (the default: "
                        "1e-3 once intermediate frontiers grow past thousands of points)")
    p.add_argument("--optimizer", choices=tuple(OPTIMIZERS), default="adam")
    p.add_argument("--recompute", action="store_true",
                   help="also offer every operator recomputation in backward (less memory, more time)")
    p.add_argument("--shard-optimizer", action="store_true",
                   help="also offer every parameter operator sharded optimizer state (ZeRO-1 over its replicas)")
    p.add_argument("--precision", choices=tuple(PRECISIONS), default="32-true",
                   help="training precision (default 32-true; bf16-mixed needs the device's bf16 rate)")
    p.add_argument("--meshes", choices=MESH_SPACES, default="auto",
                   help="device meshes per operator: every mesh (all), the flat mesh and two-axis meshes whose inner "
                        f"axis stays in a machine (hierarchical), or all up to {AUTO_ALL_MAX_DEVICES} devices and "
                        "hierarchical beyond (auto, the default)")
    p.add_argument("--threads", type=int, default=None,
                   help="worker threads of the cost graph's rescheduling searches and of the engine (default: all cores)")
    p.add_argument("--cache-dir", default=None,
                   help="keep frontiers in this folder and reuse them (same model, cluster, devices, options)")
    p.add_argument("--json", default=None, help="write the result as JSON to this path")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")


def _parser():
    parser = argparse.ArgumentParser(
        prog="tensoropt-py",
        description="Cost-frontier planning of parallel deep-learning training: every Pareto-optimal "
                    "(memory per device, time per iteration) strategy of a model on a cluster.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("frontier", help="print the cost frontier and the strategy picked under the memory cap")
    _add_common(p)
    p.add_argument("--plot", default=None, help="write the Fig. 6 style plot (PNG/PDF/SVG)")
    p.add_argument("--baselines", action="store_true", help="also cost the baselines and draw them")
    p.add_argument("--limit", type=int, default=30, help="rows of the frontier table to print")

    p = sub.add_parser("find", help="find one strategy (mini_time or mini_parallelism)")
    _add_common(p)
    p.add_argument("--option", choices=("mini_time", "mini_parallelism"), default="mini_time")
    p.add_argument("--refine", choices=("mcmc",), default=None, help="refine with the FlexFlow simulator")
    p.add_argument("--budget", default=None,
                   help="refinement budget: MCMC proposals (default 2000; reproducible with --seed) or "
                        "wall-clock time (e.g. 30s; not reproducible)")
    p.add_argument("--seed", type=int, default=None)

    p = sub.add_parser("profile", help="best time per device count (Fig. 8)")
    _add_common(p, devices_many=True)
    p.add_argument("--plot", default=None, help="write the Fig. 8 style plot (PNG/PDF/SVG)")

    sub.add_parser("calibrate", help="measure collective bandwidth and compute tables (run under mpiexec)",
                   add_help=False)

    p = sub.add_parser("show", help="print a saved plan; --plot draws its simulated iteration")
    p.add_argument("plan", help="PLAN.json")
    p.add_argument("--plot", default=None,
                   help="draw the simulated per-device timeline of compute and communication (PNG/PDF/SVG)")
    p.add_argument("--model", default=None,
                   help="the plan's model for --plot (default: the plan's model name as a zoo spec)")
    p.add_argument("--report", default=None, help="an executor report (run --report) whose measured time is drawn")
    p.add_argument("--devices-shown", type=int, default=4, help="devices drawn by --plot (default 4)")

    sub.add_parser("run", help="execute a plan over MPI ranks (run under mpiexec)", add_help=False)

    p = sub.add_parser("iopddl", help="solve an IOPDDL sharding-contest problem (JSON or JSON.gz file)")
    p.add_argument("problem", help="PROBLEM.json or PROBLEM.json.gz")
    p.add_argument("--max-nodes", type=int, default=1000,
                   help="branch-and-bound nodes (default 1000; 1: the root relaxation only, for large problems)")
    p.add_argument("--iterations", type=int, default=50, help="subgradient steps per branch-and-bound node")
    p.add_argument("--max-memory", default=None,
                   help="memory the solver's tables may take, e.g. 8GB (default: 60%% of the memory available)")
    p.add_argument("--json", default=None, help="write the solution (one strategy index per node) and its figures")
    return parser


def _check_outputs(args):
    """Fail on a bad output path before minutes of computation, not after."""
    from pathlib import Path

    from .errors import InvalidInputError

    if getattr(args, "plot", None):
        from .plot import check_plot_path

        check_plot_path(args.plot)
    if getattr(args, "json", None):
        folder = Path(args.json).parent
        if not folder.is_dir():
            raise InvalidInputError(f"cannot write {args.json!r}: the folder {str(folder)!r} does not exist")


def _cluster(args):
    """The ``--cluster``, with the measured tables of ``--calibration`` when given."""
    cluster = load_cluster(args.cluster)
    return cluster if args.calibration is None else cluster.with_calibration(args.calibration)


def _default_devices(args, cluster):
    """One machine's devices unless --devices says otherwise: a frontier over several machines takes longer."""
    return args.devices if args.devices is not None else cluster.devices_per_machine


def _frontier_options(args):
    return dict(method=args.method, exact=args.exact, epsilon=args.epsilon, optimizer=args.optimizer,
                threads=args.threads, cache_dir=args.cache_dir, progress=not args.quiet, recompute=args.recompute,
                shard_optimizer=args.shard_optimizer, precision=args.precision, meshes=args.meshes)


def _cmd_frontier(args):
    from . import api
    from .units import format_bytes

    _check_outputs(args)
    cluster = _cluster(args)
    cap = parse_memory_cap(args.memory_cap, cluster)
    fr = api.frontier(args.model, cluster, _default_devices(args, cluster), **_frontier_options(args))
    print(fr)
    peaks = fr.seconds.get("peaks")  # absent from frontiers saved before it was timed
    print(f"cost graph built in {fr.seconds['build']:.2f} s, frontier tracked in {fr.seconds['track']:.2f} s"
          + ("" if peaks is None else f", its points' peak memory in {peaks:.2f} s")
          + f" ({fr.accuracy}; {fr.meshes} meshes searched)")
    try:
        picked = fr.index_under(cap)
    except TensorOptError as exc:
        picked = None
        print(f"no strategy fits under the cap: {exc}")
    print(fr.table(mark=picked, limit=args.limit))
    if picked is not None:
        plan = fr.plan(picked)
        print(f"\npicked under a memory cap of {format_bytes(cap)} per device (mini_time):")
        print(plan.summary())
        print(plan.table(limit=12))
    baselines = {}
    if args.baselines:
        from . import baselines as bl

        if not args.quiet:
            print("costing the baselines (data parallel, OptCNN, ToFu, SOYBEAN)...", file=sys.stderr, flush=True)
        baselines = bl.all_baselines(fr.model_cost_graph, cluster, exact=args.exact)
        for name, b in baselines.items():
            if b is not None and hasattr(b, "summary"):
                print(f"{name}: {b.summary()}")
    if args.plot:
        fr.plot(args.plot, memory_cap=cap, baselines=baselines, picked=picked)
        print(f"plot written to {args.plot}")
    if args.json:
        fr.to_json(args.json)
        print(f"frontier written to {args.json}")


def _cmd_find(args):
    from . import api

    _check_outputs(args)
    cluster = _cluster(args)
    devices = _default_devices(args, cluster) if args.option == "mini_time" else args.devices
    plan = api.find_strategy(args.model, cluster, option=args.option, devices=devices,
                             memory_cap=args.memory_cap, refine=args.refine,
                             budget=args.budget if args.refine else None, seed=args.seed, **_frontier_options(args))
    if args.json:  # written before printing, so that a closed stdout (| head) cannot lose it
        plan.to_json(args.json)
    print(plan)
    if args.json:
        print(f"plan written to {args.json}")


def _cmd_profile(args):
    from . import api
    from .errors import InvalidInputError

    _check_outputs(args)
    devices = None
    if args.devices:
        try:
            devices = [int(d) for d in args.devices.split(",") if d.strip()]
        except ValueError:
            raise InvalidInputError(f"--devices must be comma-separated integers, got {args.devices!r}") from None
    prof = api.find_strategy(args.model, _cluster(args), option="profiling", devices=devices,
                             memory_cap=args.memory_cap, **_frontier_options(args))
    print(prof)
    if args.plot:
        prof.plot(args.plot)
        print(f"plot written to {args.plot}")
    if args.json:
        import json

        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"devices": list(prof.devices), "time": [None if t != t else t for t in prof.time.tolist()],
                       "memory": [None if m != m else m for m in prof.memory.tolist()],
                       "memory_cap": prof.memory_cap, "model": prof.model, "cluster": prof.cluster}, fh)


def _cmd_show(args):
    from .plan import Plan

    if args.plot:
        from .plot import check_plot_path

        check_plot_path(args.plot)
    plan = Plan.from_json(args.plan)
    print(plan.summary())
    print(plan.table())
    if args.plot:
        _plot_simulated(plan, args)


def _plot_simulated(plan, args):
    import json

    from .errors import InvalidInputError
    from .inputs import load_model
    from .plan import read_json
    from .plot import plot_timeline
    from .soap.plan_simulator import simulate_plan

    try:
        graph = load_model(args.model or plan.model)
    except InvalidInputError as exc:
        raise InvalidInputError(f"--plot needs the plan's model: pass --model ({exc})") from None
    measured = measured_memory = None
    if args.report:
        try:
            report = read_json(args.report, "executor report")
            measured = float(report["time"]["measured"])
            peak = (report.get("memory") or {}).get("measured")
            measured_memory = None if peak is None else float(peak)
        except (KeyError, TypeError, ValueError, AttributeError, json.JSONDecodeError):
            raise InvalidInputError(f"{args.report!r} is not an executor report (run ... --report)") from None
    sim = simulate_plan(plan, graph)
    plot_timeline(sim, devices=args.devices_shown, measured_time=measured, plan=plan, measured_memory=measured_memory,
                  path=args.plot,
                  title=f"{plan.model} on {plan.devices} devices of {plan.cluster}: one simulated iteration")
    print(f"simulated iteration {sim.time * 1e3:.4g} ms (additive estimate {sim.additive_time * 1e3:.4g} ms"
          + ("" if measured is None else f", measured {measured * 1e3:.4g} ms") + f"); plot written to {args.plot}")


def _cmd_iopddl(args):
    import json

    from .engine.iopddl import read_iopddl, solve_iopddl
    from .units import parse_bytes

    _check_outputs(args)
    problem = read_iopddl(args.problem)
    print(problem)
    max_memory = None if args.max_memory is None else parse_bytes(args.max_memory)
    r = solve_iopddl(problem, max_nodes=args.max_nodes, iterations=args.iterations, max_memory=max_memory)
    how = "optimal" if r.optimal else f"within {r.gap:.3%} of the lower bound {r.lower_bound:.6g}"
    print(f"cost {r.time:.6g} ({how}), peak usage {r.peak:.6g}, {r.n_nodes_explored} branch-and-bound nodes, "
          f"{r.seconds:.3g} s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"problem": problem.name, "solution": r.choices.tolist(), "cost": r.time, "peak_usage": r.peak,
                       "lower_bound": r.lower_bound, "optimal": bool(r.optimal), "seconds": r.seconds}, fh)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # calibrate and run parse their own flags (they run under mpiexec).
    if argv and argv[0] == "calibrate":
        from .calibrate.__main__ import main as calibrate_main

        return _guard(lambda: calibrate_main(argv[1:]))
    if argv and argv[0] == "run":
        from .exec.runner import main as run_main

        return _guard(lambda: run_main(argv[1:]))
    args = _parser().parse_args(argv)
    handler = {"frontier": _cmd_frontier, "find": _cmd_find, "profile": _cmd_profile, "show": _cmd_show,
               "iopddl": _cmd_iopddl}[args.command]
    return _guard(lambda: handler(args))


def _guard(fn) -> int:
    try:
        code = fn()
    except BrokenPipeError:
        # The reader went away (``tensoropt-py frontier ... | head``): not an error. Point
        # stdout at devnull so the interpreter's final flush does not complain either.
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except InfeasibleError as exc:
        _error(exc)
        return 1
    except (TensorOptError, ValueError, OSError) as exc:
        # Library errors are the user's input: one line, no traceback.
        _error(exc)
        return 2
    return int(code or 0)


def _error(exc):
    """One line on stderr; under mpiexec from rank 0 only (every rank meets the same input error)."""
    from .exec.launcher import launcher_rank

    if launcher_rank() == 0:
        print(f"tensoropt-py: error: {exc}", file=sys.stderr)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
