"""How close the synthetic RL loop runs to a minimal kernel of the same work, in one process.

    python benchmarks/kernel.py                     # 4096 environments x 64 nodes
    python benchmarks/kernel.py --num-envs 1024 --num-nodes 16 --rounds 3 --json out.json

Four batched rollouts of `--steps` decisions each (a `lax.scan` over `num_envs`
environments), compiled ahead of time, then timed in alternating rounds so that the load of
a shared machine falls on all of them alike; each figure is the median over `--rounds`:

- **kernel**: the least a scheduling environment must do per decision. Each environment
  holds the free capacity of its nodes (N, 4 resources) and one request (4,). A decision
  scores every node (best fit: the capacity left after placing, summed over the resources
  relative to each node's capacity), takes the feasible node of least score (or defers
  when none fits), subtracts the request from that node, frees 1 % of every node's
  capacity (so the cluster neither fills nor empties) and draws a new request from a
  hash of the step's random word. No observation, no rewards, no twin.
- **environment**: `vte.step` under vmap with a uniformly random allowed action, the
  rollout of `throughput.py` (`make_rollout`): only the action mask of the observation is
  read, so XLA drops the rest of it.
- **observed**: the same random actions, the whole observation read (summed into a
  condition that never changes the action): the environment and its observation.
- **RL loop**: the same rollout with `vte.step`'s whole observation read by a linear
  policy (the node features times a fixed vector, plus the request's, as logits) and the
  action sampled from a categorical over the action mask (`vte.rng.categorical`, one key
  per environment): everything an agent's loop does except its network.
- **RL loop, JAX's sampler**: the same with `jax.random.categorical` (a Gumbel-max: a
  threefry number and two logarithms per action, where `vte.rng.categorical` draws one
  uniform per decision from the hash the kernel and `vte.step` draw from).

Prints decisions/s of each, the ratios loop / kernel (with either sampler) and environment
/ kernel, and the loop's microseconds per decision split into the step (environment), the
observation (observed - environment) and the policy (RL loop - observed); `--json` writes
them with the machine and the per-round seconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import vte  # noqa: E402
from benchmarks.throughput import (ROLLOUT_UNROLL, machine, make_rollout,  # noqa: E402
                                   random_valid_action)

RESOURCES = 4
RELEASE = 0.01     # share of each node's capacity freed per decision in the kernel


def kernel_init(key: jax.Array, num_envs: int, num_nodes: int):
    """(capacity (N, 4), free (E, N, 4), request (E, 4)): capacities 1..4 per resource,
    half of it free, requests up to a quarter of the smallest capacity."""
    k1, k2, k3 = jax.random.split(key, 3)
    capacity = jax.random.randint(k1, (num_nodes, RESOURCES), 1, 5).astype(jnp.float32)
    free = capacity * jax.random.uniform(k2, (num_envs, num_nodes, RESOURCES), maxval=0.5)
    request = jax.random.uniform(k3, (num_envs, RESOURCES), maxval=0.25)
    return capacity, free, request


def kernel_decision(capacity, free, request, word):
    """One environment's decision. free (N, 4), request (4,), word () uint32 ->
    (free, next request, chosen node or N = defer)."""
    n = free.shape[0]
    left = free - request
    feasible = jnp.all(left >= 0, axis=-1)
    score = jnp.where(feasible, jnp.sum(left / capacity, axis=-1), jnp.inf)
    node = jnp.where(jnp.any(feasible), jnp.argmin(score), n)
    placed = jax.nn.one_hot(node, n, dtype=free.dtype)[:, None] * request
    free = jnp.minimum(free - placed + RELEASE * capacity, capacity)
    bits = vte.rng.hash32(word + jnp.arange(RESOURCES, dtype=jnp.uint32))
    return free, 0.25 * vte.rng.to_uniform(bits), node


def make_kernel(num_envs: int, steps: int):
    """jitted (capacity, free, request, key) -> (free, request, checksum) over `steps`."""
    decide = jax.vmap(kernel_decision, in_axes=(None, 0, 0, 0))

    def body(carry, key):
        capacity, free, request = carry
        words = vte.rng.key_words(key, 0, (num_envs,))
        free, request, node = decide(capacity, free, request, words)
        return (capacity, free, request), jnp.sum(node)

    def rollout(capacity, free, request, key):
        (_, free, request), nodes = jax.lax.scan(body, (capacity, free, request),
                                                 jax.random.split(key, steps),
                                                 unroll=ROLLOUT_UNROLL)
        return free, request, jnp.sum(nodes)

    return jax.jit(rollout, donate_argnums=(1, 2))


def reading_policy(key, obs, params):
    """A uniformly random allowed action (`throughput.random_valid_action`) that also reads
    the whole observation (a sum XLA cannot drop, which never changes the action): the
    observation's cost without a policy's."""
    total = (jnp.sum(obs.nodes) + jnp.sum(obs.request) + jnp.sum(obs.queue)
             + jnp.sum(obs.queue_mask) + jnp.sum(obs.weights) + obs.progress)
    return random_valid_action(key, obs.action_mask) + (total > 1e30).astype(jnp.int32)


def linear_policy(params: vte.EnvParams, sample=vte.rng.categorical):
    """policy(key, obs, params) -> action: logits from the whole observation by fixed
    vectors (node features and the request's), sampled over the action mask by
    `sample(key, masked logits)` (`vte.rng.categorical` or `jax.random.categorical`)."""
    obs, _ = vte.reset(jax.random.PRNGKey(0), params)
    kn, kr = jax.random.split(jax.random.PRNGKey(1))
    w_node = jax.random.normal(kn, obs.nodes.shape[-1:])
    w_req = jax.random.normal(kr, obs.request.shape + (obs.nodes.shape[0] + 1,))

    def policy(key, obs, params):
        node_logits = obs.nodes @ w_node
        logits = jnp.concatenate([node_logits, jnp.zeros((1,))]) + obs.request @ w_req
        logits = logits + jnp.sum(obs.queue) + jnp.sum(obs.weights) + obs.progress
        return sample(key, jnp.where(obs.action_mask, logits, -jnp.inf)).astype(jnp.int32)

    return policy


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--num-envs", type=int, default=4096)
    p.add_argument("--num-nodes", type=int, default=64)
    p.add_argument("--steps", type=int, default=32, help="decisions per timed rollout")
    p.add_argument("--rounds", type=int, default=7, help="alternating timed rounds")
    p.add_argument("--json", default=None, help="write the figures here")
    args = p.parse_args(argv)
    for name in ("num_envs", "num_nodes", "steps", "rounds"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    e, n, steps = args.num_envs, args.num_nodes, args.steps
    params = vte.EnvParams(num_nodes=n)
    obs, state = jax.jit(jax.vmap(vte.reset, in_axes=(0, None)))(
        jax.random.split(jax.random.PRNGKey(0), e), params)
    capacity, free, request = kernel_init(jax.random.PRNGKey(0), e, n)

    def copy(tree):
        return jax.tree_util.tree_map(jnp.copy, tree)

    programs = {
        "kernel": (make_kernel(e, steps), (capacity, free, request)),
        "environment": (make_rollout(params, e, steps), (state, obs.action_mask)),
        "observed": (make_rollout(params, e, steps, reading_policy), (state, obs)),
        "rl_loop": (make_rollout(params, e, steps, linear_policy(params)), (state, obs)),
        "rl_loop_jax": (make_rollout(params, e, steps,
                                     linear_policy(params, jax.random.categorical)), (state, obs)),
    }
    carries, compiled, compile_s = {}, {}, {}
    for name, (fn, carry) in programs.items():
        carry = copy(carry)
        t0 = time.perf_counter()
        compiled[name] = fn.lower(*carry, jax.random.PRNGKey(1)).compile()
        compile_s[name] = time.perf_counter() - t0
        carries[name] = carry

    def run(name, key):
        carry = carries[name]
        if name == "kernel":
            free_, request_, check = compiled[name](*carry, key)
            carries[name] = (carry[0], free_, request_)
        else:
            state_, obs_, check = compiled[name](*carry, key)
            carries[name] = (state_, obs_)
        check.block_until_ready()
        if not np.isfinite(float(check)):
            raise RuntimeError(f"{name}: non-finite checksum {float(check)}")

    for name in programs:   # warm-up
        run(name, jax.random.PRNGKey(1))
    seconds = {name: [] for name in programs}
    for r in range(args.rounds):
        for name in programs:
            t0 = time.perf_counter()
            run(name, jax.random.PRNGKey(2 + r))
            seconds[name].append(time.perf_counter() - t0)
    rate = {name: e * steps / statistics.median(s) for name, s in seconds.items()}
    result = {
        "num_envs": e, "num_nodes": n, "steps": steps, "rounds": args.rounds,
        "decisions_per_s": rate, "compile_s": compile_s, "round_s": seconds,
        "loop_over_kernel": rate["rl_loop"] / rate["kernel"],
        "loop_jax_sampler_over_kernel": rate["rl_loop_jax"] / rate["kernel"],
        "environment_over_kernel": rate["environment"] / rate["kernel"],
        "machine": machine(),
    }
    for name in programs:
        print(f"{name:12s} {rate[name]:>12,.0f} decisions/s   (compiled in {compile_s[name]:.1f} s)")
    print(f"RL loop / kernel     {result['loop_over_kernel']:.3f}   (JAX's sampler: "
          f"{result['loop_jax_sampler_over_kernel']:.3f})")
    print(f"environment / kernel {result['environment_over_kernel']:.3f}")
    # Where the loop's time goes, per decision: the step, the observation, the policy.
    per = {name: 1e6 / rate[name] for name in programs}
    shares = {"step": per["environment"], "observation": per["observed"] - per["environment"],
              "policy": per["rl_loop"] - per["observed"],
              "policy, JAX's sampler": per["rl_loop_jax"] - per["observed"]}
    result["loop_us_per_decision"] = shares
    print("RL loop per decision: " + ", ".join(f"{k} {v:.2f} us" for k, v in shares.items()))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
