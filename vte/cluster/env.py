"""The environment: `reset` and `step` tie the scenario, the dynamics, the twin and the
scoring together.

    obs, state = vte.reset(key, params)
    obs, state, reward, terminated, truncated, info = vte.step(key, state, action, params)

Observation: `vte.Observation` (see `vte.cluster.types`), features built from the twin only.
Action: int in [0, num_nodes]; `a < num_nodes` places the head request on node a,
  `a == num_nodes` defers it (it moves to the back of the queue). The observation's
  action mask allows exactly the valid actions, unless `params.mask_from_twin` computes
  it on a noisy or stale twin (then it can allow invalid ones).
Reward: `-regret`, regret = cost(choice) - cost(optimal action) >= 0. An invalid action
  (out of range, or a node that is infeasible for the head request) changes nothing in
  the cluster or the queue and has the regret of the worst valid action of the state plus
  `params.invalid_penalty`: never worth more than any valid action (MODEL.md section 4).
Termination: never; truncation after `episode_len` decisions, then the state resets to a
  fresh scenario and `info["final_observation"]` holds the last observation of the
  episode that ended (gymnax 1.0 semantics).

The environment is `SyntheticEnv` (`vte.make("Cluster-v0")`), on the protocol of
`vte.environment`, which owns the action checks and the auto-reset: cheap under
`jax.vmap`, a fresh scenario is computed only in steps where some environment is done.
The module functions `reset`, `step`, `step_env` and `reward` are that environment's.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from vte.cluster import catalogue as C
from vte import rng
from vte.cluster import dynamics, fusion, scenario, scoring, twin
from vte.environment import Environment, action_index as _action_index
from vte.environment import narrow_action, reset_key  # noqa: F401  (vte.cluster.env.* names of before)
from vte.cluster.observation import get_obs, static_node_features
from vte.cluster.params import EnvParams, check_param_shapes, num_actions
from vte.cluster.types import Counters, EnvState, Observation, Requests


def _zero_counters() -> Counters:
    z = jnp.zeros((), jnp.int32)
    return Counters(placed=z, deferred=z, invalid=z, dropped=z, jobs_lost=z, completed=z,
                    matched=z, regret=jnp.zeros((), jnp.float32),
                    energy=jnp.zeros((), jnp.float32))


def reset_state(key: jax.Array, params: EnvParams) -> EnvState:
    """A fresh scenario at time 0."""
    check_param_shapes(params)
    k_cluster, k_nodes, k_queue, k_weights = jax.random.split(key, 4)
    cluster = scenario.sample_cluster(k_cluster, params)
    nodes = dynamics.initial_nodes(k_nodes, cluster, params)
    queue, incoming = scenario.initial_queue(k_queue, params)
    if params.sample_weights:
        weights = scenario.sample_weights(k_weights)
    else:
        weights = jnp.broadcast_to(jnp.asarray(params.weights, jnp.float32), (3,))
    weights = weights.astype(jnp.float32)
    metrics = dynamics.measure(cluster, nodes)
    return EnvState(
        cluster=cluster,
        nodes=nodes,
        queue=queue,
        incoming=incoming,
        twin=twin.from_metrics(metrics),
        scores=scoring.score_head(cluster, metrics, queue, weights, params),
        node_static=static_node_features(cluster),
        counters=_zero_counters(),
        weights=weights,
        time=jnp.zeros((), jnp.float32),
        steps=jnp.zeros((), jnp.int32),
    )


def rescore(state: EnvState, params: EnvParams) -> EnvState:
    """`state` with its cached scoring of the head request (`EnvState.scores`) recomputed.

    `reset` and `step` keep the cache up to date; call this after editing a state by hand
    (its nodes, queue, cluster or weights) and before passing it to `step` or `get_obs`.
    """
    return state.replace(scores=scoring.fresh_scores(state, params))


def reset(key: jax.Array, params: EnvParams) -> tuple[Observation, EnvState]:
    """Sample a fresh scenario. Returns (obs, state). Pure; works under jit and vmap."""
    state = reset_state(key, params)
    return get_obs(state, params), state


# --------------------------------------------------------------------------
# Queue operations (the queue is compacted: valid requests first, head at 0)
# --------------------------------------------------------------------------

def _update_queue(queue: Requests, pop: jax.Array, rotate: jax.Array, new: Requests,
                  n_new: jax.Array) -> tuple[Requests, jax.Array]:
    """The queue after the decision and the arrivals, and the number of arrivals dropped.

    First the head is removed (`pop`) or moved behind the last valid request (`rotate`);
    then the first `n_new` of `new` (leading axis MAX_ARRIVALS) join at the back, as many
    as fit. Every new slot takes one of few sources (itself, its successor, the head, or
    one arrival); the per-slot choice is computed once, so each field costs a few selects.
    """
    k = queue.valid.shape[0]
    m = new.valid.shape[0]
    count = jnp.sum(queue.valid)
    idx = jnp.arange(k)
    move = pop | rotate
    count2 = count - pop.astype(count.dtype)            # valid requests after the decision
    arrive = [(idx == count2 + i) & (i < n_new) for i in range(m)]
    # (K,) masks per env, materialised so the field updates below only select.
    from_next, from_head, arrive = fusion.materialize(
        (move & (idx != count - 1), move & (idx == count - 1), arrive))

    def put(q, nw):
        def bc(mask):
            return mask.reshape((k,) + (1,) * (q.ndim - 1))
        # Moving shifts every slot one place forward (the last one wraps to the front).
        out = jnp.where(bc(from_next), jnp.roll(q, -1, axis=0), q)
        out = jnp.where(bc(from_head), q[0], out)
        for i in range(m):
            out = jnp.where(bc(arrive[i]), nw[i], out)
        return out

    out = jax.tree_util.tree_map(put, queue, new)
    n_in = jnp.minimum(n_new, k - count2)
    out = out.replace(valid=idx < count2 + n_in)
    dropped = (n_new - n_in).astype(jnp.int32)
    return out, dropped


# --------------------------------------------------------------------------
# Step
# --------------------------------------------------------------------------

ACTION_MEANING = "num_nodes = defer"


def action_index(action, n: int) -> tuple[jax.Array, jax.Array]:
    """The action as an integer array and whether it lies in [0, n] (`n` = num_nodes =
    defer); the shared check of `vte.environment.action_index` (raises before any work
    when the action is not one integer)."""
    return _action_index(action, n + 1, ACTION_MEANING)


_STATIC_FIELDS = tuple(f for f, spec in EnvParams.__dataclass_fields__.items()
                       if not spec.metadata.get("pytree_node", True))


@functools.lru_cache(maxsize=64)
def _state_layout(static: tuple) -> list:
    """[(path, shape, dtype)] of one environment's state for these static params fields."""
    params = EnvParams(**dict(zip(_STATIC_FIELDS, static)))
    shapes = jax.eval_shape(reset_state, jax.random.PRNGKey(0), params)
    return [(jax.tree_util.keystr(path), leaf.shape, leaf.dtype)
            for path, leaf in jax.tree_util.tree_leaves_with_path(shapes)]


