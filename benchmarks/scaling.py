"""Scaling over devices: decisions/s of sharded environments on 1, 2, 4 ... devices.

    python benchmarks/scaling.py                      # CPU: forces 4 host devices
    python benchmarks/scaling.py --devices 1 2 4 8    # GPUs: the real devices

On a CPU-only machine each device count runs in a subprocess with
`--xla_force_host_platform_device_count` (it must be set before jax is imported); the
forced devices share the same cores, so on CPU this measures the overhead and the
parallel efficiency of the sharded program, not extra hardware. Writes JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import json, os, statistics, sys, time
import jax, jax.numpy as jnp
import vte
from vte import distributed as dist
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(sys.argv[1])), ""))
from throughput import random_valid_action
n_dev, num_envs, num_nodes, steps, repeats = map(int, sys.argv[2:7])
params = vte.EnvParams(num_nodes=num_nodes)
mesh = dist.make_mesh(n_dev)
obs, state = dist.reset(jax.random.PRNGKey(0), params, num_envs, mesh)
spec = jax.sharding.PartitionSpec(dist.AXIS)

def body(carry, key):
    state, mask = carry
    k_a, k_s = jax.random.split(key)
    actions = jax.vmap(random_valid_action)(jax.random.split(k_a, mask.shape[0]), mask)
    obs, state, reward, *_ = jax.vmap(vte.step, in_axes=(0, 0, 0, None))(
        jax.random.split(k_s, mask.shape[0]), state, actions, params)
    return (state, obs.action_mask), jnp.sum(reward)

def local_rollout(state, mask, key):
    # Each device scans its own environments; keys differ per device.
    key = jax.random.fold_in(key, jax.lax.axis_index(dist.AXIS))
    (state, mask), r = jax.lax.scan(body, (state, mask), jax.random.split(key, steps))
    return state, mask, jnp.sum(r)[None]

rollout = jax.jit(jax.shard_map(local_rollout, mesh=mesh, in_specs=(spec, spec, None),
                                out_specs=(spec, spec, spec), check_vma=False),
                  donate_argnums=(0, 1))
mask = obs.action_mask
t0 = time.perf_counter()
state, mask, r = rollout(state, mask, jax.random.PRNGKey(1)); r.block_until_ready()
warm = time.perf_counter() - t0
times = []
for i in range(repeats):
    t0 = time.perf_counter()
    state, mask, r = rollout(state, mask, jax.random.PRNGKey(2 + i)); r.block_until_ready()
    times.append(time.perf_counter() - t0)
print(json.dumps({"devices": n_dev, "num_envs": num_envs, "num_nodes": num_nodes,
                  "steps": steps, "decisions_per_s": num_envs * steps / statistics.median(times),
                  "warmup_s_incl_compile": warm, "repeat_s": times,
                  "platform": jax.default_backend(), "device": jax.devices()[0].device_kind}))
"""


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--num-envs", type=int, default=4096)
    p.add_argument("--num-nodes", type=int, default=64)
    p.add_argument("--steps", type=int, default=64)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--force-cpu-devices", type=int, default=None,
                   help="host devices to force (default: max(--devices) when on CPU)")
    p.add_argument("--out", default="benchmarks/results/scaling.json")
    args = p.parse_args(argv)
    for d in args.devices:
        if d < 1 or args.num_envs % d:
            p.error(f"--devices {d} is invalid: allowed positive divisors of --num-envs "
                    f"{args.num_envs}")
    env = dict(os.environ)
    import jax  # noqa: E402  (only to learn the backend; children set their own flags)
    if jax.default_backend() == "cpu":
        forced = args.force_cpu_devices or max(args.devices)
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") +
                            f" --xla_force_host_platform_device_count={forced}").strip()
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "throughput.py")
    rows = []
    print(f"{'devices':>8} {'envs':>7} {'nodes':>6} {'decisions/s':>14} {'vs 1 device':>12}")
    for d in args.devices:
        out = subprocess.run([sys.executable, "-c", CHILD, here, str(d), str(args.num_envs),
                              str(args.num_nodes), str(args.steps), str(args.repeats)],
                             capture_output=True, text=True, env=env)
        if out.returncode:
            sys.exit(f"devices={d} failed:\n{out.stderr}")
        row = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(row)
        base = rows[0]["decisions_per_s"]
        print(f"{d:>8} {args.num_envs:>7} {args.num_nodes:>6} {row['decisions_per_s']:>14,.0f} "
              f"{row['decisions_per_s'] / base:>11.2f}x", flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"argv": sys.argv[1:] if argv is None else list(argv), "rows": rows}, f,
                  indent=1)
    print(f"wrote {args.out}")
    return rows


if __name__ == "__main__":
    main()
