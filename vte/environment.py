"""The environment protocol every vte environment follows, and what they all share.

    env, params = vte.make("Cluster-v0")          # or "OpenB-v0"; see `vte.registry`
    obs, state = env.reset(key, params)
    obs, state, reward, terminated, truncated, info = env.step(key, state, action, params)

An environment subclasses `Environment` and writes only its own parts, in gymnax's shape:
`default_params`, `reset_env`, `step_env`, `get_obs`, `num_actions`, `observation_specs`
(and `check` for its own shape checks). The base's `reset` and `step` own, once, what every
environment needs:

- **action checks**, one rule and one error for all: an action that is not one integer
  raises before any work (TypeError for a float, bool or complex dtype, ValueError for a
  shape other than ()); an integer outside [0, num_actions) is an *invalid action*, which
  each environment penalises and lets change nothing (its docstring says by how much). A
  concrete integer too wide for int32 is invalid too, not wrapped onto a node.
- **auto-reset** at episode end (gymnax 1.0 semantics): the state resets and
  `info["final_observation"]` holds the last observation of the episode that ended. Under
  `jax.vmap` a fresh state is computed only in steps where some environment is done
  (`jax.custom_batching.custom_vmap`), not in every step as a plain `select` would; nested
  vmaps (seeds x environments) fold into one environment axis, so the reset stays
  conditional there too. The fresh state's key is `reset_key(key)` of the step's key.
- **the compiled eager path**: called with concrete arrays (a research loop in plain
  Python), `reset`, `step`, `step_env` and `get_obs` run one `jax.jit`-compiled function
  per environment; inside the caller's own `jit` or `vmap` the plain function is traced.
  The auto-reset's fresh state is a nested `jax.jit` (XLA inlines it), so a batched step
  traces the reset once, not once for the custom_vmap's own function and once more in its
  batching rule, and later programs of the same shapes reuse that trace.

Observations are pytrees (flax dataclasses) with an `action_mask` field: (num_actions,)
bool, True where an action is valid, at least one True in every state. Every function is
pure, deterministic for a key, and works under `jax.jit` and `jax.vmap`.
"""

from __future__ import annotations

import functools
from typing import Callable, Generic, NamedTuple, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

TState = TypeVar("TState")
TParams = TypeVar("TParams")


class FieldSpec(NamedTuple):
    """One observation field: shape, dtype and elementwise bounds (arrays of `shape`)."""

    shape: tuple[int, ...]
    dtype: np.dtype
    low: np.ndarray
    high: np.ndarray


class Column(NamedTuple):
    """One named column of an observation field (`Environment.observation_columns`)."""

    name: str            # e.g. "cpu_cores/64": the name states the scale
    unit: str            # unit of the decoded value ("flag": 0 or 1, "fraction": 0..1)
    meaning: str = ""    # one line, when the name does not say it all


def field_spec(shape, dtype, low, high) -> FieldSpec:
    """A `FieldSpec` with `low` and `high` broadcast to `shape` (booleans stay booleans,
    every other dtype's bounds are float32)."""
    dtype = np.dtype(dtype)
    cast = np.bool_ if dtype == np.bool_ else np.float32
    return FieldSpec(tuple(shape), dtype,
                     np.array(np.broadcast_to(np.asarray(low, cast), shape)),
                     np.array(np.broadcast_to(np.asarray(high, cast), shape)))


def round_outward(x, up: bool) -> np.ndarray:
    """float64 bounds -> float32 rounded outward (up for a high, down for a low), so a
    bound never moves inside what an environment's float32 columns can hold."""
    x = np.asarray(x, np.float64)
    out = x.astype(np.float32)
    wrong = out < x if up else out > x
    return np.where(wrong, np.nextafter(out, np.float32(np.inf if up else -np.inf)), out)


def concrete_extreme(x, what: str, pick=np.max) -> float:
    """`pick` (np.max or np.min) over every value of the array tree `x` (0 when empty),
    which must be concrete: spaces are built from concrete params, so a traced `x` raises
    ValueError naming `what`."""
    leaves = jax.tree_util.tree_leaves(x)
    if any(isinstance(v, jax.core.Tracer) for v in leaves):
        raise ValueError(f"{what} is traced: the observation bounds depend on it, build the "
                         "spaces from concrete params (outside jit and vmap)")
    values = [np.asarray(v, np.float64).ravel() for v in leaves]
    values = np.concatenate(values) if values else np.zeros(0)
    return float(pick(values)) if values.size else 0.0


def bounds_of(specs: dict[str, FieldSpec]) -> tuple[np.ndarray, np.ndarray]:
    """(low, high), each (D,) float32: the bounds of any environment's specs laid out as
    `flatten_fields` lays out its fields (booleans as 0 and 1)."""
    low = np.concatenate([s.low.astype(np.float32).ravel() for s in specs.values()])
    high = np.concatenate([s.high.astype(np.float32).ravel() for s in specs.values()])
    return low, high


