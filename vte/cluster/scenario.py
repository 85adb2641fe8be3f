"""Scenario generator: clusters, sites and scheduling requests sampled from a key.

Separate from the dynamics (as Jumanji separates its generators), so that other
sources of scenarios (replayed traces, hand-made instances) can be plugged in by
building a `Cluster` and a `Requests` queue of the same shapes.

The request sampler takes raw uint32 words rather than a key, so `reset` and `step` can
feed it the cheap hash words of `vte.rng`; the samplers that take a key expand it the
same way (`vte.rng.key_words`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from vte.cluster import catalogue as C
from vte import rng
from vte.cluster.params import EnvParams
from vte.cluster.dynamics import step_event_prob
from vte.cluster.fusion import lookup
from vte.cluster.types import Cluster, Requests

NUM_NODE_WORDS = 16     # random words consumed per node
NUM_REQUEST_WORDS = 14  # random words consumed per request

# The reset draws come from streams `vte.rng.RESET_*` of `vte.rng.key_words`.


def _f32(x) -> jax.Array:
    return jnp.asarray(x, jnp.float32)


def _rows(table, index: jax.Array) -> jax.Array:
    """`table[index]` for a small constant table (K,) or (K, M) indexed along its first axis:
    shape index.shape or index.shape + (M,), float32 unless the table is integer.

    Built by `lookup` (a chain of selects, which vectorises) rather than a gather."""
    return lookup(np.asarray(table), index)


def _rows_of(index: jax.Array, *tables) -> list[jax.Array]:
    """`[_rows(t, index) for t in tables]` in one lookup: the tables (all indexed by
    `index` along their first axis) joined into one float32 table, looked up once and
    split again, integer tables cast back (exact: their values are below 2**24). One
    lookup's handful of operations instead of one per table."""
    arrays = [np.asarray(t) for t in tables]
    for a in arrays:
        assert a.dtype.kind == "f" or np.abs(a).max() < 2**24, "not exact in float32"
    rows = lookup(np.concatenate([a.reshape(len(a), -1).astype(np.float32) for a in arrays],
                                 axis=1), index)
    out, start = [], 0
    for a in arrays:
        width = int(np.prod(a.shape[1:], dtype=int))
        part = rows[..., start:start + width]
        part = part.reshape(part.shape[:-1] + a.shape[1:])
        out.append(part if a.dtype.kind == "f" else part.astype(a.dtype))
        start += width
    return out


def categorical(u: jax.Array, probs: jax.Array) -> jax.Array:
    """Index drawn from `probs` (last axis, sums to 1) with uniforms `u` (shape of probs[..., 0])."""
    cdf = jnp.cumsum(probs, axis=-1)[..., :-1]
    return jnp.sum(u[..., None] >= cdf, axis=-1).astype(jnp.int32)


def _between(u, lohi):
    """Uniform in [lo, hi] per row of `lohi` (..., 2)."""
    return lohi[..., 0] + u * (lohi[..., 1] - lohi[..., 0])


def _int_between(u, lohi):
    """Uniform integer in [lo, hi] (floats holding integers)."""
    return jnp.minimum(jnp.floor(lohi[..., 0] + u * (lohi[..., 1] - lohi[..., 0] + 1.0)), lohi[..., 1])


def _log_between(u, lohi):
    """Log-uniform in [lo, hi], lo > 0."""
    lo, hi = jnp.log(lohi[..., 0]), jnp.log(lohi[..., 1])
    return jnp.exp(lo + u * (hi - lo))


def _bernoulli_bits(w: jax.Array, probs: jax.Array) -> jax.Array:
    """Label bitmask: bit l set with probability probs[..., l], from one word per set.

    Each label reads its own 4 bits of `w`, so probabilities are rounded to sixteenths.
    """
    nibbles = (w[..., None] >> (4 * jnp.arange(C.NUM_LABELS, dtype=jnp.uint32))) & jnp.uint32(15)
    thresholds = jnp.round(probs * 16.0).astype(jnp.uint32)
    hit = nibbles < thresholds
    return jnp.sum(jnp.where(hit, 1 << jnp.arange(C.NUM_LABELS), 0), axis=-1).astype(jnp.int32)


