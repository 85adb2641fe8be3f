"""Decisions per second of `vte.step` under jit + vmap, with random valid actions and with
the policy network choosing them, PPO training env steps per second, state memory, and
the speed-up over the NumPy reference.

    python benchmarks/throughput.py            # full sweep
    python benchmarks/throughput.py --quick    # a small sweep

Every figure is taken after compiling ahead of time and one warm-up run (both timed on
their own: `compile_s` and `first_run_s` in the JSON) as the median of several repeats,
each a `lax.scan` of `--steps` decisions over `num_envs` environments (two steps per scan
iteration for the environment alone, see `ROLLOUT_UNROLL`). "random_valid": a uniformly
random allowed action (environment only); "policy": `vte.SchedulerNet` (default width,
freshly initialised: its cost does not depend on its weights) samples the action from the
full observation. PPO: whole `train/ppo.py` updates (rollout, advantages, epochs of
minibatch gradient steps), env steps = num_envs x num_steps per update. Writes JSON
(figures, device, jax version, shapes), rewritten after every measured row so that a sweep
cut short keeps what it measured, and a PNG of decisions/s against num_envs, a line per
cluster size. `--no-env`, `--no-policy` and an empty `--ppo-envs` leave sections out.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import sys
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

import vte

# The project's targets on a 2-core CPU: decisions/s of one device at 4096 environments of
# 64 nodes, and the speed-up over the NumPy reference at every cluster size measured.
TARGET_DECISIONS_PER_S = 1_000_000
TARGET_SHAPE = {"num_envs": 4096, "num_nodes": 64}
TARGET_SPEEDUP = 100.0

FULL_ENVS = (1, 64, 1024, 4096, 16384, 65536)
FULL_NODES = (16, 64, 256, 1024)
QUICK_ENVS = (1, 64, 1024, 4096)
QUICK_NODES = (16, 64)


def random_valid_action(key: jax.Array, mask: jax.Array) -> jax.Array:
    """A uniformly random allowed action from an action mask (N+1,): the allowed action with
    the largest hash of one random word. The index sits in the low bits of each hash, so a
    plain max finds it (an argmax or a cumulative sum would cost more than the step)."""
    n = mask.shape[-1]
    bits = max(1, (n - 1).bit_length())
    scores = vte.rng.words(vte.rng.seed_from_key(key), 0, mask.shape)
    keyed = (scores >> bits << bits) | jnp.arange(n, dtype=jnp.uint32)
    best = jnp.max(jnp.where(mask, keyed, 0))
    return (best & jnp.uint32((1 << bits) - 1)).astype(jnp.int32)


# Two steps per iteration of the rollout's `lax.scan`. A step shifts the queue, which
# XLA cannot do in the loop-carried buffers, so each iteration ends by copying the
# queue's fields (and a few other arrays) back into them; with two steps per iteration
# the first step's results stay in temporaries and only the second one is copied.
# Measured 13-23 % more decisions/s at 4096 x 64 (alternating A/B, one process); 4 steps
# gave no more than 2. Research loops can pass `unroll=2` to their own scans alike.
# Environment-only rollouts use it; with the policy network in the loop it cost 14 %
# (16 and 64 nodes, 4096 environments), so those keep one step per iteration.
ROLLOUT_UNROLL = 2


def make_rollout(params: vte.EnvParams, num_envs: int, steps: int, policy=None):
    """jitted (state, obs, key) -> (state, obs, total reward) over `steps` batched steps.

    With `policy=None` actions are random valid ones and only the action mask of each
    observation is used (XLA drops the rest of the observation); otherwise
    `policy(key, obs, params)` chooses.
    """
    vstep = jax.vmap(vte.step, in_axes=(0, 0, 0, None))

    def body(carry, key):
        state, obs = carry
        if policy is None:  # the carry holds only the action mask
            # One key per env for both the step and the action: the action reads hash
            # stream 0 of the step's word, which the step itself does not use.
            keys = jax.random.split(key, num_envs)
            actions = jax.vmap(random_valid_action)(keys, obs)
        else:
            k_a, k_s = jax.random.split(key)
            actions = jax.vmap(policy, in_axes=(0, 0, None))(jax.random.split(k_a, num_envs),
                                                             obs, params)
            keys = jax.random.split(k_s, num_envs)
        obs, state, reward, _, _, _ = vstep(keys, state, actions, params)
        if policy is None:
            obs = obs.action_mask
        return (state, obs), jnp.sum(reward)

    def rollout(state, obs, key):
        (state, obs), rewards = jax.lax.scan(body, (state, obs), jax.random.split(key, steps),
                                             unroll=ROLLOUT_UNROLL if policy is None else 1)
        return state, obs, jnp.sum(rewards)

    return jax.jit(rollout, donate_argnums=(0, 1))


def network_policy(params: vte.EnvParams, hidden: int = 32):
    """A freshly initialised `SchedulerNet` policy that samples its action (the cost of the
    network does not depend on its weights)."""
    net = vte.SchedulerNet(hidden=hidden)
    obs, _ = vte.reset(jax.random.PRNGKey(0), params)
    variables = jax.jit(net.init)(jax.random.PRNGKey(1), obs)
    return vte.make_policy(net, variables, greedy=False)


def measure_ppo(num_nodes: int, num_envs: int, updates: int, repeats: int) -> dict:
    """PPO training env steps per second: `updates` whole updates of `train/ppo.py` (its
    default hyper-parameters) in one jitted scan, after a warm-up."""
    from vte.train import ppo
    from vte.train.config import PPOConfig

    config = PPOConfig.of(num_envs=num_envs, num_nodes=num_nodes)
    init, update = ppo.make_update(config)
    chunk = jax.jit(lambda r: jax.lax.scan(lambda r, _: update(r), r, None, updates),
                    donate_argnums=0)
    runner = jax.jit(init)(jax.random.PRNGKey(0))

    def run(compiled, out, r):
        runner_now = runner if out is None else out[0]
        out = compiled(runner_now)
        jax.block_until_ready(out[1])
        return out

    _, timing = time_compiled(chunk, (runner,), repeats, run)
    steps = num_envs * config.num_steps * updates
    median = statistics.median(timing.repeat_s)
    return {"num_nodes": num_nodes, "num_envs": num_envs, "num_steps": config.num_steps,
            "updates": updates, "update_epochs": config.update_epochs,
            "num_minibatches": config.num_minibatches, "hidden": config.hidden,
            "env_steps_per_s": steps / median, "median_s": median, **timing.row()}


@functools.lru_cache(maxsize=None)
def bytes_per_env(params: vte.EnvParams) -> tuple[int, int]:
    """Bytes of one environment's (state, observation): shapes only, nothing allocated,
    from one trace of `vte.reset` per params."""
    obs, state = jax.eval_shape(lambda k: vte.reset(k, params), jax.random.PRNGKey(0))

    def size(tree):
        return int(sum(np.prod(x.shape) * x.dtype.itemsize for x in jax.tree_util.tree_leaves(tree)))
    return size(state), size(obs)


def state_bytes_per_env(params: vte.EnvParams) -> int:
    """Bytes of one environment's state (`bytes_per_env`)."""
    return bytes_per_env(params)[0]