def flatten_fields(fields: dict, batch: int = 0):
    """(*B, D) float32: any environment's observation fields (a dict in its specs' order)
    each raveled after the `batch` leading axes and joined, booleans as 0/1. JAX or NumPy
    arrays in, the same kind out; works under jit and vmap."""
    first = next(iter(fields.values()))
    xp = np if isinstance(first, np.ndarray) else jnp
    lead = tuple(np.shape(first)[:batch])
    return xp.concatenate([xp.reshape(xp.asarray(x).astype(np.float32), lead + (-1,))
                           for x in fields.values()], axis=-1)



# --------------------------------------------------------------------------
# Actions: one check and one error for every environment
# --------------------------------------------------------------------------

def narrow_action(action):
    """A concrete (Python or NumPy) integer action outside int32 becomes -1, an invalid
    action like any other out of range, before JAX would cast it to 32 bits and wrap it
    onto a valid one. Arrays and traced values pass unchanged."""
    if isinstance(action, (jax.Array, jax.core.Tracer)):
        return action
    concrete = np.asarray(action)
    wide = (concrete < -2**31) | (concrete >= 2**31) if concrete.dtype.kind in "iu" else False
    if np.any(wide):
        return np.where(wide, -1, concrete).astype(np.int32)
    return action


def action_index(action, num_actions: int, meaning: str = "") -> tuple[jax.Array, jax.Array]:
    """The action as an integer array and whether it lies in [0, num_actions).

    Raises before any work when the action is not one integer: TypeError for a float,
    bool or complex dtype, ValueError for a shape other than () (batch with `jax.vmap`).
    `meaning` says what the actions are, for the message (e.g. "num_nodes = defer").
    """
    a = jnp.asarray(narrow_action(action))
    allowed = f"an integer in [0, {num_actions - 1}]" + (f" ({meaning})" if meaning else "")
    if a.dtype == jnp.bool_ or not jnp.issubdtype(a.dtype, jnp.integer):
        raise TypeError(f"action must be {allowed}, got dtype {a.dtype}")
    if a.shape != ():
        raise ValueError(f"action must be one integer (shape ()), got shape {a.shape}; "
                         f"for a batch of environments use jax.vmap(env.step)")
    return a, (a >= 0) & (a < num_actions)


# --------------------------------------------------------------------------
# The compiled eager path
# --------------------------------------------------------------------------

def _traced(tree) -> bool:
    return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(tree))


def eager_jit(fn: Callable, action_arg: str | None = None) -> Callable:
    """`fn`, run `jax.jit`-compiled when every argument is concrete and traced plainly
    inside the caller's own transformation (custom batching rules inside stay intact, and
    parameters the caller closed over stay concrete: `vte.cluster.twin.static_exact`).

    With `action_arg`, that argument (by position or name) is narrowed first
    (`narrow_action`), so a concrete int64 action is range-checked before JAX casts it.
    The compiled function is `.compiled`.
    """
    import inspect
    jitted = jax.jit(fn)
    signature = inspect.signature(fn) if action_arg else None

    @functools.wraps(fn)
    def call(*args, **kwargs):
        if signature is not None:
            bound = signature.bind(*args, **kwargs)
            bound.arguments[action_arg] = narrow_action(bound.arguments[action_arg])
            args, kwargs = bound.args, bound.kwargs
        if _traced((args, kwargs)):
            return fn(*args, **kwargs)
        return jitted(*args, **kwargs)
    call.compiled = jitted      # (not named `lower`: jax.vmap would take it for a jitted function)
    return call


# --------------------------------------------------------------------------
# Auto-reset, batched without paying for a reset in every step
# --------------------------------------------------------------------------

def reset_key(key: jax.Array) -> jax.Array:
    """The key of the state that follows an episode ending in a step with `key`.

    Derived only when some environment is done; a threefry output of `key` distinct from
    what the step itself draws from `key`.
    """
    return jax.random.split(key)[1]


def _broadcast(tree, batched, axis_size):
    return jax.tree_util.tree_map(
        lambda x, b: x if b else jnp.broadcast_to(x, (axis_size,) + jnp.shape(x)), tree, batched)


def _all_true(tree):
    return jax.tree_util.tree_map(lambda _: True, tree)


def _fold(tree, axis_size):
    return jax.tree_util.tree_map(lambda x: x.reshape((-1,) + x.shape[2:]), tree)


def _unfold(tree, axis_size):
    return jax.tree_util.tree_map(lambda x: x.reshape((axis_size, -1) + x.shape[1:]), tree)


