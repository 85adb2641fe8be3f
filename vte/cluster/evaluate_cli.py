"""Cluster-v0's `python -m vte.evaluate`: every heuristic against the optimum on held-out
scenarios.

    python -m vte.evaluate --episodes 64 --seed 12345 --json evaluation.json \
        --png evaluation.png [--set num_nodes=16 --set episode_len=64] [--policies a,b]

Prints the comparison table (Markdown), writes it as JSON and draws a bar chart of the
main metrics. Parameters not set keep the defaults of `vte.EnvParams`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import jax
import numpy as np

from vte import compilation_cache
from vte.cluster.evaluate import COLUMNS, OPTIMAL, evaluate, table
from vte.rng import SEED_LIMIT
from vte.files import atomic_write, atomic_write_text, check_output_path
from vte.cluster.heuristics import ALL
from vte.cluster.params import EnvParams, parse_assignments

# Metrics drawn in the bar chart.
PLOTTED = ("match_rate", "mean_regret", "cost_ratio", "energy", "mean_completion_time",
           "jobs_lost")


def _params(assignments: list[str]) -> EnvParams:
    return EnvParams(**parse_assignments(assignments))


def _policies(names: str | None) -> dict:
    allowed = [OPTIMAL, *ALL]
    if names is None:
        return {name: name for name in allowed}
    chosen = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in allowed]
    if unknown or not chosen:
        raise ValueError(f"--policies {names!r} is invalid: allowed a comma-separated list "
                         f"of {allowed}")
    return {name: name for name in chosen}


def _jsonable(params: EnvParams) -> dict:
    return {name: np.asarray(getattr(params, name)).tolist()
            for name in EnvParams.__dataclass_fields__}


def plot(results: dict, path: str, title: str) -> None:
    """Bar chart of the main metrics, one panel per metric, one bar per policy."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    headers = {m: h for m, h, _ in COLUMNS}
    fig, axes = plt.subplots(2, 3, figsize=(15, 8), constrained_layout=True)
    for ax, metric in zip(axes.flat, PLOTTED):
        values = [results[n][metric] for n in names]
        colors = ["tab:green" if n == OPTIMAL else "tab:blue" for n in names]
        ax.bar(range(len(names)), values, color=colors)
        ax.set_xticks(range(len(names)), names, rotation=60, ha="right", fontsize=8)
        ax.set_title(headers[metric])
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(title)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m vte.evaluate", description=__doc__ + "\n--env openb evaluates the six published policies and trained runs on\nthe OpenB trace (the arguments of python -m vte.openb).",
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default=None, help="the environment (vte.registered(); default "
                        "synthetic); --env openb evaluates the six published policies and "
                        "trained runs on the OpenB trace (the arguments of python -m vte.openb)")
    parser.add_argument("--episodes", type=int, default=64, help="episodes per policy")
    parser.add_argument("--seed", type=int, default=12345,
                        help="seed of the held-out scenarios (keep it apart from training)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="an EnvParams field, e.g. --set num_nodes=16 (repeatable)")
    parser.add_argument("--policies", default=None,
                        help=f"comma-separated subset of {[OPTIMAL, *ALL]} (default: all)")
    parser.add_argument("--json", default="evaluation.json", help="where to write the JSON")
    parser.add_argument("--png", default="evaluation.png",
                        help="where to draw the bar chart ('' for none)")
    compilation_cache.add_flag(parser, "the next evaluation of the same shapes")
    args = parser.parse_args(argv)
    compilation_cache.use(getattr(args, "compilation_cache", None))

    params = _params(args.set)
    policies = _policies(args.policies)
    if not 0 <= args.seed < SEED_LIMIT:
        raise ValueError(f"--seed {args.seed} is invalid: allowed an integer in [0, 2**32)")
    if args.episodes < 1:
        raise ValueError(f"--episodes {args.episodes} is invalid: allowed an integer >= 1")
    check_output_path(args.json, "--json")          # before the work, not after it
    if args.png:
        check_output_path(args.png, "--png")
    start = time.perf_counter()
    results = evaluate(policies, params, jax.random.PRNGKey(args.seed), args.episodes)
    seconds = time.perf_counter() - start

    print(table(results))
    print(f"\n{args.episodes} episodes of {params.episode_len} decisions per policy, "
          f"{params.num_nodes} nodes, seed {args.seed}; {seconds:.1f} s wall "
          f"(compilation included)")
    atomic_write_text(args.json, json.dumps({"seed": args.seed, "num_episodes": args.episodes,
                                             "params": _jsonable(params), "wall_seconds": seconds,
                                             "results": results}, indent=2))
    if args.png:
        atomic_write(args.png, lambda tmp: plot(results, tmp, f"{args.episodes} episodes, "
                                                f"{params.num_nodes} nodes, seed {args.seed}"))
    return results


if __name__ == "__main__":
    try:
        main()
    except ValueError as err:
        sys.exit(f"error: {err}")
