"""What the training scripts share: flags, checks, the run loop and its outputs.

`train/ppo.py` and `train/imitate.py` each define the algorithm (`make_update`, a jitted
`make_train`); this module runs one in a Python loop that returns every `--log-every`
updates, and writes the outputs of a run directory:

    OUT/config.json         the configuration (what `vte.load_policy` and `--resume` read)
    OUT/metrics.jsonl       one row per update and seed
    OUT/learning_curve.png  match rate, regret, return and loss against env steps
    OUT/checkpoints/        orbax checkpoints (every --checkpoint-every updates, at the end)
    OUT/checksums.json      a SHA-256 of each checkpoint, verified before it is restored
    OUT/eval.json           the trained policy against the heuristics and the optimum

Several devices (`--devices N`, default every local device) run the same program, data
parallel: the compiled update takes its inputs with the environments split over a
one-axis mesh (`vte.distributed.AXIS`) and the parameters replicated, and XLA partitions
it (GSPMD). Each device steps its own environments; each minibatch is split over the
devices, so the gradient of the mean loss is summed across devices by an all-reduce in
the backward pass, and the metrics (means over environments) are global. Keys,
shuffling and initialisation are those of the one-device program (JAX's random numbers
do not depend on the sharding), so N devices give the metrics of one, up to float
rounding. Several hosts: `train/multihost.py`; only process 0 writes the outputs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from flax import struct
from jax.sharding import NamedSharding, PartitionSpec as P

import vte
from train import multihost
from vte import checkpoint as ckpt
from vte import distributed as dist
from vte.rng import SEED_LIMIT
from vte.files import atomic_write, atomic_write_text
from vte.network import SchedulerNet, make_policy

# --------------------------------------------------------------------------
# Training state shared by the algorithms
# --------------------------------------------------------------------------


@struct.dataclass
class Runner:
    """Everything a run needs to continue: saved whole, so a resumed run is exact."""

    params: Any              # network parameters
    opt_state: Any           # optimiser state (holds the learning-rate schedule's count)
    env_state: vte.EnvState  # (num_envs, ...) environment states
    obs: vte.Observation     # (num_envs, ...) current observations
    rng: jax.Array           # (2,) uint32 key
    update: jax.Array        # () int32, updates done


def make_network(config: dict) -> SchedulerNet:
    return ckpt.network_from_config(config)


def make_optimizer(config: dict) -> optax.GradientTransformation:
    """Adam with global-norm clipping; the learning rate falls linearly to 0 when annealed."""
    grad_steps = config["num_updates"] * config["update_epochs"] * config["num_minibatches"]
    lr = (optax.linear_schedule(config["lr"], 0.0, grad_steps) if config["anneal_lr"]
          else config["lr"])
    return optax.chain(optax.clip_by_global_norm(config["max_grad_norm"]),
                       optax.adam(lr, eps=1e-5))


def train_env_params(config: dict) -> vte.EnvParams:
    """The environment the policy trains on."""
    env = config["env"]
    return vte.EnvParams(num_nodes=env["num_nodes"], queue_len=env["queue_len"],
                         episode_len=env["episode_len"], sample_weights=env["sample_weights"],
                         weights=tuple(env["weights"]))


def eval_env_params(config: dict) -> vte.EnvParams:
    """Held-out evaluation: the same cluster sizes with the fixed objective weights."""
    env = config["env"]
    return vte.EnvParams(num_nodes=env["num_nodes"], queue_len=env["queue_len"],
                         episode_len=env["episode_len"], weights=tuple(env["weights"]))


def init_runner(rng: jax.Array, config: dict, net: SchedulerNet,
                tx: optax.GradientTransformation, params=None) -> Runner:
    """A fresh runner: `num_envs` new environments and fresh (or given) parameters."""
    k_env, k_net, k_run = jax.random.split(rng, 3)
    keys = jax.random.split(k_env, config["num_envs"])
    obs, env_state = jax.vmap(vte.reset, (0, None))(keys, train_env_params(config))
    if params is None:
        params = net.init(k_net, jax.tree_util.tree_map(lambda x: x[0], obs))
    return Runner(params=params, opt_state=tx.init(params), env_state=env_state, obs=obs,
                  rng=k_run, update=jnp.zeros((), jnp.int32))


def step_envs(rng: jax.Array, env_state, action: jax.Array, config: dict):
    """`vte.step` in every environment: (obs, state, reward, terminated, truncated, info)."""
    keys = jax.random.split(rng, config["num_envs"])
    return jax.vmap(vte.step, (0, 0, 0, None))(keys, env_state, action,
                                               train_env_params(config))


def rollout(net: SchedulerNet, runner: Runner, config: dict, record: Callable):
    """The COLLECT phase: `num_steps` decisions of the policy (sampled from the network's
    masked logits) in every environment, as a `lax.scan`.

    `record(obs, logits, value, action, reward, done, info)` gives what to keep of each
    step. Returns ((env_state, obs, rng) after the rollout, (records, stats)), records and
    stats stacked over the steps."""

    def env_step(carry, _):
        env_state, obs, rng = carry
        rng, k_act, k_env = jax.random.split(rng, 3)
        logits, value = net.apply(runner.params, obs)
        action = jax.random.categorical(k_act, logits).astype(jnp.int32)
        next_obs, env_state, reward, term, trunc, info = step_envs(k_env, env_state, action,
                                                                   config)
        done = term | trunc
        kept = record(obs, logits, value, action, reward, done, info)
        return (env_state, next_obs, rng), (kept, step_stats(logits, info, done))

    return jax.lax.scan(env_step, (runner.env_state, runner.obs, runner.rng), None,
                        config["num_steps"])


def step_stats(logits: jax.Array, info: dict, done: jax.Array) -> dict:
    """Scalars of one rollout step: behaviour regret and match, the greedy action's match
    (on states the network has not trained on yet), and the returns of ended episodes."""
    return {
        "regret": info["regret"].mean(),
        "match_rate": info["matched_optimal"].mean(),
        "greedy_match": (jnp.argmax(logits, -1) == info["optimal_action"]).mean(),
        "invalid_rate": info["invalid_action"].mean(),
        "ret_sum": jnp.sum(jnp.where(done, -info["counters"].regret, 0.0)),
        "ret_count": jnp.sum(done),
    }


def learn(runner: Runner, rollout_end: tuple, data, loss_fn: Callable,
          tx: optax.GradientTransformation, config: dict, stats: dict):
    """The UPDATE NETWORK phase: `update_epochs` passes over `data` (leaves (num_steps,
    num_envs, ...)), each a scan of `num_minibatches` gradient steps on shuffled
    minibatches of `loss_fn(params, minibatch) -> (loss, aux)`.

    `rollout_end` is (env_state, obs, rng) after the rollout. Returns the next `Runner`
    and the update's metrics (`update_metrics` of `stats` and the losses)."""
    env_state, obs, rng = rollout_end

    def minibatch_step(carry, mb):
        p, o = carry
        grads, aux = jax.grad(loss_fn, has_aux=True)(p, mb)
        updates, o = tx.update(grads, o, p)
        return (optax.apply_updates(p, updates), o), aux

    def epoch(carry, key):
        mbs = split_over_devices(shuffle_minibatches(key, data, config["num_minibatches"]))
        return jax.lax.scan(minibatch_step, carry, mbs)

    rng, k_epochs = jax.random.split(rng)
    (params, opt_state), losses = jax.lax.scan(
        epoch, (runner.params, runner.opt_state),
        jax.random.split(k_epochs, config["update_epochs"]))
    runner = Runner(params=params, opt_state=opt_state, env_state=env_state, obs=obs,
                    rng=rng, update=runner.update + 1)
    return runner, update_metrics(stats, losses)


