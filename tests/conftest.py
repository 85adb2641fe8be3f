"""Shared small configurations and compiled functions (compiling is the slow part).

Whole clean runs of the suite in one process segfaulted three times inside XLA's CPU
compilation (jax 0.10.2), each time late in the process's life, after some hundreds of
programs, in a program that compiles fine alone. So no process keeps every program alive:
the suite runs on several worker processes (pytest-xdist, `-n auto --dist loadfile`), and
after each test file its compiled programs are dropped (`jax.clear_caches()` and the
trainers' cache), so the programs a file compiles do not outlive it. Within a file they are
shared. No persistent compilation cache is set: in a fresh clone it only costs the writes
(JAX_COMPILATION_CACHE_DIR turns one on).
"""

import gc
import sys

import jax
import pytest

import vte

SMALL = vte.EnvParams(num_nodes=8, queue_len=4, num_sites=2, slots_per_node=4, episode_len=6)


@pytest.fixture(scope="module", autouse=True)
def _drop_compiled_programs_after_each_file():
    yield
    jax.clear_caches()
    run = sys.modules.get("train.run")
    if run is not None:
        run.clear_compiled()
    gc.collect()


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