class Timing(NamedTuple):
    """Seconds of one measurement: compiling alone, the first run after it, every repeat."""

    compile_s: float
    first_run_s: float
    repeat_s: list[float]

    def row(self) -> dict:
        """The fields every result row stores (`warmup_s_incl_compile` = compile + first
        run, the single figure earlier result files have)."""
        return {"compile_s": self.compile_s, "first_run_s": self.first_run_s,
                "warmup_s_incl_compile": self.compile_s + self.first_run_s,
                "repeat_s": self.repeat_s}


def time_compiled(fn, args: tuple, repeats: int, run) -> tuple[object, Timing]:
    """Compile the jitted `fn` for `args` ahead of time (timed on its own), run it once to
    warm up, then `repeats` times more. `run(compiled, out, r)` performs repeat r (r = -1
    for the warm-up) from the previous output `out` (None the first time) and returns the
    new output with every array ready. Returns (the last output, `Timing`)."""
    t0 = time.perf_counter()
    compiled = fn.lower(*args).compile()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = run(compiled, None, -1)
    first_run_s = time.perf_counter() - t0
    times = []
    for r in range(repeats):
        t0 = time.perf_counter()
        out = run(compiled, out, r)
        times.append(time.perf_counter() - t0)
    return out, Timing(compile_s, first_run_s, times)


