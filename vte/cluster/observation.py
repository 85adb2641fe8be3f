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
twin until the next step. Every column has finite bounds (`bounds(table, params)`),
derived from the generator's extremes (the catalogue) and the params; the spaces of
`vte.cluster.spaces` state them.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Union

import jax
import jax.numpy as jnp
import numpy as np

from vte.cluster import catalogue as C
from vte.environment import Column, concrete_extreme, round_outward
from vte.cluster import scoring, twin
from vte.cluster.params import EnvParams
from vte.cluster.types import Cluster, EnvState, Observation, Requests, Twin

INF = float("inf")
RESOURCE_SCALE = (64.0, 256.0, 8.0, 1000.0)  # cores, GiB, GPUs, GiB: features are x / scale
_RESOURCES = (("cpu_cores", "cores"), ("memory_gib", "GiB"), ("gpus", "GPUs"),
              ("disk_gib", "GiB"))


Bound = Union[float, Callable[[EnvParams], float]]


class Feature(NamedTuple):
    """One observation column, defined once: the encoder, the decoder, the names and the
    bounds of the observation spaces are all generated from these.

    The column holds `source(context) / scale` (computed as `value * (1 / scale)` when
    the scale is below 1, the name's "*"); `decode` undoes it. `scale` is a number, or the
    name of an `EnvParams` field (`"slots_per_node"`). `low`, `high` bound the decoded
    value (0 and 1 for flags and fractions), or the column itself when the scale is read
    from the params (jobs never exceed the slots: [0, 1]); each is a number or a function
    of the `EnvParams` (`bounds` evaluates them), derived from the generator's extremes
    below. `stated` is the scale the name states, in
    the name's own unit, when that differs from `unit` (bandwidth: Gbit/s / 10 in the
    name, Mbit/s / 10000 in the source)."""

    name: str            # column name; states the scale ("cpu_cores/64", "failures_per_hour*100")
    unit: str            # unit of the decoded value ("flag": 0 or 1, "fraction": 0..1)
    scale: float | str   # column = value / scale
    source: Callable     # context -> (...) float32 value in `unit`
    low: Bound = 0.0     # bounds of the decoded value: numbers or params -> number
    high: Bound = INF
    stated: float | None = None


# --------------------------------------------------------------------------
# Bounds: the extremes of the scenario generator (`vte.cluster.scenario`), the dynamics and the
# twin, computed from the catalogue and the params. Padded nodes and empty queue slots are
# 0, so every low is at most 0. The maxima are taken over every node kind and archetype of
# the catalogue (whatever the mix of `EnvParams`), so a space does not change with the
# shares.
# --------------------------------------------------------------------------

# Relative margin on an extreme that float32 arithmetic reaches only up to rounding (a
# uniform draw between two ends, a log-uniform draw's log and exp, a product): the float32
# result may pass the exact extreme by a few ulps (~1e-7 relative each).
ROUNDING_MARGIN = 1e-4
_SQRT3 = float(np.sqrt(3.0))   # the twin's noise is uniform in [-sqrt(3) s, sqrt(3) s)


def _up(x: float) -> float:
    """An extreme of float32 arithmetic, widened by `ROUNDING_MARGIN`."""
    return float(x) * (1.0 + ROUNDING_MARGIN)


def _rounded(x: float) -> float:
    """The largest `round` of a log-uniform draw of at most `x` (GiB of memory or disk)."""
    return float(np.floor(_up(x) + 0.5))


def _ceiled(x: float) -> float:
    """The largest `ceil` of a log-uniform draw of at most `x` (a request's disk, its data
    size rounded up: float32 may put the draw just past `x`)."""
    return float(np.ceil(_up(x)))


def param_extreme(params: EnvParams, name: str, pick) -> float:
    """`pick` (np.max or np.min) of the field's values (all of them when batched). Raises
    ValueError for a traced value: the spaces are built from concrete params."""
    return concrete_extreme(getattr(params, name), f"EnvParams.{name}", pick)


# Node capacities: cores and GPUs are whole draws in [lo, hi]; memory and disk rounded
# log-uniform draws.
CAPACITY_MAX = (float(C.KIND_CORES[:, 1].max()), _rounded(C.KIND_MEM_GIB[:, 1].max()),
                float(C.KIND_GPUS[:, 1].max()), _rounded(C.KIND_DISK_GIB[:, 1].max()))
# Request demands: cores and GPUs whole draws, memory a rounded log-uniform draw (>= 1),
# disk the data size rounded up.
DEMAND_MAX = (float(C.ARCH_CORES[:, 1].max()), max(_rounded(C.ARCH_MEM_GIB[:, 1].max()), 1.0),
              float(C.ARCH_GPUS[:, 1].max()), _ceiled(C.ARCH_DATA_GB[:, 1].max()))
