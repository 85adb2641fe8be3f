"""Scoring: the cost of placing a request on each node, feasibility, and the optimum.

This module is the one source of truth for every formula of the cost model (written
out with units in `vte/cluster/MODEL.md`); the environment, heuristics, evaluator and trainer
all call it. Scoring reads the ground truth, never the twin.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from vte.cluster import catalogue as C
from vte.cluster import dynamics, fusion
from vte.cluster.fusion import lookup
from vte.cluster.params import EnvParams
from vte.cluster.types import Cluster, EnvState, HeadScores, Metrics, Requests

_EPS = 1e-4  # tolerance of the capacity check (GiB, cores)


@struct.dataclass
class Breakdown:
    """Per-node objectives of placing one request, each (N,)."""

    completion_time: jax.Array  # s, run time (slowed by contention) + data transfer + link delay
    run_time: jax.Array         # s, execution part of completion_time
    energy: jax.Array           # J, extra energy the placement costs
    failure_prob: jax.Array     # probability the node fails while the job runs
    performance: jax.Array      # normalised performance term
    energy_term: jax.Array      # normalised energy term
    reliability: jax.Array      # normalised reliability term
    missing_preferred: jax.Array  # number of preferred labels the node lacks


def link_delay(cluster: Cluster, origin: jax.Array) -> jax.Array:
    """Delay from site `origin` to every node's site, ms, (N,)."""
    row = cluster.link_delay[origin]                                   # (S,)
    return lookup(row, cluster.site)


def _popcount(x: jax.Array) -> jax.Array:
    return jax.lax.population_count(x.astype(jnp.int32)).astype(jnp.float32)


def feasibility(cluster: Cluster, metrics: Metrics, request: Requests, params: EnvParams,
                delay: jax.Array | None = None) -> jax.Array:
    """Whether `request` (scalar fields) can be placed on each node given `metrics`: (N,) bool.

    The queue slot holds a request, the node exists and is up, has a free job slot and the
    free resources for the demand, its labels include the required and none of the
    rejected ones, its GPU model is accepted (when GPUs are wanted), and its site is within
    the request's latency bound. `delay`: `link_delay(cluster, request.origin)` if the
    caller has it. On the ground truth (`measure`) this is the feasibility `score` returns;
    on the twin (`vte.cluster.twin.as_metrics`) it is what the scheduler believes.
    """
    demand = request.demand
    if delay is None:
        delay = link_delay(cluster, request.origin)
    free = metrics.free
    fits = ((free[0] >= demand[0] - _EPS) & (free[1] >= demand[1] - _EPS)
            & (free[2] >= demand[2] - _EPS) & (free[3] >= demand[3] - _EPS))
    labels_ok = (((cluster.labels & request.required) == request.required)
                 & ((cluster.labels & request.rejected) == 0))
    gpu_ok = ~(demand[C.GPU] > 0) | (((request.gpu_models >> cluster.gpu_model) & 1) == 1)
    latency_ok = delay <= request.latency_bound
    slot_ok = metrics.jobs < params.slots_per_node
    return (request.valid & cluster.mask & metrics.up & fits & labels_ok & gpu_ok
            & latency_ok & slot_ok)


def score(cluster: Cluster, metrics: Metrics, request: Requests, weights: jax.Array,
          params: EnvParams, delay: jax.Array | None = None
          ) -> tuple[jax.Array, jax.Array, Breakdown]:
    """Cost and feasibility of placing one request on every node.

    Args:
      cluster: the scenario's nodes and sites.
      metrics: ground-truth metrics now (`measure`).
      request: one request (scalar fields).
      weights: (3,) objective weights (performance, energy, reliability).
      delay: (N,) ms from the request's origin to every node, when the caller has it
        (the heuristics read it from the observation); else `link_delay` of the cluster.
    Returns:
      cost (N,) float32 (finite for every node, feasible or not), feasible (N,) bool,
      and the per-objective `Breakdown`.
    """
    cap = cluster.capacity
    demand = request.demand
    if delay is None:
        delay = link_delay(cluster, request.origin)                      # (N,) ms
    feasible = feasibility(cluster, metrics, request, params, delay)
    wants_gpu = demand[C.GPU] > 0

    # Performance: completion time, s.
    speed = jnp.where(wants_gpu, lookup(C.GPU_SPEED, cluster.gpu_model), cluster.speed)
    run_time = request.work / jnp.maximum(speed, 1e-3) * (1.0 + params.contention * metrics.util)
    transfer = request.data_gb * C.MBIT_PER_GB / jnp.maximum(cluster.bandwidth, 1.0)
    completion = run_time + transfer + delay / 1000.0

    # Energy: power rise times run time, plus waking an otherwise empty node, J.
    cpu_share = jnp.clip(demand[C.CPU] / jnp.maximum(cap[C.CPU], 1.0), 0.0, 1.0)
    rise = ((cluster.power_peak - cluster.power_idle) * cpu_share
            + lookup(C.GPU_WATTS, cluster.gpu_model) * demand[C.GPU])
    wake = jnp.where(metrics.jobs == 0, cluster.power_idle, 0.0)
    energy = (rise + wake) * run_time

    # Reliability: probability of a failure during the job.
    failure_prob = -jnp.expm1(-cluster.failure_rate / 3600.0 * completion)

    work = jnp.maximum(request.work, 1.0)
    ref_energy = work * (C.REF_WATTS_PER_CORE * jnp.maximum(demand[C.CPU], 1.0)
                         + C.REF_WATTS_PER_GPU * demand[C.GPU])
    performance = completion / work
    energy_term = energy / ref_energy
    reliability = failure_prob / C.RELIABILITY_REF
    missing = _popcount(request.preferred & ~cluster.labels)

    w = jnp.asarray(weights, jnp.float32)
    cost = (w[0] * performance + w[1] * energy_term + w[2] * reliability
            + params.pref_penalty * missing)
    breakdown = Breakdown(completion, run_time, energy, failure_prob, performance,
                          energy_term, reliability, missing)
    return cost, feasible, breakdown


