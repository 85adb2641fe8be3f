"""Parameter validation and property tests over parameters (hypothesis)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import vte
from tests.conftest import SMALL


@pytest.mark.parametrize("field, value", [
    ("num_nodes", 0), ("num_nodes", -3), ("num_nodes", 2.5), ("queue_len", 0),
    ("num_sites", 0), ("slots_per_node", 0), ("episode_len", 0),
    ("active_nodes", 65), ("active_nodes", -1), ("active_nodes", 1.5),
    ("weights", (1.0, -1.0, 1.0)), ("weights", (1.0, math.nan, 1.0)), ("weights", (1.0, 1.0)),
    ("weights", (1.0, math.inf, 0.0)),
    ("tier_shares", (0.5, 0.5, 0.5)), ("tier_shares", (1.2, -0.2, 0.0)),
    ("load_shares", (0.2, 0.2, 0.2)), ("archetype_shares", (0.5, 0.5)),
    ("archetype_shares", (0.2, 0.2, 0.2, 0.2, 0.3)),
    ("gpu_node_share", 1.5), ("arrival_rate", -0.1), ("arrival_rate", 5.0),
    ("arrival_rate", math.nan), ("step_seconds", 0.0), ("failure_rate_scale", -1.0),
    ("repair_hours", 0.0), ("bg_reversion", 1.5), ("bg_volatility", -0.1),
    ("twin_noise", 2.0), ("twin_report_prob", 0.0), ("pref_penalty", -1.0),
    ("defer_penalty", 0.0), ("invalid_penalty", -2.0), ("initial_queue_fill", 1.1),
    ("contention", -1.0), ("sample_weights", "yes"), ("mask_from_twin", 1),
])
def test_invalid_params_raise_naming_field_and_value(field, value):
    with pytest.raises(ValueError) as err:
        vte.EnvParams(**{field: value})
    msg = str(err.value)
    assert field in msg and repr(value) in msg and "allowed" in msg


def test_defaults_are_a_mid_size_cluster():
    p = vte.EnvParams()
    assert p.num_nodes == 64 and p.queue_len == 8
    assert vte.num_actions(p) == 65
    assert vte.EnvParams(num_nodes=64, queue_len=8) == p


@pytest.mark.parametrize("kwargs, match", [
    ({"num_nodes": 0, "active_nodes": False}, "num_nodes=0"),   # a bool switched checks off
    ({"failure_rate_scale": -50.0, "pref_penalty": True}, "not booleans"),
    ({"arrival_rate": np.bool_(True)}, "not booleans"),
    ({"step_seconds": "300"}, "real numbers"), ({"weights": (1 + 0j, 1.0, 1.0)}, "real numbers"),
    # batched per environment: env 1 has shares 0.5 + 0.0 + 1.0
    ({"tier_shares": (np.array([0.5, 0.5]), np.array([0.5, 0.0]), np.array([0.0, 1.0]))},
     "sum to 1"),
])
def test_no_value_switches_validation_off(kwargs, match):
    with pytest.raises(ValueError, match=match):
        vte.EnvParams(**kwargs)


def test_batched_values_are_validated_per_environment():
    assert vte.EnvParams(arrival_rate=jnp.bfloat16(1.0)).arrival_rate == 1.0
    ok = (np.array([0.5, 0.0]), np.array([0.5, 0.0]), np.array([0.0, 1.0]))
    assert vte.EnvParams(tier_shares=ok).tier_shares is ok
    vte.EnvParams(tier_shares=np.array([[0.5, 0.2, 0.3], [0.2, 0.3, 0.5]]))
    stacked = jax.tree_util.tree_map(lambda x: jnp.stack([jnp.asarray(x)] * 2), SMALL)
    assert stacked.tier_shares[0].shape == (2,)


@pytest.mark.parametrize("field, value, match", [
    ("arrival_rate", jnp.array([1.0, 2.0]), r"arrival_rate has shape \(2,\)"),
    ("gpu_node_share", (0.1, 0.5, 0.9), "gpu_node_share has shape tuple"),
    ("weights", jnp.ones((2, 3)), r"weights has shape \(2, 3\)"),
])
def test_per_environment_shapes_are_checked_when_called(field, value, match):
    """A batched value is valid input to vmap; given to reset or step unbatched it is an
    error that names the field, raised while tracing."""
    p = SMALL.replace(**{field: value})
    key = jax.random.PRNGKey(0)
    with pytest.raises(ValueError, match=match):
        vte.reset(key, p)
    _, state = vte.reset(key, SMALL)
    with pytest.raises(ValueError, match=match):
        vte.step(key, state, 0, p)


def test_vmap_over_a_batched_field_runs():
    p = SMALL.replace(arrival_rate=jnp.array([0.0, 4.0]))
    axes = jax.tree_util.tree_map(lambda _: None, SMALL).replace(arrival_rate=0)
    keys = jax.random.split(jax.random.PRNGKey(0), 2)
    _, states = jax.jit(jax.vmap(vte.reset, in_axes=(0, axes)))(keys, p)
    _, states, *_ = jax.jit(jax.vmap(vte.step, in_axes=(0, 0, None, axes)))(keys, states, 0, p)
    assert states.queue.valid.shape == (2, SMALL.queue_len)


def test_replace_validates_too():
    with pytest.raises(ValueError, match="queue_len"):
        vte.EnvParams().replace(queue_len=0)


_shares3 = st.lists(st.floats(0.05, 1.0), min_size=3, max_size=3).map(
    lambda xs: tuple(x / sum(xs) for x in xs))
_shares5 = st.lists(st.floats(0.05, 1.0), min_size=5, max_size=5).map(
    lambda xs: tuple(x / sum(xs) for x in xs))


@st.composite
def float_params(draw):
    """Random valid float fields on the static shapes of SMALL (one compile serves all)."""
    return SMALL.replace(
        tier_shares=draw(_shares3), load_shares=draw(_shares3),
        archetype_shares=draw(_shares5),
        gpu_node_share=draw(st.floats(0.0, 1.0)),
        arrival_rate=draw(st.floats(0.0, 4.0)),
        initial_queue_fill=draw(st.floats(0.0, 1.0)),
        step_seconds=draw(st.floats(1.0, 7200.0)),
        failure_rate_scale=draw(st.floats(0.0, 1000.0)),
        repair_hours=draw(st.floats(0.01, 100.0)),
        bg_reversion=draw(st.floats(0.0, 1.0)),
        bg_volatility=draw(st.floats(0.0, 0.5)),
        contention=draw(st.floats(0.0, 10.0)),
        twin_noise=draw(st.floats(0.0, 1.0)),
        twin_report_prob=draw(st.floats(0.01, 1.0)),
        weights=tuple(draw(st.lists(st.floats(0.0, 100.0), min_size=3, max_size=3))),
        pref_penalty=draw(st.floats(0.0, 10.0)),
        defer_penalty=draw(st.floats(0.01, 10.0)),
        invalid_penalty=draw(st.floats(0.01, 10.0)),
        active_nodes=draw(st.integers(0, SMALL.num_nodes)),
    )


@jax.jit
def _episode(key, params):
    """Reset and run one episode plus one step with optimal actions mixed with random
    ones; returns per-step (regret, feasible-optimal check, finiteness)."""
    obs, state = vte.reset(key, params)

    def body(carry, k):
        obs, state = carry
        k_a, k_s, k_r = jax.random.split(k, 3)
        opt = vte.optimal_action(state, params)
        costs, feasible = vte.node_costs(state, params)
        rand = jax.random.randint(k_r, (), 0, params.num_nodes + 1)
        action = jnp.where(jax.random.bernoulli(k_a), opt, rand)
        obs2, state2, reward, term, trunc, info = vte.step(k_s, state, action, params)
        leaves = [x for x in jax.tree_util.tree_leaves((obs2, state2, reward, info, costs))
                  if jnp.issubdtype(x.dtype, jnp.floating)]
        finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in leaves]))
        checks = (info["regret"], feasible[opt], info["optimal_action"] == opt,
                  jnp.where(action == opt, info["regret"], 0.0), finite,
                  obs.action_mask == feasible)
        return (obs2, state2), checks

    _, checks = jax.lax.scan(body, (obs, state), jax.random.split(key, params.episode_len + 1))
    return checks


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(params=float_params(), seed=st.integers(0, 2**31 - 1))
def test_properties_hold_for_any_valid_params(params, seed):
    regret, opt_feasible, opt_matches, regret_at_opt, finite, mask_ok = _episode(
        jax.random.PRNGKey(seed), params)
    assert bool(np.all(np.asarray(finite)))
    assert bool(np.all(np.asarray(regret) >= 0))
    assert bool(np.all(np.asarray(opt_feasible)))
    assert bool(np.all(np.asarray(opt_matches)))
    assert bool(np.all(np.asarray(regret_at_opt) == 0))
    assert bool(np.all(np.asarray(mask_ok)))


def test_sample_weights_draws_per_episode_weights():
    p = SMALL.replace(sample_weights=True)
    reset = jax.jit(vte.reset)
    w = [np.asarray(reset(jax.random.PRNGKey(s), p)[0].weights) for s in range(3)]
    assert not np.allclose(w[0], w[1])
    for x in w:
        assert np.all(x >= 0) and abs(x.sum() - 3.0) < 1e-4
