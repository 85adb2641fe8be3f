"""Replay the OpenB trace under the FGD paper's policies and compare with the published figures.

    python -m vte.openb --pods default --policies all --seeds 10 --tune 1.3 \
        --json openb.json --png openb.png
    python -m vte.openb --pods all --policies all --seeds 10 --json results/ --png results/
    python -m vte.openb --policies fgd,best_fit,runs/openb_ppo     # a learned scheduler too
    python -m vte.openb --policies fgd,plan:fgd,runs/openb_imitate,plan:runs/openb_imitate
    python -m vte.openb --pods default --seeds 10 --power \
        --policies fgd,best_fit,pwr,pwr_fgd:200,pwr_fgd:100,pwr_fgd:50 --json out.json --png out.png

Seeds are consecutive from --first-seed (42, the first published seed); each policy is one
compiled program that runs all seeds at once. Bundled traces: --nodes gpu|all, --pods one of
the seventeen workloads (default, gpushare40..100, gpuspec10..33, multigpu20..50,
cpu050..250), several joined by commas, or 'all'; any file of the same format is accepted by
path. With several traces --json and --png name directories: a JSON and a figure per trace,
summary.json and overview.png. Finished runs are kept in --cache (an interrupted grid
continues where it stopped, a repeated one is instant); --force recomputes them.

Policies: the six published ones, the PWR paper's "pwr" and "pwr_fgd:<a>" (a x PWR +
(1000 - a) x FGD, `vte.openb.power`), trained run directories (RUN_DIR@STEP: checkpoint
STEP of one, e.g. to choose a checkpoint on other seeds with --first-seed), and "plan:"
before any of those: the lookahead planner over it (`vte.openb.lab.lookahead`, --plan-*
settings, recorded in the JSON under "plan"; e.g. plan:RUN_DIR --plan-rollouts fgd
--plan-horizon 32 --plan-confidence 2: a network's candidates, FGD's futures, the choice
by evidence). "pwr_within:<M>:" before a published policy or a run directory is PWR among
the nodes it scores within M of its best (`power.pwr_within`; M in nats of a network's
logits, e.g. pwr_within:8:RUN_DIR, the learned power front's points);
"pwr_within:<M>@<x>/<m>:" is the same with the margin m once the arrived GPU demand reaches
x of the cluster's GPUs (e.g. pwr_within:24@0.8/8:RUN_DIR); "+sockets" after either
(pwr_within:24@0.8/8+sockets:RUN_DIR) sends PWR's ties to the fullest active sockets
first (`pwr_within(..., fill_sockets=True)`). --power runs the PWR
paper's experiment instead (OPENB.md section 11): datacenter power against arrived GPU
demand, savings against FGD ("fgd" must be among the policies) and GRAR at x = 1.0,
beside the paper's readings; its JSON and figure (power and savings per policy) go to
--json and --png (per trace `openb_power_<trace>.json/png` in a directory with several
traces); with --bound, also the least power any scheduler placing every pod could draw
(`bound.power_bound`) and each policy's share of FGD's gap to it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys

from vte import compilation_cache
from vte.rng import SEED_LIMIT
from vte.files import atomic_write, atomic_write_text, check_output_path
from vte.config import add_flags, given, to_json
from vte.openb.lab import bound, lookahead
from vte.openb.lab.cache import RunCache
from vte.openb.lab.experiment import (format_summary, format_table, ordering, plot, plot_overview,
                                  run_traces, summary, trace_name)
from vte.openb.policies import POLICIES
from vte.openb.power import _margin, parse_name, parse_switch, policy_by_name, pwr_within
from vte.openb.trace import TRACES, TraceError, load_nodes, load_pods


def _traces(text: str) -> list[str]:
    """'all' (the seventeen bundled workloads), one name or path, or several joined by commas."""
    names = list(TRACES) if text == "all" else [p.strip() for p in text.split(",") if p.strip()]
    if not names:
        raise ValueError(f"--pods {text!r}: give 'all', a bundled name of {list(TRACES)} or a path")
    if len(set(names)) != len(names):
        raise ValueError(f"--pods {text!r} names a trace twice")
    return names


def default_cache() -> str:
    """Where finished runs are kept unless --cache says otherwise: $XDG_CACHE_HOME/vte/openb
    (~/.cache/vte/openb)."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(root, "vte", "openb")


