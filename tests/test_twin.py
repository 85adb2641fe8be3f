"""The digital twin: exact by default, noisy and stale when asked, pure."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import vte
from tests.conftest import SMALL


def _run(params, steps=6, seed=0):
    step = jax.jit(vte.step_env)
    _, state = jax.jit(vte.reset)(jax.random.PRNGKey(seed), params)
    for t in range(steps):
        a = vte.optimal_action(state, params)
        state = step(jax.random.PRNGKey(100 + t), state, a, params)[1]
    return state


def test_twin_is_exact_by_default():
    state = _run(SMALL)
    truth = vte.measure(state.cluster, state.nodes)
    tw = state.twin
    np.testing.assert_allclose(tw.util, truth.util, rtol=1e-6)
    np.testing.assert_allclose(tw.mem_util, truth.mem_util, rtol=1e-6)
    np.testing.assert_allclose(tw.free, truth.free, rtol=1e-6, atol=1e-5)
    np.testing.assert_allclose(tw.power, truth.power, rtol=1e-6)
    np.testing.assert_array_equal(tw.up, truth.up)
    np.testing.assert_array_equal(tw.age, 0.0)


def test_twin_noise_is_bounded_and_scoring_uses_truth():
    params = SMALL.replace(twin_noise=0.1)
    state = _run(params)
    truth = vte.measure(state.cluster, state.nodes)
    rel = np.abs(np.asarray(state.twin.power) - np.asarray(truth.power))
    assert rel.max() > 0, "noise must show"
    assert np.all(rel <= np.sqrt(3) * 0.1 * np.asarray(truth.power) + 1e-3)
    # The observation reflects the twin; the costs reflect the ground truth.
    exact = state.replace(twin=vte.cluster.twin.from_metrics(truth))
    obs_noisy, obs_exact = vte.get_obs(state, params), vte.get_obs(exact, params)
    assert not np.allclose(obs_noisy.nodes, obs_exact.nodes)
    chex.assert_trees_all_equal(vte.node_costs(state, params), vte.node_costs(exact, params))
    np.testing.assert_array_equal(obs_noisy.action_mask, obs_exact.action_mask)


def test_stale_twin_keeps_old_reports_and_ages():
    params = SMALL.replace(twin_report_prob=0.3, bg_volatility=0.2)
    state = _run(params, steps=8)
    age = np.asarray(state.twin.age)
    assert age.max() >= 1, "some nodes must have missed a report"
    truth = vte.measure(state.cluster, state.nodes)
    stale = age > 0
    fresh = age == 0
    np.testing.assert_allclose(np.asarray(state.twin.util)[fresh], np.asarray(truth.util)[fresh],
                               rtol=1e-6)
    assert not np.allclose(np.asarray(state.twin.util)[stale], np.asarray(truth.util)[stale])


def test_update_is_pure_and_vmappable():
    params = SMALL.replace(twin_noise=0.2, twin_report_prob=0.5)
    _, state = vte.reset(jax.random.PRNGKey(0), params)
    metrics = vte.measure(state.cluster, state.nodes)
    update = jax.jit(vte.cluster.twin.update)
    a = update(state.twin, metrics, state.cluster, jax.random.PRNGKey(1), params)
    b = update(state.twin, metrics, state.cluster, jax.random.PRNGKey(1), params)
    chex.assert_trees_all_equal(a, b)
    keys = jax.random.split(jax.random.PRNGKey(2), 3)
    batched = jax.vmap(vte.cluster.twin.update, in_axes=(None, None, None, 0, None))(
        state.twin, metrics, state.cluster, keys, params)
    for i in range(3):
        one = update(state.twin, metrics, state.cluster, keys[i], params)
        chex.assert_trees_all_close(jax.tree_util.tree_map(lambda x: x[i], batched), one)
    assert jnp.all(jnp.isfinite(batched.util))


def test_static_exact_path_equals_traced_path():
    """With concrete exact parameters `step` writes the metrics straight into the twin (no
    `lax.cond`); with traced ones it takes the `cond`. Both give the same states, and
    noisy parameters give the same states whether concrete or traced."""
    assert vte.cluster.twin.static_exact(SMALL) is True
    assert vte.cluster.twin.static_exact(SMALL.replace(twin_noise=0.1)) is False
    assert vte.cluster.twin.static_exact(SMALL.replace(twin_report_prob=0.5)) is False
    seen = []
    jax.jit(lambda p: seen.append(vte.cluster.twin.static_exact(p)) or 0)(SMALL)
    assert seen == [None]
    for params in (SMALL, SMALL.replace(twin_noise=0.1, twin_report_prob=0.5)):
        _, start = jax.jit(vte.reset)(jax.random.PRNGKey(3), params)
        concrete = jax.jit(lambda k, s, a: vte.step(k, s, a, params))
        traced = jax.jit(vte.step)
        a_state, b_state = start, start
        for t in range(6):
            key = jax.random.PRNGKey(50 + t)
            a = vte.optimal_action(a_state, params)
            a_state = concrete(key, a_state, a)[1]
            b_state = traced(key, b_state, a, params)[1]
            chex.assert_trees_all_close(a_state, b_state, rtol=1e-6, atol=1e-5)


def test_bookkeeping_is_exact_in_a_stale_noisy_twin():
    """Free GPUs and disk, health and running jobs follow the truth every step, also on
    nodes whose report did not arrive; there the free cores and memory move by exactly the
    allocations placed or released since, and the utilisation stays stale."""
    params = SMALL.replace(twin_report_prob=0.3, twin_noise=0.1, bg_volatility=0.2,
                           failure_rate_scale=30.0, repair_hours=0.2)
    step = jax.jit(vte.step_env)
    _, state = jax.jit(vte.reset)(jax.random.PRNGKey(1), params)
    exercised = moved = 0
    for t in range(20):
        before = vte.measure(state.cluster, state.nodes)
        old_twin, old_alloc = state.twin, np.asarray(state.nodes.alloc)
        state = step(jax.random.PRNGKey(200 + t), state, vte.optimal_action(state, params),
                     params)[1]
        truth, tw = vte.measure(state.cluster, state.nodes), state.twin
        silent = np.asarray(tw.age) > 0
        change = np.asarray(state.nodes.alloc) - old_alloc
        np.testing.assert_allclose(np.asarray(tw.free)[:2, silent],
                                   (np.asarray(old_twin.free) - change)[:2, silent], atol=1e-4)
        moved += int(np.sum(silent & np.any(change[:2] != 0, axis=0)))
        np.testing.assert_array_equal(tw.up, truth.up)
        np.testing.assert_array_equal(tw.jobs, truth.jobs)
        np.testing.assert_array_equal(tw.free[2:], truth.free[2:])
        stale = np.asarray(tw.age) > 0
        changed = ((np.asarray(truth.jobs) != np.asarray(before.jobs))
                   | (np.asarray(truth.up) != np.asarray(before.up)))
        exercised += int(np.sum(stale & changed))
    assert exercised > 0 and moved > 0, "no stale node changed: nothing was tested"
    stale = np.asarray(state.twin.age) > 0
    assert not np.allclose(np.asarray(state.twin.util)[stale], np.asarray(truth.util)[stale])


def test_mask_from_twin_allows_what_the_twin_believes():
    """With an exact twin the twin's mask is the truth's; with a stale one it can allow a
    node the cluster rejects: taking it is invalid (penalised, nothing placed)."""
    exact = vte.get_obs(_run(SMALL), SMALL.replace(mask_from_twin=True))
    np.testing.assert_array_equal(exact.action_mask, vte.get_obs(_run(SMALL), SMALL).action_mask)
    params = SMALL.replace(twin_report_prob=0.2, bg_volatility=0.3, mask_from_twin=True)
    step = jax.jit(vte.step_env)
    obs, state = jax.jit(vte.reset)(jax.random.PRNGKey(2), params)
    tested = 0
    for t in range(60):
        believed = np.asarray(obs.action_mask)
        truly = np.asarray(state.scores.feasible)
        assert believed[-1], "defer is always allowed"
        wrong = np.flatnonzero(believed[:-1] & ~truly[:-1])
        action = int(wrong[0]) if wrong.size else int(vte.optimal_action(state, params))
        obs, new, reward, _, _, info = step(jax.random.PRNGKey(300 + t), state, action, params)
        if wrong.size:
            tested += 1
            assert bool(info["invalid_action"]) and not bool(info["placed"])
            costs, feasible = vte.node_costs(state, params)
            c, f = np.asarray(costs), np.asarray(feasible)
            assert float(reward) == pytest.approx(-(c[f].max() - c[f].min()
                                                    + params.invalid_penalty))
            assert int(new.counters.placed) == int(state.counters.placed)
        state = new
    assert tested > 0, "the twin never allowed an infeasible node: nothing was tested"
