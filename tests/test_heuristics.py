"""Heuristic schedulers: the action mask is respected, the documented scores are computed,
the twin's view agrees with the ground truth when the twin is exact."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import vte
from vte.cluster import heuristics as H
from vte.cluster import scoring
from tests.conftest import SMALL

NORMAL, EDGE = 34, 6   # states, and states each edge case is made from
REQUIRED = {"random", "round_robin", "first_fit", "best_fit", "least_allocated",
            "balanced_allocation", "kube_default", "min_completion_time", "lowest_energy",
            "most_reliable"}

_obs = jax.jit(jax.vmap(vte.get_obs, in_axes=(0, None)))
def _ground_truth(state, params):
    """(feasible (N+1,), breakdown) of the head request, from the ground truth."""
    cost, feasible, br = scoring.score(state.cluster, vte.measure(state.cluster, state.nodes),
                                       scoring.head(state.queue), state.weights, params)
    return scoring.with_defer(cost, feasible, params)[1], br


_head_truth = jax.jit(jax.vmap(_ground_truth, in_axes=(0, None)))
_exact_twin = jax.jit(jax.vmap(lambda c, n: vte.cluster.twin.from_metrics(vte.measure(c, n))))


def _batched(fn):
    """fn(obs) -> (N,) as a jitted function of a batch of observations."""
    return jax.jit(jax.vmap(fn))


@pytest.fixture(scope="module")
def states(jit_reset, jit_step):
    """NORMAL states of SMALL (first-fit steps, so nodes fill up), then 3 x EDGE edge
    cases made from the first EDGE: all nodes down, a full cluster, an empty queue."""
    out = []
    for i in range(NORMAL):
        key = jax.random.PRNGKey(100 + i)
        obs, state = jit_reset(key, SMALL)
        for _ in range(i % 6):
            key, k = jax.random.split(key)
            obs, state = jit_step(k, state, int(np.argmax(np.asarray(obs.action_mask))),
                                  SMALL)[:2]
        out.append(state)
    normal = _stack(out)
    base = _stack(out[:EDGE])
    nodes, queue = base.nodes, base.queue
    down = base.replace(nodes=nodes.replace(up=nodes.up & False))
    full = base.replace(nodes=nodes.replace(alloc=base.cluster.capacity))
    empty = base.replace(queue=queue.replace(valid=queue.valid & False))
    out = jax.tree_util.tree_map(lambda *x: jnp.concatenate(x), normal, down, full, empty)
    out = out.replace(twin=_exact_twin(out.cluster, out.nodes))  # the twin hears the edits
    return jax.jit(jax.vmap(vte.rescore, in_axes=(0, None)), static_argnums=1)(out, SMALL)


def _stack(trees):
    return jax.tree_util.tree_map(lambda *x: jnp.stack(x), *trees)


@pytest.fixture(scope="module")
def observations(states):
    return _obs(states, SMALL)


def test_all_required_heuristics_exist():
    assert REQUIRED <= set(H.ALL)
    assert all(callable(p) for p in H.ALL.values())


@pytest.mark.parametrize("name", sorted(H.ALL))
def test_heuristic_respects_the_action_mask(name, observations):
    policy = H.ALL[name]
    keys = jax.random.split(jax.random.PRNGKey(0), observations.action_mask.shape[0])
    actions = jax.jit(jax.vmap(policy, in_axes=(0, 0, None)))(keys, observations, SMALL)
    assert actions.dtype == jnp.int32
    a = np.asarray(actions)
    mask = np.asarray(observations.action_mask)
    n = SMALL.num_nodes
    assert np.all((a >= 0) & (a <= n))
    assert np.all(mask[np.arange(len(a)), a]), "an action outside the mask"
    any_node = mask[:, :n].any(1)
    np.testing.assert_array_equal(a == n, ~any_node, err_msg="deferred with a node allowed")
    assert (~any_node).sum() >= 3 * EDGE, "the edge cases allow no node"


def test_random_is_deterministic_per_key_and_spreads(observations):
    obs = jax.tree_util.tree_map(lambda x: x[0], observations)
    run = jax.jit(jax.vmap(H.random, in_axes=(0, None, None)))
    keys = jax.random.split(jax.random.PRNGKey(1), 64)
    a, b = run(keys, obs, SMALL), run(keys, obs, SMALL)
    np.testing.assert_array_equal(a, b)
    allowed = np.flatnonzero(np.asarray(obs.action_mask[:-1]))
    assert set(np.asarray(a).tolist()) == set(allowed.tolist())


def test_round_robin_pointer_follows_the_step(observations):
    obs = jax.tree_util.tree_map(lambda x: x[0], observations)
    n = SMALL.num_nodes
    all_allowed = obs.replace(action_mask=jnp.ones_like(obs.action_mask))
    steps = jnp.arange(SMALL.episode_len)
    batch = jax.vmap(lambda s: all_allowed.replace(progress=s / SMALL.episode_len))(steps)
    a = jax.vmap(H.round_robin, in_axes=(None, 0, None))(jax.random.PRNGKey(0), batch, SMALL)
    np.testing.assert_array_equal(a, np.asarray(steps) % n)
    # With node 0 masked out at step 0, the pointer moves on to node 1.
    skip = all_allowed.replace(action_mask=all_allowed.action_mask.at[0].set(False),
                               progress=jnp.float32(0.0))
    assert int(H.round_robin(jax.random.PRNGKey(0), skip, SMALL)) == 1


def _numpy_kube(states):
    """LeastAllocated, MostAllocated, BalancedAllocation from the ground truth, by hand."""
    cap = np.asarray(states.cluster.capacity)[:, :2]            # (B, 2, N)
    free = np.asarray(states.twin.free)[:, :2]
    head_valid = np.asarray(states.queue.valid)[:, 0, None]
    demand = np.asarray(states.queue.demand)[:, 0, :2] * head_valid   # the observed head
    req = cap - free + demand[:, :, None]
    safe = np.maximum(cap, 1e-6)
    least = np.where((cap > 0) & (req <= cap), (cap - req) * 100 / safe, 0).mean(1)
    most = np.where(cap > 0, np.clip(req, 0, cap) * 100 / safe, 0).mean(1)
    f = np.clip(req / safe, 0, 1)
    balanced = (1 - np.abs(f[:, 0] - f[:, 1]) / 2) * 100       # std of two values
    return least, most, balanced


def test_kube_scores_match_the_formulas(states, observations):
    least, most, balanced = _numpy_kube(states)
    exists = np.asarray(states.cluster.mask)
    for fn, want in ((H.least_allocated_score, least), (H.most_allocated_score, most),
                     (H.balanced_allocation_score, balanced)):
        got = np.asarray(_batched(fn)(observations))
        np.testing.assert_allclose(got[exists], want[exists], rtol=1e-4, atol=1e-3,
                                   err_msg=fn.__name__)
    affinity = np.asarray(_batched(H.node_affinity_score)(observations))
    preferred = np.asarray(states.queue.preferred)[:, 0] * np.asarray(states.queue.valid)[:, 0]
    labels = np.asarray(states.cluster.labels)
    carried = np.array([[bin(p & lb).count("1") for lb in row]
                        for p, row in zip(preferred, labels)], np.float64)
    allowed = np.asarray(observations.action_mask)[:, :-1]
    best = np.where(allowed, carried, 0).max(1, keepdims=True)
    want = np.where(best > 0, carried * 100 / np.maximum(best, 1e-6), 0)
    np.testing.assert_allclose(affinity, want, rtol=1e-5, atol=1e-4)
    assert np.all(affinity[allowed] <= 100 + 1e-4) and np.all(affinity >= 0)


@pytest.mark.parametrize("name,score", [
    ("best_fit", H.most_allocated_score),
    ("least_allocated", H.least_allocated_score),
    ("balanced_allocation", H.balanced_allocation_score),
    ("kube_default", lambda o: (H.least_allocated_score(o) + H.balanced_allocation_score(o)
                                + 2 * H.node_affinity_score(o))),
    ("first_fit", lambda o: -jnp.arange(o.nodes.shape[0], dtype=jnp.float32)),
])
def test_score_heuristics_take_the_best_allowed_node(name, score, observations):
    keys = jax.random.split(jax.random.PRNGKey(0), observations.action_mask.shape[0])
    actions = np.asarray(jax.jit(jax.vmap(H.ALL[name], in_axes=(0, 0, None)))(
        keys, observations, SMALL))
    s = np.asarray(_batched(score)(observations))
    allowed = np.asarray(observations.action_mask)[:, :-1]
    rows = np.flatnonzero(allowed.any(1))
    best = np.where(allowed, s, -np.inf).max(1)
    np.testing.assert_allclose(s[rows, actions[rows]], best[rows], rtol=1e-6)


def test_twin_view_estimates_equal_the_ground_truth_with_an_exact_twin(states, observations):
    feasible, truth = _head_truth(states, SMALL)
    est = _batched(lambda o: H.estimates(o, SMALL))(observations)
    # Nodes that exist, for a request the observation shows (empty queues show none).
    exists = np.asarray(states.cluster.mask) & np.asarray(states.queue.valid)[:, :1]
    for field in ("completion_time", "energy", "failure_prob", "missing_preferred"):
        np.testing.assert_allclose(np.asarray(getattr(est, field))[exists],
                                   np.asarray(getattr(truth, field))[exists],
                                   rtol=1e-4, err_msg=field)
    def view_score(o):
        cluster, metrics, request, delay = H.twin_view(o, SMALL)
        return scoring.score(cluster, metrics, request, o.weights, SMALL, delay)[1], delay, cluster
    view_feasible, delay, cluster = jax.jit(jax.vmap(view_score))(observations)
    np.testing.assert_array_equal(view_feasible, np.asarray(feasible)[:, :-1])
    # The request's real delays, read from the observation; the view holds one site, so
    # nothing in it grows as N^2.
    true_delay = jax.vmap(lambda s: scoring.link_delay(s.cluster, scoring.head(s.queue).origin))(states)
    np.testing.assert_allclose(np.asarray(delay)[exists], np.asarray(true_delay)[exists], rtol=1e-6)
    assert cluster.link_delay.shape[1:] == (1, 1)


def test_the_feature_table_decodes_what_it_encodes(states):
    """Every column decodes (`vte.cluster.observation.decode`) to its source in its unit, and the
    names, the encoder and the bounds come from the one table."""
    from vte.cluster import observation as O
    state = jax.tree_util.tree_map(lambda x: x[0], states)
    cols = O.static_node_features(state.cluster)
    for f in O.NODE_STATIC_TABLE:
        decoded = O.decode(O.NODE_STATIC_TABLE, cols, f.name)
        source = jnp.where(state.cluster.mask, jnp.asarray(f.source(state.cluster), jnp.float32), 0.0)
        if f.stated is not None:          # decoded in the unit the name states
            source = source * (f.stated / f.scale)
        np.testing.assert_allclose(decoded, source, rtol=1e-6, err_msg=f.name)
    req = O.request_features(state.queue)
    for f in O.REQUEST_TABLE:
        source = jnp.where(state.queue.valid, jnp.asarray(f.source(state.queue), jnp.float32), 0.0)
        np.testing.assert_allclose(O.decode(O.REQUEST_TABLE, req, f.name), source, rtol=1e-6,
                                   err_msg=f.name)
    obs = vte.get_obs(state, SMALL)
    jobs = H.node_feature(obs, "jobs/slots", SMALL)
    np.testing.assert_allclose(jobs, jnp.where(state.cluster.mask, state.twin.jobs, 0.0), rtol=1e-6)
    with pytest.raises(ValueError, match="scaled by EnvParams.slots_per_node"):
        H.node_feature(obs, "jobs/slots")
    assert O.NODE_FEATURE_NAMES == tuple(f.name for f in O.NODE_TABLE)
    low, high = O.bounds(O.NODE_TABLE)
    assert low.shape == high.shape == (vte.NODE_FEATURES,)


def test_best_allowed_never_leaves_the_mask_for_non_finite_scores(observations):
    mask = np.asarray(observations.action_mask)[:, :-1]
    row = int(np.argmax(~mask[:, 0] & mask.any(1)))    # node 0 not allowed, another is
    assert not mask[row, 0] and mask[row].any()
    obs = jax.tree_util.tree_map(lambda x: x[row], observations)
    allowed = np.flatnonzero(mask[row])
    for bad in (np.nan, -np.inf, np.inf):
        score = jnp.full((SMALL.num_nodes,), bad)
        assert int(H.best_allowed(obs, score)) == allowed[0], bad


def test_unknown_feature_name_is_a_value_error(observations):
    obs = jax.tree_util.tree_map(lambda x: x[0], observations)
    with pytest.raises(ValueError, match="no_such_feature"):
        H.node_feature(obs, "no_such_feature")
    with pytest.raises(ValueError, match="no_such_feature"):
        H.request_feature(obs, "no_such_feature")