def check_state_shapes(state: EnvState, params: EnvParams) -> None:
    """Raise ValueError naming the first field of `state` whose shape or dtype is not what
    `params` makes (a state of another cluster size, queue or number of sites); shapes are
    static, so this runs while tracing, before any work, eager or under jit and vmap."""
    try:
        want = _state_layout(tuple(getattr(params, f) for f in _STATIC_FIELDS))
    except ValueError:   # defaults that do not fit these static fields: use the params as given
        shapes = jax.eval_shape(reset_state, jax.random.PRNGKey(0), params)
        want = [(jax.tree_util.keystr(path), leaf.shape, leaf.dtype)
                for path, leaf in jax.tree_util.tree_leaves_with_path(shapes)]
    got = [(jax.tree_util.keystr(path), np.shape(leaf), jnp.result_type(leaf))
           for path, leaf in jax.tree_util.tree_leaves_with_path(state)]
    if [p for p, _, _ in got] != [p for p, _, _ in want]:
        raise ValueError("state is not a vte.EnvState of this version (its fields differ)")
    # Leading batch axes (the same on every field) are allowed: a batching rule may trace
    # this code with the whole batch (vmap of the compiled step inside another vmap).
    lead = len(got[0][1]) - len(want[0][1])
    for (path, shape, dtype), (_, shape0, dtype0) in zip(got, want):
        if (len(shape) - len(shape0) != lead or lead < 0 or tuple(shape[lead:]) != tuple(shape0)
                or dtype != dtype0):
            shape = shape[lead:] if lead > 0 else shape
            fields = ", ".join(f"{f}={getattr(params, f)}" for f in _STATIC_FIELDS
                               if isinstance(getattr(params, f), int) and not isinstance(getattr(params, f), bool))
            raise ValueError(f"state{path} has shape {shape} {dtype}, but these params ({fields}) "
                             f"make {shape0} {dtype0}: the state comes from other params")


