"""Shared small configurations and compiled functions (compiling is the slow part)."""

import os
from pathlib import Path

# One persistent compilation cache for the whole run, subprocesses included (they inherit
# the environment): a program compiled once is read back instead of compiled again.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR",
                      str(Path(__file__).resolve().parents[1] / ".pytest_cache" / "jax"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")

import jax  # noqa: E402  (after the cache settings it reads)
import pytest  # noqa: E402

jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
jax.config.update("jax_persistent_cache_min_compile_time_secs",
                  float(os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"]))

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
