"""Decisions per second of the OpenB environment (`vte.openb.env`), batched with vmap.

    python benchmarks/openb_env.py --nodes 64 256 1213 --num-envs 16 256 --steps 64

Random valid actions (uniform over the action mask), `jit(vmap(step))` inside a `lax.scan`
of `--steps` decisions; compile time and the median of `--repeats` timed runs are printed
and written as JSON (`--json`). Sub-clusters (`--nodes` below 1213) draw that many nodes
of the trace per workload, with the demand scaled (`make_params(subset=...)`).
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np

from vte.files import atomic_write_text, check_output_path
from vte.openb import env as oenv
from vte.openb.trace import load_nodes, load_pods


def rollout(params, num_envs: int, steps: int):
    def one(key):
        obs, state = oenv.reset(key, params)

        def body(carry, k):
            obs, state = carry
            logits = jnp.where(obs.action_mask, jax.random.gumbel(k, obs.action_mask.shape), -jnp.inf)
            action = jnp.argmax(logits).astype(jnp.int32)
            obs, state, reward, *_ = oenv.step(k, state, action, params)
            return (obs, state), reward
        _, rewards = jax.lax.scan(body, (obs, state), jax.random.split(key, steps))
        return rewards.sum()
    return jax.jit(lambda keys: jax.vmap(one)(keys))


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pods", default="default")
    p.add_argument("--nodes", type=int, nargs="+", default=[64, 256, 1213])
    p.add_argument("--num-envs", type=int, nargs="+", default=[16, 256])
    p.add_argument("--steps", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--workloads", type=int, default=8, help="workloads in the bank (seeds)")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    for name in ("steps", "repeats", "workloads"):
        if getattr(args, name) < 1:
            p.error(f"--{name} {getattr(args, name)}: must be >= 1")
    if any(n < 1 for n in args.num_envs + args.nodes):
        p.error("--nodes and --num-envs take integers >= 1")
    if args.json:
        check_output_path(args.json, "--json")
    nodes = load_nodes("gpu")
    pods = load_pods(args.pods, nodes)
    rows = []
    for n in args.nodes:
        params = oenv.make_params(nodes, pods, seeds=range(args.workloads),
                                  subset=None if n >= len(nodes) else n)
        for envs in args.num_envs:
            fn = rollout(params, envs, args.steps)
            keys = jax.random.split(jax.random.PRNGKey(0), envs)
            t0 = time.perf_counter()
            jax.block_until_ready(fn(keys))
            compile_s = time.perf_counter() - t0
            times = []
            for r in range(args.repeats):
                keys = jax.random.split(jax.random.PRNGKey(r + 1), envs)
                t0 = time.perf_counter()
                jax.block_until_ready(fn(keys))
                times.append(time.perf_counter() - t0)
            rate = envs * args.steps / float(np.median(times))
            row = {"nodes": params.num_nodes, "num_envs": envs, "steps": args.steps,
                   "decisions_per_s": round(rate, 1), "compile_and_first_run_s": round(compile_s, 2)}
            rows.append(row)
            print(f"{params.num_nodes:5d} nodes x {envs:5d} envs: {rate:12,.0f} decisions/s "
                  f"(compile + first run {compile_s:.1f} s)", flush=True)
    if args.json:
        atomic_write_text(args.json, json.dumps({"device": jax.devices()[0].device_kind,
                                                 "jax_version": jax.__version__, "rows": rows}, indent=1))
    return rows


if __name__ == "__main__":
    main()