def _transition(key: jax.Array, state: EnvState, action: jax.Array, in_range: jax.Array,
                params: EnvParams):
    """One decision and one time advance: (state, reward, terminated, truncated, info).

    `action` is an integer array and `in_range` whether it lies in [0, num_nodes] (checked
    by `vte.environment.Environment.step`). Phases: judge the decision against the scores
    of the state it was taken in, place the head request, advance time (`vte.cluster.dynamics`),
    let requests arrive, report to the twin, and score the next head request."""
    seed = rng.seed_from_key(key)
    d = _judge(state, action, in_range, params)
    nodes = dynamics.place(state.nodes, scoring.head(state.queue), d.node, d.place,
                           state.time + d.completion)
    # From the integer step count, not summed: float32 sums drift (288 s per step instead of
    # 300 after a million steps); a product of exact integers is rounded once.
    t1 = (state.steps + 1).astype(jnp.float32) * params.step_seconds
    nodes, n_lost, n_completed = dynamics.advance(nodes, state.cluster, seed, t1, params)
    queue, incoming, new_head, dropped = _arrivals(state, d, seed, params)
    metrics, tw = _report(state, nodes, seed, params)
    c = state.counters
    counters = c.replace(
        placed=c.placed + d.place, deferred=c.deferred + d.defer, invalid=c.invalid + ~d.valid,
        dropped=c.dropped + dropped, jobs_lost=c.jobs_lost + n_lost,
        completed=c.completed + n_completed,
        matched=c.matched + d.matched, regret=c.regret + d.regret, energy=c.energy + d.energy)
    # SCORE THE NEXT HEAD REQUEST once, for the next decision and the action mask
    scores = scoring.score_request(state.cluster, metrics, new_head, state.weights, params)
    state = state.replace(nodes=nodes, queue=queue, incoming=incoming, twin=tw, scores=scores,
                          counters=counters, time=t1, steps=state.steps + 1)
    truncated = state.steps >= params.episode_len
    terminated = jnp.zeros((), bool)
    info = {
        "optimal_action": d.optimum,
        "optimal_cost": d.optimal_cost,
        "cost": d.optimal_cost + d.regret,
        "regret": d.regret,
        "matched_optimal": d.matched,
        "invalid_action": ~d.valid,
        "placed": d.place,
        "deferred": d.defer,
        "completion_time": d.completion,
        "energy": d.energy,
        "failure_prob": d.failure_prob,
        "dropped": dropped,
        "jobs_lost": n_lost,
        "counters": counters,
    }
    return state, -d.regret, terminated, truncated, info


