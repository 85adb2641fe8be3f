"""The digital twin: the scheduler's view of the cluster, folded from reported metrics.

Each step every node reports its metrics with probability `twin_report_prob` (else the
twin keeps the last report and its age grows: staleness), and the reported CPU
utilisation, memory utilisation and power carry relative noise of std `twin_noise`
(uniform noise, so it stays bounded); free cores and memory follow the reported
utilisation. The scheduler's own bookkeeping is exact after every update, whether or
not the node reported: free GPUs and disk, health, running jobs, and its allocations
(a silent node's free cores and memory move by what was placed on it or released since,
only the background load stays as last reported). With the
defaults (`twin_noise=0`, `twin_report_prob=1`) the twin equals the ground truth after
every update.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from vte.cluster import catalogue as C
from vte import rng
from vte.cluster.params import EnvParams
from vte.cluster.types import Cluster, Metrics, Twin

_STREAM = rng.STEP_TWIN  # hash stream of twin noise


def from_metrics(metrics: Metrics) -> Twin:
    """A twin that has just heard every node exactly (age 0)."""
    return Twin(util=metrics.util, mem_util=metrics.mem_util, free=metrics.free,
                power=metrics.power, up=metrics.up, jobs=metrics.jobs,
                age=jnp.zeros_like(metrics.util))


def as_metrics(twin: Twin) -> Metrics:
    """The twin's view as `Metrics` (for `vte.cluster.scoring.feasibility` on what the scheduler
    believes)."""
    return Metrics(util=twin.util, mem_util=twin.mem_util, free=twin.free, power=twin.power,
                   up=twin.up, jobs=twin.jobs)


def _exact(twin_noise, twin_report_prob):
    """The twin is exact: no noise and every node reports every step (NumPy or JAX values)."""
    return (twin_noise == 0) & (twin_report_prob >= 1)


def static_exact(params: EnvParams) -> bool | None:
    """Whether the twin is exact (`twin_noise == 0` and `twin_report_prob >= 1`) when that is
    known while tracing: True or False for concrete parameters (Python or NumPy numbers, or
    arrays closed over by a jitted function), None when either is traced (passed to `jit`
    as an argument, or batched by `vmap`)."""
    values = (params.twin_noise, params.twin_report_prob)
    if any(isinstance(x, jax.core.Tracer) for x in values):
        return None
    return bool(np.all(_exact(*(np.asarray(x) for x in values))))


def update_from_seed(twin: Twin, metrics: Metrics, cluster: Cluster, seed: jax.Array,
                     params: EnvParams, alloc_change: jax.Array | None = None) -> Twin:
    """`update` with its randomness taken from a seed of `vte.rng.words` (inside `step`, the
    step's (2,) uint32 64-bit seed).

    With exact-twin parameters (the default) the twin is the metrics: a `lax.cond` skips
    the noise and the per-node draws (a real branch whenever the parameters are not
    batched; under a vmap over twin parameters both sides run and the result is the same).
    """
    exact = _exact(params.twin_noise, params.twin_report_prob)
    if alloc_change is None:
        alloc_change = jnp.zeros_like(metrics.free)
    return jax.lax.cond(exact, lambda: from_metrics(metrics),
                        lambda: _noisy_update(twin, metrics, cluster, seed, params, alloc_change))


def _noisy_update(twin: Twin, metrics: Metrics, cluster: Cluster, seed: jax.Array,
                  params: EnvParams, alloc_change: jax.Array) -> Twin:
    n = metrics.util.shape[0]
    w = rng.words(seed, _STREAM, (n, 3))
    report = rng.to_uniform(w[:, 0]) < params.twin_report_prob
    noise = rng.unit_noise(w[:, 1:]) * params.twin_noise               # (N, 2), std twin_noise

    cap = cluster.capacity
    util = jnp.clip(metrics.util * (1.0 + noise[:, 0]), 0.0, 1.0)
    mem_util = jnp.clip(metrics.mem_util * (1.0 + noise[:, 0]), 0.0, 1.0)
    power = jnp.maximum(metrics.power * (1.0 + noise[:, 1]), 0.0)
    # Free cores / memory move with the reported utilisation; GPUs and disk are exact.
    free = metrics.free.at[C.CPU].add(cap[C.CPU] * (metrics.util - util))
    free = free.at[C.MEM].add(cap[C.MEM] * (metrics.mem_util - mem_util))
    fresh = Twin(util=util, mem_util=mem_util, free=free, power=power, up=metrics.up,
                 jobs=metrics.jobs, age=jnp.zeros_like(util))

    # What a silent node keeps: its last report, but the scheduler's own bookkeeping is
    # exact whether or not the node reported: health, jobs, and its free resources move by
    # the allocations and releases since the last update (only its background load stays
    # as last reported).
    stale = twin.replace(free=twin.free - alloc_change, up=metrics.up, jobs=metrics.jobs,
                         age=twin.age + 1.0)
    # Every field has the node axis last, so `report` (N,) broadcasts against it.
    out = jax.tree_util.tree_map(lambda new, old: jnp.where(report, new, old), fresh, stale)
    exact_free = jnp.arange(C.NUM_RESOURCES)[:, None] >= C.GPU           # GPUs and disk
    return out.replace(free=jnp.where(exact_free, metrics.free, out.free))


def update(twin: Twin, metrics: Metrics, cluster: Cluster, key: jax.Array,
           params: EnvParams, alloc_change: jax.Array | None = None) -> Twin:
    """Fold one set of reported metrics into the twin.

    Args:
      twin: the current twin.
      metrics: the ground-truth metrics now (`vte.cluster.dynamics.measure`).
      cluster: the scenario (capacities, used to turn utilisation into free resources).
      key: a JAX key for reporting and noise.
      alloc_change: (R, N), the change of `Nodes.alloc` since the previous update (the
        scheduler's own placements and releases; `step` passes it); a node that does not
        report has its free resources moved by it. None: no change.
    Returns:
      The new twin. Pure; deterministic for a given key; works under jit and vmap.
    """
    return update_from_seed(twin, metrics, cluster, rng.seed_from_key(key), params,
                            alloc_change)