def sample_cluster(key: jax.Array, params: EnvParams) -> Cluster:
    """Nodes and sites of a fresh scenario."""
    n, s = params.num_nodes, params.num_sites
    w = rng.key_words(key, rng.RESET_NODES, (n, NUM_NODE_WORDS))
    u = rng.to_uniform(w)

    tier = categorical(u[:, 0], _f32(params.tier_shares))
    has_gpu = (tier != C.EDGE) & (u[:, 1] < params.gpu_node_share)
    kind = jnp.where(tier == C.EDGE, 4, jnp.where(tier == C.CLOUD, 0, 2) + has_gpu).astype(jnp.int32)

    (k_cores, k_mem, k_gpus, k_model, k_disk, k_speed, k_bandwidth, k_idle, k_peak, k_arm,
     k_ssd, k_failure) = _rows_of(
        kind, C.KIND_CORES, C.KIND_MEM_GIB, C.KIND_GPUS, C.KIND_GPU_MODEL_P, C.KIND_DISK_GIB,
        C.KIND_SPEED, C.KIND_BANDWIDTH_MBPS, C.KIND_IDLE_W, C.KIND_PEAK_W, C.KIND_P_ARM,
        C.KIND_P_SSD, C.KIND_FAILURE_RATE)
    cores = _int_between(u[:, 2], k_cores)
    mem = jnp.round(_log_between(u[:, 3], k_mem))
    gpus = _int_between(u[:, 4], k_gpus)
    gpu_model = categorical(u[:, 5], k_model)
    disk = jnp.round(_log_between(u[:, 6], k_disk))
    capacity = jnp.stack([cores, mem, gpus, disk], axis=0)

    speed = _between(u[:, 7], k_speed)
    bandwidth = _log_between(u[:, 8], k_bandwidth)
    power_idle = _between(u[:, 9], k_idle)
    power_peak = jnp.maximum(_between(u[:, 10], k_peak), power_idle)

    tier_label = jnp.left_shift(1, tier)
    labels = (tier_label
              | jnp.where(gpus > 0, C.L_GPU, 0)
              | jnp.where(mem >= C.BIGMEM_GIB, C.L_BIGMEM, 0)
              | jnp.where(u[:, 11] < k_arm, C.L_ARM64, 0)
              | jnp.where(u[:, 12] < k_ssd, C.L_SSD, 0)
              | jnp.where(bandwidth >= C.HIGHNET_MBPS, C.L_HIGHNET, 0)).astype(jnp.int32)

    site = jnp.minimum(jnp.floor(u[:, 13] * s), s - 1).astype(jnp.int32)
    level = categorical(u[:, 14], _f32(params.load_shares))
    bg_mean = _between(u[:, 15], _rows(C.LOAD_LEVELS, level))

    failure_rate = k_failure * params.failure_rate_scale

    pos = rng.to_uniform(rng.key_words(key, rng.RESET_SITES, (s, 2)))
    dist = jnp.sqrt(jnp.sum((pos[:, None, :] - pos[None, :, :]) ** 2, axis=-1))
    link_delay = jnp.where(jnp.eye(s, dtype=bool), C.INTRA_SITE_DELAY_MS,
                           C.LINK_BASE_DELAY_MS + C.LINK_DELAY_MS_PER_UNIT * dist)

    return Cluster(
        mask=jnp.arange(n) < jnp.where(params.active_nodes > 0, params.active_nodes, n),
        tier=tier,
        kind=kind,
        capacity=capacity.astype(jnp.float32),
        gpu_model=jnp.where(gpus > 0, gpu_model, 0).astype(jnp.int32),
        labels=labels,
        site=site,
        speed=speed,
        bandwidth=bandwidth,
        power_idle=power_idle,
        power_peak=power_peak,
        failure_rate=failure_rate,
        step_fail_prob=step_event_prob(failure_rate, params),
        bg_mean=bg_mean,
        link_delay=link_delay.astype(jnp.float32),
    )


