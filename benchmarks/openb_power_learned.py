"""A learned OpenB scheduler at several power preferences against the PWR paper's trade-offs:
GRAR at x = 1.0 and power savings against FGD (plateau x 0.2..0.8) on one or more traces,
beside FGD, BestFit, PWR and the PWR+FGD mixes, and whether its front dominates the mixes.

    python benchmarks/openb_power_learned.py --run runs/openb_pref --pods default \
        --preferences 0,0.4,0.55,0.7,0.85,1 --baselines benchmarks/results/openb_power_default.json \
        --json benchmarks/results/openb_power_learned_default.json

The run is a `train/imitate.py --env openb --power-weight LOW HIGH` (or PPO) directory; each
preference w is the network with `Observation.preference` = w (`network.as_policy`), named
`learned@w`. `--pwr-weights A,B,...` adds the run's network at w = 0 combined with PWR,
a x PWR + (1000 - a) x the network's rescaled logits (`power.pwr_with`), named
`learned+pwr@a`, part of the learned front too (`--preferences ""` for these alone), and
`--pwr-margins M,...` the network at w = 0 with PWR choosing among the nodes whose logit is
within M nats of its best (`power.pwr_within`), named `learned+pwr_within@M`; with
`--pwr-switch X/m` the margin is m once the arrived GPU demand reaches X of the cluster's
GPUs (`pwr_within(..., switch_at=X, late_margin=m)`), named `learned+pwr_within[X/m]@M`;
with `--fill-sockets` PWR's ties go to the fullest active sockets first, named
`learned+pwr_within...+sockets@M`.
FGD is always replayed (the savings' reference); the other published and power
policies are replayed (`--policies`) or, with `--baselines`, taken from an earlier
`benchmarks/openb_power.py` JSON of the same trace, tune and seeds, whose FGD must equal the
one replayed here; when that JSON is an earlier one of this script on the same `--run`,
its learned policies are kept too (margins added to a measured front).
The front is judged on the paper's plateau savings (`dominance`) and, when every judged
policy was replayed with it, on the whole reading, x 0.2..1.0 (`dominance_whole`).
`--fronts A.json,B.json [--reading whole]` prints, per trace and mix, on how many seeds the
finished JSONs' fronts dominate it (`power_experiment.seed_table`), and on how many seeds
they allocate at least FGD's GRAR with more savings than FGD and every mix that does; with
`--front PNG` it draws them;
`--judge A.json,B.json [--json OUT]` judges one run's front measured over several finished
JSONs of one trace (their learned policies together, FGD equal in all) without replaying.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from vte import checkpoint as ckpt
from vte.files import atomic_write, atomic_write_text, check_output_path
from vte.openb.lab import power_experiment
from vte.openb.network import as_policy, models_of
from vte.openb.power import (READINGS, WEIGHT_TOTAL, parse_switch, policy_by_name, power_model,
                             pwr_with, pwr_within)
from vte.openb.trace import POD_PREFIX, TraceError, load_nodes, load_pods


def learned_policies(run: str, preferences: list[float], nodes,
                     pwr_weights: tuple[int, ...] = (), pwr_margins: tuple[float, ...] = (),
                     pwr_switch: tuple[float, float] | None = None,
                     fill_sockets: bool = False) -> dict:
    """`learned@w` -> the run's seed-0 network as a replay policy at preference w,
    `learned+pwr@a` -> that network at w = 0 combined with PWR at weight a (`pwr_with`), and
    `learned+pwr_within@m` -> PWR among its nodes within m nats of its best (`pwr_within`);
    with `pwr_switch` = (x, late), `learned+pwr_within[x/late]@m` -> the same with the
    margin `late` once the arrived GPU demand reaches x of the cluster's GPUs; with
    `fill_sockets`, PWR's ties go to the fullest active sockets first
    (`pwr_within(..., fill_sockets=True)`), named `learned+pwr_within...+sockets@m`."""
    config = ckpt.load_config(run)
    net, variables = ckpt.network_from_config(config), ckpt.load_variables(run)
    watts = power_model(nodes.models)
    out = {f"learned@{w:g}": as_policy(net, variables, models_of(variables), w, watts)
           for w in preferences}
    alone = as_policy(net, variables, models_of(variables), 0.0, watts)
    out.update({f"learned+pwr@{a}": pwr_with(alone, a, nodes.models) for a in pwr_weights})
    x, late = pwr_switch or (None, 0.0)
    tag = ("" if x is None else f"[{x:g}/{late:g}]") + ("+sockets" if fill_sockets else "")
    out.update({f"learned+pwr_within{tag}@{m:g}":
                pwr_within(alone, m, nodes.models, switch_at=x, late_margin=late,
                           fill_sockets=fill_sockets)
                for m in pwr_margins})
    return out


def _preferences(text: str) -> list[float]:
    values = [float(v) for v in text.split(",") if v.strip()]
    if any(not 0.0 <= v <= 1.0 for v in values) or len(set(values)) != len(values):
        raise ValueError(f"--preferences {text!r}: distinct numbers in [0, 1], comma-separated")
    return values


def _pwr_weights(text: str) -> tuple[int, ...]:
    parts = [v.strip() for v in text.split(",") if v.strip()]
    if (any(not v.isdigit() or int(v) > WEIGHT_TOTAL for v in parts)
            or len(set(map(int, parts))) != len(parts)):
        raise ValueError(f"--pwr-weights {text!r}: distinct integers in [0, {WEIGHT_TOTAL}], "
                         "comma-separated")
    return tuple(int(v) for v in parts)


def _pwr_margins(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        values = None
    if values is None or any(not v >= 0 for v in values) or len(set(values)) != len(values):
        raise ValueError(f"--pwr-margins {text!r}: distinct numbers >= 0 (nats), comma-separated")
    return values


def _pwr_switch(text: str | None) -> tuple[float, float] | None:
    """(x, m) of `--pwr-switch X/m`, checked by `pwr_within`'s own rules."""
    if text is None:
        return None
    try:
        return parse_switch(text)
    except ValueError:
        raise ValueError(f"--pwr-switch {text!r}: allowed X/m, X the arrived GPU demand (a "
                         "finite share of the cluster's GPUs > 0, e.g. 0.8) from which the "
                         "margin is m (a number >= 0, nats), e.g. 0.8/8") from None


