"""What the Gymnasium adapter costs: env steps/s of `gym.make_vec("vte/Cluster-v0")` with
random valid actions, beside `vte.step` batched directly (the same environments, one
jitted call per step from Python, and a 64-step `lax.scan`).

    python benchmarks/adapters.py --num-envs 64 --num-nodes 16 --steps 512 \
        --json benchmarks/results/adapters.json

The ratio direct / adapter is the adapter's overhead: NumPy conversion of observations
and info, the host round trip of every step, and Gymnasium's bookkeeping.
"""

from __future__ import annotations

import argparse
import json
import time

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np

import vte
import vte.adapters.gymnasium  # noqa: F401
from vte.files import atomic_write_text, check_output_path


def random_valid(rng: np.random.Generator, mask: np.ndarray) -> np.ndarray:
    """One uniformly random valid action per row of an (E, A) mask."""
    u = rng.random(mask.shape) * mask
    return np.argmax(u, -1)


def adapter_rate(params, num_envs: int, steps: int) -> float:
    envs = gym.make_vec("vte/Cluster-v0", num_envs=num_envs, params=params,
                        autoreset_mode="SameStep")
    rng = np.random.default_rng(0)
    obs, info = envs.reset(seed=0)
    for _ in range(8):                                   # compile and warm up
        obs, *_, info = envs.step(random_valid(rng, info["action_mask"]))
    t0 = time.perf_counter()
    for _ in range(steps):
        obs, *_, info = envs.step(random_valid(rng, info["action_mask"]))
    dt = time.perf_counter() - t0
    envs.close()
    return num_envs * steps / dt


def direct_rates(params, num_envs: int, steps: int) -> tuple[float, float]:
    """(per-call, scanned) env steps/s of jit(vmap(vte.step)) with random valid actions."""
    def act(key, obs):
        return jax.random.categorical(key, jnp.where(obs.action_mask, 0.0, -jnp.inf)).astype(jnp.int32)

    @jax.jit
    def one(key, obs, state):
        ka, ks = jax.random.split(key)
        actions = jax.vmap(act)(jax.random.split(ka, num_envs), obs)
        obs, state, *_ = jax.vmap(vte.step, (0, 0, 0, None))(
            jax.random.split(ks, num_envs), state, actions, params)
        return obs, state

    @jax.jit
    def scanned(key, obs, state):
        def body(carry, k):
            return one(k, *carry), None
        return jax.lax.scan(body, (obs, state), jax.random.split(key, 64))[0]

    obs, state = jax.jit(jax.vmap(vte.reset, (0, None)))(
        jax.random.split(jax.random.PRNGKey(0), num_envs), params)
    key = jax.random.PRNGKey(1)
    jax.block_until_ready(one(key, obs, state))
    t0 = time.perf_counter()
    for i in range(steps):
        obs, state = one(jax.random.fold_in(key, i), obs, state)
    jax.block_until_ready(state)
    per_call = num_envs * steps / (time.perf_counter() - t0)
    jax.block_until_ready(scanned(key, obs, state))
    calls = max(1, steps // 64)
    t0 = time.perf_counter()
    for i in range(calls):
        obs, state = scanned(jax.random.fold_in(key, i), obs, state)
    jax.block_until_ready(state)
    return per_call, num_envs * 64 * calls / (time.perf_counter() - t0)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-envs", type=int, default=64)
    p.add_argument("--num-nodes", type=int, default=16)
    p.add_argument("--steps", type=int, default=512)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    for name in ("num_envs", "num_nodes", "steps"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')}={getattr(args, name)} is invalid: allowed an integer >= 1")
    if args.json:
        check_output_path(args.json, "--json")
    params = vte.EnvParams(num_nodes=args.num_nodes)
    gym_rate = adapter_rate(params, args.num_envs, args.steps)
    per_call, scanned = direct_rates(params, args.num_envs, args.steps)
    out = {"num_envs": args.num_envs, "num_nodes": args.num_nodes, "steps": args.steps,
           "device": jax.devices()[0].device_kind, "jax_version": jax.__version__,
           "gymnasium_make_vec": round(gym_rate, 1), "vte_step_per_call": round(per_call, 1),
           "vte_step_scanned": round(scanned, 1)}
    print(f"{args.num_envs} envs x {args.num_nodes} nodes, random valid actions, env steps/s:")
    print(f"  gym.make_vec('vte/Cluster-v0')        {gym_rate:12,.0f}")
    print(f"  jit(vmap(vte.step)), one call a step   {per_call:12,.0f}  ({per_call / gym_rate:.1f}x the adapter)")
    print(f"  the same in a 64-step lax.scan         {scanned:12,.0f}  ({scanned / gym_rate:.1f}x the adapter)")
    if args.json:
        atomic_write_text(args.json, json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
