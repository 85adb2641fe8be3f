"""The registration of vte's synthetic cluster, "Cluster-v0" (--env synthetic).

    env, params = vte.make("Cluster-v0", num_nodes=16)    # EnvParams fields as keywords

What every tool needs of it (`vte.registry.Registration`): its section of a run's
configuration (`ClusterConfig`: `num_nodes`, `queue_len`, `episode_len`, `weights`,
`sample_weights`), the network
(`vte.SchedulerNet`), the reference policies (the heuristics of `vte.cluster.heuristics` and the
known optimum, each `(key, state, params) -> action`), the evaluation of a trained run
(`vte.evaluate` against every heuristic and the optimum), its picture (`vte.render`) and
DECICE's API (`python -m vte.serve`, `vte.cluster.decice`).
"""

from __future__ import annotations

import dataclasses
import json
import os

import jax
import jax.numpy as jnp

from vte.cluster import env as _env
from vte.files import atomic_write_text
from vte.cluster.observation import get_obs
from vte.config import check_fields, option
from vte.cluster.params import EnvParams
from vte.registry import Registration, flag_error

EVAL_EPISODES = 64      # held-out episodes of a run's evaluation when --eval-episodes is not given


@dataclasses.dataclass(frozen=True)
class ClusterConfig:
    """Cluster-v0's section of a run's configuration (`--env synthetic`; "env" in
    config.json): `EnvParams` fields, under the names `vte.make("Cluster-v0", ...)` takes."""

    num_nodes: int = option(64, "nodes per cluster", low=1, group="environment")
    queue_len: int = option(8, "queue slots", low=1, group="environment")
    episode_len: int = option(128, "decisions per episode", low=1, group="environment")
    weights: tuple[float, float, float] = option(
        (1.0, 1.0, 1.0), "objective weights (performance, energy, reliability); the "
        "evaluation uses them, training too unless --sample-weights", group="environment",
        metavar=("PERF", "ENERGY", "REL"))
    sample_weights: bool = option(True, "train on objective weights drawn per episode (shown "
                                  "to the policy), so one model serves many preferences",
                                  group="environment")

    def __post_init__(self):
        check_fields(self)

    def summary(self) -> str:
        """What one environment is, for a trainer's first line and its curve's title."""
        return f"{self.num_nodes} nodes"


def make(params: EnvParams | None = None, **fields) -> tuple[_env.SyntheticEnv, EnvParams]:
    """(env, params): `params`, or `EnvParams(**fields)`, not both; unknown fields raise
    ValueError naming them and the allowed ones."""
    if params is not None and fields:
        raise ValueError(f"pass params or EnvParams fields, not both: got params and "
                         f"{sorted(fields)}")
    if params is not None:
        if not isinstance(params, EnvParams):
            raise ValueError(f"params={params!r} is invalid: allowed a vte.EnvParams or None")
        return _env.ENV, params
    allowed = EnvParams.__dataclass_fields__
    unknown = sorted(set(fields) - set(allowed))
    if unknown:
        raise ValueError(f"{unknown} are not EnvParams fields: allowed {sorted(allowed)}")
    return _env.ENV, EnvParams(**fields)


def run_params(config, train: bool) -> tuple[_env.SyntheticEnv, EnvParams]:
    """The environment a run trains on (`train`), or its held-out evaluation: the same
    cluster sizes with the fixed objective weights."""
    c = config.env_config
    return _env.ENV, EnvParams(num_nodes=c.num_nodes, queue_len=c.queue_len,
                               episode_len=c.episode_len,
                               sample_weights=c.sample_weights and train,
                               weights=tuple(c.weights))


def check_config(config) -> None:
    teacher = getattr(config, "teacher", None)
    if teacher not in (None,) + TEACHERS:
        raise flag_error("teacher", teacher, "optimal with --env synthetic (the six "
                         "published policies are OpenB's)", depends=("env",))
    try:
        run_params(config, train=True)
    except ValueError as err:   # EnvParams names the field and what is allowed
        raise ValueError(f"environment flags: {err}") from None


def network(hidden: int):
    from vte.cluster.network import SchedulerNet
    return SchedulerNet(hidden=hidden, head_hidden=hidden)