# Host power at full load (peak >= idle), plus every GPU of the kind at the hungriest model
# it can carry, W.
POWER_MAX = float(max(
    max(C.KIND_PEAK_W[k, 1], C.KIND_IDLE_W[k, 1])
    + C.KIND_GPUS[k, 1] * C.GPU_WATTS[C.KIND_GPU_MODEL_P[k] > 0].max()
    for k in range(len(C.NODE_KINDS))))
# Share of the background load on each resource (`vte.cluster.dynamics.measure`).
_BG_SHARE = (1.0, C.MEM_BG_RATIO, 0.0, 0.0)


def _stale_noise(params: EnvParams) -> float:
    """k = sqrt(3) twin_noise, the largest relative error of a report, where reports can
    go stale (`twin_report_prob` < 1); 0 otherwise (a fresh report's free resources stay
    within the ground truth's range)."""
    if param_extreme(params, "twin_report_prob", np.min) >= 1.0:
        return 0.0
    return _SQRT3 * param_extreme(params, "twin_noise", np.max)


def _free_drift(params: EnvParams, r: int) -> float:
    """Float32 drift of a silent node's free resources: one rounding (<= 2^-24 of at most
    2 x capacity) for every step of an episode it stays silent."""
    if param_extreme(params, "twin_report_prob", np.min) >= 1.0:
        return 0.0
    return params.episode_len * 2.0 * CAPACITY_MAX[r] * 2.0 ** -24


def _free_low(r: int) -> Callable[[EnvParams], float]:
    """Free cores / memory: a placement fits the ground truth (alloc <= capacity, up to
    the capacity check's tolerance), then the background load may rise to BG_MAX:
    free >= -BG_MAX x share x capacity. A report that goes stale and erred by up to k
    (`_stale_noise`) lowers that to -capacity x (1 - max(0, 1 / (1 + k) - BG_MAX x
    share)). GPUs and disk have no background load and the twin keeps them exact: >= 0."""
    share = _BG_SHARE[r]
    if share == 0.0:
        return lambda params: 0.0

    def low(params: EnvParams) -> float:
        k = _stale_noise(params)
        depth = 1.0 - max(0.0, 1.0 / (1.0 + k) - C.BG_MAX * share)
        return -(_up(CAPACITY_MAX[r] * depth) + scoring._EPS + _free_drift(params, r))
    return low


def _free_high(r: int) -> Callable[[EnvParams], float]:
    """Free resources are at most the capacity; a stale report that erred by k
    (`_stale_noise`) and the jobs that left since may show up to capacity x
    (1 + min(1, k)) free cores or memory."""
    if _BG_SHARE[r] == 0.0:
        return lambda params: CAPACITY_MAX[r]
    return lambda params: (_up(CAPACITY_MAX[r] * (1.0 + min(1.0, _stale_noise(params))))
                           + _free_drift(params, r))


def _power_high(params: EnvParams) -> float:
    """Power at most POWER_MAX, times (1 + sqrt(3) twin_noise) in a report."""
    return _up(POWER_MAX * (1.0 + _SQRT3 * param_extreme(params, "twin_noise", np.max)))


def _delay_high(params: EnvParams) -> float:
    """Sites sit in the unit square: a link is at most LINK_BASE + PER_UNIT x sqrt(2) ms;
    with one site every delay is the intra-site one."""
    if params.num_sites == 1:
        return _up(C.INTRA_SITE_DELAY_MS)
    return _up(max(C.INTRA_SITE_DELAY_MS,
                   C.LINK_BASE_DELAY_MS + C.LINK_DELAY_MS_PER_UNIT * np.sqrt(2.0)))


def _age_high(params: EnvParams) -> float:
    """The age grows by one a step without a report and restarts with every episode: at
    most `episode_len`. (It stays 0 while every node reports every step, but the bound
    keeps `episode_len` there too: a column with equal bounds would divide by zero in a
    normalisation by the space, and Gymnasium's checker warns about it.)"""
    return float(params.episode_len)


def _failure_high(params: EnvParams) -> float:
    """The catalogue's highest failure rate times `failure_rate_scale` (a zero scale
    keeps the unscaled one, not a column with equal bounds; every rate is then 0)."""
    scale = param_extreme(params, "failure_rate_scale", np.max)
    return _up(C.KIND_FAILURE_RATE.max() * (scale if scale > 0 else 1.0))


class _Flag(NamedTuple):
    """A flag column's source: `inner(x)` as float32 (0 or 1)."""

    inner: Callable

    def __call__(self, x):
        return self.inner(x).astype(jnp.float32)