def time_rollout(rollout, state, carry, repeats: int):
    """Compile `rollout` (from `make_rollout`; timed on its own), run it once to warm up,
    then `repeats` times more, each with a fresh key. Returns (state, carry, `Timing`)."""

    def run(compiled, out, r):
        st, ca = (state, carry) if out is None else out[:2]
        out = compiled(st, ca, jax.random.PRNGKey(2 + r))
        out[2].block_until_ready()
        return out

    (state, carry, _), timing = time_compiled(rollout, (state, carry, jax.random.PRNGKey(1)),
                                              repeats, run)
    return state, carry, timing


def measure_env(num_nodes: int, num_envs: int, steps: int, repeats: int, policy=None,
                policy_name: str = "random_valid") -> dict:
    params = vte.EnvParams(num_nodes=num_nodes)
    keys = jax.random.split(jax.random.PRNGKey(0), num_envs)
    reset = jax.jit(jax.vmap(vte.reset, in_axes=(0, None)))
    obs, state = reset(keys, params)
    carry_obs = obs.action_mask if policy is None else obs
    if policy == "network":
        policy = network_policy(params)
    rollout = make_rollout(params, num_envs, steps, policy)
    state, carry_obs, timing = time_rollout(rollout, state, carry_obs, repeats)
    median = statistics.median(timing.repeat_s)
    row = {
        "num_nodes": num_nodes, "num_envs": num_envs, "steps": steps, "policy": policy_name,
        "decisions_per_s": num_envs * steps / median, "median_s": median, **timing.row(),
        "state_bytes_per_env": state_bytes_per_env(params),
    }
    if policy_name == "random_valid":
        row["reset_batch_s"] = measure_reset(reset, params, num_envs, repeats)
    return row


def measure_reset(reset, params: vte.EnvParams, num_envs: int, repeats: int) -> float:
    """Median seconds to reset `num_envs` environments at once with `reset`, the jitted
    vmap of `vte.reset` (compiled for this batch once, by `measure_env`).

    Episodes that start together end together, so the step's auto-reset resets the whole
    batch in one step every `episode_len` decisions; the timed scans above contain such a
    step in roughly one repeat out of episode_len / steps, so their median mostly leaves it
    out: this is its cost.
    """
    jax.block_until_ready(reset(jax.random.split(jax.random.PRNGKey(0), num_envs), params))
    times = []
    for r in range(repeats):
        keys = jax.random.split(jax.random.PRNGKey(100 + r), num_envs)
        t0 = time.perf_counter()
        jax.block_until_ready(reset(keys, params))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure_numpy(num_nodes: int, steps: int) -> dict:
    """The NumPy reference, one environment, a Python loop (as a user would write it)."""
    from vte.cluster import reference as ref

    params = vte.EnvParams(num_nodes=num_nodes)
    rng = np.random.default_rng(0)
    state = ref.reset(rng, params)
    # Warm-up a few steps, then time.
    for _ in range(5):
        state, *_ = ref.step(state, ref.optimal_action(state, params), rng, params)
    t0 = time.perf_counter()
    for _ in range(steps):
        mask = ref.action_mask(state, params)
        action = int(rng.choice(np.flatnonzero(mask)))
        state, *_ = ref.step(state, action, rng, params)
    dt = time.perf_counter() - t0
    return {"num_nodes": num_nodes, "num_envs": 1, "steps": steps,
            "decisions_per_s": steps / dt, "median_s": dt}


