"""Performance helpers: how values are laid out and what XLA recomputes.

Two helpers change how a value is computed, never the value: `lookup` (a small static
table indexed per node, as a chain of selects) and `materialize` (compute once into
memory). Both pay on CPU, where they were measured; `set_hints(backend, ...)` switches
either off for a backend where it does not (then `lookup` is a gather and `materialize`
the identity). The switch is read while tracing, so set it before the first call.

Why `materialize`: XLA fuses an elementwise producer into each of its consumers and recomputes it there.
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

# Which helpers are on, by backend (`jax.default_backend()`); absent means on.
HINTS: dict[str, dict[str, bool]] = {}


def set_hints(backend: str, *, lookup: bool | None = None, materialize: bool | None = None):
    """Switch the performance helpers on or off for `backend` ("cpu", "gpu", "tpu").
    Compiled programs keep what they were traced with."""
    hints = HINTS.setdefault(backend, {})
    if lookup is not None:
        hints["lookup"] = bool(lookup)
    if materialize is not None:
        hints["materialize"] = bool(materialize)


def enabled(name: str) -> bool:
    """Whether helper `name` is on for the default backend."""
    return HINTS.get(jax.default_backend(), {}).get(name, True)


def lookup(table, index: jax.Array) -> jax.Array:
    """`table[index]` for a small static table: (T,) values, or (T, C) rows (the result
    then has a trailing axis C). An index outside [0, T) gives entry 0.

    A chain of T - 1 selects: under vmap a gather from a tiny table becomes a batched
    gather, which XLA on CPU runs element by element, while selects vectorise (and a
    one-hot selection, `sum(where(index == arange(T), table, 0))`, halved the batched
    step's decisions/s: it does T times the work). A (T, C) table selects whole rows, so
    the catalogue's columns behind one index cost one chain, not one per column. A plain
    gather when switched off (`set_hints`).
    """
    t = jnp.asarray(table)
    if not enabled("lookup"):
        return t[jnp.clip(index, 0, t.shape[0] - 1)]
    index = jnp.asarray(index)
    if t.ndim == 2:
        index = index[..., None]                # each row selected whole: (..., 1) vs (C,)
    out = jnp.broadcast_to(t[0], index.shape[:-1] + t.shape[1:]) if t.ndim == 2 else \
        jnp.full(index.shape, t[0], t.dtype)
    for i in range(1, t.shape[0]):
        out = jnp.where(index == i, t[i], out)
    return out


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
    the values are identical. The identity when switched off (`set_hints`).
    """
    if not enabled("materialize"):
        return tree
    return _cond(tree)


@materialize.def_vmap
def _materialize_batched(axis_size, in_batched, tree):
    # Calling `materialize` again (not `_cond`): under a further vmap this rule runs once
    # more for the outer axis, so the predicate never becomes batched.
    del axis_size
    return materialize(tree), in_batched[0]


__all__ = ["materialize", "lookup", "set_hints", "enabled", "HINTS"]