def optimal(key, state, params) -> jax.Array:
    """The known optimal action of the state (`vte.cluster.scoring`), () int32."""
    del key, params
    return state.scores.optimum.astype(jnp.int32)


def _on_state(heuristic):
    def act(key, state, params):
        return jnp.asarray(heuristic(key, get_obs(state, params), params), jnp.int32)
    act.__name__ = getattr(heuristic, "__name__", "heuristic")
    return act


def policies() -> dict:
    """The known optimum and every heuristic of `vte.cluster.heuristics`, each
    `(key, state, params) -> action`."""
    from vte.cluster import heuristics
    return {"optimal": optimal, **{name: _on_state(h) for name, h in heuristics.ALL.items()}}


TEACHERS = ("optimal",)


def metrics(info: dict, done) -> dict:
    """Behaviour regret, invalid actions, and the returns of ended episodes."""
    return {
        "regret": info["regret"].mean(),
        "invalid_rate": info["invalid_action"].mean(),
        "return_sum": jnp.sum(jnp.where(done, -info["counters"].regret, 0.0)),
        "episodes": jnp.sum(done),
    }


CURVES = (("regret", "mean regret per decision (behaviour)", "regret"),
          ("return", "episode return", "return"))


def action_costs(state, params) -> jax.Array:
    """The cost of every action in `state` ((N + 1,) float32, +inf where infeasible),
    which imitation's distillation loss reads (`--distill-temp`)."""
    sc = state.scores
    return jnp.where(sc.feasible, sc.cost, jnp.inf)


def load_policy(config: dict, variables, greedy: bool = True):
    from vte.cluster.network import make_policy
    return make_policy(network(config["hidden"]), variables, greedy)


def as_action(policy):
    """A policy of observations `(key, obs, params) -> action` (a heuristic, a loaded run)
    as one of states."""
    return _on_state(policy)


def run_make(config: dict) -> dict:
    """The EnvParams fields a training run's configuration records (its "env" section)."""
    fields = EnvParams.__dataclass_fields__
    return {k: tuple(v) if isinstance(v, list) else v
            for k, v in config.get("env", {}).items() if k in fields}


def evaluate(config, params, out: str) -> dict:
    """Each trained seed's greedy policy against every heuristic and the optimum on
    held-out scenarios (`vte.evaluate`); writes `eval.json` and prints the table."""
    from vte.cluster import heuristics
    from vte.cluster.evaluate import evaluate as run, table
    from vte.cluster.network import make_policy

    net = network(config.hidden)
    named = {}
    for s in range(config.seeds):
        variables = {"params": jax.tree_util.tree_map(lambda x: x[s], params["params"])}
        named["policy" if s == 0 else f"policy_seed{s}"] = make_policy(net, variables)
    named.update(heuristics.ALL)
    named["optimal"] = "optimal"
    key = jax.random.fold_in(jax.random.PRNGKey(config.seed), 0x5EED_E7A1)
    episodes = config.eval_episodes if config.eval_episodes is not None else EVAL_EPISODES
    results = run(named, run_params(config, train=False)[1], key, episodes)
    atomic_write_text(os.path.join(out, "eval.json"), json.dumps(results, indent=2))
    print(table(results))
    return results


def render(state, params, action=None, reference=None, caption=None):
    from vte.cluster.viewer import render as draw
    return draw(state, params, action, reference, caption)


REGISTRATION = Registration(
    id="Cluster-v0", flag="synthetic",
    summary="vte's synthetic heterogeneous cluster (cloud, edge, HPC) with a known optimum",
    make=make, config=ClusterConfig, check_config=check_config, run_params=run_params,
    network=network, policies=policies, default_policy="kube_default", teachers=TEACHERS, default_teacher="optimal",
    metrics=metrics, curves=CURVES, evaluate=evaluate, load_policy=load_policy,
    as_action=as_action, run_make=run_make, optimum="optimal", reward_fn=_env.reward, action_costs=action_costs, render=render,
    protocols={"decice": "vte.cluster.decice.cli:main"},
    evaluate_main="vte.cluster.evaluate_cli", evaluate_module="vte.cluster.evaluate",
    eval_episodes=EVAL_EPISODES,
    small={"num_nodes": 4, "queue_len": 2, "episode_len": 5, "num_sites": 2})
