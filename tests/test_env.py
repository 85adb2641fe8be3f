"""Core environment: API, jit/vmap behaviour, determinism, scoring invariants, edges."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import vte
from vte.cluster import catalogue as C
from tests.conftest import SMALL, finite_tree


def invalid_regret(costs, feasible, params) -> float:
    """The regret of an invalid action (MODEL.md section 4): the worst valid action's
    regret in the state plus `invalid_penalty`."""
    c, f = np.asarray(costs), np.asarray(feasible)
    best = c[f].min()
    return float(c[f].max() - best + params.invalid_penalty)


def _rollout(step_fn, key, state, params, actions_fn, n):
    """Run n steps; returns the list of (obs, state, reward, term, trunc, info)."""
    out = []
    for i in range(n):
        key, k_a, k_s = jax.random.split(key, 3)
        action = actions_fn(k_a, state)
        res = step_fn(k_s, state, action, params)
        out.append(res)
        state = res[1]
    return out


def _random_action(key, state, params=SMALL):
    """Any action in [-1, N + 1]: valid, infeasible and out of range alike."""
    return jax.random.randint(key, (), -1, params.num_nodes + 2)


# ---------------------------------------------------------------------------- API


def test_reset_shapes_and_observation_access(params, jit_reset):
    obs, state = jit_reset(jax.random.PRNGKey(0), params)
    n, k = params.num_nodes, params.queue_len
    assert obs.nodes.shape == (n, vte.NODE_FEATURES)
    assert obs.request.shape == (vte.REQUEST_FEATURES,)
    assert obs.queue.shape == (k, vte.REQUEST_FEATURES)
    assert obs.queue_mask.shape == (k,)
    assert obs.weights.shape == (3,)
    assert obs.action_mask.shape == (n + 1,) and obs.action_mask.dtype == jnp.bool_
    assert obs["action_mask"] is obs.action_mask
    assert set(obs.keys()) == {"nodes", "request", "queue", "queue_mask", "weights",
                               "progress", "action_mask"}
    assert bool(obs.action_mask[-1]), "defer is always allowed"
    assert len(vte.NODE_FEATURE_NAMES) == vte.NODE_FEATURES
    assert finite_tree(obs) and finite_tree(state)


def test_scenario_has_three_tiers_and_resources():
    params = vte.EnvParams(num_nodes=256)
    state = jax.jit(vte.reset)(jax.random.PRNGKey(3), params)[1]
    tiers = np.bincount(np.asarray(state.cluster.tier), minlength=3)
    assert np.all(tiers > 0), tiers
    cap = np.asarray(state.cluster.capacity)
    assert cap.shape == (C.NUM_RESOURCES, 256) and np.all(cap[C.CPU] >= 1)
    assert np.any(cap[C.GPU] > 0) and np.all(np.asarray(state.cluster.power_peak)
                                             >= np.asarray(state.cluster.power_idle))
    edge = np.asarray(state.cluster.tier) == C.EDGE
    # Edge devices are small, fail more and draw little power.
    assert cap[C.CPU][edge].max() <= 8 and cap[C.CPU][~edge].min() >= 16
    assert np.asarray(state.cluster.failure_rate)[edge].min() > \
        np.asarray(state.cluster.failure_rate)[~edge].max()
    assert np.asarray(state.cluster.power_idle)[edge].max() <= 10


def test_step_returns_documented_info(params, jit_step, jit_reset):
    obs, state = jit_reset(jax.random.PRNGKey(0), params)
    obs, state, reward, term, trunc, info = jit_step(jax.random.PRNGKey(1), state,
                                                     params.num_nodes, params)
    for name in ("optimal_action", "regret", "cost", "completion_time", "energy",
                 "failure_prob", "matched_optimal", "invalid_action", "final_observation",
                 "dropped", "jobs_lost", "counters"):
        assert name in info, name
    assert reward.shape == () and reward.dtype == jnp.float32
    assert term.dtype == jnp.bool_ and trunc.dtype == jnp.bool_


def test_no_retrace_across_steps(params, jit_reset):
    @jax.jit
    @chex.assert_max_traces(n=1)
    def step(key, state, action):
        return vte.step(key, state, action, params)

    obs, state = jit_reset(jax.random.PRNGKey(0), params)
    for i in range(2 * params.episode_len + 1):  # crosses two auto-resets
        obs, state, *_ = step(jax.random.PRNGKey(i), state, jnp.int32(i % (params.num_nodes + 1)))
    chex.clear_trace_counter()


# ---------------------------------------------------------------------------- jit / vmap


def test_vmap_equals_per_env_across_auto_reset(params, jit_step, jit_reset):
    """Batched steps (whose auto-reset runs through the custom vmap rule) equal
    environment-by-environment steps, including the steps where episodes end."""
    b = 3
    keys = jax.random.split(jax.random.PRNGKey(0), b)
    vreset = jax.jit(jax.vmap(vte.reset, in_axes=(0, None)))
    vstep = jax.jit(jax.vmap(vte.step, in_axes=(0, 0, 0, None)))
    _, states = vreset(keys, params)
    singles = [jit_reset(k, params)[1] for k in keys]
    # Desynchronise: env 1 starts two steps into its episode, so episodes end at
    # different steps and the batched rule must reset only the envs that are done.
    for extra in range(2):
        k = jax.random.PRNGKey(100 + extra)
        singles[1] = jit_step(k, singles[1], 0, params)[1]
    states = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *singles)
    for t in range(2 * params.episode_len):
        step_keys = jax.random.split(jax.random.PRNGKey(1000 + t), b)
        actions = jnp.array([(t + i) % (params.num_nodes + 1) for i in range(b)])
        batched = vstep(step_keys, states, actions, params)
        for i in range(b):
            single = jit_step(step_keys[i], singles[i], actions[i], params)
            chex.assert_trees_all_close(
                jax.tree_util.tree_map(lambda x: x[i], batched), single, rtol=1e-5, atol=1e-5)
            singles[i] = single[1]
        states = batched[1]


@pytest.mark.slow
def test_nested_vmap_equals_flat_vmap_and_keeps_the_reset_conditional(params):
    """vmap over seeds of vmap over envs (as the trainer runs `--seeds`) equals one vmap over
    all envs, across an auto-reset, and still resets only in steps where some env is done
    (the compiled step holds the reset's conditional rather than a select)."""
    keys = jax.random.split(jax.random.PRNGKey(3), 6).reshape(2, 3, 2)
    _, states = jax.jit(jax.vmap(jax.vmap(vte.reset, (0, None)), (0, None)))(keys, params)
    actions = jnp.zeros((2, 3), jnp.int32)
    flat_states = jax.tree_util.tree_map(lambda x: x.reshape((6,) + x.shape[2:]), states)

    def compiled(fn, *args):   # each program compiled once: inspected, then run
        return jax.jit(fn).lower(*args).compile()

    def conditionals(program):
        return program.as_text().count("conditional(")

    nested = compiled(jax.vmap(jax.vmap(vte.step, (0, 0, 0, None)), (0, 0, 0, None)),
                      keys, states, actions, params)
    flat = compiled(jax.vmap(vte.step, (0, 0, 0, None)),
                    keys.reshape(6, 2), flat_states, actions.reshape(6), params)
    # The step's conditionals are step_env's, the reset's own, and one more: the reset's
    # `lax.cond` on any env being done (a reset computed in every step and selected would
    # leave one fewer), nested as flat.
    step_env = conditionals(compiled(
        jax.vmap(jax.vmap(vte.step_env, (0, 0, 0, None)), (0, 0, 0, None)),
        keys, states, actions, params))
    reset = conditionals(compiled(jax.vmap(vte.reset, (0, None)), keys[0], params))
    assert conditionals(nested) == step_env + reset + 1
    assert conditionals(flat) == step_env + reset + 1
    resets = 0
    for t in range(params.episode_len + 2):
        ks = jax.random.split(jax.random.PRNGKey(50 + t), 6)
        a = jnp.arange(6, dtype=jnp.int32) % (params.num_nodes + 1)
        out = nested(ks.reshape(2, 3, 2), states, a.reshape(2, 3), params)
        ref = flat(ks, jax.tree_util.tree_map(lambda x: x.reshape((6,) + x.shape[2:]), states),
                   a, params)
        chex.assert_trees_all_close(
            jax.tree_util.tree_map(lambda x: x.reshape((6,) + x.shape[2:]), out), ref,
            rtol=1e-5, atol=1e-5)
        resets += int(out[4].sum())
        states = out[1]
    assert resets == 6


def test_sampled_weights_are_three_times_a_flat_dirichlet():
    """With `sample_weights`, each episode's weights are 3 x Dirichlet(1, 1, 1): they sum to 3
    and each one divided by 3 is Beta(1, 2) (scipy as the oracle)."""
    from scipy import stats

    keys = jax.random.split(jax.random.PRNGKey(11), 4000)
    w = np.asarray(jax.jit(jax.vmap(vte.cluster.scenario.sample_weights))(keys))
    assert np.all(np.isfinite(w)) and np.all(w >= 0)
    np.testing.assert_allclose(w.sum(axis=1), 3.0, rtol=1e-5)
    for i in range(3):
        assert stats.kstest(w[:, i] / 3.0, stats.beta(1, 2).cdf).pvalue > 1e-3, i
    # Different draws per component and per key.
    assert np.corrcoef(w[:, 0], w[:, 1])[0, 1] < -0.3   # Dirichlet components anti-correlate


def test_reset_scenarios_differ_per_key_and_repeat_per_key():
    params = vte.EnvParams(num_nodes=16)
    keys = jax.random.split(jax.random.PRNGKey(5), 512)
    states = jax.jit(jax.vmap(lambda k: vte.reset(k, params)[1]))(keys)
    again = jax.jit(jax.vmap(lambda k: vte.reset(k, params)[1]))(keys)
    chex.assert_trees_all_equal(states, again)
    # Every scenario is its own: no two keys give the same cluster, queue or link delays.
    sig = np.concatenate([np.asarray(states.cluster.capacity).reshape(512, -1),
                          np.asarray(states.cluster.speed),
                          np.asarray(states.queue.work),
                          np.asarray(states.cluster.link_delay).reshape(512, -1)], axis=1)
    assert len(np.unique(sig, axis=0)) == 512
    # Attributes drawn from words of their own do not correlate within a node kind.
    kind = np.asarray(states.cluster.kind).ravel()
    u = np.asarray(states.cluster.speed).ravel()
    b = np.log(np.asarray(states.cluster.bandwidth).ravel())
    for k in np.unique(kind):
        at = kind == k
        if at.sum() > 200:
            assert abs(np.corrcoef(u[at], b[at])[0, 1]) < 0.15, k


def test_vmap_over_params_weights(params):
    """Float fields of the params are pytree leaves: one compiled step serves many."""
    weights = jnp.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    key = jax.random.PRNGKey(0)

    @jax.jit
    @jax.vmap
    def reset_and_score(w):
        p = params.replace(weights=w)
        obs, state = vte.reset(key, p)
        return obs, vte.node_costs(state, p)

    obs, (costs, feasible) = reset_and_score(weights)
    np.testing.assert_allclose(obs.weights, weights)
    for i in range(3):
        single = params.replace(weights=tuple(float(w) for w in weights[i]))
        ref = vte.node_costs(vte.reset(key, single)[1], single)
        np.testing.assert_allclose(costs[i], ref[0], rtol=1e-5)
        np.testing.assert_array_equal(feasible[i], ref[1])


def test_determinism_per_key(params, jit_step, jit_reset):
    def run():
        _, state = jit_reset(jax.random.PRNGKey(7), params)
        return _rollout(jit_step, jax.random.PRNGKey(8), state, params, _random_action, 8)
    chex.assert_trees_all_equal(run(), run())
    _, s1 = jit_reset(jax.random.PRNGKey(7), params)
    _, s2 = jit_reset(jax.random.PRNGKey(9), params)
    assert not np.array_equal(s1.cluster.capacity, s2.cluster.capacity)


# ---------------------------------------------------------------------------- scoring


@jax.jit
def _all_actions_regret(state):
    """The step's info for every action in [-1, N + 1] from one state."""
    params = SMALL
    keys = jnp.zeros((params.num_nodes + 3, 2), jnp.uint32)
    actions = jnp.arange(-1, params.num_nodes + 2)
    info = jax.vmap(lambda k, a: vte.step_env(k, state, a, params)[5])(keys, actions)
    return actions, info


def test_regret_nonnegative_and_zero_at_optimum(params, jit_reset):
    for seed in range(4):
        _, state = jit_reset(jax.random.PRNGKey(seed), params)
        costs, feasible = vte.node_costs(state, params)
        opt = int(vte.optimal_action(state, params))
        actions, info = _all_actions_regret(state)
        regret = np.asarray(info["regret"])
        assert np.all(regret >= 0)
        i_opt = opt + 1  # actions start at -1
        assert regret[i_opt] == 0 and bool(info["matched_optimal"][i_opt])
        # Every feasible action's regret is its cost gap; every infeasible one is penalised.
        for i, a in enumerate(np.asarray(actions)):
            if 0 <= a <= params.num_nodes and feasible[a]:
                np.testing.assert_allclose(regret[i], costs[a] - costs[opt], rtol=1e-5)
                assert not info["invalid_action"][i]
            else:
                assert regret[i] == pytest.approx(invalid_regret(costs, feasible, params))
                assert regret[i] >= regret.max() - 1e-5     # never better than a valid one
                assert info["invalid_action"][i]
        # The optimum is the least-cost feasible node, lowest index on ties.
        masked = np.where(np.asarray(feasible), np.asarray(costs), np.inf)
        assert opt == int(np.argmin(masked))


def test_reward_is_the_step_reward_without_stepping(params, jit_reset):
    """`vte.reward` of every action (valid, infeasible, out of range) equals what `step`
    gives, under jit and vmap over actions, eagerly for one action, and for a concrete
    action too wide for int32 (invalid, not wrapped onto a node)."""
    for seed in range(3):
        _, state = jit_reset(jax.random.PRNGKey(seed), params)
        actions, info = _all_actions_regret(state)
        rewards = jax.jit(jax.vmap(vte.reward, (None, 0, None)))(state, actions, params)
        np.testing.assert_array_equal(np.asarray(rewards), -np.asarray(info["regret"]))
        opt = int(vte.optimal_action(state, params))
        assert float(vte.reward(state, opt, params)) == 0.0
        costs, feasible = vte.node_costs(state, params)
        assert float(vte.reward(state, 2**40, params)) == pytest.approx(
            -invalid_regret(costs, feasible, params))
    with pytest.raises(ValueError, match="other params"):
        vte.reward(state, 0, vte.EnvParams(num_nodes=params.num_nodes + 1))


def test_defer_is_optimal_only_when_nothing_fits(params, jit_reset):
    _, state = jit_reset(jax.random.PRNGKey(1), params)
    costs, feasible = vte.node_costs(state, params)
    if feasible[:-1].any():
        assert int(vte.optimal_action(state, params)) < params.num_nodes
        assert costs[-1] > costs[:-1][feasible[:-1]].max()


def test_placement_respects_capacity(params, jit_step, jit_reset):
    """A placed job fits the node's free capacity at the moment of placement."""
    _, state = jit_reset(jax.random.PRNGKey(2), params)
    placed = 0
    for t in range(30):
        metrics = vte.measure(state.cluster, state.nodes)
        a = int(vte.optimal_action(state, params))
        demand = np.asarray(state.queue.demand[0])
        _, new_state, _, _, _, info = jit_step(jax.random.PRNGKey(t), state, a, params)
        if bool(info["placed"]):
            placed += 1
            assert np.all(np.asarray(metrics.free)[:, a] >= demand - 1e-3)
            assert bool(metrics.up[a]) and bool(state.cluster.mask[a])
            labels = int(state.cluster.labels[a])
            req, rej = int(state.queue.required[0]), int(state.queue.rejected[0])
            assert labels & req == req and labels & rej == 0
        state = new_state
    assert placed > 0
    np.testing.assert_allclose(state.nodes.alloc, vte.cluster.dynamics.allocated(state.nodes), atol=1e-3)
    np.testing.assert_array_equal(state.nodes.jobs, vte.cluster.dynamics.slot_count(state.nodes.job_active))


def test_cached_head_scores_equal_a_fresh_scoring_after_every_step(params):
    """`EnvState.scores` (computed once per step) equals scoring the state afresh, after
    placements, defers, invalid actions and auto-resets, and drives the action mask."""
    step = jax.jit(vte.step)
    rescore = jax.jit(vte.rescore)
    obs, state = jax.jit(vte.reset)(jax.random.PRNGKey(5), params)
    for t in range(params.episode_len + 5):
        chex.assert_trees_all_close(state.scores, rescore(state, params).scores, rtol=1e-6,
                                   atol=1e-6)
        np.testing.assert_array_equal(obs.action_mask, state.scores.feasible)
        a = [int(vte.optimal_action(state, params)), params.num_nodes, -1, t % params.num_nodes][t % 4]
        obs, state = step(jax.random.PRNGKey(t), state, a, params)[:2]
    assert int(state.steps) == 5  # went through an auto-reset


def test_invalid_actions_change_nothing_in_the_cluster():
    """Out-of-range and infeasible actions give identical states: no job placed, the
    queue untouched, only the invalid counter moves."""
    params = SMALL.replace(failure_rate_scale=0.0, arrival_rate=0.0, step_seconds=1.0)
    _, state = vte.reset(jax.random.PRNGKey(4), params)
    costs, feasible = vte.node_costs(state, params)
    infeasible = [int(i) for i in np.flatnonzero(~np.asarray(feasible[:-1]))]
    actions = [-1, params.num_nodes + 1, 10_000] + infeasible[:2]
    key = jax.random.PRNGKey(5)
    results = [vte.step_env(key, state, a, params) for a in actions]
    for res in results:
        new = res[1]
        assert bool(res[5]["invalid_action"]) and float(res[2]) == pytest.approx(
            -invalid_regret(costs, feasible, params))
        chex.assert_trees_all_equal(new.queue, state.queue)
        np.testing.assert_array_equal(new.nodes.job_active, state.nodes.job_active)
        np.testing.assert_array_equal(new.nodes.alloc, state.nodes.alloc)
        assert int(new.counters.invalid) == 1 and int(new.counters.placed) == 0
        chex.assert_trees_all_equal(new, results[0][1])
    # A NumPy integer too wide for int32 is out of range too (JAX would wrap 2**32 to 0).
    wide = vte.step_env(key, state, np.int64(2**32), params)
    assert bool(wide[5]["invalid_action"])
    chex.assert_trees_all_equal(wide[1], results[0][1])


@pytest.mark.parametrize("action, error, match", [
    (1.0, TypeError, "got dtype float32"), (np.float32(np.nan), TypeError, "float32"),
    (True, TypeError, "got dtype bool"), (1 + 0j, TypeError, "complex"),
    (np.array([1]), ValueError, r"shape \(1,\)"), (jnp.array([1, 2]), ValueError, r"\(2,\)"),
])
def test_non_integer_actions_raise_before_any_work(action, error, match):
    _, state = vte.reset(jax.random.PRNGKey(4), SMALL)
    for fn in (vte.step, vte.step_env, jax.jit(vte.step, static_argnums=3)):
        with pytest.raises(error, match=match):
            fn(jax.random.PRNGKey(5), state, action, SMALL)


@pytest.mark.slow   # op-by-op or whole rollouts: 10-20 s
def test_vmap_of_step_without_jit(params, jit_step, jit_reset):
    """The batched auto-reset broadcasts the params; that must not trip their validation."""
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    states = [jit_reset(k, params)[1] for k in keys]
    batched = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *states)
    actions = jnp.full((3,), params.num_nodes)
    eager = jax.vmap(vte.step, in_axes=(0, 0, 0, None))(keys, batched, actions, params)
    for i in range(3):
        one = jit_step(keys[i], states[i], actions[i], params)
        chex.assert_trees_all_close(jax.tree_util.tree_map(lambda x: x[i], eager), one,
                                    rtol=1e-5, atol=1e-5)


