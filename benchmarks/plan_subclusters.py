"""Where the networks and the planner stand on the sub-clusters the network trains on.

    python benchmarks/plan_subclusters.py                 # 16 episodes of 64-node sub-clusters
    python benchmarks/plan_subclusters.py --runs zoo:openb-evidence \
        --horizons 8,32 --json out.json

Imitation of the planner (`train/imitate.py --env openb --teacher plan_fgd`) learns on
random 64-node sub-clusters of the training workloads (seeds 10_000..), while the figures
that count are on the full cluster. This script replays the first episode of `--episodes`
such sub-clusters under FGD, the planner over FGD at each of `--horizons` (4 candidates x 8
futures, `vte.openb.lookahead`) and the network of each `--runs` directory, the same
episodes for all, and reports each policy's GPU allocation at the episode's end (% of the
sub-cluster's GPUs), its difference from FGD's per episode, and the failed pods: how much
room the teacher leaves above the network where the network learns.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import vte  # noqa: E402
from vte.openb import env as oenv  # noqa: E402
from vte.openb.lookahead import planner  # noqa: E402
from vte.openb.policies import POLICIES  # noqa: E402
from vte.files import atomic_write_text, check_output_path  # noqa: E402
from vte.openb.registration import TRAIN_SEED0, learned_policy  # noqa: E402


def first_episodes(policy, env, params, episodes: int, seed: int = 0):
    """(episodes, 2) float: GPU allocation (%) and failed pods at the end of each
    environment's first episode under `policy`, and (episodes,) bool: whether it ended.
    Each environment takes `params.max_steps_in_episode` decisions, the bank's longest
    workload, so every first episode ends (an episode ends with its workload's last pod)."""
    act = oenv.policy_action(policy)

    def one(key):
        _, state = env.reset(key, params)

        def body(carry, k):
            state, got, ended = carry
            _, state, _, term, trunc, info = env.step(k, state, act(k, state, params), params)
            done = (term | trunc) & ~ended
            end = jnp.stack([info["alloc_percent"], info["failed_pods"].astype(jnp.float32)])
            return (state, jnp.where(done, end, got), ended | done), None

        (_, got, ended), _ = jax.lax.scan(body, (state, jnp.zeros(2), jnp.bool_(False)),
                                          jax.random.split(jax.random.fold_in(key, 1),
                                                           params.max_steps_in_episode))
        return got, ended
    keys = jax.random.split(jax.random.key(seed), episodes)
    got, ended = jax.jit(jax.vmap(one))(keys)
    return np.asarray(got), np.asarray(ended)


def compare(pods: str = "default", num_nodes: int = 64, episodes: int = 16,
            horizons: tuple[int, ...] = (8, 32), runs: tuple[str, ...] = (), seed: int = 0,
            nodes: str | None = None) -> dict:
    """The figures `main` prints, per policy: first-episode allocation and failed pods, and
    the allocation's difference from FGD's (mean, standard error, episodes better)."""
    env, params = vte.make("OpenB-v0", pods=pods, subset=num_nodes,
                           seeds=range(TRAIN_SEED0, TRAIN_SEED0 + episodes),
                           **({"nodes": nodes} if nodes is not None else {}))
    policies = {"fgd": POLICIES["fgd"]}
    policies.update({f"plan:fgd@{h}": planner(POLICIES["fgd"], horizon=h) for h in horizons})
    policies.update({run: learned_policy(run, params.num_models) for run in runs})
    out = {"pods": pods, "num_nodes": num_nodes, "episodes": episodes,
           "steps": params.max_steps_in_episode,
           "policies": {}}
    for name, policy in policies.items():
        t0 = time.perf_counter()
        got, ended = first_episodes(policy, env, params, episodes, seed)
        if not ended.all():      # every workload ends within the bank's longest
            raise RuntimeError(f"{name}: {int((~ended).sum())} of {episodes} first episodes "
                               f"did not end within {params.max_steps_in_episode} decisions")
        out["policies"][name] = {"alloc_end": got[:, 0].tolist(), "failed": got[:, 1].tolist(),
                                 "seconds": time.perf_counter() - t0}
    fgd = np.asarray(out["policies"]["fgd"]["alloc_end"])
    for name, row in out["policies"].items():
        diff = np.asarray(row["alloc_end"]) - fgd
        row.update(mean=float(np.mean(row["alloc_end"])), minus_fgd=float(diff.mean()),
                   minus_fgd_se=float(diff.std(ddof=1) / np.sqrt(len(diff))) if len(diff) > 1
                   else 0.0, better=int((diff > 0).sum()), failed_mean=float(np.mean(row["failed"])))
    return out


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pods", default="default", help="a bundled pod file (default: default)")
    p.add_argument("--nodes", default=None, help="a node file (default: the GPU nodes)")
    p.add_argument("--num-nodes", type=int, default=64, help="nodes per sub-cluster")
    p.add_argument("--episodes", type=int, default=16)
    p.add_argument("--horizons", default="8,32", help="the planner's horizons (pods), comma-"
                   "separated; empty: no planner")
    p.add_argument("--runs", default="", help="OpenB run directories or zoo:NAME, "
                   "comma-separated")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="write the figures here")
    args = p.parse_args(argv)
    for name in ("num_nodes", "episodes"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    try:
        horizons = tuple(int(h) for h in args.horizons.split(",") if h.strip())
    except ValueError:
        p.error(f"--horizons must be integers separated by commas, got {args.horizons!r}")
    if any(h < 1 for h in horizons):
        p.error(f"--horizons must be at least 1, got {args.horizons!r}")
    runs = tuple(r for r in args.runs.split(",") if r.strip())
    if args.json:
        check_output_path(args.json, "--json")           # before any work
    result = compare(args.pods, args.num_nodes, args.episodes, horizons, runs,
                     args.seed, args.nodes)
    print(f"{args.episodes} first episodes of {args.num_nodes}-node sub-clusters of {args.pods}:")
    for name, row in result["policies"].items():
        print(f"  {name:44s} {row['mean']:6.2f} %   - FGD {row['minus_fgd']:+.2f} ± "
              f"{row['minus_fgd_se']:.2f} (better on {row['better']})   failed "
              f"{row['failed_mean']:.1f}   {row['seconds']:.0f} s")
    if args.json:
        atomic_write_text(args.json, json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