def shuffle_minibatches(rng: jax.Array, batch, num_minibatches: int):
    """Flatten (num_steps, num_envs, ...) leaves, shuffle, split into minibatches."""
    lead = jax.tree_util.tree_leaves(batch)[0].shape
    size = lead[0] * lead[1]
    perm = jax.random.permutation(rng, size)

    def split(x):
        x = x.reshape((size,) + x.shape[2:])[perm]
        return x.reshape((num_minibatches, size // num_minibatches) + x.shape[1:])

    return jax.tree_util.tree_map(split, batch)


def split_over_devices(minibatches):
    """Split each minibatch (leaves (num_minibatches, size, ...)) over the devices of the
    mesh in context (`jax.set_mesh`, axis `vte.distributed.AXIS`), so each device takes the
    gradient of its share and XLA sums the shares; without such a mesh, unchanged."""
    if dist.AXIS not in jax.sharding.get_abstract_mesh().axis_names:
        return minibatches
    return jax.lax.with_sharding_constraint(minibatches, P(None, dist.AXIS))


def update_metrics(stats: dict, losses: dict) -> dict:
    """Reduce a rollout's per-step scalars and the losses of its epochs to one scalar each."""
    metrics = {k: v.mean() for k, v in stats.items() if not k.startswith("ret_")}
    count = stats["ret_count"].sum()
    metrics["return"] = jnp.where(count > 0, stats["ret_sum"].sum() / count, jnp.nan)
    metrics["reward"] = -metrics["regret"]
    metrics.update({k: v.mean() for k, v in losses.items()})
    return metrics


def compile_train(make_update: Callable, config: dict):
    """`make_update`'s whole training as one jitted `train(rng) -> (runner, metrics)`,
    metrics stacked over the updates."""
    init, update = make_update(config)

    @jax.jit
    def train(rng):
        return jax.lax.scan(lambda r, _: update(r), init(rng), None, config["num_updates"])

    return train


# --------------------------------------------------------------------------
# Flags and their checks
# --------------------------------------------------------------------------

COMMON_DEFAULTS = dict(
    num_envs=1024, num_steps=4, total_timesteps=1_000_000, update_epochs=2,
    num_minibatches=8, lr=3e-3, anneal_lr=True, max_grad_norm=1.0, seed=0, seeds=1,
    hidden=32, num_nodes=64, queue_len=8, episode_len=128, sample_weights=True,
    weights=(1.0, 1.0, 1.0), log_every=5, checkpoint_every=50, eval_episodes=64,
)


def build_parser(prog: str, description: str, defaults: dict,
                 add_algorithm_flags: Callable) -> argparse.ArgumentParser:
    d = {**COMMON_DEFAULTS, **defaults}
    p = argparse.ArgumentParser(prog=prog, description=description,
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    g = p.add_argument_group("training")
    g.add_argument("--num-envs", type=int, default=d["num_envs"],
                   help="environments stepped in parallel (per seed)")
    g.add_argument("--num-steps", type=int, default=d["num_steps"],
                   help="rollout length: steps per environment per update")
    g.add_argument("--total-timesteps", type=int, default=d["total_timesteps"],
                   help="environment steps per seed; updates = this // (num_envs * num_steps)")
    g.add_argument("--update-epochs", type=int, default=d["update_epochs"],
                   help="passes over each rollout")
    g.add_argument("--num-minibatches", type=int, default=d["num_minibatches"],
                   help="minibatches per epoch; must divide num_envs * num_steps")
    g.add_argument("--lr", type=float, default=d["lr"], help="Adam learning rate")
    g.add_argument("--anneal-lr", action=argparse.BooleanOptionalAction,
                   default=d["anneal_lr"], help="decay the learning rate linearly to 0")
    g.add_argument("--max-grad-norm", type=float, default=d["max_grad_norm"],
                   help="clip gradients to this global norm")
    g.add_argument("--seed", type=int, default=d["seed"], help="random seed")
    g.add_argument("--seeds", type=int, default=d["seeds"],
                   help="independent models trained at once (vmap over seeds)")
    g.add_argument("--hidden", type=int, default=d["hidden"], help="network width")
    g.add_argument("--init-from", metavar="DIR", default=None,
                   help="start from the latest checkpoint of another run (e.g. imitation): "
                        "its seed-0 network, which every --seeds model starts from")
    add_algorithm_flags(g, d)
    e = p.add_argument_group("environment")
    e.add_argument("--num-nodes", type=int, default=d["num_nodes"], help="nodes per cluster")
    e.add_argument("--queue-len", type=int, default=d["queue_len"], help="queue slots")
    e.add_argument("--episode-len", type=int, default=d["episode_len"],
                   help="decisions per episode")
    e.add_argument("--weights", type=float, nargs=3, default=list(d["weights"]),
                   metavar=("PERF", "ENERGY", "REL"),
                   help="objective weights (performance, energy, reliability); the "
                        "evaluation uses them, training too unless --sample-weights")
    e.add_argument("--sample-weights", action=argparse.BooleanOptionalAction,
                   default=d["sample_weights"],
                   help="train on objective weights drawn per episode (shown to the policy), "
                        "so one model serves many preferences")
    o = p.add_argument_group("outputs")
    o.add_argument("--out", metavar="DIR", default=d["out"], help="run directory")
    o.add_argument("--resume", metavar="DIR", default=None,
                   help="continue the interrupted run in DIR from its newest good checkpoint "
                        "with its saved configuration; only --stop-after-updates and the "
                        "device and host flags may be given with it (others are refused)")
    o.add_argument("--overwrite", action="store_true",
                   help="replace the run already in --out (its config, metrics, curve, "
                        "evaluation and checkpoints); without it a non-empty --out is refused")
    o.add_argument("--log-every", type=int, default=d["log_every"],
                   help="updates per compiled chunk: metrics and progress bar refresh")
    o.add_argument("--checkpoint-every", type=int, default=d["checkpoint_every"],
                   help="updates between checkpoints (rounded up to a multiple of "
                        "--log-every); one is always written at the end")
    o.add_argument("--eval-episodes", type=int, default=d["eval_episodes"],
                   help="held-out episodes for eval.json (0: skip the evaluation)")
    o.add_argument("--stop-after-updates", type=int, default=None, metavar="U",
                   help="stop after U updates as if interrupted (checkpoint saved); "
                        "continue with --resume")
    h = p.add_argument_group("devices and hosts")
    h.add_argument("--devices", type=int, default=argparse.SUPPRESS, metavar="N",
                   help="local devices to split the environments and minibatches over, "
                        "data parallel (default: every local device); with --seeds, every "
                        "seed is split so; the metrics do not depend on N")
    multihost.add_flags(h)
    return p


def config_from_args(args: argparse.Namespace, algorithm: str, algorithm_keys: tuple) -> dict:
    config = {
        "algorithm": algorithm,
        **{k: getattr(args, k) for k in (
            "num_envs", "num_steps", "total_timesteps", "update_epochs", "num_minibatches",
            "lr", "anneal_lr", "max_grad_norm", "seed", "seeds", "hidden", "init_from",
            "log_every", "checkpoint_every", "eval_episodes") + tuple(algorithm_keys)},
        "env": {"num_nodes": args.num_nodes, "queue_len": args.queue_len,
                "episode_len": args.episode_len, "sample_weights": args.sample_weights,
                "weights": list(args.weights)},
    }
    batch = args.num_envs * args.num_steps
    config["num_updates"] = args.total_timesteps // batch if batch > 0 else 0
    return config


def _need(ok: bool, name: str, value, allowed: str):
    if not ok:
        raise ValueError(f"--{name.replace('_', '-')}={value!r} is invalid: allowed {allowed}")


def validate(config: dict, ranges: dict | None = None) -> None:
    """Raise ValueError naming the flag, its value and what is allowed."""
    for name in ("num_envs", "num_steps", "update_epochs", "num_minibatches", "seeds",
                 "hidden", "log_every", "checkpoint_every"):
        v = config[name]
        _need(isinstance(v, int) and v >= 1, name, v, "an integer >= 1")
    _need(config["eval_episodes"] >= 0, "eval_episodes", config["eval_episodes"],
          "an integer >= 0")
    _need(isinstance(config["seed"], int) and 0 <= config["seed"] < SEED_LIMIT, "seed",
          config["seed"], "an integer in [0, 2**32)")
    batch = config["num_envs"] * config["num_steps"]
    _need(config["total_timesteps"] >= batch, "total_timesteps", config["total_timesteps"],
          f"at least num_envs * num_steps = {batch} (one update)")
    _need(batch % config["num_minibatches"] == 0, "num_minibatches",
          config["num_minibatches"],
          f"a divisor of num_envs * num_steps = {config['num_envs']} * "
          f"{config['num_steps']} = {batch}")
    _need(math.isfinite(config["lr"]) and config["lr"] > 0, "lr", config["lr"],
          "a finite number > 0")
    _need(math.isfinite(config["max_grad_norm"]) and config["max_grad_norm"] > 0,
          "max_grad_norm", config["max_grad_norm"], "a finite number > 0")
    for name, (lo, hi) in (ranges or {}).items():
        v = config[name]
        _need(math.isfinite(v) and lo <= v <= hi, name, v, f"a number in [{lo}, {hi}]")
    env = config["env"]
    for name in ("num_nodes", "queue_len", "episode_len"):
        _need(isinstance(env[name], int) and env[name] >= 1, name, env[name], "an integer >= 1")
    try:
        train_env_params(config)
    except ValueError as err:  # EnvParams names the field and what is allowed
        raise ValueError(f"environment flags: {err}") from None


def check_devices(config: dict, devices: int | None) -> int:
    """The number of local devices to use (None: all), checked against the run: the
    environments and each minibatch must split evenly over the devices of every process.
    Raises ValueError naming `--devices`, its value and the counts allowed."""
    local, hosts = jax.local_device_count(), jax.process_count()
    n = local if devices is None else devices
    minibatch = config["num_envs"] * config["num_steps"] // config["num_minibatches"]

    def fits(d):
        return config["num_envs"] % (d * hosts) == 0 and minibatch % (d * hosts) == 0

    _need(isinstance(n, int) and 1 <= n <= local, "devices", n,
          f"1..{local}, the number of devices of this process")
    if not fits(n):
        allowed = ", ".join(str(d) for d in range(1, local + 1) if fits(d)) or "none"
        times = f", times {hosts} processes," if hosts > 1 else ""
        _need(False, "devices", n,
              f"{allowed}: device counts up to {local}{times} that divide num_envs = "
              f"{config['num_envs']} and the minibatch, num_envs * num_steps / "
              f"num_minibatches = {minibatch}")
    return n


def parse(argv, description: str, algorithm: str, defaults: dict,
          add_algorithm_flags: Callable, algorithm_keys: tuple, ranges: dict):
    """Parse and check the flags: (config, out_dir, resume, stop_after, devices, overwrite). Errors
    exit with a message naming the flag before any work starts."""
    parser = build_parser(f"train/{algorithm}.py", description, defaults, add_algorithm_flags)
    args = parser.parse_args(argv)
    try:
        multihost.initialize(args)
    except (ValueError, RuntimeError) as err:
        parser.error(str(err))
    config, out, resume = _parse_config(parser, args, algorithm, algorithm_keys, ranges,
                                        argv if argv is not None else sys.argv[1:])
    if args.stop_after_updates is not None and args.stop_after_updates < 1:
        parser.error(f"--stop-after-updates={args.stop_after_updates} is invalid: "
                     "allowed an integer >= 1")
    try:
        devices = check_devices(config, getattr(args, "devices", None))
    except ValueError as err:
        parser.error(str(err))
    return config, out, resume, args.stop_after_updates, devices, args.overwrite


# Flags --resume accepts: they change how the run continues, not what it is.
RESUME_FLAGS = {"--resume", "--stop-after-updates", "--devices", "--coordinator",
                "--num-processes", "--process-id"}


def _flags_given(parser: argparse.ArgumentParser, argv: list[str]) -> set[str]:
    """The long option names written on the command line (abbreviations resolved)."""
    names = {opt for action in parser._actions for opt in action.option_strings
             if opt.startswith("--")}
    given = set()
    for token in argv:
        if not token.startswith("--") or token == "--":
            continue
        word = token.split("=", 1)[0]
        match = [n for n in names if n == word] or [n for n in names if n.startswith(word)]
        if len(match) == 1:
            given.add(match[0])
    return given


RUN_FILES = (ckpt.CONFIG_FILE, "metrics.jsonl", "learning_curve.png", "eval.json",
             ckpt.CHECKSUM_FILE, ckpt.CHECKPOINT_DIR)


def check_out_dir(out: str, overwrite: bool) -> None:
    """Raise ValueError unless `out` may receive a new run: absent or empty, or (with
    `overwrite`) holding only a previous run's own files. Nothing is deleted here."""
    if not out:
        raise ValueError("--out '' is invalid: allowed a directory path")
    if os.path.exists(out) and not os.path.isdir(out):
        raise ValueError(f"--out {out!r} is a file: allowed a directory (new or empty)")
    if not os.path.isdir(out):
        return
    present = sorted(os.listdir(out))
    if not present:
        return
    if not overwrite and ckpt.checkpoint_steps(out):
        raise ValueError(f"--out {out!r} already holds a run's checkpoints: continue it with "
                         f"--resume {out}, replace it with --overwrite, or choose another --out")
    if not overwrite:
        listed = ", ".join(present[:5]) + (" ..." if len(present) > 5 else "")
        raise ValueError(f"--out {out!r} already holds files ({listed}): a new run needs an "
                         "empty or new directory (--overwrite replaces a previous run's "
                         "files), or choose another --out")
    foreign = [name for name in present if name not in RUN_FILES]
    if foreign:
        raise ValueError(f"--out {out!r} holds files that are not a run's ({', '.join(foreign[:5])}): "
                         "--overwrite replaces a previous run only; choose another --out")


def clear_run_files(out: str) -> None:
    """Delete a previous run's own files from `out` (after `check_out_dir(out, True)`)."""
    import shutil
    for name in RUN_FILES:
        path = os.path.join(out, name)
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.exists(path):
            os.unlink(path)


def _parse_config(parser, args, algorithm: str, algorithm_keys: tuple, ranges: dict,
                  argv: list[str] = ()):
    """(config, out_dir, resume) of the flags: a run to continue, or a new one."""
    if args.resume is not None:
        try:
            config = ckpt.load_config(args.resume)
        except (FileNotFoundError, ckpt.CheckpointError) as err:
            parser.error(str(err))
        refused = _flags_given(parser, argv) - RESUME_FLAGS
        if refused:
            parser.error(f"--resume {args.resume!r} continues the run with its saved "
                         f"configuration, so {', '.join(sorted(refused))} would be ignored: "
                         f"drop {'them' if len(refused) > 1 else 'it'} (allowed with --resume: "
                         f"{', '.join(sorted(RESUME_FLAGS - {'--resume'}))})")
        if config.get("algorithm") != algorithm:
            parser.error(f"--resume {args.resume!r} is a {config.get('algorithm')!r} run, "
                         f"not {algorithm!r}")
        fresh = config_from_args(parser.parse_args([]), algorithm, algorithm_keys)
        missing = sorted(set(fresh) - set(config)) + sorted(
            f"env.{k}" for k in set(fresh["env"]) - set(config.get("env", {})))
        if missing:
            parser.error(f"--resume {args.resume!r}: its config.json lacks {', '.join(missing)} "
                         "(not written by this version of the trainer)")
        if not ckpt.checkpoint_steps(args.resume):
            parser.error(f"--resume {args.resume!r} holds no checkpoint: the run stopped before "
                         "its first one was saved; start it again with a fresh --out")
        return config, args.resume, True
    config = config_from_args(args, algorithm, algorithm_keys)
    try:
        validate(config, ranges)
    except ValueError as err:
        parser.error(str(err))
    if args.init_from is not None:
        try:
            source = ckpt.load_config(args.init_from)
        except (FileNotFoundError, ckpt.CheckpointError) as err:
            parser.error(f"--init-from: {err}")
        if source["hidden"] != config["hidden"]:
            parser.error(f"--init-from {args.init_from!r} holds a network of --hidden "
                         f"{source['hidden']}, this run asks for --hidden {config['hidden']}")
        if not ckpt.checkpoint_steps(args.init_from):
            parser.error(f"--init-from {args.init_from!r} holds no checkpoint to start from")
    # Process 0 alone judges --out: the others would race with its first writes there.
    if jax.process_index() == 0:
        try:
            check_out_dir(args.out, args.overwrite)
        except ValueError as err:
            parser.error(str(err))
    return config, args.out, False


# --------------------------------------------------------------------------
# The run loop
# --------------------------------------------------------------------------

def seed_keys(config: dict) -> jax.Array:
    """One key per seed (`--seeds`), from `--seed`."""
    return jax.random.split(jax.random.PRNGKey(config["seed"]), config["seeds"])


def _initial_params(config: dict):
    """Network parameters to start from (--init-from), or None for a fresh init."""
    if not config.get("init_from"):
        return None
    return ckpt.load_variables(config["init_from"], seed=0)


def over_seeds(fn: Callable, seeds: int) -> Callable:
    """`fn` mapped over the leading seed axis of its argument and outputs: `jax.vmap` for
    several seeds; for one seed the axis is dropped and added back instead, because a
    vmap of size one made the PPO update about 40 % slower on CPU (its matrix products
    become batched ones)."""
    if seeds > 1:
        return jax.vmap(fn)

    def one(tree):
        out = fn(jax.tree_util.tree_map(lambda x: x[0], tree))
        return jax.tree_util.tree_map(lambda x: x[None], out)

    return one


def training_mesh(devices: int) -> jax.sharding.Mesh:
    """The one-axis mesh of a run: the first `devices` local devices of every process."""
    chosen = [d for p in range(jax.process_count())
              for d in [d for d in jax.devices() if d.process_index == p][:devices]]
    return dist.make_mesh(chosen)


def runner_shardings(runner: Runner, mesh: jax.sharding.Mesh) -> Runner:
    """Where the leaves of a Runner batched over seeds live: environment states and
    observations split along their environment axis (axis 1, after the seeds), the
    parameters, optimiser state, key and update count replicated on every device."""
    split = NamedSharding(mesh, P(None, dist.AXIS))
    replicated = NamedSharding(mesh, P())

    def every(tree, sharding):
        return jax.tree_util.tree_map(lambda _: sharding, tree)

    return Runner(params=every(runner.params, replicated),
                  opt_state=every(runner.opt_state, replicated),
                  env_state=every(runner.env_state, split), obs=every(runner.obs, split),
                  rng=replicated, update=replicated)


def _on_mesh(tree, sharding: NamedSharding):
    """Host values (the same on every process) as global arrays with `sharding`."""
    def put(x):
        x = np.asarray(x)
        return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])
    return jax.tree_util.tree_map(put, tree)


def _save(mngr: ocp.CheckpointManager, runner: Runner, out: str) -> None:
    """Save the runner (as sharded: every process writes its part) and the policy's
    parameters as host arrays, which load on any devices (`vte.load_policy`), then record
    the checkpoint's checksum. Ctrl-C is held off until both are done, so a second one
    while saving leaves no half-written checkpoint."""
    step = int(np.asarray(runner.update)[0])
    if step in mngr.all_steps():
        if ckpt.verify_checkpoint(out, step) is None:
            return
        mngr.delete(step)                      # a damaged copy of this step: save it afresh
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:   # not the main thread: signals cannot be set, nor arrive here
        previous = None
    try:
        mngr.save(step, args=ocp.args.Composite(
            state=ocp.args.StandardSave(runner),
            policy=ocp.args.StandardSave({"params": jax.device_get(runner.params["params"])})))
        mngr.wait_until_finished()
        if jax.process_index() == 0:
            ckpt.record_checksum(out, step)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def _restore(mngr: ocp.CheckpointManager, abstract: Runner, shardings: Runner,
             out: str) -> Runner:
    """The newest checkpoint that verifies against its checksum and restores, placed as
    `shardings` asks, whatever devices saved it; damaged ones are named and skipped."""
    target = jax.tree_util.tree_map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), abstract, shardings)

    def restore(step):
        return mngr.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(target))).state
    _, runner = ckpt.restore_newest_good(out, restore, sorted(mngr.all_steps()))
    return runner