def test_defer_moves_head_to_back(params):
    params = params.replace(arrival_rate=0.0, initial_queue_fill=1.0)
    _, state = vte.reset(jax.random.PRNGKey(0), params)
    new = vte.step_env(jax.random.PRNGKey(1), state, params.num_nodes, params)[1]
    np.testing.assert_array_equal(new.queue.work, jnp.roll(state.queue.work, -1))
    assert int(new.counters.deferred) == 1


# ---------------------------------------------------------------------------- edges


def _all_down(state):
    n = state.nodes
    nodes = n.replace(up=jnp.zeros_like(n.up))
    return state.replace(nodes=nodes, twin=state.twin.replace(up=jnp.zeros_like(n.up)))


def _full(state, params):
    n = state.nodes
    j = params.slots_per_node
    cap = state.cluster.capacity
    # Whole units per slot that add up to the capacity: the last slot holds the rest.
    each = jnp.floor(cap / j)
    demand = jnp.stack([each] * (j - 1) + [cap - (j - 1) * each], axis=1).astype(jnp.uint16)
    nodes = n.replace(job_active=jnp.ones_like(n.job_active), job_demand=demand,
                      jobs=jnp.full_like(n.jobs, j),
                      job_end=jnp.full_like(n.job_end, 1e9), alloc=cap,
                      bg_load=jnp.full_like(n.bg_load, C.BG_MAX))
    return state.replace(nodes=nodes)


