"""Control over what XLA recomputes.

XLA fuses an elementwise producer into each of its consumers and recomputes it there.
When a per-environment value (the new head request, say) feeds per-node loops, every
node of every fusion that reads it recomputes it; on CPU this turned out to be a large
share of a step. `lax.optimization_barrier` does not prevent it on CPU (the barrier is
removed before fusion), but the outputs of a `lax.cond` whose predicate is only known at
run time are always materialised, once. `materialize` wraps a value in such a `cond`
(always true, with a branch that is never taken, since XLA removes a `cond` whose two
branches are the same).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax


def _always(tree) -> jax.Array:
    """A scalar predicate that is always true but only known at run time."""
    word = jnp.ravel(jax.tree_util.tree_leaves(tree)[0])[0].astype(jnp.uint32)
    return jnp.all((word | jnp.uint32(1)) != 0)


def _cond(tree):
    never = lambda t: jax.tree_util.tree_map(jnp.zeros_like, t)  # noqa: E731
    return lax.cond(_always(tree), lambda t: t, never, tree)


@jax.custom_batching.custom_vmap
def materialize(tree):
    """`tree`, unchanged, computed once into memory rather than recomputed by each consumer.

    Works under jit and vmap (the batched rule keeps one unbatched predicate, so the
    `cond` stays a `cond` rather than becoming a `select`). Purely a performance hint:
    the values are identical.
    """
    return _cond(tree)


@materialize.def_vmap
def _materialize_batched(axis_size, in_batched, tree):
    # Calling `materialize` again (not `_cond`): under a further vmap this rule runs once
    # more for the outer axis, so the predicate never becomes batched.
    del axis_size
    return materialize(tree), in_batched[0]


__all__ = ["materialize"]
