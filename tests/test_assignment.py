"""Queue-level optimum: cost matrix, exact assignment (against SciPy and brute force),
pricing of assignments, jit/vmap, edges."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

import vte
from vte.cluster import assignment
from tests.conftest import SMALL, finite_tree

_cost_matrix = jax.jit(jax.vmap(vte.cost_matrix, in_axes=(0, None)))
_optimal = jax.jit(jax.vmap(vte.optimal_assignment, in_axes=(0, None)))
_score = jax.jit(jax.vmap(vte.score_assignment, in_axes=(0, 0, None)))
_assign = jax.jit(vte.cluster.assignment.assign)
_optimal_action = jax.jit(vte.optimal_action)
BATCH = 24  # every batch has this size, so each function above compiles once
FULL = SMALL.replace(initial_queue_fill=1.0)


@pytest.fixture(scope="module")
def small_states(jit_reset, jit_step):
    """BATCH states: fresh scenarios, then a few optimal steps so nodes hold jobs (with the
    session's compiled reset and step)."""
    states = []
    for i in range(BATCH):
        key = jax.random.PRNGKey(i)
        _, state = jit_reset(key, FULL)
        for _ in range(i % 4):
            key, k = jax.random.split(key)
            state = jit_step(k, state, _optimal_action(state, FULL), FULL)[1]
        states.append(state)
    return jax.tree_util.tree_map(lambda *x: jnp.stack(x), *states)


@pytest.fixture(scope="module")
def crowded_states(small_states):
    """Queues longer than the nodes that exist: 4 requests, 2 of 8 nodes active."""
    cluster = small_states.cluster
    return small_states.replace(cluster=cluster.replace(
        mask=cluster.mask & (jnp.arange(SMALL.num_nodes) < 2)))


def _pick(states, i):
    return jax.tree_util.tree_map(lambda x: x[i], states)


def _lexicographic_reference(costs, feasible):
    """(count, total) of the lexicographic optimum by SciPy, in float64: feasible pairs
    cost c - B with B larger than any total, so the most pairs win, then the least cost."""
    k, n = costs.shape
    if not feasible.any():
        return 0, 0.0
    big = 10.0 * (1.0 + costs[feasible].sum())
    m = np.where(feasible, costs - big, 0.0)            # 0: unassigned (or barred pair)
    m = np.concatenate([m, np.zeros((k, k))], axis=1)
    rows, cols = linear_sum_assignment(m)
    chosen = (cols < n) & feasible[rows, np.minimum(cols, n - 1)]
    return int(chosen.sum()), float(costs[rows[chosen], cols[chosen]].sum())


def _check_assignment(a, costs, feasible):
    """a is valid: distinct nodes, feasible pairs; returns (count, total)."""
    k, n = costs.shape
    a = np.asarray(a)
    assert a.shape == (k,) and np.all((a >= 0) & (a <= n))
    placed = a < n
    assert len(set(a[placed].tolist())) == placed.sum(), "a node took two requests"
    assert np.all(feasible[np.arange(k)[placed], a[placed]]), "an infeasible pair was chosen"
    return int(placed.sum()), float(costs[np.arange(k)[placed], a[placed]].sum())


# ---------------------------------------------------------------------------- cost matrix


def test_cost_matrix_is_the_step_scoring(small_states):
    costs, feasible = _cost_matrix(small_states, SMALL)
    k, n = SMALL.queue_len, SMALL.num_nodes
    assert costs.shape == (BATCH, k, n) and feasible.shape == (BATCH, k, n)
    assert costs.dtype == jnp.float32 and feasible.dtype == jnp.bool_
    head_costs, head_feasible = jax.jit(jax.vmap(vte.node_costs, in_axes=(0, None)),
                                        static_argnums=1)(small_states, SMALL)
    # Same code; only the fusion differs (vmapped over the queue), so equal to float32 ulps.
    np.testing.assert_allclose(np.asarray(costs[:, 0]), np.asarray(head_costs[:, :n]), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(feasible[:, 0]), np.asarray(head_feasible[:, :n]))
    # Empty queue slots are feasible nowhere.
    empty = ~np.asarray(small_states.queue.valid)
    assert not np.asarray(feasible)[empty].any()
    assert np.all(np.isfinite(np.asarray(costs)))


# ---------------------------------------------------------------------------- optimum


@pytest.mark.parametrize("which", ["small", "crowded"])
def test_optimal_assignment_matches_scipy(which, small_states, crowded_states):
    params, states = SMALL, small_states if which == "small" else crowded_states
    costs, feasible = (np.asarray(x, np.float64) for x in _cost_matrix(states, params))
    feasible = feasible.astype(bool)
    got = np.asarray(_optimal(states, params))
    longer = 0
    for i in range(got.shape[0]):
        count, total = _check_assignment(got[i], costs[i], feasible[i])
        ref_count, ref_total = _lexicographic_reference(costs[i], feasible[i])
        assert count == ref_count
        np.testing.assert_allclose(total, ref_total, rtol=1e-5, atol=1e-5)
        longer += int(np.asarray(states.queue.valid)[i].sum() > feasible[i].any(0).sum())
    if which == "crowded":
        assert longer > 0, "no state had more requests than feasible nodes"


def _brute_force(costs, feasible):
    """(count, total) of the lexicographic optimum by enumeration."""
    k, n = costs.shape
    best = (0, 0.0)
    for a in itertools.product(range(n + 1), repeat=k):
        nodes = [x for x in a if x < n]
        if len(set(nodes)) < len(nodes):
            continue
        if any(x < n and not feasible[i, x] for i, x in enumerate(a)):
            continue
        total = sum(costs[i, x] for i, x in enumerate(a) if x < n)
        if (len(nodes), -total) > (best[0], -best[1]):
            best = (len(nodes), total)
    return best


@pytest.mark.parametrize("n", [2, 3, 5])
def test_assign_matches_brute_force(n):
    rng = np.random.default_rng(n)
    k = 4
    for _ in range(30):
        costs = rng.exponential(2.0, (k, n)).astype(np.float32)
        feasible = rng.random((k, n)) < rng.choice([0.2, 0.5, 0.9])
        got = np.asarray(_assign(jnp.asarray(costs), jnp.asarray(feasible), SMALL))
        count, total = _check_assignment(got, costs, feasible)
        ref_count, ref_total = _brute_force(costs, feasible)
        assert count == ref_count
        np.testing.assert_allclose(total, ref_total, rtol=1e-5, atol=1e-5)


def test_assign_prefers_more_requests_over_lower_cost():
    # Request 0 can go only to node 0; request 1 to node 0 (cheap) or node 1 (very dear).
    costs = jnp.array([[1.0, 0.0], [0.1, 1000.0]])
    feasible = jnp.array([[True, False], [True, True]])
    np.testing.assert_array_equal(_assign(costs, feasible, SMALL), [0, 1])


def test_negative_indices_from_the_solver_are_dropped(monkeypatch):
    """Some optax versions pad the answer with -1: such pairs must never be used."""
    def padded(cost_matrix):
        k = cost_matrix.shape[0]
        return jnp.full((k,), -1, jnp.int32), jnp.full((k,), -1, jnp.int32)

    monkeypatch.setattr(assignment.optax.assignment, "hungarian_algorithm", padded)
    out = assignment.assign(jnp.ones((3, 4)), jnp.ones((3, 4), bool), SMALL)
    np.testing.assert_array_equal(out, [4, 4, 4])


# ---------------------------------------------------------------------------- pricing


def test_score_assignment_of_the_optimum_and_of_others(small_states):
    n = SMALL.num_nodes
    opt = _optimal(small_states, SMALL)
    total, regret, valid = _score(small_states, opt, SMALL)
    assert np.all(np.asarray(regret) == 0.0) and np.asarray(valid).all()
    assert np.all(np.isfinite(np.asarray(total)))

    costs, feasible = _cost_matrix(small_states, SMALL)
    # Greedy in queue order: each request takes its cheapest feasible node still free.
    greedy = []
    for c, f in zip(np.asarray(costs), np.asarray(feasible)):
        taken, row = set(), []
        for ci, fi in zip(c, f):
            options = [j for j in np.argsort(ci, kind="stable") if fi[j] and j not in taken]
            row.append(options[0] if options else n)
            taken.update(options[:1])
        greedy.append(row)
    g_total, g_regret, g_valid = _score(small_states, jnp.asarray(greedy), SMALL)
    assert np.asarray(g_valid).all() and np.all(np.asarray(g_regret) >= 0.0)
    np.testing.assert_allclose(np.asarray(g_total) - np.asarray(total), np.asarray(g_regret),
                               rtol=1e-5, atol=1e-4)
    assert np.any(np.asarray(g_regret) > 1e-3), "greedy was optimal in every state"


def test_score_assignment_flags_invalid_entries(small_states):
    n, k = SMALL.num_nodes, SMALL.queue_len
    costs, feasible = (np.asarray(x) for x in _cost_matrix(small_states, SMALL))
    opt = np.asarray(_optimal(small_states, SMALL))
    base = np.asarray(_score(small_states, jnp.asarray(opt), SMALL)[0])
    rows = np.arange(BATCH)
    i = np.argmax(opt < n, axis=1)                  # a placed request per state, if any
    placed = opt[rows, i] < n
    assert placed.sum() >= BATCH // 2
    infeasible = np.argmin(feasible[rows, i], axis=1)
    has_infeasible = ~feasible[rows, i, infeasible]

    def score_with(node):
        a = opt.copy()
        a[rows, i] = node
        return (np.asarray(x) for x in _score(small_states, jnp.asarray(a), SMALL))

    for what, node, where in (("out of range", -1, placed), ("past defer", n + 1, placed),
                              ("infeasible", infeasible, placed & has_infeasible)):
        _, regret, valid = score_with(node)
        assert not valid[rows, i][where].any(), what
        assert np.all(valid.sum(1)[where] == k - 1), what
        assert np.all(regret[where] >= SMALL.invalid_penalty - 1e-5), what
    # A second claim on a taken node is invalid; the first keeps it.
    other = (i + 1) % k
    a = opt.copy()
    a[rows, other] = opt[rows, i]
    _, _, valid = (np.asarray(x) for x in _score(small_states, jnp.asarray(a), SMALL))
    first, second = np.minimum(i, other), np.maximum(i, other)
    assert valid[rows, first][placed].all() and not valid[rows, second][placed].any()
    # Leaving out a request that could be placed costs U (module doc) instead of its pair.
    total, regret, valid = score_with(n)
    assert valid[placed].all() and np.all(total[placed] > base[placed])
    price = SMALL.defer_penalty + np.max(np.where(feasible, costs, 0.0), axis=2).sum(1)
    pair = costs[rows, i, np.minimum(opt[rows, i], n - 1)]
    np.testing.assert_allclose(regret[placed], (price - pair)[placed], rtol=1e-5)


# ---------------------------------------------------------------------------- edges


def test_edges_are_finite_and_leave_requests_out(small_states):
    n, k = SMALL.num_nodes, SMALL.queue_len
    nodes, queue = small_states.nodes, small_states.queue
    edges = {
        "empty queue": small_states.replace(queue=queue.replace(valid=queue.valid & False)),
        "all nodes down": small_states.replace(nodes=nodes.replace(up=nodes.up & False)),
        # Every node's resources taken: nothing fits.
        "full cluster": small_states.replace(nodes=nodes.replace(
            alloc=small_states.cluster.capacity)),
    }
    for name, states in edges.items():
        a = _optimal(states, SMALL)
        total, regret, valid = _score(states, a, SMALL)
        assert finite_tree((total, regret)), name
        np.testing.assert_array_equal(a, np.full((BATCH, k), n), err_msg=name)
        assert np.all(np.asarray(total) == 0.0) and np.all(np.asarray(regret) == 0.0), name
        assert np.asarray(valid).all(), name


def test_jit_vmap_agree_with_single_calls(small_states):
    batched = np.asarray(_optimal(small_states, SMALL))
    for i in (0, 5):
        single = jax.jit(vte.optimal_assignment)(_pick(small_states, i), SMALL)
        np.testing.assert_array_equal(batched[i], single)
