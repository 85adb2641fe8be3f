"""The six scheduling policies of the FGD paper's experiment (OPENB.md section 5).

Every policy has one signature, so that a learned policy drops in beside them:

    policy(key, state, pod, feasible, spec) -> (scores, shared_gpu)

`scores` (N,) ranks the nodes (integers in 0..100 for the published policies; higher is
better; the replay keeps the feasible node with the highest score and breaks ties by the
seed's node rank, `cluster.select`). `shared_gpu` (N,) int32 is the GPU a shared pod would
take on each node (section 6); whole-GPU pods always take the lowest-indexed idle GPUs.
Scores of infeasible nodes are ignored. All are pure and work under `jit` and `vmap`.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from vte.openb.cluster import (MILLI, SHARE_CLASS, Pod, Spec, State, best_fit_gpu, fitting_gpus,
                               frag_terms, is_shared, least_sufficient, _shape_fits)

Policy = Callable[[jax.Array, State, Pod, jax.Array, Spec], tuple[jax.Array, jax.Array]]

CPU_NORM = 128_000            # thousandths of a core: the largest node's CPU, the score's scale
GPU_NORM = 8 * MILLI          # milli-GPU of the largest node


def _free_gpu(state: State) -> jax.Array:
    """(N,) int32, L: the free milli-GPU of each node."""
    return jnp.sum(state.gpu_free, axis=0)


def _trunc(x: jax.Array) -> jax.Array:
    return jnp.trunc(x).astype(jnp.int32)


def random(key, state: State, pod: Pod, feasible: jax.Array, spec: Spec):
    """One feasible node drawn uniformly scores 100, the others 0; a uniform fitting GPU."""
    k_node, k_gpu = jax.random.split(key)
    noise = jax.random.uniform(k_node, feasible.shape)
    pick = jnp.argmax(jnp.where(feasible, noise, -1.0))
    scores = jnp.where(jnp.arange(feasible.shape[0]) == pick, 100, 0).astype(jnp.int32)
    gpu_noise = jax.random.uniform(k_gpu, state.gpu_free.shape)
    fit = fitting_gpus(state.gpu_free, pod.gpu_milli)
    gpu = jnp.argmax(jnp.where(fit, gpu_noise, -1.0), axis=0).astype(jnp.int32)
    return scores, gpu


def dot_product(key, state: State, pod: Pod, feasible: jax.Array, spec: Spec):
    """trunc(100 (1 - <node, pod> / 2)) on (CPU, GPU) vectors scaled by the largest node."""
    del key, feasible
    gpu_total = (pod.num_gpus * pod.gpu_milli).astype(jnp.float32)
    dot = (state.cpu_free.astype(jnp.float32) / CPU_NORM * (pod.cpu_milli / CPU_NORM)
           + _free_gpu(state).astype(jnp.float32) / GPU_NORM * (gpu_total / GPU_NORM))
    return _trunc(100.0 * (1.0 - dot / 2.0)), best_fit_gpu(state.gpu_free, pod.gpu_milli)


def gpu_clustering(key, state: State, pod: Pod, feasible: jax.Array, spec: Spec):
    """75 / 50 / 25 / 0 by the classes of GPU pods the node holds, plus 25 x its used share."""
    del key, feasible, spec
    bit = jnp.left_shift(1, jnp.where(is_shared(pod), SHARE_CLASS, pod.num_gpus))
    held = state.classes
    base = jnp.where(held == bit, 75,
                     jnp.where((held & bit) != 0, 50, jnp.where(held == 0, 25, 0)))
    score = base + (25 * (GPU_NORM - _free_gpu(state))) // GPU_NORM
    score = jnp.where(pod.num_gpus > 0, score, 0).astype(jnp.int32)
    return score, best_fit_gpu(state.gpu_free, pod.gpu_milli)


def gpu_packing(key, state: State, pod: Pod, feasible: jax.Array, spec: Spec):
    """Shared GPUs first (100 - their free tenths / 10), then idle GPUs of used nodes, then idle nodes."""
    del key, feasible
    idle = jnp.sum(state.gpu_free == MILLI, axis=0)                       # (N,) fully free GPUs
    whole_node = jnp.maximum(100 // 3 - idle, idle)
    take = least_sufficient(state.gpu_free, pod.gpu_milli, pod.num_gpus)  # (G, N)
    idle_taken = jnp.sum(take & (state.gpu_free == MILLI), axis=0)
    tenths = jnp.sum(jnp.where(take, state.gpu_free * 100 // MILLI, 0), axis=0)
    score = jnp.where(idle == spec.num_gpus, whole_node,
                      jnp.where(idle_taken > 0, jnp.maximum(50 - idle_taken, 100 // 3),
                                jnp.maximum(100 - tenths // 10, 50)))
    score = jnp.where(pod.num_gpus > 0, score, 0).astype(jnp.int32)
    return score, best_fit_gpu(state.gpu_free, pod.gpu_milli)


def best_fit(key, state: State, pod: Pod, feasible: jax.Array, spec: Spec):
    """The least CPU and GPU left after placement, min-max rescaled over the feasible nodes."""
    del key, spec
    left_cpu = (state.cpu_free - pod.cpu_milli).astype(jnp.float32)
    left_gpu = (_free_gpu(state) - pod.num_gpus * pod.gpu_milli).astype(jnp.float32)
    raw = _trunc(100.0 * (1.0 - (0.5 * left_cpu / CPU_NORM + 0.5 * left_gpu / GPU_NORM)))
    big = jnp.iinfo(jnp.int32).max
    lo = jnp.min(jnp.where(feasible, raw, big))
    hi = jnp.max(jnp.where(feasible, raw, -big))
    span = jnp.maximum(hi - lo, 1)
    score = jnp.where(hi > lo, (raw - lo) * 100 // span, 0)
    return score.astype(jnp.int32), best_fit_gpu(state.gpu_free, pod.gpu_milli)


def fgd_gain(state: State, pod: Pod, spec: Spec) -> tuple[jax.Array, jax.Array]:
    """FGD's fragmentation gradient: ((N,) float32 milli-GPU, (N,) int32 GPU).

    The expected fragmentation the placement removes, sum_t p_t (f_t before - f_t after)
    over the typical pods, on each node (negative: it adds fragmentation). A shared pod
    tries each fitting GPU and keeps the GPU of the best published score (the lowest index
    on ties), returned second; other pods take their least sufficient GPUs. Differences
    are taken shape by shape in integers, so a placement that changes nothing gains 0."""
    typ = spec.typical
    gpu_free, cpu_free, model = state.gpu_free, state.cpu_free, spec.model
    free = jnp.sum(gpu_free, axis=0)                                       # (N,)
    usable, fits = frag_terms(gpu_free, cpu_free, model, typ)               # (K, N)
    f_before = free[None] - jnp.where(fits, usable, 0)                      # (K, N)
    cpu_after = cpu_free - pod.cpu_milli
    prob = typ.prob[:, None]

    def gain(delta_k):                                                     # (K, ...) int32
        return jnp.sum(prob.reshape(prob.shape + (1,) * (delta_k.ndim - 2)) * delta_k, axis=0)

    # Shared pod on GPU i: only GPU i changes (free_i -> free_i - m), so the counts and usable
    # milli of each shape move by GPU i's own terms: (K, G, N) instead of (K, G, G, N).
    m_t = typ.gpu_milli[:, None, None]                                      # (K, 1, 1)
    g_i = gpu_free[None]                                                    # (1, G, N)
    g_after = g_i - pod.gpu_milli
    was = (g_i >= m_t) & (m_t > 0)
    now = (g_after >= m_t) & (m_t > 0)
    count = jnp.sum((gpu_free[None] >= m_t) & (m_t > 0), axis=1)[:, None]   # (K, 1, N)
    count_i = count - was + now
    usable_i = usable[:, None] - jnp.where(was, g_i, 0) + jnp.where(now, g_after, 0)
    fits_i = _shape_fits(count_i, cpu_after[None], model[None], typ)
    f_after_i = (free - pod.gpu_milli)[None, None] - jnp.where(fits_i, usable_i, 0)
    gain_i = gain(f_before[:, None] - f_after_i)                            # (G, N)
    per_gpu = jnp.where(fitting_gpus(gpu_free, pod.gpu_milli), fgd_score(gain_i), -1)
    shared_gpu = jnp.argmax(per_gpu, axis=0).astype(jnp.int32)
    shared_gain = jnp.take_along_axis(gain_i, shared_gpu[None], axis=0)[0]

    # Whole-GPU, multi-GPU and CPU-only pods: one hypothetical placement per node.
    take = least_sufficient(gpu_free, pod.gpu_milli, pod.num_gpus) & (pod.num_gpus > 0)
    after = gpu_free - jnp.where(take, pod.gpu_milli, 0)
    usable_a, fits_a = frag_terms(after, cpu_after, model, typ)
    f_after = jnp.sum(after, axis=0)[None] - jnp.where(fits_a, usable_a, 0)
    other_gain = gain(f_before - f_after)
    return jnp.where(is_shared(pod), shared_gain, other_gain).astype(jnp.float32), shared_gpu


def fgd_score(gain: jax.Array) -> jax.Array:
    """FGD's published score of a fragmentation gain (milli-GPU): trunc(100 sigmoid(gain / 1000))."""
    return _trunc(100.0 * jax.nn.sigmoid(gain / 1000.0))


def fgd(key, state: State, pod: Pod, feasible: jax.Array, spec: Spec):
    """Fragmentation gradient descent: `fgd_score` of `fgd_gain`, so a placement that changes
    nothing scores exactly 50; a shared pod's node keeps its best GPU's score."""
    del key, feasible
    gain, shared_gpu = fgd_gain(state, pod, spec)
    return fgd_score(gain), shared_gpu


POLICIES: dict[str, Policy] = {
    "random": random,
    "dot_product": dot_product,
    "gpu_clustering": gpu_clustering,
    "gpu_packing": gpu_packing,
    "best_fit": best_fit,
    "fgd": fgd,
}