def _empty_queue(state):
    return state.replace(queue=state.queue.replace(valid=jnp.zeros_like(state.queue.valid)))


@pytest.mark.parametrize("edge", ["all_down", "full", "empty_queue"])
def test_edges_defer_is_optimal_and_everything_finite(edge, params, jit_step, jit_reset):
    _, state = jit_reset(jax.random.PRNGKey(0), params)
    state = {"all_down": _all_down, "full": lambda s: _full(s, params),
             "empty_queue": _empty_queue}[edge](state)
    state = vte.rescore(state, params)
    costs, feasible = vte.node_costs(state, params)
    assert not bool(feasible[:-1].any())
    assert int(vte.optimal_action(state, params)) == params.num_nodes
    assert float(costs[-1]) == 0.0 and finite_tree(costs)
    obs = vte.get_obs(state, params)
    assert finite_tree(obs) and not bool(obs.action_mask[:-1].any())
    for a in range(-1, params.num_nodes + 2):
        res = jit_step(jax.random.PRNGKey(a + 10), state, a, params)
        assert finite_tree(res)
        assert float(res[5]["regret"]) == (0.0 if a == params.num_nodes
                                           else pytest.approx(params.invalid_penalty))


def test_node_failure_kills_jobs_and_counts_them(params, jit_step, jit_reset):
    _, state = jit_reset(jax.random.PRNGKey(0), params)
    state = vte.rescore(_full(state, params), params)
    # Node 0 fails within the next step for sure.
    cl = state.cluster
    state = state.replace(cluster=cl.replace(step_fail_prob=cl.step_fail_prob.at[0].set(1.0)))
    _, new, _, _, _, info = jit_step(jax.random.PRNGKey(1), state, params.num_nodes, params)
    assert not bool(new.nodes.up[0])
    assert int(info["jobs_lost"]) == params.slots_per_node
    assert not bool(new.nodes.job_active[:, 0].any())
    np.testing.assert_allclose(new.nodes.alloc[:, 0], 0.0, atol=1e-4)
    assert not bool(new.twin.up[0])


