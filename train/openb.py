"""The OpenB trace replay as a training environment (`--env openb`).

    python train/imitate.py --env openb --teacher fgd --out runs/openb_imitate
    python train/ppo.py --env openb --init-from runs/openb_imitate --gamma 0.99 --lr 1e-3 \
        --num-minibatches 8 --out runs/openb_ppo

Training episodes replay workloads of the `--trace` pod file on random sub-clusters of
`--num-nodes` GPU nodes (the workload's GPU demand tuned to each sub-cluster,
`vte.openb.env.make_params(subset=...)`), one workload per seed 10_000 + i, i <
`--workloads`. The reward of a decision is the share of the sub-cluster's GPUs it
allocated, in percent (the environment's reward, GPUs, scaled by 100 / the sub-cluster's
GPUs), so an episode's return is the published metric, GPU allocation at the end in %,
whatever the sub-cluster's size. Imitation labels each visited state with the `--teacher`
policy's action (`vte.openb.env.policy_action`).

The evaluation (`eval.json`) replays the published seeds 42, 43, ... (`--eval-episodes`
of them, 10 by default) on the full 1213-node cluster with `vte.openb.experiment.run_grid`:
each trained seed's network beside the six published policies, on the published metrics
(GPU allocation at 100 % arrived and at the end, failed pods, fragmentation). With
`--nodes all` sub-clusters may draw CPU-only nodes; one that holds no GPU is drawn again.
"""

from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp

from train.envs import TrainEnv
from vte import checkpoint as ckpt
from vte.files import atomic_write_text
from vte.openb import env as oenv
from vte.openb.network import as_policy
from vte.openb.policies import POLICIES
from vte.openb.trace import MILLI, load_nodes, load_pods

TRAIN_SEED0 = 10_000        # training workloads: seeds 10_000 + i, apart from the published 42..
EVAL_SEED0 = 42             # the published seeds
EVAL_EPISODES = 10          # held-out workloads when --eval-episodes is not given
ALLOC = ("alloc_end", "GPU allocation at episode end (% of the sub-cluster's GPUs)", "alloc")
CURVES = (ALLOC, ("greedy_match", "greedy action = the teacher's", "match"),
          ("failed", "failed pods per episode", "failed"), ("loss", "loss", "loss"))
CURVES_NO_TEACHER = (ALLOC, ("reward", "reward per decision (% of the GPUs)", "reward"),
                     ("failed", "failed pods per episode", "failed"), ("loss", "loss", "loss"))


def load_trace(config):
    """(nodes, pods) of the run: the `--nodes` file (the paper's 1213 GPU nodes by default)
    and the `--trace` pod file."""
    nodes = load_nodes(config.nodes)
    return nodes, load_pods(config.trace, nodes)


def _stats(logits: jax.Array, info: dict, done: jax.Array) -> dict:
    out = {
        "invalid_rate": info["invalid_action"].mean(),
        "failed_rate": info["failed"].mean(),
        "alloc_end_sum": jnp.sum(jnp.where(done, info["alloc_percent"], 0.0)),
        "frag_end_sum": jnp.sum(jnp.where(done, info["frag_percent"], 0.0)),
        "failed_sum": jnp.sum(jnp.where(done, info["failed_pods"], 0)).astype(jnp.float32),
        "episodes": jnp.sum(done),
    }
    if "optimal_action" in info:
        out["match_rate"] = info["matched_optimal"].mean()
        out["greedy_match"] = (jnp.argmax(logits, -1) == info["optimal_action"]).mean()
    return out


def make_openb_env(config) -> TrainEnv:
    """The replay on sub-clusters, with the teacher's labels when the config names one."""
    nodes, pods = load_trace(config)
    subset = config.num_nodes if config.num_nodes < len(nodes) else None
    params = oenv.make_params(nodes, pods, range(TRAIN_SEED0, TRAIN_SEED0 + config.workloads),
                              tune=config.tune, subset=subset)
    name = getattr(config, "teacher", None)
    teacher = oenv.policy_action(POLICIES[name]) if name in POLICIES else None

    def step(key, state, action):
        label = teacher(key, state, params) if teacher is not None else None
        total = state.cluster.total_gpu_milli          # this episode's, before an auto-reset
        obs, state, reward, terminated, truncated, info = oenv.step(key, state, action, params)
        reward = reward * (100.0 * MILLI) / jnp.maximum(total, 1)
        if label is not None:
            info["optimal_action"] = label
            info["matched_optimal"] = action == label
        return obs, state, reward, terminated, truncated, info

    return TrainEnv(reset=lambda key: oenv.reset(key, params), step=step, stats=_stats,
                    network=ckpt.network_from_config(config.to_dict()), evaluate=evaluate,
                    curves=CURVES if teacher is not None else CURVES_NO_TEACHER)


def evaluate(config, params, out: str) -> dict:
    """Each trained seed's network and the six published policies replayed on the held-out
    published seeds, full cluster; writes `eval.json` (the `run_grid` result) and prints
    the table beside the published figures."""
    from vte.openb.experiment import format_table, run_grid

    nodes, pods = load_trace(config)
    net = ckpt.network_from_config(config.to_dict())
    policies = dict(POLICIES)
    for s in range(config.seeds):
        variables = {"params": jax.tree_util.tree_map(lambda x: x[s], params["params"])}
        name = "learned" if s == 0 else f"learned_seed{s}"
        policies[name] = as_policy(net, variables, max(len(nodes.models), 1))
    episodes = config.eval_episodes if config.eval_episodes is not None else EVAL_EPISODES
    result = run_grid(nodes, pods, policies, range(EVAL_SEED0, EVAL_SEED0 + episodes),
                      tune=config.tune, progress=True)
    atomic_write_text(os.path.join(out, "eval.json"), json.dumps(result, indent=1))
    print(format_table(result))
    return result
