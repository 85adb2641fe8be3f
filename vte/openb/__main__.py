"""Replay the OpenB trace under the FGD paper's policies and compare with the published figures.

    python -m vte.openb --pods default --policies all --seeds 10 --tune 1.3 \
        --json openb.json --png openb.png
    python -m vte.openb --policies fgd,best_fit,runs/openb_ppo     # a learned scheduler too

Seeds are consecutive from --first-seed (42, the first published seed); each policy is one
compiled program that runs all seeds at once. Bundled traces: --nodes gpu|all, --pods
default|gpuspec10|multigpu20; any file of the same format is accepted by path.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from vte.rng import SEED_LIMIT
from vte.files import atomic_write, atomic_write_text, check_output_path
from vte.openb.experiment import format_table, plot, run_grid
from vte.openb.policies import POLICIES
from vte.openb.trace import TraceError, load_nodes, load_pods


def _policies(text: str) -> list[str]:
    """Names of published policies and trained run directories (`train/*.py --env openb`)."""
    names = list(POLICIES) if text == "all" else [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in names if p not in POLICIES and not os.path.isdir(p)]
    if unknown or not names:
        raise ValueError(f"--policies {text!r}: unknown {unknown or 'empty list'}; "
                         f"give 'all' or a comma-separated subset of {list(POLICIES)} and run "
                         "directories of train/ppo.py or train/imitate.py --env openb")
    if len(set(names)) != len(names):
        raise ValueError(f"--policies {text!r} names a policy twice")
    return names


def _learned(run_dir: str, num_models: int):
    """The network a run directory trained, as a replay policy; ValueError when the run is
    not an OpenB one or was trained on a node file of other GPU models."""
    from vte import checkpoint as ckpt
    from vte import registry
    from vte.openb.network import as_policy
    from vte.openb.registration import REGISTRATION
    try:
        config = ckpt.load_config(run_dir)
    except FileNotFoundError as err:
        raise ValueError(str(err)) from None
    if registry.of_run(config) is not REGISTRATION:
        raise ValueError(f"--policies: {run_dir!r} trained on {registry.of_run(config).id}, "
                         "not on the OpenB trace (train with --env openb)")
    try:
        return as_policy(ckpt.network_from_config(config), ckpt.load_variables(run_dir),
                         num_models)
    except (ValueError, FileNotFoundError) as err:
        raise ValueError(f"--policies {run_dir!r}: {err}") from None


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m vte.openb", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", default="gpu", help="node file: 'gpu' (1213 GPU nodes, the "
                        "paper's), 'all' (adds 310 CPU-only nodes) or a path")
    parser.add_argument("--pods", default="default",
                        help="pod file: 'default', 'gpuspec10', 'multigpu20' or a path")
    parser.add_argument("--policies", default="all",
                        help=f"'all' or a comma-separated subset of {list(POLICIES)}, where a "
                             "trained run directory (train/ppo.py --env openb --out DIR) is one more")
    parser.add_argument("--seeds", type=int, default=10, help="number of seeds (default 10)")
    parser.add_argument("--first-seed", type=int, default=42, help="first seed (published: 42..51)")
    parser.add_argument("--tune", type=float, default=1.3,
                        help="GPU demand to submit, as a multiple of the cluster's GPUs (default 1.3)")
    parser.add_argument("--chunk", type=int, default=2048, help="pods per compiled call (progress granularity)")
    parser.add_argument("--json", default=None, help="write the results here")
    parser.add_argument("--png", default=None, help="draw allocation and fragmentation curves here")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)

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
    for flag, path in (("--json", args.json), ("--png", args.png)):
        if path is not None:
            check_output_path(path, flag)
    nodes = load_nodes(args.nodes)
    pods = load_pods(args.pods, nodes)

    chosen = {name: (POLICIES[name] if name in POLICIES else _learned(name, max(len(nodes.models), 1)))
              for name in policies}
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    result = run_grid(nodes, pods, chosen, seeds, args.tune, chunk=args.chunk,
                      progress=not args.no_progress)
    print(format_table(result))
    if args.json is not None:
        atomic_write_text(args.json, json.dumps(result, indent=1))
    if args.png is not None:
        atomic_write(args.png, lambda tmp: plot(result, tmp))
    return result


if __name__ == "__main__":
    try:
        main()
    except (ValueError, TraceError) as err:
        sys.exit(f"error: {err}")