class _Decision(NamedTuple):
    """The decision judged against the scores of the state it was taken in, () each."""

    node: jax.Array          # int32, the chosen node (clipped into range)
    valid: jax.Array         # bool, in range and feasible
    place: jax.Array         # bool, a valid choice of a node
    defer: jax.Array         # bool, a valid deferral of a real request
    matched: jax.Array       # bool, the optimum
    optimum: jax.Array       # int32, the optimal action
    optimal_cost: jax.Array  # float32
    regret: jax.Array        # float32, cost - optimal cost, or the invalid penalty
    completion: jax.Array    # float32 s, of a placement (0 otherwise)
    energy: jax.Array        # float32 J
    failure_prob: jax.Array  # float32


def _judge(state: EnvState, a: jax.Array, in_range: jax.Array, params: EnvParams) -> _Decision:
    """SCORE THE DECISION on the ground truth, scored at the end of the previous step."""
    n = params.num_nodes
    sc = state.scores
    a_c = jnp.clip(a, 0, n).astype(jnp.int32)
    valid = in_range & sc.feasible[a_c]
    place = valid & (a_c < n)
    opt_cost = sc.cost[sc.optimum]
    node = jnp.minimum(a_c, n - 1)
    # An invalid action is never worth more than the worst valid one of the same state:
    # its regret is the worst valid regret (defer is always valid: finite) plus the penalty.
    worst = jnp.max(jnp.where(sc.feasible, sc.cost, -jnp.inf)) - opt_cost
    return _Decision(
        node=node, valid=valid, place=place,
        defer=valid & (a_c == n) & scoring.head(state.queue).valid,
        matched=in_range & (a_c == sc.optimum), optimum=sc.optimum, optimal_cost=opt_cost,
        regret=jnp.where(valid, sc.cost[a_c] - opt_cost, worst + params.invalid_penalty),
        completion=jnp.where(place, sc.completion[node], 0.0),
        energy=jnp.where(place, sc.energy[node], 0.0),
        failure_prob=jnp.where(place, sc.failure_prob[node], 0.0))


def _arrivals(state: EnvState, d: _Decision, seed: jax.Array, params: EnvParams):
    """ARRIVALS: the candidates drawn at the previous step join the queue (after the head
    leaves or moves back); the next ones are drawn. Returns (queue, incoming, new head,
    dropped)."""
    wa = rng.words(seed, rng.STEP_ARRIVALS, (C.MAX_ARRIVALS,))
    n_new = jnp.sum(rng.to_uniform(wa) < params.arrival_rate / C.MAX_ARRIVALS)
    queue, dropped = _update_queue(state.queue, d.place, d.defer, state.incoming, n_new)
    # The new head request is computed once (else every per-node fusion of the scoring
    # recomputes the queue update to find it, see vte.cluster.fusion); the queue itself is
    # written straight into the state.
    new_head = fusion.materialize(scoring.head(queue))
    incoming = scenario.sample_requests(
        rng.words(seed, rng.STEP_REQUESTS, (C.MAX_ARRIVALS, scenario.NUM_REQUEST_WORDS)), params)
    return queue, incoming, new_head, dropped


def _report(state: EnvState, nodes, seed: jax.Array, params: EnvParams):
    """DIGITAL TWIN: the ground-truth metrics, folded into the twin; the scoring reads the
    metrics. Returns (metrics, twin)."""
    metrics = dynamics.measure(state.cluster, nodes)
    if twin.static_exact(params):
        # Known exact while tracing: the twin is the metrics, written straight into the
        # state (the outputs of the `lax.cond` below would be copied there).
        return metrics, twin.from_metrics(metrics)
    metrics = fusion.materialize(metrics)
    return metrics, twin.update_from_seed(state.twin, metrics, state.cluster, seed, params,
                                          alloc_change=nodes.alloc - state.nodes.alloc)