def where_batch(mask: jax.Array, new, old):
    """Per element of a batch: `new` where `mask`, `old` elsewhere. `mask` (n,) bool;
    `new` and `old` pytrees of one structure, every leaf (n, ...)."""
    n = mask.shape[0]
    return jax.tree_util.tree_map(
        lambda a, b: jnp.where(mask.reshape((n,) + (1,) * (a.ndim - 1)), a, b), new, old)


def make_auto_reset(reset_state: Callable) -> Callable:
    """`reset_if_done(key, state, done, params)`: `state`, or `reset_state(reset_key(key),
    params)` where `done` (`state` any pytree that `reset_state` returns, e.g. a state
    and its observation); under `jax.vmap` the fresh states are computed only when some
    environment is done (one `lax.cond` on `any(done)` over all of them, also under nested
    vmaps). `params` shared by the batch stay unbatched (a large bank of workloads is
    never copied per environment)."""

    reset_state = jax.jit(reset_state)

    @jax.custom_batching.custom_vmap
    def where_done(key, state, done, params):
        """Along the leading axis of key, state, done and params: fresh where done."""
        def do_reset():
            fresh = jax.vmap(lambda k, p: reset_state(reset_key(k), p))(key, params)
            return where_batch(done, fresh, state)
        return lax.cond(jnp.any(done), do_reset, lambda: state)

    @jax.custom_batching.custom_vmap
    def where_done_shared(key, state, done, params):
        """As `where_done`, with one `params` for the whole leading axis."""
        def do_reset():
            fresh = jax.vmap(lambda k: reset_state(reset_key(k), params))(key)
            return where_batch(done, fresh, state)
        return lax.cond(jnp.any(done), do_reset, lambda: state)

    @jax.custom_batching.custom_vmap
    def if_done(key, state, done, params):
        return lax.cond(done, lambda: reset_state(reset_key(key), params), lambda: state)

    def run(axis_size, in_batched, key, state, done, params, fold: bool, params_axis: bool):
        """Broadcast the unbatched of key, state and done to the new axis (and fold it into
        the environment axis when `fold`), then reset where done. `params_axis`: the
        params already carry the environment axis (of `where_done`)."""
        kb, sb, db, pb = in_batched
        key, state, done = (_broadcast(x, b, axis_size)
                            for x, b in zip((key, state, done), (kb, sb, db)))
        shared = not params_axis and not any(jax.tree_util.tree_leaves(pb))
        if not shared:
            params = _broadcast(params, pb, axis_size)
        if fold:
            # Under a further vmap (e.g. over training seeds) the cond's predicate would
            # become batched and the cond a select that resets in every step: fold the new
            # axis into the environment axis, so the predicate stays one `any` over all.
            key, state, done = _fold((key, state, done), axis_size)
            if not shared:
                params = _fold(params, axis_size)
        out = (where_done_shared if shared else where_done)(key, state, done, params)
        if fold:
            out = _unfold(out, axis_size)
        return out, _all_true(out)

    @if_done.def_vmap
    def _if_done_rule(axis_size, in_batched, *args):
        return run(axis_size, in_batched, *args, fold=False, params_axis=False)

    @where_done_shared.def_vmap
    def _shared_rule(axis_size, in_batched, key, state, done, params):
        kb, sb, db, pb = in_batched
        if any(jax.tree_util.tree_leaves(pb)):
            # params batched now (a vmap over parameters outside the environments' vmap):
            # give every environment its own copy, with the environment axis.
            n = done.shape[-1]
            params = jax.tree_util.tree_map(
                lambda x, b: jnp.broadcast_to(jnp.expand_dims(x, 1) if b else x,
                                              (axis_size, n) + (x.shape[1:] if b else x.shape)),
                params, pb)
            return run(axis_size, (kb, sb, db, _all_true(params)), key, state, done, params,
                       fold=True, params_axis=True)
        return run(axis_size, in_batched, key, state, done, params, fold=True,
                   params_axis=False)

    @where_done.def_vmap
    def _each_rule(axis_size, in_batched, *args):
        return run(axis_size, in_batched, *args, fold=True, params_axis=True)

    return if_done


# --------------------------------------------------------------------------
# The base class
# --------------------------------------------------------------------------

