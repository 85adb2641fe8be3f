"""Environment parameters: what a scenario looks like and how decisions are scored.

`EnvParams` travels as an argument to every call (gymnax style), so one compiled
function serves many parameter sets and `jax.vmap` can run over the float fields.
Integer fields that fix array shapes are static (changing them recompiles).

Every field is checked when the object is built from concrete values: an
impossible value raises `ValueError` naming the field, the value and what is
allowed, before any work starts.
"""

from __future__ import annotations

import ast

from typing import Any

import jax
import numpy as np
from flax import struct

from vte.cluster import catalogue

# Sum-to-one tolerance for share vectors.
_SHARE_TOL = 1e-4


@struct.dataclass
class EnvParams:
    """Parameters of the cluster simulator.

    Shapes (static; changing one recompiles):
      num_nodes: N, nodes per cluster (padded size; see `active_nodes`).
      queue_len: K, requests the queue holds; arrivals beyond it are dropped.
      num_sites: S, sites (vertex pools) that nodes and request origins sit in.
      slots_per_node: J, running jobs a node can host at once (kubelet's max pods).
      episode_len: decisions per episode; then `truncated` is set and the env resets.
      sample_weights: draw the objective weights per episode (Dirichlet(1,1,1),
        times 3) instead of using `weights`; the policy sees them in the observation.
      mask_from_twin: compute the observation's action mask on the digital twin (what
        the scheduler believes) instead of the ground truth (default False: the mask is
        exactly the valid actions). With a noisy or stale twin the mask can then allow
        an action the cluster rejects (invalid: `invalid_penalty`, nothing changes) and
        forbid a feasible one; with an exact twin both masks are the same in every
        state `reset` and `step` make.

    Scenario mix (float, vmappable):
      active_nodes: nodes that exist (1..N); the rest are masked off. 0 (default)
        means all N.
      tier_shares: (cloud, edge, hpc) shares of nodes, summing to 1.
      gpu_node_share: share of cloud and HPC nodes that carry GPUs, in [0, 1].
      load_shares: (low 5-25 %, medium 25-65 %, high 65-95 %) background CPU
        load profiles of nodes, summing to 1.
      archetype_shares: request archetypes in `catalogue.ARCHETYPES` order
        (cpu_heavy, mem_heavy, gpu_job, small_short, balanced), summing to 1.
      arrival_rate: mean requests arriving per step, in [0, 4]
        (Binomial(4, arrival_rate / 4) arrivals per step).
      initial_queue_fill: share of the queue filled at reset, in [0, 1].

    Time and dynamics:
      step_seconds: simulated seconds between two decisions (> 0).
      failure_rate_scale: multiplies every node's failure rate (>= 0); the
        scoring and the simulated failures use the same scaled rate.
      repair_hours: mean time to repair a failed node, hours (> 0).
      bg_reversion: per-step pull of background load to its daily mean, [0, 1].
      bg_volatility: std of the per-step background load change, [0, 0.5].
      contention: slowdown per unit of CPU utilisation, completion time is
        multiplied by (1 + contention * util), >= 0.

    Digital twin (exact by default):
      twin_noise: relative std of reported metrics, [0, 1].
      twin_report_prob: probability that a node's metrics arrive in a step
        (1 = fresh every step; lower = stale), (0, 1].

    Scoring:
      weights: (performance, energy, reliability) weights, each >= 0, finite.
      pref_penalty: cost per missing preferred label, >= 0.
      defer_penalty: extra cost of deferring when a node was feasible, > 0.
      invalid_penalty: regret of an invalid action beyond the worst valid action of the
        same state, > 0 (MODEL.md section 4).
    """

    num_nodes: int = struct.field(pytree_node=False, default=64)
    queue_len: int = struct.field(pytree_node=False, default=8)
    num_sites: int = struct.field(pytree_node=False, default=4)
    slots_per_node: int = struct.field(pytree_node=False, default=4)
    episode_len: int = struct.field(pytree_node=False, default=128)
    sample_weights: bool = struct.field(pytree_node=False, default=False)
    mask_from_twin: bool = struct.field(pytree_node=False, default=False)

    active_nodes: Any = 0
    tier_shares: Any = (0.5, 0.2, 0.3)
    gpu_node_share: Any = 0.375
    load_shares: Any = (0.4, 0.4, 0.2)
    archetype_shares: Any = (0.25, 0.20, 0.25, 0.15, 0.15)
    arrival_rate: Any = 1.0
    initial_queue_fill: Any = 0.5

    step_seconds: Any = 300.0
    failure_rate_scale: Any = 1.0
    repair_hours: Any = 1.0
    bg_reversion: Any = 0.1
    bg_volatility: Any = 0.03
    contention: Any = 1.0

    twin_noise: Any = 0.0
    twin_report_prob: Any = 1.0

    weights: Any = (1.0, 1.0, 1.0)
    pref_penalty: Any = 0.1
    defer_penalty: Any = 0.5
    invalid_penalty: Any = 1.0

    def __post_init__(self):
        if _is_user_value(self) and not _is_axes_spec(self):
            _validate(self)

    @property
    def max_steps_in_episode(self) -> int:
        """Decisions per episode, `episode_len` (the name gymnax-based code reads)."""
        return self.episode_len