def _protocol(result: dict) -> dict:
    """The pod file, tune and seeds a JSON of this script or `openb_power.py` replayed."""
    return {"pods": result["trace"]["pods"], "tune": result["tune"], "seeds": result["seeds"]}


def _fgd_differs(a: dict, b: dict) -> list[str]:
    """The figures of FGD's replay (the savings' reference) that differ between results."""
    return [key for key in ("grar_per_seed", "power_w")
            if a["policies"]["fgd"][key] != b["policies"]["fgd"][key]]


def _baselines(path: str, pods, tune: float, seeds: list[int]) -> dict:
    """An earlier JSON of the same pod file, tune and seeds (checked before any replay)."""
    with open(path, encoding="utf-8") as f:
        base = json.load(f)
    ours = {"pods": os.path.basename(pods.path), "tune": tune, "seeds": seeds}
    theirs = _protocol(base)
    if ours != theirs:
        raise ValueError(f"--baselines {path}: {theirs} differs from this run's {ours}")
    return base


def _merge(result: dict, base: dict, baselines: str, run: str) -> dict:
    """`result` with the policies of the earlier JSON `base` when its FGD figures equal this
    replay's. The learned policies of `base` are kept when it measured the same `run` (more
    margins or preferences added to an earlier front) and dropped otherwise; `result["learned"]`
    is then base's followed by this replay's new ones."""
    differs = _fgd_differs(result, base)
    if differs:     # kept unmerged (the replay's minutes are not lost), and said
        return {**result, "baselines_error": f"--baselines {baselines}: FGD's "
                f"{', '.join(differs)} differ from this replay's (another code version?); "
                "replay the baselines with --policies"}
    same_run = (base.get("run") is not None
                and os.path.normpath(base["run"]) == os.path.normpath(run))
    kept = list(base.get("learned", ())) if same_run else []
    extra = {k: v for k, v in base["policies"].items()
             if k not in result["policies"] and (k in kept or k not in base.get("learned", ()))}
    learned = power_experiment.ordered_learned(kept + list(result["learned"]))
    return {**result, "policies": {**result["policies"], **extra}, "learned": learned,
            "baselines_from": baselines}


