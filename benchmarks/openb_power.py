"""The PWR paper's power figures on the OpenB trace (CCGrid 2025): datacenter power against
arrived GPU demand, savings against FGD and GRAR at x = 1.0, beside the paper's readings.

    python benchmarks/openb_power.py --pods default --seeds 10 \
        --policies fgd,best_fit,pwr,pwr_fgd:200,pwr_fgd:100,pwr_fgd:50 \
        --json benchmarks/results/openb_power_default.json \
        --png benchmarks/results/openb_power_default.png

Policies: the six published names, "pwr" and "pwr_fgd:<a>" (a x PWR + (1000 - a) x FGD);
"fgd" is needed (the reference of the savings). Formulas: vte/openb/OPENB.md section 11.
"""

from __future__ import annotations

import argparse
import json
import sys

from vte.files import atomic_write, atomic_write_text, check_output_path
from vte.openb import power_experiment
from vte.openb.power import policy_by_name
from vte.openb.trace import TraceError, load_nodes, load_pods


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", default="gpu", help="node file: 'gpu', 'all' or a path")
    parser.add_argument("--pods", default="default", help="pod file: a bundled name or a path")
    parser.add_argument("--policies", default="fgd,best_fit,pwr,pwr_fgd:200,pwr_fgd:100,pwr_fgd:50")
    parser.add_argument("--seeds", type=int, default=10, help="number of seeds, from --first-seed")
    parser.add_argument("--first-seed", type=int, default=42)
    parser.add_argument("--tune", type=float, default=1.3)
    parser.add_argument("--chunk", type=int, default=2048, help="pods per compiled call")
    parser.add_argument("--json", default=None)
    parser.add_argument("--png", default=None)
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    if not 1 <= args.seeds <= 4096:
        raise ValueError(f"--seeds {args.seeds}: must be in [1, 4096]")
    if not 0 < args.tune <= 10:
        raise ValueError(f"--tune {args.tune}: must be in (0, 10]")
    names = [p.strip() for p in args.policies.split(",") if p.strip()]
    if len(set(names)) != len(names) or "fgd" not in names:
        raise ValueError(f"--policies {args.policies!r}: name each policy once, 'fgd' among them")
    for flag, path in (("--json", args.json), ("--png", args.png)):
        if path is not None:
            check_output_path(path, flag)
    nodes = load_nodes(args.nodes)
    pods = load_pods(args.pods, nodes)
    chosen = {name: policy_by_name(name, nodes.models) for name in names}
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    result = power_experiment.measure(nodes, pods, chosen, seeds, args.tune, chunk=args.chunk,
                           progress=not args.no_progress)
    print(power_experiment.format_table(result))
    if args.json is not None:
        atomic_write_text(args.json, json.dumps(result, indent=1))
    if args.png is not None:
        atomic_write(args.png, lambda tmp: power_experiment.plot(result, tmp))
    return result


if __name__ == "__main__":
    try:
        main()
    except (ValueError, TraceError) as err:
        sys.exit(f"error: {err}")
