"""The environments a trainer can learn on, behind one small interface (`TrainEnv`).

    env = make_env(config)                       # --env synthetic | openb
    obs, state = env.reset(key)                  # one environment; the trainer vmaps
    obs, state, reward, terminated, truncated, info = env.step(key, state, action)

`info["optimal_action"]` is the label imitation learns (vte's known optimum on synthetic
clusters, the chosen published policy's action on the OpenB trace); on synthetic clusters
`info["action_costs"]` holds the cost of every action (+inf where infeasible), which
imitation distils. `env.stats` gives the scalars each rollout step logs, `env.network` the
policy network for the environment's observation, and `env.evaluate(config, params, out)`
writes `eval.json`.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Callable

import jax
import jax.numpy as jnp

import vte
from vte import checkpoint as ckpt
from vte.files import atomic_write_text


@dataclasses.dataclass(frozen=True)
class TrainEnv:
    """An environment as the trainers see it (each function for one environment)."""

    reset: Callable            # (key) -> (obs, state)
    step: Callable             # (key, state, action) -> (obs, state, reward, term, trunc, info)
    stats: Callable            # (logits, info, done) -> {name: scalar}, batched over envs;
                               # NAME_sum over ended episodes, with "episodes" their count
    network: Any               # flax module: obs -> (masked logits (..., A), value (...))
    evaluate: Callable         # (config, params stacked over seeds, out) -> results dict
    curves: tuple              # four (metric, title, short name) of the learning curve
    reward: Callable | None = None   # (state, action) -> the reward step would give, without
                                     # stepping (PPO's --samples-per-state); None if unknown


# --------------------------------------------------------------------------
# vte's synthetic clusters
# --------------------------------------------------------------------------

def synthetic_params(config, train: bool) -> vte.EnvParams:
    """The environment the policy trains on (`train`), or its held-out evaluation: the same
    cluster sizes with the fixed objective weights."""
    return vte.EnvParams(num_nodes=config.num_nodes, queue_len=config.queue_len,
                         episode_len=config.episode_len,
                         sample_weights=config.sample_weights and train,
                         weights=tuple(config.weights))


def _synthetic_stats(logits: jax.Array, info: dict, done: jax.Array) -> dict:
    """Behaviour regret and match, the greedy action's match (on states the network has
    not trained on yet), invalid actions, and the returns of ended episodes."""
    return {
        "regret": info["regret"].mean(),
        "match_rate": info["matched_optimal"].mean(),
        "greedy_match": (jnp.argmax(logits, -1) == info["optimal_action"]).mean(),
        "invalid_rate": info["invalid_action"].mean(),
        "return_sum": jnp.sum(jnp.where(done, -info["counters"].regret, 0.0)),
        "episodes": jnp.sum(done),
    }


EVAL_EPISODES = 64      # held-out episodes when --eval-episodes is not given


def _synthetic_evaluate(config, params, out: str) -> dict:
    """Each seed's greedy policy against every heuristic and the optimum on held-out
    scenarios (`vte.evaluate`); writes `eval.json` and prints `vte.evaluate.table`."""
    from vte import heuristics
    from vte.evaluate import evaluate, table

    net = ckpt.network_from_config(config.to_dict())
    policies = {}
    for s in range(config.seeds):
        variables = {"params": jax.tree_util.tree_map(lambda x: x[s], params["params"])}
        policies["policy" if s == 0 else f"policy_seed{s}"] = vte.make_policy(net, variables)
    policies.update(heuristics.ALL)
    policies["optimal"] = "optimal"
    key = jax.random.fold_in(jax.random.PRNGKey(config.seed), 0x5EED_E7A1)
    episodes = config.eval_episodes if config.eval_episodes is not None else EVAL_EPISODES
    results = evaluate(policies, synthetic_params(config, train=False), key, episodes)
    atomic_write_text(os.path.join(out, "eval.json"), json.dumps(results, indent=2))
    print(table(results))
    return results


SYNTHETIC_CURVES = (("greedy_match", "optimal-match rate (greedy, fresh rollout)", "match"),
                    ("regret", "mean regret per decision (behaviour)", "regret"),
                    ("return", "episode return", "return"),
                    ("loss", "loss", "loss"))


def _synthetic(config) -> TrainEnv:
    params = synthetic_params(config, train=True)

    def step(key, state, action):
        out = vte.step(key, state, action, params)
        # The cost of every action in the state the decision was taken in (infeasible
        # ones: +inf), which imitation's distillation loss reads (`--distill-temp`).
        sc = state.scores
        out[-1]["action_costs"] = jnp.where(sc.feasible, sc.cost, jnp.inf)
        return out

    return TrainEnv(reset=lambda key: vte.reset(key, params), step=step,
                    reward=lambda state, action: vte.reward(state, action, params),
                    stats=_synthetic_stats,
                    network=ckpt.network_from_config(config.to_dict()),
                    evaluate=_synthetic_evaluate, curves=SYNTHETIC_CURVES)


# --------------------------------------------------------------------------
# Choosing one
# --------------------------------------------------------------------------

def make_env(config) -> TrainEnv:
    """The training environment `config.env` names."""
    if config.env == "openb":
        from train.openb import make_openb_env
        return make_openb_env(config)
    return _synthetic(config)