def _rows(metrics: dict, first_update: int, config: dict, sps: float, elapsed: float,
          devices: int):
    """metrics: name -> (seeds, n) arrays; yields one JSON row per update and seed."""
    batch = config["num_envs"] * config["num_steps"]
    arrays = {k: np.asarray(v) for k, v in metrics.items()}
    seeds, n = next(iter(arrays.values())).shape
    for i in range(n):
        update = first_update + i + 1
        for s in range(seeds):
            row = {"update": update, "seed": s, "step": update * batch}
            for k, v in arrays.items():
                x = float(v[s, i])
                row[k] = x if math.isfinite(x) else None
            row["sps"] = sps
            row["time"] = elapsed
            row["devices"] = devices
            yield row


def _read_rows(path: str, max_update: int) -> list[dict]:
    """The logged rows up to the checkpoint's update (a line cut short by an interrupt
    is dropped)."""
    if not os.path.exists(path):
        return []
    rows = []
    with open(path) as f:
        for line in f:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return [r for r in rows if r["update"] <= max_update]


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def _interrupt_on_sigterm():
    """Treat SIGTERM (a preempted job, `kill`) like Ctrl-C: checkpoint, then stop.
    Returns the previous handler, or None when not on the main thread."""
    try:
        return signal.signal(signal.SIGTERM, _raise_interrupt)
    except ValueError:  # signals can only be set from the main thread
        return None