def _same_front(paths: list[str]) -> dict:
    """The finished JSONs at `paths` (one trace, tune and seeds, one `--run`, FGD's replay
    equal in all: checked before merging) as one result, whose learned policies are all of
    theirs: one network's front measured in several commands."""
    if not paths:
        raise ValueError("--judge: allowed one or more JSON paths, comma-separated; got none")
    results = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            results.append(json.load(f))
    first = merged = results[0]
    for path, r in zip(paths[1:], results[1:]):
        for what, get in (("trace, tune and seeds", _protocol),
                          ("--run", lambda r: os.path.normpath(r.get("run") or ""))):
            if get(r) != get(first):
                raise ValueError(f"--judge: {path} has {what} {get(r)!r}, {paths[0]} has "
                                 f"{get(first)!r}: allowed JSONs of one trace and one run")
        differs = _fgd_differs(r, first)
        if differs:
            raise ValueError(f"--judge: FGD's {', '.join(differs)} in {path} differ from "
                             f"{paths[0]}'s (another code version?): allowed JSONs whose FGD "
                             "replays are equal")
        merged = _merge(merged, r, path, first["run"])
        for name, theirs in r["policies"].items():   # in two JSONs: the same figures in both
            ours = merged["policies"][name]         # (those both have: older JSONs lack
            common = (set(ours) & set(theirs)) - {"seconds"}     # the later readings)
            if any(ours[k] != theirs[k] for k in common):
                raise ValueError(f"--judge: {name} differs between {path} and an earlier JSON "
                                 "(another code version?)")
    return {**merged, "baselines_from": None, "judged_from": list(paths)}


