"""Scaling over devices: decisions/s of sharded environments and env steps/s of PPO
training (`train/ppo.py --devices N`) on 1, 2, 4 ... devices.

    python benchmarks/scaling.py                      # CPU: forces 8 host devices
    python benchmarks/scaling.py --devices 1 2 4 8    # GPUs: the real devices

On a CPU-only machine each device count N runs in a subprocess with
`--xla_force_host_platform_device_count=N` (it must be set before jax is imported), and
1 device in a plain process, as a user runs it (forcing several host devices makes a
program on one of them markedly slower, so a 1-device run inside an 8-device process is
not the baseline). The forced devices share the same cores, so on CPU this measures the
sharded program on the same hardware: its overhead, how well it keeps the cores busy,
and (with more devices than cores) the gain from each device's share of the batch
fitting the cache.

The device counts are measured in `--rounds` alternating rounds (1, 2, 4, 8, 1, 2, ...),
so that a machine whose speed drifts (a shared virtual machine) affects them alike;
each figure is the median of all timed repeats of its rounds, after a warm-up per
process (compilation is not timed). Writes JSON, with the per-round medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import json, os, statistics, sys
import jax, jax.numpy as jnp
import vte
from vte import distributed as dist
from benchmarks.throughput import ROLLOUT_UNROLL, random_valid_action, time_rollout
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
    (state, mask), r = jax.lax.scan(body, (state, mask), jax.random.split(key, steps),
                                    unroll=ROLLOUT_UNROLL)
    return state, mask, jnp.sum(r)[None]

rollout = jax.jit(jax.shard_map(local_rollout, mesh=mesh, in_specs=(spec, spec, None),
                                out_specs=(spec, spec, spec), check_vma=False),
                  donate_argnums=(0, 1))
state, mask, timing = time_rollout(rollout, state, obs.action_mask, repeats)
print(json.dumps({"devices": n_dev, "num_envs": num_envs, "num_nodes": num_nodes,
                  "steps": steps,
                  "decisions_per_s": num_envs * steps / statistics.median(timing.repeat_s),
                  **timing.row(),
                  "platform": jax.default_backend(), "device": jax.devices()[0].device_kind}))
"""

# PPO training as the script runs it: one compiled update per chunk (--log-every 1); the
# first update is the warm-up, the others are timed (env steps/s of metrics.jsonl).
TRAIN_CHILD = r"""
import json, os, sys, time
import jax
from vte.train import ppo
n_dev, num_envs, num_nodes, num_steps, updates = map(int, sys.argv[2:7])
out = sys.argv[7]
t0 = time.perf_counter()
ppo.main(["--devices", str(n_dev), "--num-envs", str(num_envs), "--num-nodes", str(num_nodes),
          "--num-steps", str(num_steps), "--total-timesteps", str(num_envs * num_steps * updates),
          "--log-every", "1", "--checkpoint-every", str(updates), "--eval-episodes", "0",
          "--out", out])
wall = time.perf_counter() - t0
with open(os.path.join(out, "metrics.jsonl")) as f:
    rows = [json.loads(line) for line in f]
print(json.dumps({"devices": n_dev, "num_envs": num_envs, "num_nodes": num_nodes,
                  "num_steps": num_steps, "sps": [r["sps"] for r in rows], "wall_s": wall,
                  "platform": jax.default_backend(), "device": jax.devices()[0].device_kind}))
"""


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _child(script, args, env):
    # From the repository root, so that the child imports `benchmarks.throughput`.
    out = subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True,
                         text=True, env=env, cwd=ROOT)
    if out.returncode:
        sys.exit(f"{args} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure_env(d, args, env):
    """decisions/s of `args.steps` random valid decisions in sharded environments."""
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "throughput.py")
    return _child(CHILD, [here, d, args.num_envs, args.num_nodes, args.steps, args.repeats],
                  env)


