"""The API's edges behave the same eager, under jit and under vmap: bad params, states of
other params, wide integer actions, in_axes trees over params, and the clock."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import vte
from tests.conftest import SMALL


def test_none_in_a_params_field_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"EnvParams.arrival_rate=None is invalid"):
        vte.EnvParams(arrival_rate=None)
    with pytest.raises(ValueError, match=r"EnvParams.weights=\(1.0, None, 1.0\) is invalid"):
        vte.EnvParams(weights=(1.0, None, 1.0))


@pytest.mark.slow   # op-by-op or whole rollouts: 10-20 s
def test_an_in_axes_tree_over_params_is_accepted_and_vmaps():
    axes = jax.tree_util.tree_map(lambda _: None, SMALL).replace(weights=0)
    weights = jnp.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    key = jax.random.PRNGKey(0)
    _, states = jax.jit(jax.vmap(vte.reset, in_axes=(None, axes)))(
        key, SMALL.replace(weights=weights))
    np.testing.assert_array_equal(np.asarray(states.weights), np.asarray(weights))


@pytest.mark.parametrize("mode", ["eager", "jit", "vmap"])
def test_a_state_of_other_params_is_refused_naming_the_field(mode):
    key = jax.random.PRNGKey(0)
    _, state = vte.reset(key, SMALL)
    other = SMALL.replace(num_sites=SMALL.num_sites + 1)
    step = {"eager": vte.step, "jit": jax.jit(vte.step, static_argnums=3)}.get(mode)
    if mode == "vmap":
        state = jax.tree_util.tree_map(lambda x: jnp.stack([x, x]), state)
        step = jax.vmap(vte.step, in_axes=(None, 0, None, None))
    with pytest.raises(ValueError, match=r"state.cluster.link_delay has shape \(2, 2\).*num_sites=3"):
        step(key, state, 0, other)
    with pytest.raises(ValueError, match=r"num_nodes=9"):
        step(key, state, 0, SMALL.replace(num_nodes=SMALL.num_nodes + 1))


def test_an_int64_action_too_wide_for_int32_is_invalid_eagerly():
    key = jax.random.PRNGKey(3)
    _, state = vte.reset(key, SMALL)
    node = int(np.argmax(np.asarray(state.scores.feasible[:-1])))         # a feasible node
    wide = np.int64(2**32 + node)                                          # wraps to `node` in int32
    eager = vte.step(key, state, wide, SMALL)[5]["invalid_action"]
    assert bool(eager)
    assert not bool(vte.step(key, state, np.int64(node), SMALL)[5]["invalid_action"])
    # Under the caller's own jax.jit or jax.vmap, JAX casts an int64 argument to int32
    # (x64 disabled) before vte's code runs: documented in vte.step (pass int32 actions).


def test_the_clock_counts_steps_exactly_after_a_million_decisions():
    params = SMALL.replace(episode_len=1 << 24)
    key = jax.random.PRNGKey(0)
    _, state = vte.reset(key, params)
    state = state.replace(steps=jnp.int32(10**6), time=jnp.float32(123.0))   # a drifted clock
    _, state, *_ = jax.jit(vte.step, static_argnums=3)(key, state, params.num_nodes, params)
    assert float(state.time) == float(np.float32(10**6 + 1) * np.float32(params.step_seconds))
    _, after, *_ = jax.jit(vte.step, static_argnums=3)(key, state, params.num_nodes, params)
    # Each time is the float32 rounding of steps x step_seconds (not a float32 running sum):
    # its error stays within one rounding (16 s at 3e8 s) however long the episode.
    assert float(after.time) == float(np.float32(10**6 + 2) * np.float32(params.step_seconds))
    assert int(after.steps) == 10**6 + 2


@pytest.mark.slow
def test_public_functions_are_compiled_once_per_shape():
    """vte.step and vte.reset are compiled: a new float field value does not recompile, a
    new shape does; under the caller's own jit and vmap they give the plain functions'
    results."""
    from vte.cluster import compiled, env
    key = jax.random.PRNGKey(0)
    _, state = vte.reset(key, SMALL)
    vte.step(key, state, 0, SMALL)
    before = compiled.step.compiled._cache_size()
    other = SMALL.replace(arrival_rate=0.37, invalid_penalty=2.5)
    out = vte.step(key, state, 0, other)
    assert compiled.step.compiled._cache_size() == before
    # The plain function compiled by the caller (eager equals jitted: tests/test_contract.py).
    plain_step = jax.jit(env.step, static_argnums=3)
    plain = plain_step(key, state, jnp.int32(0), other)
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6),
                           out[1], plain[1])
    keys = jax.random.split(key, 3)
    _, states = jax.jit(jax.vmap(vte.reset, (0, None)), static_argnums=1)(keys, SMALL)
    # Under the caller's jit and vmap (under vmap alone, op by op: tests/test_env.py), with
    # the params `plain_step` was compiled for.
    batched = jax.jit(jax.vmap(vte.step, (0, 0, None, None)))(keys, states, 1, other)
    for s in range(3):
        one = plain_step(keys[s], jax.tree_util.tree_map(lambda x: x[s], states), jnp.int32(1), other)
        np.testing.assert_allclose(np.asarray(batched[2][s]), np.asarray(one[2]), rtol=1e-6)
    assert callable(vte.cluster.heuristics.ALL["kube_default"])


def test_import_vte_loads_no_optional_or_checkpoint_library():
    import subprocess
    import sys
    code = ("import sys, vte; heavy = [m for m in ('orbax', 'gymnax', 'gymnasium', 'fastapi', "
            "'uvicorn', 'matplotlib') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