@pytest.mark.slow
def test_failures_and_repairs_follow_the_per_step_probabilities():
    """Up nodes fail with Cluster.step_fail_prob and down nodes are repaired with
    1 - exp(-dt / repair_hours) per step: the observed transition frequencies match."""
    params = vte.EnvParams(num_nodes=16, queue_len=4, num_sites=2, episode_len=400,
                           failure_rate_scale=30.0, repair_hours=2.0)
    b, steps = 32, 300
    _, state = jax.jit(jax.vmap(vte.reset, in_axes=(0, None)))(
        jax.random.split(jax.random.PRNGKey(0), b), params)
    vstep = jax.vmap(vte.step_env, in_axes=(0, 0, None, None))

    def body(state, key):
        new = vstep(jax.random.split(key, b), state, params.num_nodes, params)[1]
        return new, (state.nodes.up, new.nodes.up)

    _, (before, after) = jax.jit(lambda s: jax.lax.scan(
        body, s, jax.random.split(jax.random.PRNGKey(1), steps)))(state)
    before, after = np.asarray(before), np.asarray(after)
    p_fail = np.broadcast_to(np.asarray(state.cluster.step_fail_prob), before.shape)
    # Observed failures against their expectation (sum of per-node-step probabilities).
    expected = p_fail[before].sum()
    failures = (before & ~after).sum()
    assert expected > 500 and abs(failures - expected) < 4 * np.sqrt(expected), (failures, expected)
    q = -np.expm1(-params.step_seconds / (params.repair_hours * 3600.0))
    down = (~before).sum()
    repairs = (~before & after).sum()
    assert down > 500 and abs(repairs / down - q) < 4 * np.sqrt(q * (1 - q) / down), (repairs / down, q)