def targets(rows: list[dict], numpy_rows: list[dict]) -> list[dict]:
    """The targets against this run's figures: `measured` is None (and `met` False) when
    the run did not measure what a target needs."""
    at_shape = [r["decisions_per_s"] for r in rows
                if all(r[k] == v for k, v in TARGET_SHAPE.items())]
    sped = [r for r in numpy_rows if r["speedup"]]
    least = min(sped, key=lambda r: r["speedup"]) if sped else None
    out = [
        {"target": f"decisions/s at {TARGET_SHAPE['num_envs']} environments x "
                   f"{TARGET_SHAPE['num_nodes']} nodes, random valid actions, one device",
         "goal": TARGET_DECISIONS_PER_S, "measured": at_shape[0] if at_shape else None,
         "unit": "decisions/s"},
        {"target": "speed-up over the NumPy reference, least over the cluster sizes measured"
                   + (f" ({', '.join(str(r['num_nodes']) for r in sped)} nodes)" if sped else ""),
         "goal": TARGET_SPEEDUP, "measured": least["speedup"] if least else None,
         "at_num_nodes": least["num_nodes"] if least else None, "unit": "x"},
    ]
    for t in out:
        t["met"] = t["measured"] is not None and t["measured"] >= t["goal"]
    return out


def _amount(value: float, unit: str) -> str:
    return f"{value:,.1f}x" if unit == "x" else f"{value:,.0f} {unit}"


def machine() -> dict:
    dev = jax.devices()[0]
    return {
        "jax": jax.__version__, "backend": jax.default_backend(),
        "device": getattr(dev, "device_kind", str(dev)), "num_devices": jax.device_count(),
        "cpu_count": os.cpu_count(), "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
    }