def head(queue: Requests) -> Requests:
    """The request at the head of the queue."""
    return jax.tree_util.tree_map(lambda x: x[0], queue)


def _defer_cost(worst: jax.Array, any_feasible: jax.Array, params: EnvParams) -> jax.Array:
    """The cost of deferring (see `with_defer`) from the worst feasible node's cost."""
    return jnp.where(any_feasible, worst + params.defer_penalty, 0.0)


def with_defer(cost: jax.Array, feasible: jax.Array,
               params: EnvParams) -> tuple[jax.Array, jax.Array]:
    """Append the defer action: always feasible; its cost is the worst feasible node's
    cost plus `defer_penalty`, or 0 when no node is feasible (then defer is the optimum)."""
    any_feasible = jnp.any(feasible)
    worst = jnp.max(jnp.where(feasible, cost, -jnp.inf))
    defer_cost = _defer_cost(worst, any_feasible, params)
    return (jnp.concatenate([cost, defer_cost[None]]),
            jnp.concatenate([feasible, jnp.ones((1,), bool)]))


def score_head(cluster: Cluster, metrics: Metrics, queue: Requests, weights: jax.Array,
               params: EnvParams) -> HeadScores:
    """The scoring of the head request of `queue` on the ground-truth `metrics`
    (`measure(cluster, nodes)`), as `HeadScores`."""
    return score_request(cluster, metrics, head(queue), weights, params)


def score_request(cluster: Cluster, metrics: Metrics, request: Requests, weights: jax.Array,
                  params: EnvParams) -> HeadScores:
    """`score_head` of one request (scalar fields) rather than a queue's head."""
    cost, feasible, br = score(cluster, metrics, request, weights, params)
    n = cost.shape[0]
    # The optimum over the nodes and defer, from three reductions over the N nodes (the
    # same result as `argmin_feasible` of `with_defer`'s N + 1 actions: defer costs more
    # than any feasible node, since defer_penalty > 0, and is the optimum when no node is
    # feasible).
    # `c` holds both the cost and the feasibility (costs are finite, see `score`);
    # computed once, as otherwise each reduction below recomputes the feasibility.
    c = fusion.materialize(jnp.where(feasible, cost, jnp.inf))
    feasible = c < jnp.inf
    best = jnp.min(c)
    any_feasible = best < jnp.inf
    first = jnp.min(jnp.where(c == best, jnp.arange(n, dtype=jnp.int32), n))
    worst = jnp.max(jnp.where(feasible, c, -jnp.inf))
    defer_cost = _defer_cost(worst, any_feasible, params)
    return HeadScores(cost=jnp.concatenate([cost, defer_cost[None]]),
                      feasible=jnp.concatenate([feasible, jnp.ones((1,), bool)]),
                      optimum=jnp.where(any_feasible, first, n).astype(jnp.int32),
                      completion=br.completion_time, energy=br.energy,
                      failure_prob=br.failure_prob)


def fresh_scores(state: EnvState, params: EnvParams) -> HeadScores:
    """`score_head` of `state` from its ground truth, ignoring the cached `state.scores`."""
    return score_head(state.cluster, dynamics.measure(state.cluster, state.nodes), state.queue,
                      state.weights, params)


def node_costs(state: EnvState, params: EnvParams) -> tuple[jax.Array, jax.Array]:
    """Cost and feasibility of every action for the request at the head of the queue,
    computed afresh from the ground truth of `state`.

    Returns:
      costs: (num_nodes + 1,) float32, dimensionless; last entry is defer.
      feasible: (num_nodes + 1,) bool; defer is always feasible.
    """
    s = fresh_scores(state, params)
    return s.cost, s.feasible


def argmin_feasible(costs: jax.Array, feasible: jax.Array) -> jax.Array:
    """Least-cost feasible index, ties to the lowest index (index 0 when nothing is
    feasible).

    The same result as `jnp.argmin`, computed as a min and then the first index that
    reaches it: on CPU, XLA runs argmin's (value, index) reduction element by element.
    """
    c = jnp.where(feasible, costs, jnp.inf)
    n = c.shape[-1]
    at_min = c == jnp.min(c, axis=-1, keepdims=True)
    return jnp.min(jnp.where(at_min, jnp.arange(n, dtype=jnp.int32), n - 1), axis=-1)


def optimal_action(state: EnvState, params: EnvParams) -> jax.Array:
    """The least-cost feasible node for the head request (ties to the lowest index), or
    `num_nodes` (defer) when no node is feasible or the queue is empty. () int32."""
    return fresh_scores(state, params).optimum