@pytest.mark.slow
def test_long_random_rollout_finite_and_counted(params):
    """Many environments, many episodes of random actions: no NaN/Inf anywhere and the
    counters add up."""
    b, t = 16, 4 * params.episode_len
    vstep = jax.vmap(vte.step, in_axes=(0, 0, 0, None))

    def body(carry, key):
        state, = carry
        k_a, k_s = jax.random.split(key)
        actions = jax.random.randint(k_a, (b,), -1, params.num_nodes + 2)
        obs, state, reward, term, trunc, info = vstep(jax.random.split(k_s, b), state,
                                                      actions, params)
        ok = jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in
                                jax.tree_util.tree_leaves((obs, state, reward, info))
                                if jnp.issubdtype(x.dtype, jnp.floating)]))
        return (state,), (ok, reward, info["regret"], trunc)

    _, state = jax.jit(jax.vmap(vte.reset, in_axes=(0, None)))(
        jax.random.split(jax.random.PRNGKey(0), b), params)
    (state,), (ok, reward, regret, trunc) = jax.jit(
        lambda s, k: jax.lax.scan(body, (s,), jax.random.split(k, t)))(state, jax.random.PRNGKey(1))
    assert bool(ok.all())
    assert bool((regret >= 0).all())
    np.testing.assert_allclose(reward, -regret)
    assert int(trunc.sum()) == b * 4  # fixed-length episodes
    c = state.counters
    assert np.all(np.asarray(c.placed + c.deferred + c.invalid) <= np.asarray(state.steps))