def _check_dir(path: str, flag: str) -> None:
    """A directory to write several files into: it exists, or its parent does (it is made)."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"{flag} {path!r} is a file; with several traces give a directory")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(path) and not os.path.isdir(parent):
        raise ValueError(f"{flag} {path!r}: the directory {parent!r} does not exist")


PLAN = "plan:"      # "plan:<base>": the lookahead planner over a base policy (`lookahead`)
WITHIN = "pwr_within:"   # "pwr_within:<M>:<base>": PWR among the base's near-best nodes


def _is_run(name: str) -> bool:
    """A run directory, or `DIR@STEP` (`vte.checkpoint.split_step`; a missing STEP raises)."""
    from vte.checkpoint import is_run_path      # orbax only where a run is named
    return is_run_path(name)


SOCKETS = "+sockets"      # after the margin: `pwr_within(..., fill_sockets=True)`


def _within(name: str) -> tuple[float, float | None, float, str, bool] | None:
    """(M, x, m, base, fill_sockets) of "pwr_within:<M>:<base>" or
    "pwr_within:<M>@<x>/<m>:<base>", either with "+sockets" before the second colon
    (`power.pwr_within`: PWR among the nodes the base scores within M of its best; with
    "@<x>/<m>", within m once the arrived GPU demand reaches x of the cluster's GPUs, x None
    without; with "+sockets", PWR's ties to the fullest active sockets first), None for
    another name; ValueError naming the name when M or m is not a number >= 0 (inf
    allowed), x not a finite number > 0, or the base is missing."""
    if not name.startswith(WITHIN):
        return None
    text, _, base = name[len(WITHIN):].partition(":")
    fill = text.endswith(SOCKETS)
    first, at, rest = text.removesuffix(SOCKETS).partition("@")
    try:
        margin = _margin(float(first))       # pwr_within's own rules
        switch_at, late_margin = parse_switch(rest) if at else (None, 0.0)
        ok = bool(base)
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"{name!r} is invalid: allowed 'pwr_within:<M>:<base>' or "
                         "'pwr_within:<M>@<x>/<m>:<base>' with M and m numbers >= 0 (inf "
                         "allowed; nats of a network's logits, points of a published score), x "
                         "a finite number > 0 (the arrived GPU demand, a share of the cluster's "
                         "GPUs, from which the margin is m) and base a published policy, "
                         "'pwr_fgd:<a>' or a run directory, e.g. pwr_within:8:RUN_DIR or "
                         "pwr_within:24@0.8/8:RUN_DIR ('+sockets' before the base's colon: "
                         "PWR's ties to the fullest active sockets first)")
    return margin, switch_at, late_margin, base, fill


def _known(name: str) -> bool:
    """A published or power policy, a run directory (or `DIR@STEP`), pwr_within:<M>: before
    one of those, or plan: before any of these."""
    if name.startswith(PLAN):
        name = name[len(PLAN):]
    within = _within(name)
    if within is not None:
        name = within[3]
        if name.startswith((PLAN, WITHIN)):
            return False
    return name in POLICIES or parse_name(name) is not None or _is_run(name)


def _policies(text: str) -> list[str]:
    """Names of published policies and trained run directories (`train/*.py --env openb`)."""
    names = []
    for p in (p.strip() for p in text.split(",")):      # 'all' anywhere: the published six
        names += list(POLICIES) if p == "all" else [p] if p else []
    try:
        unknown = [p for p in names if not _known(p)]
    except ValueError as err:
        raise ValueError(f"--policies: {err}") from None
    if unknown or not names:
        raise ValueError(f"--policies {text!r}: unknown {unknown or 'empty list'}; "
                         f"give a comma-separated list of {list(POLICIES)} ('all': the six), 'pwr', "
                         "'pwr_fgd:<a>' (a integer in [0, 1000]), run directories of "
                         "train/ppo.py or train/imitate.py --env openb (DIR@STEP: one of "
                         "their checkpoints), 'pwr_within:<M>:' before one of those (PWR "
                         "among its nodes within M of its best) and 'plan:' before "
                         "any of those (the lookahead planner over it)")
    if len(set(names)) != len(names):
        raise ValueError(f"--policies {text!r} names a policy twice")
    return names


def _learned(run_dir: str, num_models):
    """The network a run directory trained, as a replay policy on a node file's GPU models
    (`registration.learned_policy`), its errors naming --policies."""
    from vte.openb.registration import learned_policy
    try:
        return learned_policy(run_dir, num_models)
    except ValueError as err:
        raise ValueError(f"--policies: {err}") from None


def make_policy(name: str, models, plan: lookahead.PlanSettings | None = None):
    """The replay policy a --policies name means, on a node file of GPU `models`
    (`NodeTable.models`): the one place a name becomes a policy (`python -m vte.openb`,
    the kube-scheduler extender `vte.openb.kube`). `plan`: the planner's settings (the
    --plan-* flags), default `PlanSettings()`. ValueError naming the name when it means no
    policy."""
    plan = lookahead.PlanSettings() if plan is None else plan

    def policy(name):
        if name.startswith(PLAN):
            return lookahead.planner(policy(name[len(PLAN):]), **plan.kwargs(
                None if plan.rollouts is None else policy(plan.rollouts)))
        within = _within(name)
        if within is not None:
            margin, switch_at, late_margin, base, fill = within
            return pwr_within(policy(base), margin, models, switch_at=switch_at,
                              late_margin=late_margin, fill_sockets=fill)
        if _is_run(name):
            return _learned(name, tuple(models))
        return policy_by_name(name, models)

    return policy(name)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m vte.openb", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", default="gpu", help="node file: 'gpu' (1213 GPU nodes, the "
                        "paper's), 'all' (adds 310 CPU-only nodes) or a path")
    parser.add_argument("--cluster", default=None, metavar="SNAPSHOT",
                        help="replay your own cluster instead of --nodes and --pods: a "
                             "snapshot (kubectl get nodes,pods -A -o json, or Node and Pod "
                             "YAML; vte.openb.kube.objects): its pods on its nodes, with --tune")
    parser.add_argument("--pods", default="default",
                        help="pod file: a bundled name (default, gpuspec10, multigpu20, ...: "
                             "the seventeen of the paper's artifact) or a path; several joined "
                             "by commas, or 'all'")
    parser.add_argument("--policies", default="all",
                        help=f"a comma-separated list of {list(POLICIES)} ('all': those six), "
                             "where a trained run directory (train/ppo.py --env openb --out DIR; "
                             "DIR@STEP for its checkpoint STEP) or zoo:NAME is one more, e.g. "
                             "all,zoo:openb-evidence (default: all)")
    parser.add_argument("--seeds", type=int, default=10, help="number of seeds (default 10)")
    parser.add_argument("--first-seed", type=int, default=42, help="first seed (published: 42..51)")
    parser.add_argument("--tune", type=float, default=1.3,
                        help="GPU demand to submit, as a multiple of the cluster's GPUs (default 1.3)")
    parser.add_argument("--chunk", type=int, default=512, help="pods per compiled call (progress "
                        "granularity; a trace is padded to a multiple of it)")
    parser.add_argument("--json", default=None, help="write the results here (a directory "
                        "when several traces run: one file per trace and summary.json)")
    parser.add_argument("--png", default=None, help="draw allocation and fragmentation curves here "
                        "(a directory when several traces run: one per trace and overview.png)")
    parser.add_argument("--cache", default=None, help="keep finished (trace, policy, seed) runs "
                        f"here (default {default_cache()}); 'none' keeps nothing")
    parser.add_argument("--force", action="store_true", help="recompute runs already in the cache")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_flags(lookahead.PlanSettings, parser.add_argument_group(
        "planner (plan:<base>; vte.openb.lab.lookahead.PlanSettings)"), prefix="plan_")
    parser.add_argument("--bound", action="store_true", help="also the upper bound on GPU "
                        "allocation (`vte.openb.lab.bound`, an LP per seed; needs scipy) and each "
                        "policy's share of the gap between Random or FGD and it; with --power "
                        "the least power instead (an LP per seed and x) and each policy's share "
                        "of FGD's gap to it")
    parser.add_argument("--power", action="store_true",
                        help="the PWR paper's power experiment (needs 'fgd' among --policies)")
    compilation_cache.add_flag(parser, "the next replay of the same shapes")
    args = parser.parse_args(argv)
    compilation_cache.use(getattr(args, "compilation_cache", None))

    # Every check before any work.
    if not 1 <= args.seeds <= 4096:
        raise ValueError(f"--seeds {args.seeds}: must be in [1, 4096]")
    if not (0 <= args.first_seed and args.first_seed + args.seeds <= SEED_LIMIT):
        raise ValueError(f"--first-seed {args.first_seed}: with --seeds {args.seeds} the seeds "
                         "must lie in [0, 2**32)")
    if not 0 < args.tune <= 10:
        raise ValueError(f"--tune {args.tune}: must be in (0, 10]")
    if args.chunk < 1:
        raise ValueError(f"--chunk {args.chunk}: must be >= 1")
    policies = _policies(args.policies)
    plan = lookahead.PlanSettings(**given(lookahead.PlanSettings, args, "plan_"))
    try:
        rollouts_known = args.plan_rollouts is None or _known(args.plan_rollouts)
    except ValueError as err:
        raise ValueError(f"--plan-rollouts: {err}") from None
    if args.plan_rollouts is not None and (args.plan_rollouts.startswith(PLAN)
                                           or not rollouts_known):
        raise ValueError(f"--plan-rollouts {args.plan_rollouts!r}: allowed a published policy "
                         f"({list(POLICIES)}, 'pwr', 'pwr_fgd:<a>'), a run directory or "
                         "'pwr_within:<M>:' before one of those, not a planner")
    if args.power and "fgd" not in policies:
        raise ValueError(f"--power --policies {args.policies!r}: 'fgd' must be among them (the "
                         "reference of the savings)")
    if args.bound and importlib.util.find_spec("scipy") is None:
        raise ValueError("--bound solves a linear program with scipy, which is not installed: "
                         "pip install scipy")
    traces = [args.cluster] if args.cluster is not None else _traces(args.pods)
    several = len(traces) > 1
    for flag, path in (("--json", args.json), ("--png", args.png)):
        if path is not None and several:
            _check_dir(path, flag)
        elif path is not None:
            check_output_path(path, flag)
    cache = None if args.cache == "none" else RunCache(args.cache or default_cache())
    if args.cluster is not None:      # your own cluster as the twin (one converter: vte.openb.kube)
        from vte.openb.kube.objects import load_snapshot
        nodes, snapshot_pods = load_snapshot(args.cluster)
        pod_tables = [snapshot_pods]
        if os.path.isdir(args.cluster):
            cache = None              # the cache keys runs by file bytes
    else:
        nodes = load_nodes(args.nodes)
        pod_tables = [load_pods(name, nodes) for name in traces]    # every file checked first

    def policy(name):
        return make_policy(name, nodes.models, plan)

    chosen = {name: policy(name) for name in policies}
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    for flag, path in (("--json", args.json), ("--png", args.png)):
        if several and path is not None:
            os.makedirs(path, exist_ok=True)

    if args.power:
        return _power(args, nodes, traces, pod_tables, chosen, seeds, several)

    by_name = {trace_name(p): p for p in pod_tables}
    planned = to_json(plan)

    def write(trace: str, result: dict) -> None:
        """A trace's table and files, as soon as it is done."""
        if any(name.startswith(PLAN) for name in chosen):
            result["plan"] = planned          # the planner's settings, beside its rows
        if args.bound:
            bound.attach(result, by_name[trace], nodes)
        print(format_table(result), flush=True)
        if args.bound:
            print(bound.format_shares(result), flush=True)
        if args.json is not None:
            target = os.path.join(args.json, f"openb_{trace}.json") if several else args.json
            atomic_write_text(target, json.dumps(result, indent=1))
        if args.png is not None:
            target = os.path.join(args.png, f"openb_{trace}.png") if several else args.png
            atomic_write(target, lambda tmp: plot(result, tmp))

    results = run_traces(nodes, pod_tables, chosen, seeds, args.tune, chunk=args.chunk,
                         progress=not args.no_progress, cache=cache, force=args.force,
                         on_trace=write)
    if not several:
        return next(iter(results.values()))
    print(format_summary(results))
    if args.json is not None:
        atomic_write_text(os.path.join(args.json, "summary.json"),
                          json.dumps({"rows": summary(results),
                                      "ordering": {t: ordering(r) for t, r in results.items()}},
                                     indent=1))
    if args.png is not None:
        atomic_write(os.path.join(args.png, "overview.png"), lambda tmp: plot_overview(results, tmp))
    return results


def _power(args, nodes, traces, pod_tables, chosen, seeds, several) -> dict:
    """--power: the PWR experiment on each trace, its table, JSON and figure."""
    from vte.openb.lab import power_experiment
    results = {}
    for trace, pods in zip(traces, pod_tables):
        result = power_experiment.measure(nodes, pods, chosen, seeds, args.tune,
                                          chunk=args.chunk, progress=not args.no_progress,
                                          bound=args.bound)
        print(power_experiment.format_table(result), flush=True)
        name = f"openb_power_{os.path.basename(trace).removesuffix('.csv')}"
        if args.json is not None:
            target = os.path.join(args.json, name + ".json") if several else args.json
            atomic_write_text(target, json.dumps(result, indent=1))
        if args.png is not None:
            target = os.path.join(args.png, name + ".png") if several else args.png
            atomic_write(target, lambda tmp: power_experiment.plot(result, tmp))
        results[trace] = result
    return results if several else results[traces[0]]


if __name__ == "__main__":
    try:
        main()
    except (ValueError, TraceError) as err:
        sys.exit(f"error: {err}")
