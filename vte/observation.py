"""The observation: what the scheduler sees.

The node features come from the cluster's static description and the digital twin,
never from the ground-truth metrics. Node features are split in two: the part fixed for
an episode (capacities, labels, power model, ...) is computed once at reset and cached
in `EnvState.node_static`; the dynamic part (the twin's latest report and the delay from
the head request's origin) is computed every step. The scoring's costs and the optimum
are never in it. The action mask is the feasibility of the head request (a scheduler's
filter stage): by default on the ground truth, so it allows exactly the valid actions;
with `EnvParams.mask_from_twin` on the twin, so a stale or noisy twin shows in it too.
The two are the same in the states `reset` and `step` make while the twin is exact (the
default parameters); a state edited by hand and rescored (`vte.rescore`) keeps its old
twin until the next step.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from vte import catalogue as C
from vte import scoring, twin
from vte.params import EnvParams
from vte.types import Cluster, EnvState, Observation, Requests, Twin

INF = float("inf")
RESOURCE_SCALE = (64.0, 256.0, 8.0, 1000.0)  # cores, GiB, GPUs, GiB: features are x / scale
_RESOURCES = (("cpu_cores", "cores"), ("memory_gib", "GiB"), ("gpus", "GPUs"),
              ("disk_gib", "GiB"))


class Feature(NamedTuple):
    """One observation column, defined once: the encoder, the decoder, the names and the
    bounds of the observation spaces are all generated from these.

    The column holds `source(context) / scale` (computed as `value * (1 / scale)` when
    the scale is below 1, the name's "*"); `decode` undoes it. `scale` is a number, or the
    name of an `EnvParams` field (`"slots_per_node"`). `low`, `high` bound the decoded
    value (0 and 1 for flags and fractions), or the column itself when the scale is read
    from the params (jobs never exceed the slots: [0, 1]). `stated` is the scale the name states, in
    the name's own unit, when that differs from `unit` (bandwidth: Gbit/s / 10 in the
    name, Mbit/s / 10000 in the source)."""

    name: str            # column name; states the scale ("cpu_cores/64", "failures_per_hour*100")
    unit: str            # unit of the decoded value ("flag": 0 or 1, "fraction": 0..1)
    scale: float | str   # column = value / scale
    source: Callable     # context -> (...) float32 value in `unit`
    low: float = 0.0     # bounds of the decoded value
    high: float = INF
    stated: float | None = None


def _flag(name: str, source: Callable) -> Feature:
    return Feature(name, "flag", 1.0, lambda x: source(x).astype(jnp.float32), 0.0, 1.0)


def _bit(field: str, bit: int) -> Callable:
    return lambda x: (getattr(x, field) >> bit) & 1


# Node features fixed for an episode: context = the `Cluster`.
NODE_STATIC_TABLE: tuple[Feature, ...] = (
    *(_flag(f"tier_{t}", lambda c, i=i: c.tier == i) for i, t in enumerate(C.TIERS)),
    *(Feature(f"{stem}/{scale:g}", unit, scale, lambda c, r=r: c.capacity[r])
      for r, ((stem, unit), scale) in enumerate(zip(_RESOURCES, RESOURCE_SCALE))),
    *(_flag(f"gpu_{m}", lambda c, k=k: c.gpu_model == k)
      for k, m in enumerate(C.GPU_MODELS) if k > 0),
    *(_flag(f"label_{lb}", _bit("labels", i)) for i, lb in enumerate(C.LABELS)),
    Feature("speed", "x reference CPU", 1.0, lambda c: c.speed),
    Feature("bandwidth_gbps/10", "Mbit/s", 10000.0, lambda c: c.bandwidth, stated=10.0),
    Feature("power_idle_w/100", "W", 100.0, lambda c: c.power_idle),
    Feature("power_peak_w/1000", "W", 1000.0, lambda c: c.power_peak),
    Feature("failures_per_hour*100", "1/h", 0.01, lambda c: c.failure_rate),
    _flag("exists", lambda c: c.mask),
)


class _Dynamic(NamedTuple):
    twin: Twin
    delay: jax.Array         # (N,) ms from the head request's origin, 0 without a head
    params: EnvParams


# Node features of every step: context = the twin, the head's delays and the params.
NODE_DYNAMIC_TABLE: tuple[Feature, ...] = (
    _flag("up", lambda d: d.twin.up),
    Feature("cpu_util", "fraction", 1.0, lambda d: d.twin.util, 0.0, 1.0),
    Feature("mem_util", "fraction", 1.0, lambda d: d.twin.mem_util, 0.0, 1.0),
    *(Feature(f"free_{stem.split('_')[0] if r == 0 else stem}/{scale:g}".replace(
        "free_cpu", "free_cores"), unit, scale, lambda d, r=r: d.twin.free[r], -INF, INF)
      for r, ((stem, unit), scale) in enumerate(zip(_RESOURCES, RESOURCE_SCALE))),
    Feature("power_w/1000", "W", 1000.0, lambda d: d.twin.power),
    Feature("jobs/slots", "jobs", "slots_per_node", lambda d: d.twin.jobs, 0.0, 1.0),
    Feature("delay_from_origin_ms/100", "ms", 100.0, lambda d: d.delay),
    Feature("report_age_steps/10", "steps", 10.0, lambda d: d.twin.age),
)


# Request features: context = `Requests` (any leading shape).
def _latency_bound(r: Requests) -> jax.Array:
    return jnp.where(r.latency_bound < C.NO_LATENCY_BOUND_MS, r.latency_bound, 0.0)


REQUEST_TABLE: tuple[Feature, ...] = (
    _flag("valid", lambda r: r.valid),
    *(Feature(f"{stem}/{scale:g}", unit, scale, lambda q, i=i: q.demand[..., i])
      for i, ((stem, unit), scale) in enumerate(zip(_RESOURCES, RESOURCE_SCALE))),
    Feature("work_hours", "h at reference speed", 1.0, lambda r: r.work / 3600.0),
    *(_flag(f"accepts_{m}", _bit("gpu_models", k)) for k, m in enumerate(C.GPU_MODELS) if k > 0),
    *(_flag(f"required_{lb}", _bit("required", i)) for i, lb in enumerate(C.LABELS)),
    *(_flag(f"rejected_{lb}", _bit("rejected", i)) for i, lb in enumerate(C.LABELS)),
    *(_flag(f"preferred_{lb}", _bit("preferred", i)) for i, lb in enumerate(C.LABELS)),
    _flag("has_latency_bound", lambda r: r.latency_bound < C.NO_LATENCY_BOUND_MS),
    Feature("latency_bound_ms/100", "ms", 100.0, _latency_bound),
    Feature("data_gb/100", "GB", 100.0, lambda r: r.data_gb),
)

NODE_TABLE = NODE_STATIC_TABLE + NODE_DYNAMIC_TABLE
NODE_STATIC_FEATURE_NAMES = tuple(f.name for f in NODE_STATIC_TABLE)
NODE_DYNAMIC_FEATURE_NAMES = tuple(f.name for f in NODE_DYNAMIC_TABLE)
NODE_FEATURE_NAMES = NODE_STATIC_FEATURE_NAMES + NODE_DYNAMIC_FEATURE_NAMES
REQUEST_FEATURE_NAMES = tuple(f.name for f in REQUEST_TABLE)
NODE_STATIC_FEATURES = len(NODE_STATIC_FEATURE_NAMES)
NODE_FEATURES = len(NODE_FEATURE_NAMES)
REQUEST_FEATURES = len(REQUEST_FEATURE_NAMES)


def _check_names(table: tuple[Feature, ...]) -> None:
    """Each name states its scale (the convention users read), and names are unique."""
    names = [f.name for f in table]
    if len(set(names)) != len(names):
        raise AssertionError(f"repeated feature names in {names}")
    for f in table:
        scale = f.stated if f.stated is not None else f.scale
        if isinstance(scale, str) or scale == 1.0:
            continue
        stated = f"/{scale:g}" if scale > 1 else f"*{1 / scale:g}"
        if not f.name.endswith(stated):
            raise AssertionError(f"feature {f.name!r} has scale {f.scale}: its name must end "
                                 f"with {stated!r}")


_check_names(NODE_TABLE)
_check_names(REQUEST_TABLE)


def _scale(f: Feature, params: EnvParams | None):
    if not isinstance(f.scale, str):
        return f.scale
    if params is None:
        raise ValueError(f"feature {f.name!r} is scaled by EnvParams.{f.scale}: pass params")
    return getattr(params, f.scale)


def _encode_one(f: Feature, value: jax.Array, params: EnvParams | None) -> jax.Array:
    scale = _scale(f, params)
    if isinstance(scale, float) and scale < 1.0:
        return value * (1.0 / scale)            # "x*100": an exact factor
    return value / scale


def encode(table: tuple[Feature, ...], context, params: EnvParams | None = None) -> jax.Array:
    """(..., len(table)) float32 columns of `context`: each source divided by its scale."""
    return jnp.stack([_encode_one(f, jnp.asarray(f.source(context), jnp.float32), params)
                      for f in table], axis=-1)


def decode(table: tuple[Feature, ...], columns: jax.Array, name: str,
           params: EnvParams | None = None) -> jax.Array:
    """The feature `name` of `columns` (last axis = `table`) in the unit its name states
    (scale undone: "bandwidth_gbps/10" gives Gbit/s). Raises ValueError naming the feature
    and the allowed names."""
    names = [f.name for f in table]
    if name not in names:
        raise ValueError(f"feature {name!r} is not in the observation: allowed {tuple(names)}")
    i = names.index(name)
    scale = table[i].stated if table[i].stated is not None else _scale(table[i], params)
    if isinstance(scale, float) and scale < 1.0:
        return columns[..., i] / (1.0 / scale)
    return columns[..., i] * scale


def bounds(table: tuple[Feature, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) float32 of the encoded columns: the bounds of the values divided by
    their (positive) scales; those of a column scaled by a params field as they are."""
    lo = [f.low / (1.0 if isinstance(f.scale, str) else f.scale) for f in table]
    hi = [f.high / (1.0 if isinstance(f.scale, str) else f.scale) for f in table]
    return np.asarray(lo, np.float32), np.asarray(hi, np.float32)


