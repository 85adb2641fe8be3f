"""Where a trained scheduler's remaining mistakes are, on held-out episodes.

    python benchmarks/mistakes.py runs/imitate runs/ppo --episodes 64 --json mistakes.json

Each run's greedy policy plays `--episodes` held-out episodes (the evaluation's scenarios:
`vte.EnvParams` of the run's cluster size with its fixed weights, seed `--seed`); every
decision is logged with the head request's archetype, whether the optimum (or the choice)
was to defer, the cost gap between the best and the second-best action, the node count and
whether the twin was stale. The printed breakdown gives, per group, the share of decisions,
the miss rate (choice != optimum) and the share of all regret.
"""

from __future__ import annotations

import argparse
import json

import jax
import jax.numpy as jnp
import numpy as np

import vte
from vte import catalogue as C
from vte import checkpoint as ckpt
from vte import registry
from vte import scoring
from vte.files import atomic_write_text, check_output_path

GAP_EDGES = (0.0, 0.01, 0.03, 0.1, 0.3, np.inf)   # cost gap, best to second best action


def rollout(policy, params: vte.EnvParams, key: jax.Array, episodes: int) -> dict:
    """(episodes, episode_len) arrays of what each greedy decision met."""

    def episode(k):
        obs, state = vte.reset(k, params)

        def body(carry, k_step):
            obs, state = carry
            action = policy(k_step, obs, params)
            cost, feasible = vte.node_costs(state, params)
            masked = jnp.where(feasible, cost, jnp.inf)
            best2 = jnp.sort(masked)[:2]
            gap = jnp.where(jnp.isfinite(best2[1]), best2[1] - best2[0], jnp.inf)
            head = scoring.head(state.queue)
            record = {"archetype": jnp.where(head.valid, head.archetype, -1),
                      "optimum": state.scores.optimum, "action": action, "gap": gap,
                      "stale": jnp.mean(state.twin.age > 0),
                      "feasible_nodes": jnp.sum(feasible[:-1])}
            obs, state, reward, _, _, info = vte.step_env(k_step, state, action, params)
            record["regret"] = info["regret"]
            return (obs, state), record

        _, log = jax.lax.scan(body, (obs, state), jax.random.split(k, params.episode_len))
        return log

    return jax.device_get(jax.jit(jax.vmap(episode))(jax.random.split(key, episodes)))


def breakdown(log: dict, n: int) -> dict:
    """Groups -> {share of decisions, miss rate, share of regret}."""
    miss = log["action"] != log["optimum"]
    regret = log["regret"]
    total_regret = max(float(regret.sum()), 1e-12)

    def group(mask):
        count = int(mask.sum())
        return {"decisions": count / miss.size,
                "miss_rate": float(miss[mask].mean()) if count else None,
                "regret_share": float(regret[mask].sum()) / total_regret}

    out = {"all": group(np.ones_like(miss))}
    for a, name in enumerate(C.ARCHETYPES):
        out[f"archetype={name}"] = group(log["archetype"] == a)
    out["no head request"] = group(log["archetype"] < 0)
    out["optimum defers"] = group(log["optimum"] == n)
    out["chose defer"] = group(log["action"] == n)
    for lo, hi in zip(GAP_EDGES[:-1], GAP_EDGES[1:]):
        out[f"gap in [{lo}, {hi})"] = group((log["gap"] >= lo) & (log["gap"] < hi))
    out["one feasible node or none"] = group(log["feasible_nodes"] <= 1)
    out["twin stale somewhere"] = group(log["stale"] > 0)
    return out


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", help="training run directories (synthetic clusters)")
    p.add_argument("--episodes", type=int, default=64)
    p.add_argument("--seed", type=int, default=12345)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if args.episodes < 1:
        p.error(f"--episodes={args.episodes} is invalid: allowed an integer >= 1")
    if args.json is not None:
        check_output_path(args.json, "--json")
    configs = {}
    for run in args.runs:
        try:
            configs[run] = ckpt.load_config(run)
        except (FileNotFoundError, ckpt.CheckpointError) as err:
            p.error(str(err))
        reg = registry.of_run(configs[run])
        if reg.optimum is None:
            p.error(f"{run!r} trained on {reg.id}, which has no known optimum; this analysis "
                    "of mistakes against the optimum needs one (--env synthetic)")
    results = {}
    for run, config in configs.items():
        env = config["env"]
        params = vte.EnvParams(num_nodes=env["num_nodes"], queue_len=env["queue_len"],
                               episode_len=env["episode_len"], weights=tuple(env["weights"]))
        log = rollout(vte.load_policy(run), params, jax.random.PRNGKey(args.seed), args.episodes)
        results[run] = breakdown(log, params.num_nodes)
        print(f"\n{run}: {args.episodes} episodes x {params.episode_len} decisions, "
              f"{params.num_nodes} nodes")
        print(f"{'group':34s}{'decisions':>11s}{'miss rate':>11s}{'regret share':>14s}")
        for name, g in results[run].items():
            rate = "-" if g["miss_rate"] is None else f"{g['miss_rate']:.3f}"
            print(f"{name:34s}{g['decisions']:>11.3f}{rate:>11s}{g['regret_share']:>14.3f}")
    if args.json is not None:
        atomic_write_text(args.json, json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main()
