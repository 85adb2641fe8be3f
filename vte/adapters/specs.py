"""The observation as a space: every field's shape, dtype and bounds, and its flat form.

Shared by the gymnax and Gymnasium adapters and importing neither. The bounds of the
feature columns follow from what each column of `vte.observation` holds, read off its
name (`NODE_FEATURE_NAMES`, `REQUEST_FEATURE_NAMES`):

| columns | bounds | why |
|---|---|---|
| one-hot and bit features (`tier_*`, `gpu_*`, `label_*`, `accepts_*`, `required_*`, `rejected_*`, `preferred_*`, `exists`, `up`, `valid`, `has_latency_bound`) | [0, 1] | 0 or 1 |
| `cpu_util`, `mem_util`, `jobs/slots` | [0, 1] | fractions (utilisation is clipped; jobs never exceed the slots) |
| `free_*` | (-inf, inf) | free resources turn negative on an overcommitted node, and a noisy twin may report more than is free |
| every other column (capacities, speed, bandwidth, power, failure rate, delay, report age, work, latency bound, data size) | [0, inf) | non-negative quantities whose maximum depends on the scenario mix and `EnvParams` |

Columns of padded nodes and empty queue slots are 0, inside every bound. A feature
added to `vte.observation` without a rule here fails at import, so the bounds cannot
silently go stale. `weights` lie in [0, inf), `progress` in [0, 1]; the two masks are
booleans.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from vte.observation import (NODE_FEATURE_NAMES, NODE_FEATURES, REQUEST_FEATURE_NAMES,
                             REQUEST_FEATURES)
from vte.params import EnvParams, num_actions
from vte.types import Observation

# ("nodes", "request", "queue", "queue_mask", "weights", "progress", "action_mask")
FIELDS = tuple(f.name for f in dataclasses.fields(Observation))

_BINARY_PREFIXES = ("tier_", "gpu_", "label_", "accepts_", "required_", "rejected_",
                    "preferred_")
_BINARY = ("exists", "up", "valid", "has_latency_bound")
_FRACTIONS = ("cpu_util", "mem_util", "jobs/slots")
_SIGNED_PREFIXES = ("free_",)
_NON_NEGATIVE = (
    "cpu_cores/64", "memory_gib/256", "gpus/8", "disk_gib/1000", "speed",
    "bandwidth_gbps/10", "power_idle_w/100", "power_peak_w/1000", "failures_per_hour*100",
    "power_w/1000", "delay_from_origin_ms/100", "report_age_steps/10", "work_hours",
    "latency_bound_ms/100", "data_gb/100",
)


def feature_bound(name: str) -> tuple[float, float]:
    """(low, high) of one feature column, by its name (see the module's table)."""
    if name.startswith(_BINARY_PREFIXES) or name in _BINARY or name in _FRACTIONS:
        return 0.0, 1.0
    if name.startswith(_SIGNED_PREFIXES):
        return -np.inf, np.inf
    if name in _NON_NEGATIVE:
        return 0.0, np.inf
    raise ValueError(f"feature {name!r} has no bound: add it to one of the rules of "
                     f"vte.adapters.specs (binary, fraction, signed or non-negative)")


def _column_bounds(names: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = zip(*(feature_bound(n) for n in names))
    return np.asarray(lo, np.float32), np.asarray(hi, np.float32)


NODE_LOW, NODE_HIGH = _column_bounds(NODE_FEATURE_NAMES)            # (NODE_FEATURES,) each
REQUEST_LOW, REQUEST_HIGH = _column_bounds(REQUEST_FEATURE_NAMES)   # (REQUEST_FEATURES,)


class FieldSpec(NamedTuple):
    """One observation field: shape, dtype and elementwise bounds (arrays of `shape`)."""

    shape: tuple[int, ...]
    dtype: np.dtype
    low: np.ndarray
    high: np.ndarray


def _field(shape, dtype, low, high) -> FieldSpec:
    dtype = np.dtype(dtype)
    cast = np.bool_ if dtype == np.bool_ else np.float32
    return FieldSpec(tuple(shape), dtype,
                     np.array(np.broadcast_to(np.asarray(low, cast), shape)),
                     np.array(np.broadcast_to(np.asarray(high, cast), shape)))


def _check_params(params) -> EnvParams:
    if not isinstance(params, EnvParams):
        raise ValueError(f"params={params!r} is invalid: allowed a vte.EnvParams")
    return params


def observation_specs(params: EnvParams) -> dict[str, FieldSpec]:
    """The spec of every `vte.Observation` field for `params`, in `FIELDS` order.

    nodes (N, NODE_FEATURES) float32, request (REQUEST_FEATURES,) float32, queue
    (K, REQUEST_FEATURES) float32, queue_mask (K,) bool, weights (3,) float32, progress ()
    float32, action_mask (N + 1,) bool.
    """
    p = _check_params(params)
    n, k = p.num_nodes, p.queue_len
    return {
        "nodes": _field((n, NODE_FEATURES), np.float32, NODE_LOW, NODE_HIGH),
        "request": _field((REQUEST_FEATURES,), np.float32, REQUEST_LOW, REQUEST_HIGH),
        "queue": _field((k, REQUEST_FEATURES), np.float32, REQUEST_LOW, REQUEST_HIGH),
        "queue_mask": _field((k,), np.bool_, False, True),
        "weights": _field((3,), np.float32, 0.0, np.inf),
        "progress": _field((), np.float32, 0.0, 1.0),
        "action_mask": _field((num_actions(p),), np.bool_, False, True),
    }


def flat_size(params: EnvParams) -> int:
    """D, the length of the flat observation (`flatten`)."""
    return sum(int(np.prod(s.shape)) for s in observation_specs(params).values())


def flat_bounds(params: EnvParams) -> tuple[np.ndarray, np.ndarray]:
    """(low, high), each (D,) float32: the field bounds laid out as `flatten` lays out the
    fields (booleans as 0 and 1)."""
    specs = observation_specs(params).values()
    low = np.concatenate([s.low.astype(np.float32).ravel() for s in specs])
    high = np.concatenate([s.high.astype(np.float32).ravel() for s in specs])
    return low, high


def flatten(obs: Observation):
    """(D,) float32: the fields in `FIELDS` order, each raveled, booleans as 0/1.

    Works on JAX and NumPy arrays (the result is the same kind), under jit and vmap
    (a batch of observations needs `jax.vmap(flatten)`).
    """
    first = obs.nodes
    xp = np if isinstance(first, np.ndarray) else jnp
    if first.ndim != 2:
        raise ValueError(f"flatten takes one observation (nodes of shape (N, F)), got nodes "
                         f"of shape {tuple(first.shape)}; vmap it for a batch")
    return xp.concatenate([xp.ravel(xp.asarray(getattr(obs, f)).astype(np.float32))
                           for f in FIELDS])


__all__ = ["FIELDS", "FieldSpec", "feature_bound", "observation_specs", "flat_size",
           "flat_bounds", "flatten", "NODE_LOW", "NODE_HIGH", "REQUEST_LOW", "REQUEST_HIGH"]