def plot(rows: list[dict], path: str, policy_rows: list[dict] = (),
         device: str | None = None) -> None:
    """Decisions/s against num_envs (log scales), a line per cluster size; `device` names
    the hardware in the title (default: this process's first device)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    for i, n in enumerate(sorted({r["num_nodes"] for r in [*rows, *policy_rows]})):
        pts = sorted((r["num_envs"], r["decisions_per_s"]) for r in rows if r["num_nodes"] == n)
        if pts:
            ax.plot(*zip(*pts), marker="o", color=f"C{i}", label=f"{n} nodes")
        pts = sorted((r["num_envs"], r["decisions_per_s"]) for r in policy_rows
                     if r["num_nodes"] == n)
        if pts:
            ax.plot(*zip(*pts), marker="x", linestyle="--", color=f"C{i}",
                    label=f"{n} nodes, policy network")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("environments stepped at once (num_envs)")
    ax.set_ylabel("decisions / s")
    ax.set_title(f"vte.step, jit + vmap: random valid actions (solid), network (dashed), "
                 f"{device or f'{jax.default_backend()} ({jax.devices()[0].device_kind})'}",
                 fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small sweep")
    p.add_argument("--num-envs", type=int, nargs="+", help="override the num_envs sweep")
    p.add_argument("--num-nodes", type=int, nargs="+", help="override the num_nodes sweep")
    p.add_argument("--steps", type=int, default=64, help="decisions per timed scan")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--max-state-gib", type=float, default=4.0,
                   help="skip configurations whose batched state exceeds this")
    p.add_argument("--max-policy-nodes", type=int, default=2**22,
                   help="policy network sweep: skip configurations with more than this many "
                        "num_envs x num_nodes (the network's activations grow with it)")
    p.add_argument("--no-env", action="store_true",
                   help="skip the environment-only sweep (random valid actions)")
    p.add_argument("--no-policy", action="store_true", help="skip the policy-network sweep")
    p.add_argument("--ppo-envs", type=int, nargs="*", default=None,
                   help="num_envs of the PPO training figures (64 nodes); default 1024 4096 "
                        "(--quick: 1024); none to skip")
    p.add_argument("--ppo-updates", type=int, default=4, help="PPO updates per timed run")
    p.add_argument("--ppo-nodes", type=int, default=64, help="num_nodes of the PPO figures")
    p.add_argument("--numpy-steps", type=int, default=500,
                   help="decisions timed for the NumPy reference (0 = skip)")
    p.add_argument("--out", default="benchmarks/results/throughput.json")
    p.add_argument("--png", default=None, help="plot path (default: beside --out)")
    args = p.parse_args(argv)
    for name in ("steps", "repeats", "ppo_updates", "ppo_nodes", "max_policy_nodes"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.numpy_steps < 0:
        p.error(f"--numpy-steps must be >= 0, got {args.numpy_steps}")
    for name in ("num_envs", "num_nodes", "ppo_envs"):
        vals = getattr(args, name) or []
        if any(v < 1 for v in vals):
            p.error(f"--{name.replace('_', '-')} values must be >= 1, got {vals}")
    return args


def main(argv=None):
    args = parse_args(argv)
    envs = args.num_envs or (QUICK_ENVS if args.quick else FULL_ENVS)
    nodes = args.num_nodes or (QUICK_NODES if args.quick else FULL_NODES)
    info = machine()
    print(f"# {info['backend']} {info['device']} x{info['num_devices']}, jax {info['jax']}, "
          f"{info['cpu_count']} CPU cores")
    rows, policy_rows, ppo_rows, skipped, memory, numpy_rows = [], [], [], [], [], []
    result = {"machine": info, "argv": sys.argv[1:] if argv is None else list(argv),
              "env": rows, "policy": policy_rows, "ppo": ppo_rows, "skipped": skipped,
              "memory": memory, "numpy_reference": numpy_rows, "targets": []}
    png = args.png or os.path.splitext(args.out)[0] + ".png"
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)

    def save(plot_too: bool = False) -> None:
        """Write what is measured so far (after every row: a sweep cut short keeps it)."""
        result["targets"] = targets(rows, numpy_rows)
        with open(args.out + ".tmp", "w") as f:
            json.dump(result, f, indent=1)
        os.replace(args.out + ".tmp", args.out)
        if plot_too and (rows or policy_rows):
            plot(rows, png, policy_rows)

    per_env = {n: state_bytes_per_env(vte.EnvParams(num_nodes=n)) for n in nodes}

    def too_big(n: int, b: int) -> str | None:
        if per_env[n] * b > args.max_state_gib * 2**30:
            return (f"state {per_env[n] * b / 2**30:.1f} GiB > "
                    f"--max-state-gib {args.max_state_gib}")
        return None

    if not args.no_env:
        print(f"{'nodes':>6} {'envs':>7} {'decisions/s':>14} {'compile s':>10} "
              f"{'1st run s':>10} {'state KiB/env':>14} {'batch reset ms':>15}")
        for n in nodes:
            for b in envs:
                if reason := too_big(n, b):
                    skipped.append({"num_nodes": n, "num_envs": b, "reason": reason})
                    print(f"{n:>6} {b:>7} {'skipped':>14}  ({reason})")
                    continue
                r = measure_env(n, b, args.steps, args.repeats)
                rows.append(r)
                save()
                print(f"{n:>6} {b:>7} {r['decisions_per_s']:>14,.0f} {r['compile_s']:>10.1f} "
                      f"{r['first_run_s']:>10.2f} {per_env[n] / 1024:>14.1f} "
                      f"{1e3 * r['reset_batch_s']:>15.1f}", flush=True)
        save(plot_too=True)

    if not args.no_policy:
        print("\n# policy network choosing the actions (SchedulerNet, sampled)")
        print(f"{'nodes':>6} {'envs':>7} {'decisions/s':>14} {'compile s':>10} {'1st run s':>10}")
        for n in nodes:
            for b in envs:
                reason = too_big(n, b)
                if n * b > args.max_policy_nodes:
                    reason = (f"num_envs x num_nodes {n * b} > "
                              f"--max-policy-nodes {args.max_policy_nodes}")
                if reason:
                    skipped.append({"num_nodes": n, "num_envs": b, "policy": "network",
                                    "reason": reason})
                    continue
                r = measure_env(n, b, args.steps, args.repeats, policy="network",
                                policy_name="network")
                policy_rows.append(r)
                save()
                print(f"{n:>6} {b:>7} {r['decisions_per_s']:>14,.0f} "
                      f"{r['compile_s']:>10.1f} {r['first_run_s']:>10.2f}", flush=True)
        save(plot_too=True)

    ppo_envs = args.ppo_envs if args.ppo_envs is not None else (
        (1024,) if args.quick else (1024, 4096))
    if ppo_envs:
        print(f"\n# PPO training (train/ppo.py defaults, {args.ppo_nodes} nodes)")
        print(f"{'envs':>7} {'env steps/s':>14} {'compile s':>10} {'1st run s':>10}")
        for b in ppo_envs:
            r = measure_ppo(args.ppo_nodes, b, args.ppo_updates, args.repeats)
            ppo_rows.append(r)
            save()
            print(f"{b:>7} {r['env_steps_per_s']:>14,.0f} {r['compile_s']:>10.1f} "
                  f"{r['first_run_s']:>10.2f}",
                  flush=True)

    memory += [dict(zip(("num_nodes", "queue_len", "state_bytes_per_env", "obs_bytes_per_env"),
                        (n, k, *bytes_per_env(vte.EnvParams(num_nodes=n, queue_len=k)))))
               for n in (16, 64, 256, 1024) for k in (4, 8, 32)]
    print("\n# memory: bytes per environment")
    print(f"{'nodes':>6} {'queue':>6} {'state':>10} {'obs':>10}")
    for m in memory:
        print(f"{m['num_nodes']:>6} {m['queue_len']:>6} {m['state_bytes_per_env']:>10,} "
              f"{m['obs_bytes_per_env']:>10,}")

    save()
    if args.numpy_steps:
        print("\n# NumPy reference (one environment, Python loop) and the speed-up of vte")
        for n in nodes:
            ref = measure_numpy(n, args.numpy_steps)
            best = max((r["decisions_per_s"] for r in rows if r["num_nodes"] == n), default=None)
            ref["vte_best_decisions_per_s"] = best
            ref["speedup"] = best / ref["decisions_per_s"] if best else None
            numpy_rows.append(ref)
            sp = f"{ref['speedup']:,.0f}x" if ref["speedup"] else "-"
            print(f"{n:>6} nodes: numpy {ref['decisions_per_s']:,.0f} decisions/s, "
                  f"vte best {best or 0:,.0f} -> {sp}")

    save()   # the plot is current: only the two sweeps add to it
    print("\n# targets")
    for t in result["targets"]:
        verdict = ("not measured in this run" if t["measured"] is None else
                   f"measured {_amount(t['measured'], t['unit'])}"
                   + (f" (at {t['at_num_nodes']} nodes)" if t.get("at_num_nodes") else "")
                   + f": {'met' if t['met'] else 'NOT met'}")
        print(f"{t['target']}: goal {_amount(t['goal'], t['unit'])}, {verdict}")

    print(f"\nwrote {args.out}" + (f" and {png}" if rows or policy_rows else ""))
    return result


if __name__ == "__main__":
    main()
