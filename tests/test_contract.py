"""The environment contract, checked on every registered environment (`vte.registry`).

A new environment gets these tests by registering: its `Registration.small` names a small
instance. Each checks a promise of `vte.environment`: observations inside the declared
spaces, jit equal to eager, vmap equal to a loop, the auto-reset with its final
observation, a valid action in every mask and the documented outcome of an invalid one,
determinism per key, finite values over a random-policy run, and no recompilation from
step to step.
"""

from __future__ import annotations

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import vte

IDS = vte.registered()
STEPS = 48            # a random-policy run; long enough to end an episode of each small one


@functools.lru_cache(maxsize=None)
def small(name):
    reg = vte.registration(name)
    env, params = reg.make(**reg.small)
    return reg, env, params


def random_valid(key, obs):
    """A uniformly random valid action of one observation."""
    return jax.random.categorical(key, jnp.where(obs.action_mask, 0.0, -jnp.inf)).astype(jnp.int32)


@functools.lru_cache(maxsize=None)
def rollout_fn(name):
    """Jitted: a random-policy run of STEPS steps of 2 environments, every output kept."""
    _, env, params = small(name)

    def run(key):
        k0, k1 = jax.random.split(key)
        obs, state = jax.vmap(env.reset, (0, None))(jax.random.split(k0, 2), params)

        def body(carry, key):
            obs, state = carry
            ka, ks = jax.random.split(key)
            action = jax.vmap(random_valid)(jax.random.split(ka, 2), obs)
            out = jax.vmap(env.step, (0, 0, 0, None))(jax.random.split(ks, 2), state, action,
                                                        params)
            return (out[0], out[1]), (obs, action) + out[2:]
        return jax.lax.scan(body, (obs, state), jax.random.split(k1, STEPS))
    return jax.jit(run)


def leaves_equal(a, b, exact=True):
    """Leaf by leaf equal: `exact`, integers and booleans bit for bit and floats within 4
    units in the last place (two compiled programs, say `step` and `step_env`, may fuse and
    so round differently); otherwise within 1e-5."""
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        x, y = np.asarray(x), np.asarray(y)
        if exact and np.issubdtype(x.dtype, np.floating):
            assert x.dtype == y.dtype and x.shape == y.shape, (x.dtype, y.dtype, x.shape, y.shape)
            np.testing.assert_array_max_ulp(x, y, maxulp=4)
        elif exact:
            np.testing.assert_array_equal(x, y)
        else:
            np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-5)


def check_in_spaces(env, params, obs, batch=()):
    specs = env.observation_specs(params)
    fields = {f: getattr(obs, f) for f in specs}
    assert list(specs) == [f for f in obs.__dataclass_fields__], "specs in the observation's order"
    for name, spec in specs.items():
        x = np.asarray(fields[name])
        assert x.shape == tuple(batch) + spec.shape, (name, x.shape, spec.shape)
        assert x.dtype == spec.dtype, (name, x.dtype, spec.dtype)
        assert np.all(x >= spec.low) and np.all(x <= spec.high), name


@pytest.mark.parametrize("name", IDS)
def test_make_builds_the_registered_environment(name):
    reg, env, params = small(name)
    assert env.name == reg.id == name and isinstance(env, vte.Environment)
    assert env.num_actions(params) == env.observation_specs(params)["action_mask"].shape[0]
    assert vte.registration(reg.flag) is reg
    with pytest.raises((ValueError, TypeError)):
        vte.make(name, no_such_parameter=1)


@pytest.mark.parametrize("name", IDS)
def test_named_columns_match_the_observation_fields(name):
    """Every named column list (the documentation's tables) has one entry per entry of
    its field's last axis, with distinct names; every environment names some."""
    _, env, params = small(name)
    specs, columns = env.observation_specs(params), env.observation_columns(params)
    assert columns, f"{name} names no observation column"
    for field, cols in columns.items():
        assert field in specs, (field, list(specs))
        assert len(cols) == specs[field].shape[-1], (field, len(cols), specs[field].shape)
        assert len({c.name for c in cols}) == len(cols), f"{field}: a name repeats"