def sample_requests(w: jax.Array, params: EnvParams) -> Requests:
    """Requests from words `w` of shape (..., NUM_REQUEST_WORDS); all marked valid."""
    u = rng.to_uniform(w)
    a = categorical(u[..., 0], _f32(params.archetype_shares))
    (a_cores, a_mem, a_p_gpu, a_gpus, a_p_alt, a_mask_alt, a_mask, a_seconds, a_data,
     a_prefer, a_require, a_reject, a_p_latency, a_latency) = _rows_of(
        a, C.ARCH_CORES, C.ARCH_MEM_GIB, C.ARCH_P_GPU, C.ARCH_GPUS, C.ARCH_P_GPU_ALT,
        C.ARCH_GPU_MASK_ALT, C.ARCH_GPU_MASK, C.ARCH_SECONDS, C.ARCH_DATA_GB, C.ARCH_P_PREFER,
        C.ARCH_P_REQUIRE, C.ARCH_P_REJECT, C.ARCH_P_LATENCY, C.ARCH_LATENCY_MS)
    cores = _int_between(u[..., 1], a_cores)
    mem = jnp.maximum(jnp.round(_log_between(u[..., 2], a_mem)), 1.0)
    wants_gpu = u[..., 3] < a_p_gpu
    gpus = jnp.where(wants_gpu, _int_between(u[..., 4], a_gpus), 0.0)
    gpu_models = jnp.where(
        wants_gpu, jnp.where(u[..., 5] < a_p_alt, a_mask_alt, a_mask), 0).astype(jnp.int32)
    work = _between(u[..., 6], a_seconds)
    data_gb = _log_between(u[..., 7], a_data)
    preferred = _bernoulli_bits(w[..., 8], a_prefer)
    required = _bernoulli_bits(w[..., 9], a_require)
    rejected = _bernoulli_bits(w[..., 10], a_reject) & ~required
    preferred = preferred & ~rejected
    has_bound = u[..., 11] < a_p_latency
    latency_bound = jnp.where(has_bound, _between(u[..., 12], a_latency),
                              C.NO_LATENCY_BOUND_MS)
    origin = jnp.minimum(jnp.floor(u[..., 13] * params.num_sites), params.num_sites - 1)
    return Requests(
        valid=jnp.ones(a.shape, bool),
        demand=jnp.stack([cores, mem, gpus, jnp.ceil(data_gb)], axis=-1).astype(jnp.float32),
        work=work.astype(jnp.float32),
        gpu_models=gpu_models,
        required=required,
        rejected=rejected,
        preferred=preferred,
        origin=origin.astype(jnp.int32),
        latency_bound=latency_bound.astype(jnp.float32),
        data_gb=data_gb.astype(jnp.float32),
        archetype=a,
    )


def sample_weights(key: jax.Array) -> jax.Array:
    """Objective weights (performance, energy, reliability) = 3 x Dirichlet(1, 1, 1), (3,):
    three exponential draws divided by their sum (which has that distribution)."""
    u = rng.to_uniform(rng.key_words(key, rng.RESET_WEIGHTS, (3,)))
    e = -jnp.log1p(-u)                      # Exp(1); u < 1, so finite (at most ~16.6)
    return 3.0 * e / jnp.maximum(jnp.sum(e), 1e-30)


def initial_queue(key: jax.Array, params: EnvParams) -> tuple[Requests, Requests]:
    """(queue, incoming): a queue filled to `initial_queue_fill` of its K slots with fresh
    requests, and the MAX_ARRIVALS candidates of the first step's arrivals."""
    k = params.queue_len
    words = rng.key_words(key, rng.RESET_QUEUE, (k + C.MAX_ARRIVALS, NUM_REQUEST_WORDS))
    reqs = sample_requests(words, params)
    queue = jax.tree_util.tree_map(lambda x: x[:k], reqs)
    incoming = jax.tree_util.tree_map(lambda x: x[k:], reqs)
    filled = jnp.round(params.initial_queue_fill * k)
    return queue.replace(valid=(jnp.arange(k) < filled).astype(jnp.bool_)), incoming


__all__ = ["sample_cluster", "sample_requests", "initial_queue", "sample_weights",
           "categorical", "NUM_NODE_WORDS", "NUM_REQUEST_WORDS"]