# --------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------

# Numeric fields and the shape of one environment's value: () or a vector of that size.
_VECTOR_FIELDS = {"tier_shares": 3, "load_shares": 3,
                  "archetype_shares": len(catalogue.ARCHETYPES), "weights": 3}
_NUMERIC_FIELDS = tuple(f for f in EnvParams.__dataclass_fields__
                        if EnvParams.__dataclass_fields__[f].metadata.get("pytree_node", True))


def _is_user_value(p: EnvParams) -> bool:
    """False when JAX rebuilds the params with tracers or placeholders: the batched flags
    of a vmap rule (every leaf a bool) or sentinel objects. Those are not user input and
    are not validated; anything else is (a bool among numbers is then rejected)."""
    leaves = jax.tree_util.tree_leaves(p)
    if leaves and all(isinstance(leaf, (bool, np.bool_)) for leaf in leaves):
        return False
    for leaf in leaves:
        if isinstance(leaf, jax.core.Tracer):
            return False
        if not isinstance(leaf, (bool, int, float, complex, str, bytes, np.generic, np.ndarray,
                                 jax.Array)):
            return False
    return True


def _concrete(value) -> np.ndarray | None:
    """The value as a float64 array if it is concrete, else None (tracers, placeholders)."""
    leaves = jax.tree_util.tree_leaves(value)
    if not leaves:
        return None
    out = []
    for leaf in leaves:
        if isinstance(leaf, jax.core.Tracer):
            return None
        if isinstance(leaf, (bool, int, float, np.number, np.ndarray, jax.Array)):
            try:
                out.append(np.asarray(leaf, dtype=np.float64).ravel())
            except (TypeError, ValueError):
                return None
        else:
            return None
    return np.concatenate(out)


def _check_numbers(p: EnvParams, name: str):
    """Every leaf of a numeric field is a real, non-boolean number or array of them."""
    for leaf in jax.tree_util.tree_leaves(getattr(p, name)):
        dtype = leaf.dtype if isinstance(leaf, (np.generic, np.ndarray, jax.Array)) else None
        if isinstance(leaf, (bool, np.bool_)) or dtype == np.bool_:
            _fail(name, getattr(p, name), "numbers, not booleans")
        real = dtype is not None and (jax.numpy.issubdtype(dtype, jax.numpy.integer)
                                      or jax.numpy.issubdtype(dtype, jax.numpy.floating))
        if not (isinstance(leaf, (int, float)) or real):    # bfloat16 and the like are real
            _fail(name, getattr(p, name), "real numbers (Python, NumPy or JAX)")