class _Bit(NamedTuple):
    """Bit `bit` of the integer field `field`: `(x.field >> bit) & 1`. Consecutive bits of
    one field are read in one shift of the whole field (`columns`)."""

    field: str
    bit: int

    def __call__(self, x):
        return (getattr(x, self.field) >> self.bit) & 1


def _flag(name: str, source: Callable) -> Feature:
    return Feature(name, "flag", 1.0, _Flag(source), 0.0, 1.0)


def _bit(field: str, bit: int) -> Callable:
    return _Bit(field, bit)


def _bit_runs(table: tuple[Feature, ...]) -> list[tuple[int, int]]:
    """(start, length) of the table's columns, consecutive flag columns that read
    consecutive bits of one field grouped into one run."""
    runs: list[tuple[int, int]] = []
    for i, f in enumerate(table):
        bit = f.source.inner if isinstance(f.source, _Flag) else None
        if runs and isinstance(bit, _Bit):
            start, length = runs[-1]
            prev = table[start + length - 1].source
            prev = prev.inner if isinstance(prev, _Flag) else None
            if (isinstance(prev, _Bit) and prev.field == bit.field
                    and prev.bit + 1 == bit.bit):
                runs[-1] = (start, length + 1)
                continue
        runs.append((i, 1))
    return runs


# Node features fixed for an episode: context = the `Cluster`.
NODE_STATIC_TABLE: tuple[Feature, ...] = (
    *(_flag(f"tier_{t}", lambda c, i=i: c.tier == i) for i, t in enumerate(C.TIERS)),
    *(Feature(f"{stem}/{scale:g}", unit, scale, lambda c, r=r: c.capacity[r], 0.0,
              CAPACITY_MAX[r])
      for r, ((stem, unit), scale) in enumerate(zip(_RESOURCES, RESOURCE_SCALE))),
    *(_flag(f"gpu_{m}", lambda c, k=k: c.gpu_model == k)
      for k, m in enumerate(C.GPU_MODELS) if k > 0),
    *(_flag(f"label_{lb}", _bit("labels", i)) for i, lb in enumerate(C.LABELS)),
    Feature("speed", "x reference CPU", 1.0, lambda c: c.speed, 0.0, _up(C.KIND_SPEED.max())),
    Feature("bandwidth_gbps/10", "Mbit/s", 10000.0, lambda c: c.bandwidth, 0.0,
            _up(C.KIND_BANDWIDTH_MBPS.max()), stated=10.0),
    Feature("power_idle_w/100", "W", 100.0, lambda c: c.power_idle, 0.0,
            _up(C.KIND_IDLE_W.max())),
    Feature("power_peak_w/1000", "W", 1000.0, lambda c: c.power_peak, 0.0,
            _up(max(C.KIND_PEAK_W.max(), C.KIND_IDLE_W.max()))),
    Feature("failures_per_hour*100", "1/h", 0.01, lambda c: c.failure_rate, 0.0, _failure_high),
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
        "free_cpu", "free_cores"), unit, scale, lambda d, r=r: d.twin.free[r], _free_low(r),
        _free_high(r))
      for r, ((stem, unit), scale) in enumerate(zip(_RESOURCES, RESOURCE_SCALE))),
    Feature("power_w/1000", "W", 1000.0, lambda d: d.twin.power, 0.0, _power_high),
    Feature("jobs/slots", "jobs", "slots_per_node", lambda d: d.twin.jobs, 0.0, 1.0),
    Feature("delay_from_origin_ms/100", "ms", 100.0, lambda d: d.delay, 0.0, _delay_high),
    Feature("report_age_steps/10", "steps", 10.0, lambda d: d.twin.age, 0.0, _age_high),
)


# Request features: context = `Requests` (any leading shape).
def _latency_bound(r: Requests) -> jax.Array:
    return jnp.where(r.latency_bound < C.NO_LATENCY_BOUND_MS, r.latency_bound, 0.0)


REQUEST_TABLE: tuple[Feature, ...] = (
    _flag("valid", lambda r: r.valid),
    *(Feature(f"{stem}/{scale:g}", unit, scale, lambda q, i=i: q.demand[..., i], 0.0,
              DEMAND_MAX[i])
      for i, ((stem, unit), scale) in enumerate(zip(_RESOURCES, RESOURCE_SCALE))),
    Feature("work_hours", "h at reference speed", 1.0, lambda r: r.work / 3600.0, 0.0,
            _up(C.ARCH_SECONDS.max() / 3600.0)),
    *(_flag(f"accepts_{m}", _bit("gpu_models", k)) for k, m in enumerate(C.GPU_MODELS) if k > 0),
    *(_flag(f"required_{lb}", _bit("required", i)) for i, lb in enumerate(C.LABELS)),
    *(_flag(f"rejected_{lb}", _bit("rejected", i)) for i, lb in enumerate(C.LABELS)),
    *(_flag(f"preferred_{lb}", _bit("preferred", i)) for i, lb in enumerate(C.LABELS)),
    _flag("has_latency_bound", lambda r: r.latency_bound < C.NO_LATENCY_BOUND_MS),
    Feature("latency_bound_ms/100", "ms", 100.0, _latency_bound, 0.0,
            _up(C.ARCH_LATENCY_MS.max())),
    Feature("data_gb/100", "GB", 100.0, lambda r: r.data_gb, 0.0, _up(C.ARCH_DATA_GB.max())),
)