@pytest.mark.parametrize("name", IDS)
def test_every_bound_is_finite_and_no_column_degenerate(name):
    """Spaces an agent can normalise by (and Gymnasium's checkers accept): finite bounds,
    low < high in every column."""
    _, env, params = small(name)
    for field, spec in env.observation_specs(params).items():
        low, high = np.broadcast_to(spec.low, spec.shape), np.broadcast_to(spec.high, spec.shape)
        assert np.all(np.isfinite(low)) and np.all(np.isfinite(high)), field
        assert np.all(low < high), field


@pytest.mark.parametrize("name", IDS)
def test_observations_lie_in_the_declared_spaces_over_a_random_run(name):
    _, env, params = small(name)
    (_, _), (obs, action, reward, term, trunc, info) = rollout_fn(name)(jax.random.PRNGKey(0))
    check_in_spaces(env, params, obs, (STEPS, 2))
    check_in_spaces(env, params, info["final_observation"], (STEPS, 2))
    # A valid action in every mask, and the random valid actions were all valid.
    assert np.all(np.asarray(obs.action_mask).any(-1))
    assert not np.any(np.asarray(info["invalid_action"]))
    # Finite everywhere, and at least one episode ended (the auto-reset ran).
    for leaf in jax.tree_util.tree_leaves((obs, reward, info)):
        leaf = np.asarray(leaf)
        if leaf.dtype.kind == "f":
            assert np.all(np.isfinite(leaf))
    assert np.any(np.asarray(term | trunc))


@pytest.mark.parametrize("name", IDS)
def test_jit_equals_eager_and_vmap_equals_a_loop(name):
    _, env, params = small(name)
    keys = jax.random.split(jax.random.PRNGKey(1), 3)
    # The batch compiled (op by op, the vmapped reset alone took longer than the eager step).
    obs, state = jax.jit(jax.vmap(env.reset, (0, None)))(keys, params)
    actions = jax.vmap(random_valid)(keys, obs)
    batched = jax.jit(jax.vmap(env.step, (0, 0, 0, None)))(keys, state, actions, params)
    step = jax.jit(env.step)
    for i in range(3):
        one = jax.tree_util.tree_map(lambda x: x[i], (keys, state, actions))
        jitted = step(*one, params)
        if i == 0:       # op by op is slow (each primitive compiled alone): one env is enough
            with jax.disable_jit():
                eager = env.step_env(*one[:1], one[1], one[2], params)
            leaves_equal(eager[:5], jitted[:5], exact=False)
        leaves_equal(jax.tree_util.tree_map(lambda x: x[i], batched), jitted, exact=False)


@pytest.mark.parametrize("name", IDS)
def test_auto_reset_returns_the_final_observation(name):
    _, env, params = small(name)
    step, step_env = jax.jit(env.step), jax.jit(env.step_env)
    obs, state = jax.jit(env.reset)(jax.random.PRNGKey(2), params)
    key = jax.random.PRNGKey(3)
    for _ in range(500):
        key, ka, ks = jax.random.split(key, 3)
        action = random_valid(ka, obs)
        last = step_env(ks, state, action, params)
        obs, state, _, term, trunc, info = step(ks, state, action, params)
        if bool(term | trunc):
            leaves_equal(info["final_observation"], last[0])
            assert int(state.steps) == 0
            check_in_spaces(env, params, obs)
            return
        leaves_equal((obs, state), last[:2])
    pytest.fail("no episode ended in 500 steps")


@pytest.mark.parametrize("name", IDS)
def test_an_invalid_action_is_flagged_and_a_bad_one_raises(name):
    _, env, params = small(name)
    obs, state = jax.jit(env.reset)(jax.random.PRNGKey(4), params)
    n = env.num_actions(params)
    step_env = jax.jit(env.step_env)
    for bad in (-1, n):
        *_, info = step_env(jax.random.PRNGKey(5), state, jnp.int32(bad), params)
        assert bool(info["invalid_action"]), bad
    # Beyond int32, called as a user's loop calls it (op by op: no int32 argument to wrap).
    *_, info = env.step_env(jax.random.PRNGKey(5), state, np.int64(2**40), params)
    assert bool(info["invalid_action"])
    good = int(np.argmax(np.asarray(obs.action_mask)))
    *_, info = step_env(jax.random.PRNGKey(5), state, jnp.int32(good), params)
    assert not bool(info["invalid_action"])
    with pytest.raises(TypeError, match="action must be an integer"):
        env.step(jax.random.PRNGKey(5), state, 1.0, params)
    with pytest.raises(ValueError, match="action must be one integer"):
        env.step(jax.random.PRNGKey(5), state, jnp.zeros(2, jnp.int32), params)