def _vector(value, size: int) -> np.ndarray | None:
    """A vector field as a float64 array (..., size): a tuple or list of `size` values
    (each a number, or an array batched over environments) or one array whose last axis
    has `size` entries; None if not concrete. Raises ValueError on another length."""
    if isinstance(value, (tuple, list)):
        if len(value) != size:
            raise ValueError
        if any(_concrete(v) is None for v in value):
            return None
        parts = np.broadcast_arrays(*(np.asarray(v, np.float64) for v in value))
        return np.stack(parts, axis=-1)
    if _concrete(value) is None:
        return None
    arr = np.asarray(value, np.float64)
    if arr.shape[-1:] != (size,):
        raise ValueError
    return arr


def _fail(name: str, value, allowed: str):
    raise ValueError(f"EnvParams.{name}={value!r} is invalid: allowed {allowed}")


def _check_static_int(name: str, value, lo: int, hi: int):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        _fail(name, value, f"an integer in [{lo}, {hi}]")
    if not lo <= int(value) <= hi:
        _fail(name, value, f"an integer in [{lo}, {hi}]")


def _check_range(p: EnvParams, name: str, lo: float, hi: float,
                 lo_open: bool = False, size: int | None = None) -> np.ndarray | None:
    """Check a field's concrete values against [lo, hi]; returns them as float64 (the
    vector fields as (..., size)), or None when they are not concrete."""
    value = getattr(p, name)
    if size is not None:
        try:
            arr = _vector(value, size)
        except ValueError:
            _fail(name, value, f"{size} values")
    else:
        arr = _concrete(value)
    if arr is None:
        return None
    bad = ~np.isfinite(arr) | (arr < lo) | (arr > hi) | ((arr == lo) if lo_open else False)
    if np.any(bad):
        lb = "(" if lo_open else "["
        _fail(name, value, f"finite values in {lb}{lo}, {hi}]")
    return arr


def _check_shares(p: EnvParams, name: str):
    size = _VECTOR_FIELDS[name]
    arr = _check_range(p, name, 0.0, 1.0, size=size)
    if arr is None:
        return
    sums = arr.sum(axis=-1)           # one sum per environment when batched
    if np.any(np.abs(sums - 1.0) > _SHARE_TOL):
        _fail(name, getattr(p, name), f"{size} shares in [0, 1] that sum to 1")


def _is_axes_spec(p: EnvParams) -> bool:
    """True for a `jax.vmap` in_axes tree over params, e.g.
    `jax.tree_util.tree_map(lambda _: None, params).replace(weights=0)`: every numeric field
    None or a Python int (an axis), at least one None. Not a set of values, so not validated."""
    def none(v):
        return v is None or (isinstance(v, (tuple, list)) and all(x is None for x in v))
    values = [getattr(p, name) for name in _NUMERIC_FIELDS]
    return any(none(v) for v in values) and all(none(v) or type(v) is int for v in values)


def _validate(p: EnvParams):
    _check_static_int("num_nodes", p.num_nodes, 1, 1 << 16)
    _check_static_int("queue_len", p.queue_len, 1, 1 << 12)
    _check_static_int("num_sites", p.num_sites, 1, 64)
    _check_static_int("slots_per_node", p.slots_per_node, 1, 256)
    _check_static_int("episode_len", p.episode_len, 1, 1 << 24)
    if not isinstance(p.sample_weights, (bool, np.bool_)):
        _fail("sample_weights", p.sample_weights, "True or False")
    if not isinstance(p.mask_from_twin, (bool, np.bool_)):
        _fail("mask_from_twin", p.mask_from_twin, "True or False")

    for name in _NUMERIC_FIELDS:
        if getattr(p, name) is None or (isinstance(getattr(p, name), (tuple, list))
                                        and any(v is None for v in getattr(p, name))):
            _fail(name, getattr(p, name), "a number (None is only for a jax.vmap in_axes tree, "
                  "where every other field is None or an axis too)")
        _check_numbers(p, name)

    active = _concrete(p.active_nodes)
    if active is not None and (np.any(active != np.round(active)) or np.any(active < 0)
                               or np.any(active > p.num_nodes)):
        _fail("active_nodes", p.active_nodes,
              f"0 (all nodes) or an integer in [1, num_nodes={p.num_nodes}]")

    _check_shares(p, "tier_shares")
    _check_shares(p, "load_shares")
    _check_shares(p, "archetype_shares")
    _check_range(p, "gpu_node_share", 0.0, 1.0)
    _check_range(p, "arrival_rate", 0.0, float(catalogue.MAX_ARRIVALS))
    _check_range(p, "initial_queue_fill", 0.0, 1.0)

    _check_range(p, "step_seconds", 0.0, 1e7, lo_open=True)
    _check_range(p, "failure_rate_scale", 0.0, 1e4)
    _check_range(p, "repair_hours", 0.0, 1e4, lo_open=True)
    _check_range(p, "bg_reversion", 0.0, 1.0)
    _check_range(p, "bg_volatility", 0.0, 0.5)
    _check_range(p, "contention", 0.0, 100.0)

    _check_range(p, "twin_noise", 0.0, 1.0)
    _check_range(p, "twin_report_prob", 0.0, 1.0, lo_open=True)

    _check_range(p, "weights", 0.0, 1e6, size=_VECTOR_FIELDS["weights"])
    _check_range(p, "pref_penalty", 0.0, 1e6)
    _check_range(p, "defer_penalty", 0.0, 1e6, lo_open=True)
    _check_range(p, "invalid_penalty", 0.0, 1e6, lo_open=True)


