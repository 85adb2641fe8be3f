"""The observation as a space: every field's shape, dtype and bounds, and its flat form.

Shared by the gymnax and Gymnasium adapters and importing neither. The bounds of the
feature columns come from the observation's feature table (`vte.observation.bounds`):
flags and fractions (`cpu_util`, `mem_util`) lie in [0, 1]; the free resources (`free_*`)
in (-inf, inf), since they turn negative on an overcommitted node and a noisy twin may
report more than is free; every other column (capacities, speed, bandwidth, power,
failure rate, jobs, delay, report age, work, latency bound, data size) in [0, inf), as
their maximum depends on the scenario mix and `EnvParams`. Columns of padded nodes and
empty queue slots are 0, inside every bound. `weights` lie in [0, inf), `progress` in
[0, 1]; the two masks are booleans.
"""

from __future__ import annotations

import dataclasses
import jax.numpy as jnp
import numpy as np

from vte.environment import FieldSpec, field_spec
from vte.observation import (NODE_FEATURE_NAMES, NODE_FEATURES, NODE_TABLE,
                             REQUEST_FEATURE_NAMES, REQUEST_FEATURES, REQUEST_TABLE, bounds)
from vte.params import EnvParams, num_actions
from vte.types import Observation

# ("nodes", "request", "queue", "queue_mask", "weights", "progress", "action_mask")
FIELDS = tuple(f.name for f in dataclasses.fields(Observation))

def feature_bound(name: str) -> tuple[float, float]:
    """(low, high) of one feature column, by its name (node or request feature)."""
    for table in (NODE_TABLE, REQUEST_TABLE):
        names = [f.name for f in table]
        if name in names:
            lo, hi = bounds(table)
            return float(lo[names.index(name)]), float(hi[names.index(name)])
    raise ValueError(f"feature {name!r} is not in the observation: allowed "
                     f"{NODE_FEATURE_NAMES + REQUEST_FEATURE_NAMES}")


NODE_LOW, NODE_HIGH = bounds(NODE_TABLE)              # (NODE_FEATURES,) each
REQUEST_LOW, REQUEST_HIGH = bounds(REQUEST_TABLE)     # (REQUEST_FEATURES,)


_field = field_spec


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
    return bounds_of(observation_specs(params))


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
           "flat_bounds", "flatten", "bounds_of", "flatten_fields", "NODE_LOW", "NODE_HIGH", "REQUEST_LOW", "REQUEST_HIGH"]