def test_final_observation_on_truncation(params, jit_step, jit_reset):
    _, state = jit_reset(jax.random.PRNGKey(0), params)
    for t in range(params.episode_len):
        obs, new, _, _, trunc, info = jit_step(jax.random.PRNGKey(t), state, params.num_nodes,
                                               params)
        if t < params.episode_len - 1:
            assert not bool(trunc)
            chex.assert_trees_all_equal(info["final_observation"], obs)
        state = new
    assert bool(trunc)
    assert int(state.steps) == 0 and float(state.time) == 0.0   # fresh scenario
    assert float(info["final_observation"].progress) == 1.0
    assert float(obs.progress) == 0.0
    assert int(info["counters"].deferred) + int(info["counters"].invalid) <= params.episode_len


def test_active_nodes_mask(params):
    p = params.replace(active_nodes=3)
    _, state = vte.reset(jax.random.PRNGKey(0), p)
    assert np.asarray(state.cluster.mask).sum() == 3
    for s in range(5):
        _, state = vte.reset(jax.random.PRNGKey(s), p)
        _, feasible = vte.node_costs(state, p)
        assert not bool(feasible[3:-1].any())
        assert np.all(np.asarray(vte.get_obs(state, p).nodes)[3:] == 0)


def test_queue_update_matches_a_list_model_in_every_case():
    """`_update_queue` against a Python list: every count of valid requests, pop / rotate /
    nothing, and every number of arrivals, including a full queue and dropped arrivals."""
    from vte.cluster import env as E

    k, m = 4, C.MAX_ARRIVALS
    reqs = vte.cluster.scenario.sample_requests(jnp.zeros((k + m, vte.cluster.scenario.NUM_REQUEST_WORDS),
                                                  jnp.uint32), vte.EnvParams())
    ids = jnp.arange(1.0, k + m + 1.0)                 # request i carries work = i + 1
    reqs = reqs.replace(work=ids)
    queue0 = jax.tree_util.tree_map(lambda x: x[:k], reqs)
    new = jax.tree_util.tree_map(lambda x: x[k:], reqs)
    cases = [(c, act, n) for c in range(k + 1) for act in ("pop", "rotate", "none")
             for n in range(m + 1) if c > 0 or act == "none"]
    count, pop, rot, n_new = (jnp.array(v) for v in zip(*[
        (c, act == "pop", act == "rotate", n) for c, act, n in cases]))

    @jax.jit
    @jax.vmap
    def update(count, pop, rot, n_new):
        q = queue0.replace(valid=jnp.arange(k) < count)
        out, dropped = E._update_queue(q, pop, rot, new, n_new)
        return out.valid, out.work, dropped

    valid, work, dropped = (np.asarray(x) for x in update(count, pop, rot, n_new))
    for i, (c, act, n) in enumerate(cases):
        model = list(range(1, c + 1))
        if act == "pop":
            model.pop(0)
        elif act == "rotate":
            model.append(model.pop(0))
        arrivals = list(range(k + 1, k + 1 + n))
        fit = arrivals[:k - len(model)]
        model += fit
        assert valid[i].sum() == len(model), (c, act, n)
        assert list(work[i][valid[i]]) == model, (c, act, n, work[i], valid[i])
        assert dropped[i] == n - len(fit), (c, act, n)