def reward(state: EnvState, action: jax.Array, params: EnvParams) -> jax.Array:
    """The reward `step` gives for `action` in `state`, without stepping: () float32,
    -regret against the state's optimum (0 for the optimum); for an infeasible or
    out-of-range action, -(the worst valid action's regret + `invalid_penalty`). Pure and cheap (it reads the state's cached scores),
    so a learner can score several candidate actions of one state, e.g. vmapped over
    actions."""
    a, in_range = action_index(action, params.num_nodes)
    check_param_shapes(params)
    check_state_shapes(state, params)
    return -_judge(state, a, in_range, params).regret


def step_env(key: jax.Array, state: EnvState, action: jax.Array, params: EnvParams):
    """`step` without the auto-reset: (obs, state, reward, terminated, truncated, info)."""
    return ENV.step_env(key, state, action, params)


# --------------------------------------------------------------------------
# The environment (the protocol of `vte.environment`)
# --------------------------------------------------------------------------

class SyntheticEnv(Environment[EnvState, EnvParams]):
    """vte's synthetic heterogeneous cluster (`vte.make("Cluster-v0")`); see the module
    docstring for observation, action, reward and termination."""

    name = "Cluster-v0"
    action_meaning = ACTION_MEANING

    @property
    def default_params(self) -> EnvParams:
        return EnvParams()

    def reset_state(self, key: jax.Array, params: EnvParams) -> EnvState:
        return reset_state(key, params)

    def transition(self, key, state, action, valid_index, params):
        return _transition(key, state, action, valid_index, params)

    def get_obs(self, state: EnvState, params: EnvParams) -> Observation:
        return get_obs(state, params)

    def num_actions(self, params: EnvParams) -> int:
        return num_actions(params)

    def observation_specs(self, params: EnvParams):
        from vte.cluster.spaces import observation_specs
        return observation_specs(params)

    def observation_columns(self, params: EnvParams):
        from vte.cluster.observation import NODE_TABLE, REQUEST_TABLE, table_columns
        return {"nodes": table_columns(NODE_TABLE), "request": table_columns(REQUEST_TABLE),
                "queue": table_columns(REQUEST_TABLE)}

    def check(self, state, params) -> None:
        check_param_shapes(params)
        if state is not None:
            check_state_shapes(state, params)

    def reward(self, state: EnvState, action, params: EnvParams) -> jax.Array:
        return reward(state, action, params)

    def is_truncated(self, state: EnvState, params: EnvParams) -> jax.Array:
        """() bool, the episode has taken `episode_len` decisions."""
        return state.steps >= params.episode_len


ENV = SyntheticEnv()


def step(key: jax.Array, state: EnvState, action: jax.Array, params: EnvParams):
    """Take `action` for the head request, advance time, auto-reset at episode end.

    Args:
      key: JAX key for this step's randomness (arrivals, failures, load, twin, reset).
      state: the current `EnvState`.
      action: () integer, in [0, num_nodes]; num_nodes = defer. Any other integer is an
        invalid action (penalised, changes nothing); a float, bool or complex dtype, or a
        shape other than (), raises before any work. A concrete int64 outside int32 is
        invalid too when called eagerly; an int64 argument of the caller's own `jax.jit`
        or `jax.vmap` is cast to int32 by JAX (without x64) before this code sees it, so
        pass int32 actions to transformed code.
      params: `EnvParams`; a state made with other shape-deciding fields (`num_nodes`,
        `queue_len`, `num_sites`, `slots_per_node`, ...) raises ValueError naming the field.
    Returns:
      obs, state, reward () float32, terminated () bool, truncated () bool, info dict with
      `optimal_action`, `regret`, `cost`, `optimal_cost`, `matched_optimal`,
      `invalid_action`, `placed`, `deferred`, `completion_time` (s), `energy` (J),
      `failure_prob`, `dropped`, `jobs_lost`, `counters` (episode totals before any reset)
      and `final_observation` (the observation before any reset).
    """
    return ENV._auto_step(key, state, action, params)