def static_node_features(cluster: Cluster) -> jax.Array:
    """(N, NODE_STATIC_FEATURES) float32, the per-episode part of the node features."""
    return jnp.where(cluster.mask[:, None], encode(NODE_STATIC_TABLE, cluster), 0.0)


def request_features(req: Requests) -> jax.Array:
    """(..., REQUEST_FEATURES) float32 features of requests (any leading shape)."""
    return jnp.where(req.valid[..., None], encode(REQUEST_TABLE, req), 0.0)


def get_obs(state: EnvState, params: EnvParams) -> Observation:
    """The observation of a state (see `vte.types.Observation` for fields and shapes)."""
    cl, tw = state.cluster, state.twin
    head = scoring.head(state.queue)
    delay = scoring.link_delay(cl, head.origin)
    dynamic = encode(NODE_DYNAMIC_TABLE,
                     _Dynamic(tw, jnp.where(head.valid, delay, 0.0), params), params)
    dynamic = jnp.where(cl.mask[:, None], dynamic, 0.0)
    return Observation(
        nodes=jnp.concatenate([state.node_static, dynamic], axis=-1),
        request=request_features(head),
        queue=request_features(state.queue),
        queue_mask=state.queue.valid,
        weights=state.weights,
        progress=state.steps.astype(jnp.float32) / params.episode_len,
        action_mask=_action_mask(state, head, delay, params),
    )


def _action_mask(state: EnvState, head: Requests, delay: jax.Array,
                 params: EnvParams) -> jax.Array:
    """The allowed actions, (N + 1,) bool (the last, defer, always allowed): the cached
    ground-truth feasibility `state.scores.feasible`, or with `params.mask_from_twin` the
    feasibility of the head request on the twin (`scoring.feasibility`; `delay` is the
    head's link delay to every node, which `get_obs` already has)."""
    if not params.mask_from_twin:
        return state.scores.feasible
    believed = scoring.feasibility(state.cluster, twin.as_metrics(state.twin), head, params,
                                   delay)
    return jnp.concatenate([believed, jnp.ones((1,), bool)])