# Compiled programs by configuration: runs of one configuration in a process (a resumed
# run, a sweep over output settings) compile once. Keys leave out what only shapes outputs.
_COMPILED: dict = {}
_OUTPUT_KEYS = ("log_every", "checkpoint_every", "eval_episodes", "init_from")


def _compiled(config: dict, what, build: Callable):
    key = (json.dumps({k: v for k, v in config.items() if k not in _OUTPUT_KEYS},
                      sort_keys=True), what)
    if key not in _COMPILED:
        _COMPILED[key] = build()
    return _COMPILED[key]


def run(config: dict, make_update: Callable, out: str, resume: bool = False,
        stop_after: int | None = None, progress: bool = True,
        devices: int | None = None, overwrite: bool = False) -> dict:
    """Train (or continue) a run on `devices` local devices of every process (None: all);
    write its outputs (process 0). Returns the evaluation (or {}).

    A new run needs `out` absent or empty; `overwrite` first deletes a previous run's own
    files there (and refuses a directory holding anything else)."""
    from tqdm.auto import tqdm

    mesh = training_mesh(check_devices(config, devices))
    primary = jax.process_index() == 0
    if not resume and primary:     # process 0 alone: the others would race with its writes
        check_out_dir(out, overwrite)
        if overwrite:
            clear_run_files(out)
    mngr = ckpt.checkpoint_manager(out)
    if primary:
        ckpt.save_config(out, config)
    init, update = make_update(config)
    num_updates, log_every = config["num_updates"], config["log_every"]
    ckpt_every = math.ceil(config["checkpoint_every"] / log_every) * log_every
    replicated = NamedSharding(mesh, P())
    keys = _on_mesh(seed_keys(config), replicated)
    metrics_path = os.path.join(out, "metrics.jsonl")
    placement = tuple(d.id for d in mesh.devices.flat)   # compiled programs depend on it

    init_params = None if resume else _on_mesh(_initial_params(config), replicated)
    batched_init = jax.vmap(init, (0, None))
    abstract = jax.eval_shape(batched_init, keys, None)
    shardings = runner_shardings(abstract, mesh)
    if resume:
        runner = _restore(mngr, abstract, shardings, out)
        start = int(np.asarray(runner.update)[0])
        rows = _read_rows(metrics_path, start) if primary else []
        elapsed = rows[-1]["time"] if rows else 0.0
    else:
        runner = _compiled(config, ("init", init_params is None, placement),
                           lambda: jax.jit(batched_init, out_shardings=shardings)
                           )(keys, init_params)
        start, rows, elapsed = 0, [], 0.0
    if primary:   # rows past the restored checkpoint are dropped, in one atomic write
        atomic_write_text(metrics_path, "".join(json.dumps(row) + "\n" for row in rows))

    def get_chunk(length):
        """`length` updates of every seed at once, compiled ahead of time for the mesh."""
        def chunk(runner):
            return jax.lax.scan(lambda r, _: update(r), runner, None, length)

        def build():
            with jax.set_mesh(mesh):   # split_over_devices reads it
                return jax.jit(over_seeds(chunk, config["seeds"]), in_shardings=(shardings,),
                               out_shardings=(shardings, replicated)).lower(runner).compile()
        return _compiled(config, ("chunk", length, placement), build)

    end = num_updates if stop_after is None else min(num_updates, start + stop_after)
    batch = config["num_envs"] * config["num_steps"] * config["seeds"]
    u, bar = start, None
    previous = _interrupt_on_sigterm()
    try:
        if u < end:
            if progress and primary:
                print(f"{config['algorithm']}: compiling ...", file=sys.stderr, flush=True)
            get_chunk(min(log_every, end - u))
        bar = tqdm(total=num_updates, initial=start, unit="update",
                   disable=not (progress and primary), desc=config["algorithm"],
                   dynamic_ncols=True)
        while u < end:
            length = min(log_every, end - u)
            fn = get_chunk(length)
            t0 = time.perf_counter()
            new_runner, metrics = fn(runner)
            jax.block_until_ready(new_runner)
            dt = time.perf_counter() - t0
            sps = length * batch / dt
            new_rows = list(_rows(metrics, u, config, sps, elapsed + dt, mesh.size))
            if primary:
                with open(metrics_path, "a") as f:
                    for row in new_rows:
                        f.write(json.dumps(row) + "\n")
            # The runner advances once its rows are written: an interrupt saves a state
            # whose every update is logged (rows past it are dropped on resume).
            runner, elapsed, u = new_runner, elapsed + dt, u + length
            rows.extend(new_rows)
            bar.update(length)
            bar.set_postfix(_postfix(new_rows[-config["seeds"]:], sps))
            if u % ckpt_every == 0 or u == end:
                _save(mngr, runner, out)
    except KeyboardInterrupt:
        _save(mngr, runner, out)
        if bar is not None:
            bar.close()
        print(f"\ninterrupted after {int(np.asarray(runner.update)[0])} updates; checkpoint "
              f"saved. Continue with: --resume {out}", file=sys.stderr)
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    if bar is not None:
        bar.close()
    if not primary:
        return {}
    plot_learning_curve(rows, os.path.join(out, "learning_curve.png"), config)
    if u < num_updates:
        print(f"stopped after {u} of {num_updates} updates; continue with --resume {out}")
        return {}
    if config["eval_episodes"] == 0:
        return {}
    return evaluate_run(config, jax.device_get(runner.params), out)


