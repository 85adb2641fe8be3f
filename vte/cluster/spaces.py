"""The observation as a space: every field's shape, dtype and bounds, and its flat form.

Shared by the gymnax and Gymnasium adapters and importing neither. Every bound is finite.
The bounds of the feature columns come from the observation's feature table
(`vte.cluster.observation.bounds(table, params)`), which derives them from the extremes of the
scenario generator (the catalogue's ranges, `vte.cluster.catalogue`), the dynamics and the twin,
as functions of the `EnvParams`:

- flags, `cpu_util`, `mem_util`, `jobs/slots`: [0, 1];
- capacities and demands: [0, the catalogue's largest draw] (cores 96, GiB 1024, GPUs 8,
  disk 4000 GiB on a node; cores 64, GiB 256, GPUs 4, disk 201 GiB in a request: its data
  size, at most 200 GB, rounded up, which float32 may push just past 200);
- speed, bandwidth, power model, work, latency bound, data size: [0, the catalogue's
  largest draw], widened by `vte.cluster.observation.ROUNDING_MARGIN` (1e-4, relative) for the
  float32 rounding of the draw;
- `failures_per_hour*100`: [0, largest kind rate x `failure_rate_scale`];
- `free_gpus`, `free_disk`: [0, capacity] (no background load, exact in the twin);
  `free_cores`, `free_memory`: [-BG_MAX x share x capacity, capacity] (a placement fits
  the ground truth, then the background load may rise to BG_MAX = 0.98, share 1 for cores
  and 0.6 for memory); where reports can go stale (`twin_report_prob` < 1) with noise
  (`twin_noise` = s, k = sqrt(3) s), [-capacity x (1 - max(0, 1 / (1 + k) - BG_MAX x
  share)), capacity x (1 + min(1, k))], as a stale report's error and the jobs placed or
  ended since add up;
- `power_w/1000`: [0, largest host peak + its GPUs at full board power, x (1 + k)];
- `delay_from_origin_ms/100`: [0, 2 + 60 x sqrt(2) ms] (sites in the unit square), the
  intra-site 0.2 ms with `num_sites` = 1;
- `report_age_steps/10`: [0, `episode_len`].

Columns of padded nodes and empty queue slots are 0, inside every bound. `weights` lie in
[0, 3] with `sample_weights` (3 x a Dirichlet draw), else in [0, max(`weights`)];
`progress` in [0, 1]; the two masks are booleans. Every high is rounded up to float32
(every low down), so no value the environment produces lies outside. A column never has
equal bounds (Gymnasium warns, and a normalisation by the space would divide by zero): a
zero `failure_rate_scale` or zero `weights` keep the unscaled range. The bounds need
concrete params (a traced field raises ValueError): build the spaces outside jit.
`NODE_LOW`, `NODE_HIGH`, `REQUEST_LOW`, `REQUEST_HIGH` are the column bounds at the
default `EnvParams()`.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from vte.environment import FieldSpec, bounds_of, field_spec, flatten_fields
from vte.cluster.observation import (NODE_FEATURE_NAMES, NODE_FEATURES, NODE_TABLE,
                             REQUEST_FEATURE_NAMES, REQUEST_FEATURES, REQUEST_TABLE,
                             ROUNDING_MARGIN, bounds, param_extreme)
from vte.cluster.params import EnvParams, num_actions
from vte.cluster.types import Observation

# ("nodes", "request", "queue", "queue_mask", "weights", "progress", "action_mask")
FIELDS = tuple(f.name for f in dataclasses.fields(Observation))

def feature_bound(name: str, params: EnvParams | None = None) -> tuple[float, float]:
    """(low, high) of one feature column, by its name (node or request feature), for
    `params` (default `EnvParams()`)."""
    for table in (NODE_TABLE, REQUEST_TABLE):
        names = [f.name for f in table]
        if name in names:
            lo, hi = bounds(table, params)
            return float(lo[names.index(name)]), float(hi[names.index(name)])
    raise ValueError(f"feature {name!r} is not in the observation: allowed "
                     f"{NODE_FEATURE_NAMES + REQUEST_FEATURE_NAMES}")


# The column bounds at the default `EnvParams()`; `observation_specs` uses the params'.
NODE_LOW, NODE_HIGH = bounds(NODE_TABLE)              # (NODE_FEATURES,) each
REQUEST_LOW, REQUEST_HIGH = bounds(REQUEST_TABLE)     # (REQUEST_FEATURES,)


def _weights_high(params: EnvParams) -> float:
    """3 with `sample_weights` (3 x Dirichlet(1, 1, 1), widened by the rounding margin),
    else the largest of `weights` (1 when every weight is 0: no equal bounds)."""
    if params.sample_weights:
        return 3.0 * (1.0 + ROUNDING_MARGIN)
    high = param_extreme(params, "weights", np.max)
    return high if high > 0 else 1.0


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
    node_low, node_high = bounds(NODE_TABLE, p)
    request_low, request_high = bounds(REQUEST_TABLE, p)
    weights_high = np.float32(_weights_high(p))   # the weights as the state holds them
    return {
        "nodes": _field((n, NODE_FEATURES), np.float32, node_low, node_high),
        "request": _field((REQUEST_FEATURES,), np.float32, request_low, request_high),
        "queue": _field((k, REQUEST_FEATURES), np.float32, request_low, request_high),
        "queue_mask": _field((k,), np.bool_, False, True),
        "weights": _field((3,), np.float32, 0.0, weights_high),
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
           "flat_bounds", "flatten", "bounds_of", "flatten_fields", "NODE_LOW", "NODE_HIGH",
           "REQUEST_LOW", "REQUEST_HIGH"]
