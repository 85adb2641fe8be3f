"""Sharded environments over forced CPU devices (run in a subprocess: the device count
must be set before jax is imported)."""

import os
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import FAST_COMPILE

pytestmark = pytest.mark.slow   # end-to-end runs: `pytest -m slow`, and in CI

SCRIPT = textwrap.dedent("""
    import jax, jax.numpy as jnp, numpy as np, chex, vte
    from vte import distributed as dist
    assert jax.device_count() == 4
    params = vte.EnvParams(num_nodes=8, queue_len=4, num_sites=2, episode_len=3)
    mesh = dist.make_mesh()
    key = jax.random.PRNGKey(0)
    b = 8
    obs, state = dist.reset(key, params, b, mesh)
    ref_obs, ref_state = jax.jit(jax.vmap(vte.reset, in_axes=(0, None)), static_argnums=1)(
        jax.random.split(key, b), params)
    chex.assert_trees_all_close((obs, state), (ref_obs, ref_state), rtol=1e-5, atol=1e-3)
    assert state.nodes.bg_load.sharding.spec == jax.sharding.PartitionSpec("env")
    assert len(state.nodes.bg_load.sharding.device_set) == 4
    step = dist.make_step(params, mesh)
    vstep = jax.jit(jax.vmap(vte.step, in_axes=(0, 0, 0, None)))
    for t in range(7):   # crosses two auto-resets
        keys = jax.random.split(jax.random.PRNGKey(10 + t), b)
        actions = jnp.arange(b) % (params.num_nodes + 1)
        ref = vstep(keys, ref_state, actions, params)
        out = step(dist.shard(keys, mesh), state, dist.shard(actions, mesh))
        chex.assert_trees_all_close(out, ref, rtol=1e-5, atol=1e-3)
        state, ref_state = out[1], ref[1]
        assert state.nodes.bg_load.sharding.spec == jax.sharding.PartitionSpec("env")
    # The compiled step holds no cross-device collective.
    hlo = step.lower(dist.shard(keys, mesh), state, dist.shard(actions, mesh)).compile().as_text()
    for op in ("all-reduce", "all-gather", "all-to-all", "collective-permute"):
        assert op not in hlo, op
    for bad in (6, True, 8.0):
        try:
            dist.reset(key, params, bad, mesh)
        except ValueError as e:
            assert f"num_envs={bad}" in str(e), e
        else:
            raise AssertionError(f"num_envs={bad!r} on 4 devices must be refused")
    print("OK")
""")


def test_sharded_reset_and_step_equal_unsharded():
    # 4 forced CPU devices (set before jax is imported, hence the subprocess), compiled fast.
    env = {**os.environ, "XLA_FLAGS": " ".join(
        ["--xla_force_host_platform_device_count=4", *FAST_COMPILE])}
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                         env=env, timeout=600)
    assert out.returncode == 0 and "OK" in out.stdout, out.stdout + out.stderr