def _postfix(rows: list[dict], sps: float) -> dict:
    def mean(key):
        vals = [r[key] for r in rows if r.get(key) is not None]
        return float(np.mean(vals)) if vals else float("nan")
    return {"match": f"{mean('greedy_match'):.3f}", "regret": f"{mean('regret'):.4f}",
            "loss": f"{mean('loss'):.3f}", "sps": f"{sps:,.0f}"}


# --------------------------------------------------------------------------
# Outputs: learning curve and evaluation
# --------------------------------------------------------------------------

CURVES = (("greedy_match", "optimal-match rate (greedy, fresh rollout)"),
          ("regret", "mean regret per decision (behaviour)"),
          ("return", "episode return"),
          ("loss", "loss"))


def plot_learning_curve(rows: list[dict], path: str, config: dict) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    for ax, (key, title) in zip(axes.ravel(), CURVES):
        for s in range(config["seeds"]):
            pts = [(r["step"], r[key]) for r in rows if r["seed"] == s and r.get(key) is not None]
            if pts:
                x, y = zip(*pts)
                ax.plot(x, y, label=f"seed {s}", lw=1)
        if key == "regret" and ax.lines and all(min(ln.get_ydata()) > 0 for ln in ax.lines):
            ax.set_yscale("log")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("env steps (per seed)")
        ax.grid(alpha=0.3)
    if config["seeds"] > 1:
        axes[0, 0].legend(fontsize=8)
    fig.suptitle(f"{config['algorithm']}: {config['env']['num_nodes']} nodes, "
                 f"{config['num_envs']} envs")
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=100, format="png"))
    plt.close(fig)


