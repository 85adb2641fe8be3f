"""Evaluation harness: schedulers side by side on the same held-out scenarios.

    results = vte.evaluate({"kube": vte.cluster.heuristics.kube_default, "opt": "optimal"},
                           params, key, num_episodes=64)
    results["kube"]["mean_regret"]

Every policy runs on the same scenarios: episode e of every policy starts from the same
reset key and draws the same step keys (arrivals, failures, load), so only the
decisions differ. `key` should be kept apart from the keys a trainer uses (held out).
Episodes run `params.episode_len` decisions with `lax.scan`, vectorised over episodes
with `vmap`, in one jit for all policies (each a `lax.switch` branch, so the
environment compiles once); metrics are reduced to scalars inside.

A policy is a callable `(key, obs, params) -> action` (`vte.cluster.heuristics.ALL` holds the
baselines; their names are accepted as strings too) or the string "optimal", which takes
`vte.optimal_action` of the ground truth. A trained network (`vte.make_policy`,
`vte.load_policy`: a `vte.cluster.network.NetworkPolicy`) enters the program with its weights as an
argument, so other weights of the same shapes (another seed, a later checkpoint) run the
program already compiled, or kept by JAX's persistent compilation cache.

**Decisions.** Each policy meets its own states after its first decision, so the
per-decision metrics compare a policy with the optimum *of the state that policy is
in*. A step counts as a decision when the queue holds a request; a step on an empty
queue counts only when the policy acts invalidly there (any action but defer).

Metrics (means over episodes where "per episode"):
  match_rate: share of decisions equal to `vte.optimal_action`.
  mean_regret: mean regret per decision (`info["regret"]`, >= 0).
  cost_ratio: total cost of the chosen actions over the total cost of the optimal
    actions in the same states (1 for the optimum; an invalid action costs the optimum's
    cost plus its regret, the worst valid regret plus `invalid_penalty`). Costs are >= 0; when the optimal actions cost 0 in
    total (e.g. nothing ever fits, or every weight and penalty is 0) the ratio is
    undefined and reported as 1 + mean_regret (1 when the policy also cost nothing).
  invalid_rate: share of decisions that were invalid (out of range or infeasible).
  energy: kWh per episode, the extra energy of the placements.
  jobs_lost: running jobs killed by node failures, per episode.
  latency_violations: per episode, decisions at which the head request carried a
    latency bound and was not placed (deferred or an invalid action). Feasibility
    already keeps every placed request within its network-latency bound, so what a
    latency-bound (interactive, edge) request can still suffer is waiting: each such
    decision keeps it queued for at least one more step (`step_seconds`, 300 s by
    default). Requests dropped on arrival are counted in `dropped`, not here (the
    environment does not report their bounds).
  deferred: defer actions on a non-empty queue, per episode.
  dropped: arrivals lost to a full queue, per episode.
  placed: requests placed, per episode.
  mean_completion_time: s, mean expected completion time of the placed requests.
  decisions: decisions per episode.

`python -m vte.evaluate` prints the table of every heuristic plus the optimum, writes it
as JSON and draws a bar chart of the main metrics (see `--help`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping

import jax
import jax.numpy as jnp
from jax import lax

from vte.cluster import catalogue as C
from vte.cluster import scoring
from vte.cluster.env import action_index, reset, step_env
from vte.cluster.heuristics import ALL
from vte.cluster.network import NetworkPolicy
from vte.cluster.params import EnvParams

OPTIMAL = "optimal"
J_PER_KWH = 3.6e6

METRICS = ("match_rate", "mean_regret", "cost_ratio", "invalid_rate", "energy", "jobs_lost",
           "latency_violations", "deferred", "dropped", "placed", "mean_completion_time",
           "decisions")


# Per-step quantities summed over an episode.
_STEP_SUMS = ("decisions", "matched", "regret", "cost", "optimal_cost", "invalid",
              "completion_time", "latency_violations")


@dataclasses.dataclass(frozen=True)
class _Plain:
    """A policy without weights of its own, as `(weights, key, obs, params) -> action`."""
    policy: Callable

    def __call__(self, weights, key, obs, params):
        return self.policy(key, obs, params)


@dataclasses.dataclass(frozen=True)
class _Network:
    """The static part of a `vte.cluster.network.NetworkPolicy`: its network and greediness;
    the weights come in as an argument of the compiled program."""
    net: object
    greedy: bool

    def __call__(self, weights, key, obs, params):
        return NetworkPolicy(self.net, weights, self.greedy)(key, obs, params)


def _split(policy):
    """(the static part of `policy`, hashable: the compiled program's key; its weights:
    an argument of the program, or None). A `NetworkPolicy` splits into its network and
    its variables, so every set of weights of the same shapes runs one program."""
    if isinstance(policy, NetworkPolicy):
        return _Network(policy.net, policy.greedy), policy.variables
    return (policy if isinstance(policy, str) else _Plain(policy)), None


def _branch(policy, index):
    """The static policy `index` of `_split` as a `lax.switch` branch `(weights, key, obs,
    state, params) -> () int32`, `weights` the tuple of every policy's weights.

    The branches must agree on one dtype, so the action becomes int32 after the checks
    of `vte.step` (`env.action_index`: one integer, else an error while tracing) and an
    integer outside [0, num_nodes] becomes -1: invalid, as `step` would score it.
    """
    if isinstance(policy, str):   # OPTIMAL, checked in `evaluate`
        return lambda weights, key, obs, state, params: scoring.optimal_action(state, params)

    def branch(weights, key, obs, state, params):
        a, in_range = action_index(policy(weights[index], key, obs, params), params.num_nodes)
        return jnp.where(in_range, a, -1).astype(jnp.int32)

    return branch


def _episode(policies, index, key, params, weights):
    """Sums of one episode's per-decision quantities and its final counters, for
    `policies[index]` (`index` is not batched, so only that branch runs)."""
    branches = [_branch(p, i) for i, p in enumerate(policies)]
    k_reset, k_steps = jax.random.split(key)
    obs, state = reset(k_reset, params)

    def body(carry, k):
        obs, state, acc = carry
        k_act, k_step = jax.random.split(k)
        action = lax.switch(index, branches, weights, k_act, obs, state, params)
        hd = scoring.head(state.queue)
        obs, state, _, _, _, info = step_env(k_step, state, action, params)
        counted = hd.valid | info["invalid_action"]
        waited = hd.valid & (hd.latency_bound < C.NO_LATENCY_BOUND_MS) & ~info["placed"]
        add = {
            "decisions": counted,
            "matched": counted & info["matched_optimal"],
            "regret": jnp.where(counted, info["regret"], 0.0),
            "cost": jnp.where(counted, info["cost"], 0.0),
            "optimal_cost": jnp.where(counted, info["optimal_cost"], 0.0),
            "invalid": info["invalid_action"],
            "completion_time": jnp.where(info["placed"], info["completion_time"], 0.0),
            "latency_violations": waited,
        }
        acc = {name: acc[name] + add[name].astype(jnp.float32) for name in _STEP_SUMS}
        return (obs, state, acc), None

    acc = {name: jnp.zeros((), jnp.float32) for name in _STEP_SUMS}
    keys = jax.random.split(k_steps, params.episode_len)
    (_, state, acc), _ = lax.scan(body, (obs, state, acc), keys)
    c = state.counters
    for name in ("placed", "deferred", "dropped", "jobs_lost", "energy"):
        acc[name] = getattr(c, name).astype(jnp.float32)
    return acc


@functools.partial(jax.jit, static_argnums=0)
def _run(policies, keys, params, weights):
    """Metrics of every policy of the tuple `policies` (static parts, `_split`) over the
    episodes of `keys`, as (P,) arrays; `weights`: each policy's weights (or None). One
    executable for all policies: the environment compiles once, each policy is a branch
    of a `lax.switch` that only runs for its own episodes, and new weights of the same
    shapes run the same executable."""

    def one(index):
        acc = jax.vmap(lambda key: _episode(policies, index, key, params, weights))(keys)
        return _reduce(acc, keys.shape[0])

    return lax.map(one, jnp.arange(len(policies)))


def _reduce(acc, episodes):
    """Per-episode sums (E,) -> the scalar metrics of the module doc."""
    tot = {name: jnp.sum(value) for name, value in acc.items()}

    def ratio(num, den, empty):
        return jnp.where(den > 0, num / jnp.maximum(den, 1e-30), empty)

    return {
        "match_rate": ratio(tot["matched"], tot["decisions"], 1.0),
        "mean_regret": ratio(tot["regret"], tot["decisions"], 0.0),
        "cost_ratio": ratio(tot["cost"], tot["optimal_cost"],
                            1.0 + ratio(tot["regret"], tot["decisions"], 0.0)),
        "invalid_rate": ratio(tot["invalid"], tot["decisions"], 0.0),
        "energy": tot["energy"] / J_PER_KWH / episodes,
        "jobs_lost": tot["jobs_lost"] / episodes,
        "latency_violations": tot["latency_violations"] / episodes,
        "deferred": tot["deferred"] / episodes,
        "dropped": tot["dropped"] / episodes,
        "placed": tot["placed"] / episodes,
        "mean_completion_time": ratio(tot["completion_time"], tot["placed"], 0.0),
        "decisions": tot["decisions"] / episodes,
    }


def _resolve(name, policy):
    """A policy callable or OPTIMAL; heuristic names are accepted as strings."""
    allowed = f"a callable (key, obs, params) -> action, {OPTIMAL!r} or one of {sorted(ALL)}"
    if isinstance(policy, str):
        if policy == OPTIMAL:
            return OPTIMAL
        if policy in ALL:
            return ALL[policy]
        raise ValueError(f"policy {name!r}={policy!r} is unknown: allowed {allowed}")
    if not callable(policy):
        raise ValueError(f"policy {name!r}={policy!r} is invalid: allowed {allowed}")
    return policy


def _check(policies, params, num_episodes):
    if not isinstance(policies, Mapping) or not policies:
        raise ValueError(f"policies={policies!r} is invalid: allowed a non-empty mapping "
                         f"from a name to a policy")
    for name in policies:
        if not isinstance(name, str):
            raise ValueError(f"policy name {name!r} is invalid: allowed a string")
    resolved = {name: _resolve(name, policy) for name, policy in policies.items()}
    if not isinstance(params, EnvParams):
        raise ValueError(f"params={params!r} is invalid: allowed a vte.EnvParams")
    if isinstance(num_episodes, bool) or not isinstance(num_episodes, int) or num_episodes < 1:
        raise ValueError(f"num_episodes={num_episodes!r} is invalid: allowed an integer >= 1")
    return resolved


def evaluate(policies: Mapping, params: EnvParams, key: jax.Array,
             num_episodes: int) -> dict[str, dict[str, float]]:
    """Run every policy on the same `num_episodes` scenarios drawn from `key`.

    Args:
      policies: name -> a policy `(key, obs, params) -> action`, "optimal", or the name
        of a heuristic of `vte.cluster.heuristics.ALL`.
      params: `vte.EnvParams`; each episode runs `params.episode_len` decisions.
      key: JAX key of the scenarios (keep it apart from training keys).
      num_episodes: episodes per policy, >= 1.
    Returns:
      name -> {metric: float} with the metrics of the module doc (`METRICS`).
    Deterministic per key. Raises ValueError on bad input before any work.
    """
    policies = _check(policies, params, num_episodes)
    keys = jax.random.split(key, num_episodes)
    names = list(policies)
    static, weights = zip(*(_split(policies[n]) for n in names))
    metrics = jax.device_get(_run(static, keys, params, weights))
    return {name: {m: float(metrics[m][i]) for m in METRICS} for i, name in enumerate(names)}


# Columns of the comparison table: metric, header, format.
COLUMNS = (
    ("match_rate", "match rate", "{:.3f}"),
    ("mean_regret", "mean regret", "{:.3f}"),
    ("cost_ratio", "cost ratio", "{:.3f}"),
    ("invalid_rate", "invalid rate", "{:.3f}"),
    ("energy", "energy kWh/ep", "{:.1f}"),
    ("jobs_lost", "jobs lost/ep", "{:.2f}"),
    ("latency_violations", "latency violations/ep", "{:.2f}"),
    ("deferred", "deferred/ep", "{:.1f}"),
    ("dropped", "dropped/ep", "{:.1f}"),
    ("placed", "placed/ep", "{:.1f}"),
    ("mean_completion_time", "mean completion s", "{:.0f}"),
)


def table(results: Mapping[str, Mapping[str, float]]) -> str:
    """The results of `evaluate` as a Markdown table, one row per policy."""
    lines = ["| policy | " + " | ".join(h for _, h, _ in COLUMNS) + " |",
             "|---|" + "---:|" * len(COLUMNS)]
    for name, metrics in results.items():
        cells = (fmt.format(metrics[m]) for m, _, fmt in COLUMNS)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


__all__ = ["evaluate", "table", "METRICS", "OPTIMAL"]