def check_param_shapes(params: EnvParams) -> None:
    """Raise ValueError (while tracing, before any work) unless every numeric field has the
    shape of one environment's value: a scalar, or for the vector fields (`tier_shares`,
    `load_shares`, `archetype_shares`, `weights`) a tuple of that many scalars or one
    array of that length. Batched values (one per environment) are fine under
    `jax.vmap`, which hands each environment its own."""
    for name in _NUMERIC_FIELDS:
        value = getattr(params, name)
        size = _VECTOR_FIELDS.get(name)
        if size is None:
            ok = _leaf_shape(value) == ()
        elif isinstance(value, (tuple, list)):
            ok = len(value) == size and all(_leaf_shape(v) == () for v in value)
        else:
            ok = _leaf_shape(value) == (size,)
        if not ok:
            want = "a scalar" if size is None else f"{size} scalars"
            raise ValueError(
                f"EnvParams.{name} has shape {_shape_of(value)} per environment: allowed "
                f"{want} (to run several values at once, batch them with jax.vmap)")


def _leaf_shape(value) -> tuple:
    """The shape of a value without converting it (tracers included); a tuple's length."""
    if isinstance(value, (tuple, list)):
        return (len(value),)
    return tuple(value.shape) if hasattr(value, "shape") else np.shape(value)


def _shape_of(value):
    if isinstance(value, (tuple, list)):
        return f"{type(value).__name__} of {[_leaf_shape(v) for v in value]}"
    return _leaf_shape(value)


def num_actions(params: EnvParams) -> int:
    """Size of the action space: one per node plus defer (`num_nodes`)."""
    return params.num_nodes + 1


def _is_number_tree(value) -> bool:
    """A number, a bool or a (nested) tuple/list of them: what an EnvParams field holds."""
    if isinstance(value, (tuple, list)):
        return len(value) > 0 and all(_is_number_tree(v) for v in value)
    return isinstance(value, (bool, int, float)) and not (
        isinstance(value, float) and value != value)


def parse_assignments(items: list[str], flag: str = "--set") -> dict:
    """`NAME=VALUE` strings of a command line -> EnvParams keyword arguments.

    VALUE is a Python literal: a number, a bool or a tuple of numbers. Raises ValueError
    naming the item and what is allowed (an unknown NAME, None, a string, a bad literal).
    """
    fields = EnvParams.__dataclass_fields__
    kwargs = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or name not in fields:
            raise ValueError(f"{flag} {item!r} is invalid: allowed NAME=VALUE with NAME one "
                             f"of {sorted(fields)}")
        try:
            parsed = ast.literal_eval(value)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            parsed = None
        if not _is_number_tree(parsed):
            raise ValueError(f"{flag} {item!r} is invalid: VALUE must be a number, a bool or "
                             f"a tuple of numbers")
        kwargs[name] = parsed
    return kwargs


__all__ = ["EnvParams", "check_param_shapes", "num_actions", "parse_assignments"]