def evaluate_run(config: dict, params, out: str) -> dict:
    """Evaluate each seed's greedy policy against every heuristic and the optimum on
    held-out scenarios; write `eval.json` and print the table."""
    try:
        from vte import heuristics
        from vte.evaluate import evaluate
    except ImportError:
        print("vte.evaluate is not available: eval.json skipped")
        return {}
    net = make_network(config)
    policies = {}
    for s in range(config["seeds"]):
        variables = {"params": jax.tree_util.tree_map(lambda x: x[s], params["params"])}
        policies["policy" if s == 0 else f"policy_seed{s}"] = make_policy(net, variables)
    policies.update(heuristics.ALL)
    policies["optimal"] = "optimal"
    key = jax.random.fold_in(jax.random.PRNGKey(config["seed"]), 0x5EED_E7A1)
    results = evaluate(policies, eval_env_params(config), key, config["eval_episodes"])
    results = jax.tree_util.tree_map(lambda x: x.item() if hasattr(x, "item") else x, results)
    atomic_write_text(os.path.join(out, "eval.json"), json.dumps(results, indent=2))
    print(format_table(results))
    return results


def format_table(results: dict) -> str:
    cols = ("match_rate", "mean_regret", "cost_ratio", "invalid_rate", "energy")
    cols = tuple(c for c in cols if any(c in r for r in results.values()))
    order = sorted(results, key=lambda n: results[n].get("mean_regret", math.inf))
    width = max(len(n) for n in results) + 2
    lines = ["policy".ljust(width) + "".join(c.rjust(14) for c in cols)]
    for name in order:
        vals = [results[name].get(c) for c in cols]
        lines.append(name.ljust(width) + "".join(
            (f"{v:14.4g}" if isinstance(v, (int, float)) else f"{'-':>14}") for v in vals))
    return "\n".join(lines)


def main(argv, description: str, algorithm: str, defaults: dict, add_algorithm_flags,
         algorithm_keys: tuple, ranges: dict, make_update: Callable) -> dict:
    config, out, resume, stop_after, devices, overwrite = parse(
        argv, description, algorithm, defaults, add_algorithm_flags, algorithm_keys, ranges)
    try:
        return run(config, make_update, out, resume=resume, stop_after=stop_after,
                   devices=devices, overwrite=overwrite)
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    except ckpt.CheckpointError as err:
        raise SystemExit(f"error: {err}") from None
