"""Shared small configurations and compiled functions (compiling is the slow part)."""

import jax
import pytest

import vte

SMALL = vte.EnvParams(num_nodes=8, queue_len=4, num_sites=2, slots_per_node=4, episode_len=6)


@pytest.fixture(scope="session")
def params():
    return SMALL


@pytest.fixture(scope="session")
def jit_step():
    return jax.jit(vte.step)


@pytest.fixture(scope="session")
def jit_reset():
    return jax.jit(vte.reset)


def finite_tree(tree) -> bool:
    """True when every floating leaf of `tree` is finite."""
    import jax.numpy as jnp
    leaves = jax.tree_util.tree_leaves(tree)
    return all(bool(jnp.all(jnp.isfinite(x))) for x in leaves
               if jnp.issubdtype(jnp.asarray(x).dtype, jnp.floating))