class Environment(Generic[TState, TParams]):
    """A vte environment: subclasses write their dynamics, observation and reward; the base
    owns action checks, the auto-reset and the compiled eager path (module docstring).

    Subclasses define `name`, `action_meaning` and the methods marked "subclass". States
    name their fields for what they are, the same way in every environment: `cluster` the
    static instance of the episode (what does not change while it runs), `nodes` the
    dynamic state of the nodes, `steps` () int32 the decisions taken in the episode.
    """

    name: str = ""                 # the registry id, e.g. "Cluster-v0"
    action_meaning: str = ""       # for the action error, e.g. "num_nodes = defer"

    # ------------------------------------------------------------ subclass

    @property
    def default_params(self) -> TParams:                               # subclass
        raise NotImplementedError

    def reset_state(self, key: jax.Array, params: TParams) -> TState:  # subclass
        """A fresh episode's state."""
        raise NotImplementedError

    def transition(self, key: jax.Array, state: TState, action: jax.Array, valid_index: jax.Array,
                   params: TParams):                                   # subclass
        """One decision without the auto-reset: (state, reward () float32, terminated ()
        bool, truncated () bool, info). `action` is an integer array, `valid_index` whether
        it lies in [0, num_actions); checked by the base before any work."""
        raise NotImplementedError

    def get_obs(self, state: TState, params: TParams):                 # subclass
        raise NotImplementedError

    def num_actions(self, params: TParams) -> int:                     # subclass
        raise NotImplementedError

    def observation_specs(self, params: TParams) -> dict[str, FieldSpec]:  # subclass
        """Every observation field's shape, dtype and bounds, in the observation's order."""
        raise NotImplementedError

    def observation_columns(self, params: TParams) -> dict[str, tuple[Column, ...]]:
        """What each column of the observation's matrix and vector fields means: field name
        -> one `Column` per entry of the field's last axis (fields left out are scalars,
        masks or have no named columns). The documentation's environment pages and a
        user's feature inspection read these; the contract test checks their count against
        `observation_specs`. Default: none named."""
        return {}

    def check(self, state: TState | None, params: TParams) -> None:
        """Raise ValueError before any work when `params` (and `state`, if given) do not
        fit this environment (shapes are static: runs while tracing)."""

    def is_terminated(self, state: TState, params: TParams) -> jax.Array:
        """() bool, the episode reached a terminal state (default: never)."""
        return jnp.zeros((), bool)

    def is_truncated(self, state: TState, params: TParams) -> jax.Array:
        """() bool, the episode was cut by a step limit (default: never)."""
        return jnp.zeros((), bool)

    # ------------------------------------------------------------ shared

    def action_mask(self, state: TState, params: TParams) -> jax.Array:
        """(num_actions,) bool, the valid actions of `state`."""
        return self.get_obs(state, params).action_mask

    def reset_env(self, key: jax.Array, params: TParams):
        """(obs, state) of a fresh episode."""
        self.check(None, params)
        state = self.reset_state(key, params)
        return self.get_obs(state, params), state

    def step_env(self, key: jax.Array, state: TState, action, params: TParams):
        """`step` without the auto-reset: (obs, state, reward, terminated, truncated, info)."""
        state, reward, terminated, truncated, info = self._transition(key, state, action, params)
        return self.get_obs(state, params), state, reward, terminated, truncated, info

    def _transition(self, key, state, action, params):
        a, in_range = action_index(action, self.num_actions(params), self.action_meaning)
        self.check(state, params)
        return self.transition(key, state, a, in_range, params)

    def reset(self, key: jax.Array, params: TParams | None = None):
        """(obs, state) of a fresh episode; `params` default to `default_params`."""
        params = self.default_params if params is None else params
        return self._compiled("reset_env")(key, params)

    def step(self, key: jax.Array, state: TState, action, params: TParams | None = None):
        """One decision, then a fresh episode where the episode ended.

        Returns (obs, state, reward () float32, terminated () bool, truncated () bool,
        info); `info["final_observation"]` is the observation before any reset.
        """
        params = self.default_params if params is None else params
        return self._compiled("_auto_step")(key, state, action, params)

    def _auto_step(self, key, state, action, params):
        state, reward, terminated, truncated, info = self._transition(key, state, action, params)
        final = self.get_obs(state, params)
        info["final_observation"] = final
        # The observation is computed again only where an episode ended (of the fresh state).
        state, obs = self._reset_if_done(key, (state, final), terminated | truncated, params)
        return obs, state, reward, terminated, truncated, info

    @functools.cached_property
    def _reset_if_done(self):
        def fresh(key, params):
            state = self.reset_state(key, params)
            return state, self.get_obs(state, params)
        return make_auto_reset(fresh)

    def _compiled(self, method: str) -> Callable:
        cache = self.__dict__.setdefault("_eager", {})
        if method not in cache:
            fn = getattr(self, method)
            cache[method] = eager_jit(fn, "action" if method in ("_auto_step", "step_env")
                                      else None)
        return cache[method]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    def __deepcopy__(self, memo):
        """A copy without the compiled caches (libraries such as rejax copy environments;
        jitted functions do not deep-copy); they are rebuilt on first use."""
        import copy
        new = object.__new__(type(self))
        memo[id(self)] = new
        new.__dict__.update({k: copy.deepcopy(v, memo) for k, v in self.__dict__.items()
                             if k not in ("_eager", "_reset_if_done")})
        return new


__all__ = ["Environment", "FieldSpec", "Column", "field_spec", "action_index", "narrow_action",
           "eager_jit", "reset_key", "make_auto_reset"]
