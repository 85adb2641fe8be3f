"""Shared small configurations and compiled functions (compiling is the slow part).

The suite uses no persistent compilation cache: whole clean runs of it in one process
segfaulted twice inside JAX's compile-and-write-to-cache path (jax 0.10.2, CPU), and in a
fresh clone the cache only costs the writes. Set JAX_COMPILATION_CACHE_DIR to have one.
"""

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