NODE_TABLE = NODE_STATIC_TABLE + NODE_DYNAMIC_TABLE


def table_columns(table: tuple[Feature, ...]) -> tuple[Column, ...]:
    """The feature table as `vte.environment.Column`s (`SyntheticEnv.observation_columns`)."""
    return tuple(Column(f.name, f.unit) for f in table)

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


def columns(table: tuple[Feature, ...], context, params: EnvParams | None = None,
            where: jax.Array | None = None) -> list[jax.Array]:
    """The float32 columns of `context`, one per feature of `table` (its source divided by
    its scale, 0 where `where`, (...) bool, if given, is False), as blocks of the last
    axis. Kept apart so that one `jnp.concatenate` can join them with other columns: XLA
    writes a single concatenation of columns far faster than a stack of them joined again
    (the loop of `benchmarks/kernel.py` made 1.2x the decisions per second with the node
    and queue features built so). Consecutive flags reading consecutive bits of one field
    (labels, GPU models) are one block from one shift of the field (`_bit_runs`): the same
    values in a handful of operations instead of a few per bit."""
    out = []
    for start, length in _bit_runs(table):
        if length == 1:
            f = table[start]
            column = _encode_one(f, jnp.asarray(f.source(context), jnp.float32), params)
            if where is not None:
                column = jnp.where(where, column, 0.0)
            out.append(column[..., None])
            continue
        first = table[start].source.inner           # flags: scale 1, 0 or 1 already
        field = getattr(context, first.field)
        bits = np.arange(first.bit, first.bit + length).astype(np.dtype(field.dtype))
        block = ((field[..., None] >> bits) & 1).astype(jnp.float32)
        if where is not None:
            block = jnp.where(where[..., None], block, 0.0)
        out.append(block)
    return out


def encode(table: tuple[Feature, ...], context, params: EnvParams | None = None,
           where: jax.Array | None = None) -> jax.Array:
    """(..., len(table)) float32 columns of `context`: each source divided by its scale,
    0 where `where` ((...) bool, if given) is False."""
    return jnp.concatenate(columns(table, context, params, where), axis=-1)


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


def bounds(table: tuple[Feature, ...], params: EnvParams | None = None
           ) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) float32 of the encoded columns for `params` (default `EnvParams()`):
    the bounds of the values (numbers, or functions of the params evaluated here) divided
    by their (positive) scales and rounded outward to float32; those of a column scaled by
    a params field as they are. Raises ValueError when a bound needs a traced field."""
    params = EnvParams() if params is None else params

    def value(b: Bound) -> float:
        return float(b(params) if callable(b) else b)

    def column(f: Feature, b: Bound) -> float:
        scale = 1.0 if isinstance(f.scale, str) else f.scale
        return value(b) * (1.0 / scale) if scale < 1.0 else value(b) / scale
    lo = np.array([column(f, f.low) for f in table], np.float64)
    hi = np.array([column(f, f.high) for f in table], np.float64)
    return round_outward(lo, up=False), round_outward(hi, up=True)


def static_node_features(cluster: Cluster) -> jax.Array:
    """(N, NODE_STATIC_FEATURES) float32, the per-episode part of the node features."""
    return encode(NODE_STATIC_TABLE, cluster, where=cluster.mask)


def request_features(req: Requests) -> jax.Array:
    """(..., REQUEST_FEATURES) float32 features of requests (any leading shape)."""
    return encode(REQUEST_TABLE, req, where=req.valid)


def get_obs(state: EnvState, params: EnvParams) -> Observation:
    """The observation of a state (see `vte.cluster.types.Observation` for fields and shapes)."""
    cl, tw = state.cluster, state.twin
    head = scoring.head(state.queue)
    delay = scoring.link_delay(cl, head.origin)
    dynamic = columns(NODE_DYNAMIC_TABLE, _Dynamic(tw, jnp.where(head.valid, delay, 0.0), params),
                      params, where=cl.mask)
    queue = request_features(state.queue)
    return Observation(
        nodes=jnp.concatenate([state.node_static, *dynamic], axis=-1),
        request=queue[0],                     # the head's features (`scoring.head`)
        queue=queue,
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
