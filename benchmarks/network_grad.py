"""Training speed of the two backward passes of the scheduler network, in one run.

    python benchmarks/network_grad.py           # imitate.py's and ppo.py --num-envs 4096's updates
    python benchmarks/network_grad.py --repeats 3 --updates 2 --ppo-envs 0

`vte.SchedulerNet` builds its layers from `vte.network.Dense`, whose backward pass is
written out (`vte.network._affine`); `flax.linen.Dense` is the same network with XLA's own
backward pass. This script builds both and times, alternating between them so that both
see the same machine load:

- the gradient of the network on one minibatch (`--batch` observations of `--num-nodes`
  nodes), the operation training repeats most;
- whole training updates of `train/imitate.py` (its defaults: 1024 environments) and
  `train/ppo.py --num-envs 4096`, rollout and minibatch SGD, `--updates` per timed call:
  the env steps per second each trainer makes.

Prints one row per measurement with both figures and their ratio (medians over
`--repeats`), and writes them with the machine to `--out` (JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import flax.linen as nn
import jax
import optax

import vte
from vte.network import Dense, SchedulerNet

try:        # imported from the repository root (the tests)
    from benchmarks.throughput import machine
except ImportError:   # run as a script: its own directory comes first on the path
    from throughput import machine

VARIANTS = {"xla_backward": nn.Dense, "written_backward": Dense}


def _grad_step(hidden: int, dense, obs):
    """A jitted imitation-style gradient step of the network on `obs` (one minibatch)."""
    net = SchedulerNet(hidden=hidden, head_hidden=hidden, dense=dense)
    params = net.init(jax.random.PRNGKey(0), jax.tree_util.tree_map(lambda x: x[0], obs))
    tx = optax.adam(1e-3)
    opt_state = tx.init(params)

    @jax.jit
    def step(params, opt_state, obs):
        def loss(p):
            logits, value = net.apply(p, obs)
            return -jax.nn.log_softmax(logits)[:, -1].mean() + 0.5 * (value ** 2).mean()
        grads = jax.grad(loss)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    def run():
        out = step(params, opt_state, obs)
        jax.block_until_ready(out)
    return run


def _train_chunk(algorithm: str, num_envs: int, num_nodes: int, updates: int, dense):
    """`updates` whole training updates of `algorithm`'s default configuration."""
    from train import imitate, ppo
    from train.config import ImitateConfig, PPOConfig
    config_cls, module = {"imitate": (ImitateConfig, imitate), "ppo": (PPOConfig, ppo)}[algorithm]
    config = config_cls(num_envs=num_envs, num_nodes=num_nodes)
    net = SchedulerNet(hidden=config.hidden, head_hidden=config.hidden, dense=dense)
    init, update = module.make_update(config, network=net)
    chunk = jax.jit(lambda r: jax.lax.scan(lambda r, _: update(r), r, None, updates))
    state = {"runner": jax.jit(init)(jax.random.PRNGKey(0))}

    def run():
        runner, metrics = chunk(state["runner"])
        jax.block_until_ready(metrics)
        state["runner"] = runner
    return run, num_envs * config.num_steps * updates


def _alternate(runs: dict, repeats: int) -> dict:
    """Warm each up (compiling), then time `repeats` rounds, each running every variant
    once in turn. Returns {variant: [seconds per round]}."""
    for run in runs.values():
        run()
    times = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            t0 = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - t0)
    return times


def measure(num_nodes: int, batch: int, imitate_envs: int, ppo_envs: int, updates: int,
            repeats: int) -> list[dict]:
    params = vte.EnvParams(num_nodes=num_nodes)
    keys = jax.random.split(jax.random.PRNGKey(0), batch)
    obs, _ = jax.jit(jax.vmap(vte.reset, in_axes=(0, None)))(keys, params)
    rows = []
    times = _alternate({k: _grad_step(32, d, obs) for k, d in VARIANTS.items()}, repeats)
    rows.append({"measure": f"network gradient + Adam, {batch} observations x {num_nodes} "
                            "nodes", "unit": "ms", "per": 1.0,
                 **{k: 1e3 * statistics.median(v) for k, v in times.items()},
                 "repeat_s": times})
    for algorithm, num_envs in (("imitate", imitate_envs), ("ppo", ppo_envs)):
        if not num_envs:
            continue
        runs, steps = {}, 0
        for k, d in VARIANTS.items():
            runs[k], steps = _train_chunk(algorithm, num_envs, num_nodes, updates, d)
        times = _alternate(runs, repeats)
        rows.append({"measure": f"{algorithm} training, {num_envs} environments",
                     "unit": "env steps/s", "per": steps,
                     **{k: steps / statistics.median(v) for k, v in times.items()},
                     "repeat_s": times})
    for row in rows:
        a, b = row["xla_backward"], row["written_backward"]
        row["speedup"] = a / b if row["unit"] == "ms" else b / a
    return rows


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-nodes", type=int, default=64)
    p.add_argument("--batch", type=int, default=512, help="observations in the gradient")
    p.add_argument("--imitate-envs", type=int, default=1024, help="0: skip imitation")
    p.add_argument("--ppo-envs", type=int, default=4096, help="0: skip PPO")
    p.add_argument("--updates", type=int, default=3, help="training updates per timed call")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", default="benchmarks/results/network_grad.json")
    args = p.parse_args(argv)
    for name in ("num_nodes", "batch", "updates", "repeats"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')}={getattr(args, name)} is invalid: allowed "
                    "an integer >= 1")
    for name in ("imitate_envs", "ppo_envs"):
        if getattr(args, name) < 0:
            p.error(f"--{name.replace('_', '-')}={getattr(args, name)} is invalid: allowed "
                    "an integer >= 0")
    from train.config import ImitateConfig, PPOConfig
    for name, config_cls in (("imitate_envs", ImitateConfig), ("ppo_envs", PPOConfig)):
        if getattr(args, name):
            try:   # the trainer's own checks, before any work
                config_cls(num_envs=getattr(args, name), num_nodes=args.num_nodes)
            except ValueError as err:
                p.error(f"--{name.replace('_', '-')}={getattr(args, name)} is invalid for "
                        f"the trainer's defaults: {err}")
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    rows = measure(args.num_nodes, args.batch, args.imitate_envs, args.ppo_envs,
                   args.updates, args.repeats)
    print(f"# {machine()['backend']} {machine()['device']}, {os.cpu_count()} CPUs; medians "
          f"of {args.repeats} alternating repeats")
    print("| measure | unit | XLA's backward | written backward | speed-up |")
    print("|---|---|---:|---:|---:|")
    for r in rows:
        fmt = "{:,.1f}" if r["unit"] == "ms" else "{:,.0f}"
        print(f"| {r['measure']} | {r['unit']} | {fmt.format(r['xla_backward'])} | "
              f"{fmt.format(r['written_backward'])} | {r['speedup']:.2f}x |")
    result = {"machine": machine(), "argv": sys.argv[1:] if argv is None else list(argv),
              "rows": rows}
    if os.path.dirname(args.out):
        os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
