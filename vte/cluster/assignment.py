"""Queue-level optimum: the best placement of the whole queue at once.

Every queued request is scored against every node in the current state by the same
code as a single step (`vte.cluster.scoring.score`, vmapped over the queue), and the K
requests are matched to distinct nodes by an exact linear assignment (the Hungarian
algorithm of `optax.assignment`, inside jit).

The objective is lexicographic: first as many requests as possible are assigned (a
request is left out only when no feasible node is left for it), then the total cost
of the assigned pairs is least. It is written as one total so that `score_assignment`
can price any assignment on the same scale:

    total = sum over assigned pairs of cost[i, n]
          + sum over requests left out that had a feasible node of U
    U     = defer_penalty + sum over requests of their worst feasible cost

No reassignment can save as much as U, so the least total is the lexicographic
optimum, and the regret of any assignment against it is >= 0. A request with no
feasible node is left out at no cost (as deferring it is the step's optimum).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from vte.cluster import dynamics, scoring
from vte.cluster.params import EnvParams
from vte.cluster.types import EnvState


def cost_matrix(state: EnvState, params: EnvParams) -> tuple[jax.Array, jax.Array]:
    """Cost and feasibility of every queued request on every node, on the ground truth.

    Returns:
      costs: (queue_len, num_nodes) float32, dimensionless (`vte.cluster.scoring.score`).
      feasible: (queue_len, num_nodes) bool; rows of empty queue slots are all False.
    """
    metrics = dynamics.measure(state.cluster, state.nodes)

    def one(request):
        cost, feasible, _ = scoring.score(state.cluster, metrics, request, state.weights,
                                          params)
        return cost, feasible

    return jax.vmap(one)(state.queue)


def _unassigned_price(costs: jax.Array, feasible: jax.Array, params: EnvParams):
    """(K,) price of leaving each request out: U (module doc) when it had a feasible
    node, else 0."""
    worst = jnp.max(jnp.where(feasible, costs, 0.0), axis=1)              # (K,)
    has_node = jnp.any(feasible, axis=1)
    price = params.defer_penalty + jnp.sum(worst)
    return jnp.where(has_node, price, 0.0)


def assign(costs: jax.Array, feasible: jax.Array, params: EnvParams) -> jax.Array:
    """The optimum of any (K, N) cost matrix and feasibility mask (as `cost_matrix`
    returns): (K,) int32, a node per request or N for one left unassigned, minimising
    the total of the module doc. Costs must be finite and >= 0."""
    k, n = costs.shape
    price = _unassigned_price(costs, feasible, params)                     # (K,)
    # Scale to O(1) so float32 keeps the costs' precision next to the large prices.
    scale = jnp.maximum(jnp.max(price), 1.0)
    barred = 2.0 * jnp.max(price) / scale + 1.0    # dearer than leaving any request out
    pairs = jnp.where(feasible, costs / scale, barred)                     # (K, N)
    # One private "left out" column per request; other requests' columns are barred.
    leave = jnp.where(jnp.eye(k, dtype=bool), (price / scale)[:, None], barred)  # (K, K)
    rows, cols = optax.assignment.hungarian_algorithm(jnp.concatenate([pairs, leave], 1))
    # Keep only real, feasible pairs; some optax versions pad with -1 indices.
    rows = rows.astype(jnp.int32)
    cols = cols.astype(jnp.int32)
    ok = (rows >= 0) & (rows < k) & (cols >= 0) & (cols < n)
    ok = ok & feasible[jnp.clip(rows, 0, k - 1), jnp.clip(cols, 0, n - 1)]
    out = jnp.full((k,), n, jnp.int32)
    return out.at[jnp.where(ok, rows, k)].set(cols, mode="drop")


def optimal_assignment(state: EnvState, params: EnvParams) -> jax.Array:
    """The queue-level optimum: (queue_len,) int32, a node per request, or `num_nodes`
    for a request left unassigned (empty slots included).

    Every node takes at most one request, no infeasible pair is ever chosen, as many
    requests as possible are assigned and, among those assignments, the total cost is
    least (module doc). Exact (Hungarian algorithm); pure; works under jit and vmap.
    """
    costs, feasible = cost_matrix(state, params)
    return assign(costs, feasible, params)


def _priced(costs, feasible, assignment, params):
    """(total, valid (K,)) of an assignment under the module's total."""
    k, n = costs.shape
    a = jnp.asarray(assignment).astype(jnp.int32)
    node = jnp.clip(a, 0, n - 1)
    on_node = (a >= 0) & (a < n)
    pair_ok = on_node & jnp.take_along_axis(feasible, node[:, None], axis=1)[:, 0]
    # A node goes to the first request that names it; later claims are invalid.
    earlier = jnp.tril(jnp.ones((k, k), bool), -1)
    taken = jnp.any(earlier & (a[:, None] == a[None, :]) & pair_ok[None, :], axis=1)
    placed = pair_ok & ~taken
    valid = placed | (a == n)
    pair_cost = jnp.take_along_axis(costs, node[:, None], axis=1)[:, 0]
    per_request = jnp.where(placed, pair_cost, _unassigned_price(costs, feasible, params))
    per_request = per_request + jnp.where(valid, 0.0, params.invalid_penalty)
    return jnp.sum(per_request), valid


def score_assignment(state: EnvState, assignment: jax.Array, params: EnvParams):
    """Price an assignment of the queue against the queue-level optimum.

    Args:
      state: the current `EnvState`.
      assignment: (queue_len,) int, a node per request or `num_nodes` to leave it out.
    Returns:
      (total_cost, regret, valid):
      total_cost () float32, the module doc's total: assigned pairs at their cost,
        requests left out that had a feasible node at U each. An invalid entry (out of
        range, an infeasible node, or a node an earlier request of the queue already
        took) counts as left out plus `invalid_penalty`.
      regret () float32, total_cost minus the optimum's, >= 0 (clamped against float
        rounding when the assignment ties the optimum).
      valid (queue_len,) bool, the entry is `num_nodes` or a feasible node of its own.
    Pure; works under jit and vmap.
    """
    costs, feasible = cost_matrix(state, params)
    best = assign(costs, feasible, params)
    # Both priced by one vmapped computation, so equal assignments get equal totals.
    both = jnp.stack([jnp.asarray(assignment).astype(jnp.int32), best])
    totals, valid = jax.vmap(_priced, in_axes=(None, None, 0, None))(costs, feasible, both,
                                                                     params)
    return totals[0], jnp.maximum(totals[0] - totals[1], 0.0), valid[0]


__all__ = ["cost_matrix", "optimal_assignment", "score_assignment", "assign"]