@pytest.mark.parametrize("name", IDS)
def test_deterministic_for_a_key(name):
    a = rollout_fn(name)(jax.random.PRNGKey(6))
    b = rollout_fn(name)(jax.random.PRNGKey(6))
    leaves_equal(a, b)


@pytest.mark.parametrize("name", IDS)
def test_no_recompilation_from_step_to_step(name):
    _, env, params = small(name)
    chex.clear_trace_counter()     # counted per code location, across the parametrization

    @jax.jit
    @chex.assert_max_traces(n=1)
    def step(key, state, action):
        return env.step(key, state, action, params)

    obs, state = env.reset(jax.random.PRNGKey(7), params)
    for i in range(3):
        obs, state, *_ = step(jax.random.PRNGKey(i), state, random_valid(jax.random.PRNGKey(i), obs))


@pytest.mark.parametrize("name", IDS)
def test_gymnasium_and_gymnax_adapters_serve_every_environment(name):
    gym = pytest.importorskip("gymnasium")
    pytest.importorskip("gymnax")
    import vte.adapters.gymnasium  # noqa: F401  (registers "vte/" + every id)
    from gymnasium.utils.env_checker import check_env
    from vte.adapters.gymnax import ClusterEnv as GymnaxEnv

    reg, env, _ = small(name)
    single = gym.make("vte/" + name, **reg.small)
    check_env(single.unwrapped, skip_render_check=True)
    obs, info = single.reset(seed=0)
    obs, reward, terminated, truncated, info = single.step(
        single.action_space.sample(mask=info["action_mask"]))
    assert single.observation_space.contains(obs) and np.isfinite(reward)
    vec = gym.make_vec("vte/" + name, num_envs=2, **reg.small)
    obs, info = vec.reset(seed=0)
    obs, rewards, *_ = vec.step(np.argmax(info["action_mask"], -1))
    assert rewards.shape == (2,) and vec.observation_space.contains(obs)

    genv = GymnaxEnv(env_id=name, observation="flat", **reg.small)
    obs, state = genv.reset(jax.random.PRNGKey(0))
    assert obs.shape == genv.observation_space().shape and genv.name == "vte/" + name
    obs, state, reward, *_ = genv.step(jax.random.PRNGKey(1), state, genv.num_actions - 1)
    assert genv.observation_space().contains(obs)


@functools.lru_cache(maxsize=None)
def every_action_fn(name):
    """Jitted: from a random-policy state after `k` steps, the step of every action in
    [-1, num_actions] (the valid ones, the invalid nodes, both out-of-range ends)."""
    _, env, params = small(name)
    n = env.num_actions(params)

    def run(key, k):
        k0, k1, k2 = jax.random.split(key, 3)
        obs, state = env.reset(k0, params)

        def body(i, carry):
            obs, state = carry
            ka, ks = jax.random.split(jax.random.fold_in(k1, i))
            out = env.step(ks, state, random_valid(ka, obs), params)
            return out[0], out[1]
        obs, state = jax.lax.fori_loop(0, k, body, (obs, state))
        actions = jnp.arange(-1, n + 1, dtype=jnp.int32)
        _, _, reward, _, _, info = jax.vmap(env.step_env, (None, None, 0, None))(
            k2, state, actions, params)
        return obs.action_mask, reward, info["invalid_action"]
    return jax.jit(run)


@pytest.mark.parametrize("name", IDS)
@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), k=st.integers(0, 30))
def test_an_invalid_action_is_never_worth_more_than_a_valid_one(name, seed, k):
    """In every state, every invalid action (an infeasible node, or out of range) has a
    reward at most that of the worst valid action: an agent that ignores the mask cannot
    gain by invalid no-ops (MODEL.md section 4; OPENB.md section 10)."""
    mask, reward, invalid = (np.asarray(x) for x in every_action_fn(name)(
        jax.random.PRNGKey(seed), k))
    np.testing.assert_array_equal(invalid[1:-1], ~mask)     # the mask is the valid actions
    assert invalid[0] and invalid[-1]
    assert reward[invalid].max() <= reward[~invalid].min() + 1e-6