def measure_train(d, args, env):
    """env steps/s of PPO updates on `d` devices: median over the timed updates."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with tempfile.TemporaryDirectory() as out:
        row = _child(TRAIN_CHILD, [root, d, args.train_num_envs, args.num_nodes,
                                   args.train_num_steps, args.repeats + 1, out + "/run"], env)
    row["train_steps_per_s"] = statistics.median(row["sps"][1:])
    row["compile_s"] = row["wall_s"] - sum(row["num_envs"] * row["num_steps"] / s
                                           for s in row["sps"])
    return row


def _combine(rows, what):
    """One row per device count from its rounds: the median over every timed repeat (env:
    of the rollout times; train: of the PPO updates' env steps/s) and each round's own."""
    out = dict(rows[0])
    if what == "env":
        times = [t for row in rows for t in row["repeat_s"]]
        out["repeat_s"] = times
        out["decisions_per_s"] = out["num_envs"] * out["steps"] / statistics.median(times)
        out["round_decisions_per_s"] = [row["decisions_per_s"] for row in rows]
    else:
        sps = [s for row in rows for s in row["sps"][1:]]
        out["sps"] = [row["sps"] for row in rows]
        out["train_steps_per_s"] = statistics.median(sps)
        out["round_train_steps_per_s"] = [row["train_steps_per_s"] for row in rows]
    out["rounds"] = len(rows)
    return out


MEASURES = {"env": (measure_env, "decisions_per_s"),
            "train": (measure_train, "train_steps_per_s")}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--num-envs", type=int, default=4096)
    p.add_argument("--num-nodes", type=int, default=64)
    p.add_argument("--steps", type=int, default=64)
    p.add_argument("--repeats", type=int, default=5,
                   help="timed repeats (rollouts; PPO updates after one warm-up update)")
    p.add_argument("--measure", nargs="+", choices=("env", "train"), default=["env", "train"],
                   help="env: decisions/s of sharded environments; train: PPO env steps/s")
    p.add_argument("--train-num-envs", type=int, default=1024,
                   help="environments of the PPO run (the training default)")
    p.add_argument("--train-num-steps", type=int, default=4, help="PPO rollout length")
    p.add_argument("--rounds", type=int, default=2,
                   help="alternating rounds over the device counts (each one process per "
                        "device count with --repeats timed repeats)")
    p.add_argument("--force-cpu-devices", type=int, default=None,
                   help="on CPU, force this many host devices in every process (default: "
                        "as many as the process uses, none for 1 device)")
    p.add_argument("--out", default="benchmarks/results/scaling.json")
    args = p.parse_args(argv)
    for d in args.devices:
        for flag, n in (("--num-envs", args.num_envs), ("--train-num-envs", args.train_num_envs)):
            if d < 1 or n % d:
                p.error(f"--devices {d} is invalid: allowed positive divisors of {flag} {n}")
    if args.repeats < 1:
        p.error(f"--repeats {args.repeats} is invalid: allowed an integer >= 1")
    if args.rounds < 1:
        p.error(f"--rounds {args.rounds} is invalid: allowed an integer >= 1")
    if args.force_cpu_devices is not None and args.force_cpu_devices < max(args.devices):
        p.error(f"--force-cpu-devices {args.force_cpu_devices} is invalid: allowed at least "
                f"max(--devices) = {max(args.devices)}")
    import jax  # noqa: E402  (only to learn the backend; children set their own flags)
    on_cpu = jax.default_backend() == "cpu"

    def child_env(d):
        env = dict(os.environ)
        forced = args.force_cpu_devices or (d if d > 1 else None)
        if on_cpu and forced:
            env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") +
                                f" --xla_force_host_platform_device_count={forced}").strip()
        return env, (forced if on_cpu else None)

    # rounds[what][d]: the rows of each round
    rounds = {what: {d: [] for d in args.devices} for what in args.measure}
    print(f"{'round':>6} {'devices':>8} {'decisions/s':>14} {'train steps/s':>14}")
    for r in range(args.rounds):
        for d in args.devices:
            env, forced = child_env(d)
            cells = []
            for what, (measure, key) in MEASURES.items():
                if what in args.measure:
                    row = measure(d, args, env)
                    row["forced_cpu_devices"] = forced
                    rounds[what][d].append(row)
                    cells.append(f"{row[key]:>14,.0f}")
                else:
                    cells.append(f"{'-':>14}")
            print(f"{r + 1:>6} {d:>8} " + " ".join(cells), flush=True)
    results = {"env": [], "train": []}
    for what, by_d in rounds.items():
        for d, rows in by_d.items():
            results[what].append(_combine(rows, what))
    print("\nall rounds (median of every timed repeat):")
    print(f"{'devices':>8} {'decisions/s':>14} {'vs 1':>6} {'train steps/s':>14} {'vs 1':>6}")
    for i, d in enumerate(args.devices):
        cells = []
        for what, (_, key) in MEASURES.items():
            rows = results[what]
            if rows:
                cells += [f"{rows[i][key]:>14,.0f}", f"{rows[i][key] / rows[0][key]:>5.2f}x"]
            else:
                cells += [f"{'-':>14}", f"{'-':>6}"]
        print(f"{d:>8} " + " ".join(cells))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"argv": sys.argv[1:] if argv is None else list(argv),
                   "backend": jax.default_backend(), **results}, f, indent=1)
    print(f"wrote {args.out}")
    return results


if __name__ == "__main__":
    main()