def _judge(result: dict) -> dict:
    """`result` with its front judged against the mixes on the plateau and, when every judged
    policy has it, on the whole reading (x 0.2..1.0, which sees a switch at x >= 0.8);
    the table and the judgements printed."""
    result["dominance"] = power_experiment.dominance(result, result["learned"])
    judged = list(result["learned"]) + power_experiment.mixes(result)
    whole = not power_experiment.lacking(result, judged, "whole")
    result["dominance_whole"] = (power_experiment.dominance(result, result["learned"], "whole")
                                 if whole else None)
    print(power_experiment.format_table(result))
    print(json.dumps(result["dominance"], indent=1))
    if whole:
        print("judged on the whole reading (savings over x 0.2..1.0):")
        print(json.dumps(result["dominance_whole"], indent=1))
    return result


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", help="training run directory (train/*.py --env openb)")
    parser.add_argument("--nodes", default="gpu", help="node file: 'gpu', 'all' or a path")
    parser.add_argument("--pods", default="default", help="pod file: a bundled name or a path")
    parser.add_argument("--preferences", default="0,0.4,0.55,0.7,0.85,1")
    parser.add_argument("--pwr-weights", default="",
                        help="PWR weights a of the network combined with PWR (learned+pwr@a)")
    parser.add_argument("--pwr-margins", default="",
                        help="margins M (nats) of PWR among the network's near-best nodes "
                             "(learned+pwr_within@M)")
    parser.add_argument("--pwr-switch", default=None, metavar="X/m",
                        help="with --pwr-margins: the margin is m once the arrived GPU demand "
                             "reaches X of the cluster's GPUs (learned+pwr_within[X/m]@M)")
    parser.add_argument("--fill-sockets", action="store_true",
                        help="with --pwr-margins: PWR's ties go to the node whose active "
                             "sockets the pod leaves the fewest idle cores "
                             "(learned+pwr_within+sockets@M)")
    parser.add_argument("--policies", default="fgd",
                        help="published and power policies replayed beside (fgd always)")
    parser.add_argument("--baselines", default=None, help="an earlier openb_power.py JSON")
    parser.add_argument("--seeds", type=int, default=10, help="number of seeds, from 42")
    parser.add_argument("--tune", type=float, default=1.3)
    parser.add_argument("--json", default=None)
    parser.add_argument("--front", default=None, help="PNG of the fronts of --fronts")
    parser.add_argument("--fronts", default=None,
                        help="finished JSONs, one per trace, comma-separated: their seed counts "
                             "printed (and drawn with --front)")
    parser.add_argument("--judge", default=None,
                        help="finished JSONs of one trace and one --run, comma-separated: their "
                             "learned policies judged together as one front (nothing replayed)")
    parser.add_argument("--reading", default="plateau", choices=sorted(READINGS),
                        help="the savings of --front's x axis: plateau (x 0.2..0.8, the "
                             "paper's) or whole (x 0.2..1.0)")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    for flag, path in (("--json", args.json), ("--front", args.front)):
        if path is not None:
            check_output_path(path, flag)
    if args.judge is not None:
        given = [flag for flag, value in (("--run", args.run), ("--baselines", args.baselines),
                                          ("--fronts", args.fronts), ("--front", args.front))
                 if value is not None]
        if given:
            raise ValueError(f"--judge replays and draws nothing: {', '.join(given)} not "
                             "allowed with it")
        result = _judge(_same_front([p for p in args.judge.split(",") if p.strip()]))
        if args.json is not None:
            atomic_write_text(args.json, json.dumps(result, indent=1))
        return result
    if args.fronts is not None:
        results = {}
        for path in [p for p in args.fronts.split(",") if p.strip()]:
            with open(path, encoding="utf-8") as f:
                r = json.load(f)
            trace = Path(r["trace"]["pods"]).stem.removeprefix(POD_PREFIX)    # as trace_name
            if trace in results:
                raise ValueError(f"--fronts: two JSONs of {trace} ({path}): allowed one per "
                                 "trace (--judge merges one trace's JSONs first)")
            results[trace] = r
        if not results:
            raise ValueError("--fronts: allowed one or more JSON paths, comma-separated; got none")
        print(power_experiment.seed_table(results, args.reading))
        if args.front is not None:
            learned = list(dict.fromkeys(p for r in results.values() for p in r["learned"]))
            atomic_write(args.front, lambda tmp: power_experiment.plot_front(
                results, learned, tmp, args.reading))
        return results
    if args.front is not None:
        raise ValueError("--front PNG draws the finished JSONs of --fronts, which is missing")
    if args.run is None:
        raise ValueError("--run DIR is needed (or --fronts to draw finished results, --judge "
                         "to judge them)")
    if not 1 <= args.seeds <= 4096:
        raise ValueError(f"--seeds {args.seeds}: must be in [1, 4096]")
    preferences, pwr_weights = _preferences(args.preferences), _pwr_weights(args.pwr_weights)
    pwr_margins, pwr_switch = _pwr_margins(args.pwr_margins), _pwr_switch(args.pwr_switch)
    for flag, given in (("--pwr-switch", pwr_switch is not None),
                        ("--fill-sockets", args.fill_sockets)):
        if given and not pwr_margins:
            raise ValueError(f"{flag} applies to --pwr-margins, which is empty")
    if not preferences and not pwr_weights and not pwr_margins:
        raise ValueError("--preferences, --pwr-weights and --pwr-margins are all empty: nothing "
                         "learned to measure")
    nodes = load_nodes(args.nodes)
    pods = load_pods(args.pods, nodes)
    names = list(dict.fromkeys(["fgd"] + [p.strip() for p in args.policies.split(",") if p.strip()]))
    chosen = {name: policy_by_name(name, nodes.models) for name in names}
    learned = learned_policies(args.run, preferences, nodes, pwr_weights, pwr_margins, pwr_switch,
                               args.fill_sockets)
    seeds = list(range(42, 42 + args.seeds))
    base = None if args.baselines is None else _baselines(args.baselines, pods, args.tune, seeds)
    result = power_experiment.measure(nodes, pods, {**chosen, **learned}, seeds, args.tune,
                                      progress=not args.no_progress)
    result["run"], result["learned"] = args.run, list(learned)
    if base is not None:
        result = _merge(result, base, args.baselines, args.run)
    result = _judge(result)
    if args.json is not None:
        atomic_write_text(args.json, json.dumps(result, indent=1))
    if "baselines_error" in result:
        raise ValueError(result["baselines_error"])
    return result


if __name__ == "__main__":
    try:
        main()
    except (ValueError, TraceError, FileNotFoundError) as err:
        sys.exit(f"error: {err}")
