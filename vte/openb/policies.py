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
import numpy as np

from vte.openb.cluster import (MILLI, SHARE_CLASS, Counts, Pod, Spec, State, best_fit_gpu,
                               fitting_gpus, is_shared, least_sufficient, model_allowed)

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
    # The GPU: the k-th fitting GPU of each node, k uniform in [0, fitting) from one draw per
    # node (G times fewer draws than one per GPU; 0 where none fits).
    fit = fitting_gpus(state.gpu_free, pod.gpu_milli)
    n_fit = jnp.sum(fit, axis=0)
    k = jnp.minimum(jnp.floor(jax.random.uniform(k_gpu, n_fit.shape) * n_fit).astype(jnp.int32),
                    jnp.maximum(n_fit - 1, 0))
    gpu = jnp.argmax(fit & (jnp.cumsum(fit, axis=0) == k + 1), axis=0).astype(jnp.int32)
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
    return min_max(raw, feasible, 0), best_fit_gpu(state.gpu_free, pod.gpu_milli)


def min_max(raw: jax.Array, feasible: jax.Array, equal: int) -> jax.Array:
    """(N,) scores rescaled over the feasible nodes to [0, 100], or `equal` everywhere when
    max = min (BestFit: 0, PWR: 100): int32 (raw - min) 100 // (max - min) for integer
    `raw` (the published policies' rule), float32 (raw - min) / (max - min) x 100 for
    floating `raw` (e.g. a network's logits, `power.pwr_with`). Infeasible nodes' values
    are unspecified (the filter drops them)."""
    if jnp.issubdtype(raw.dtype, jnp.floating):
        raw = raw.astype(jnp.float32)
        lo = jnp.min(jnp.where(feasible, raw, jnp.inf))
        hi = jnp.max(jnp.where(feasible, raw, -jnp.inf))
        scaled = (raw - lo) / jnp.where(hi > lo, hi - lo, 1.0) * 100.0
        return jnp.where(hi > lo, scaled, jnp.float32(equal))
    big = jnp.iinfo(jnp.int32).max
    lo = jnp.min(jnp.where(feasible, raw, big))
    hi = jnp.max(jnp.where(feasible, raw, -big))
    scaled = (raw - lo) * 100 // jnp.maximum(hi - lo, 1)
    return jnp.where(hi > lo, scaled, equal).astype(jnp.int32)


def _fit_weight(counts: Counts, typ, allowed: jax.Array, cpu_free: jax.Array) -> jax.Array:
    """(J, L, N) int32: the summed weight of the shapes of per-GPU milli `counts.milli[j]` and
    GPU count `counts.levels[l]` that a node allows (`allowed` (K, N): its model) and whose
    CPU fits in `cpu_free` (N,), its GPUs aside. The weights are `typ.weight` when given
    (a bank of several traces), else the static `counts.weight`."""
    ok = allowed & (cpu_free[None] >= typ.cpu_milli[:, None])                     # (K, N)
    # Sum the shapes of each (milli, count) cell: the shapes ordered by cell (static), each
    # cell is a static slice of rows: K x N additions in all.
    cells = len(counts.milli) * len(counts.levels)
    order = np.argsort(np.asarray(counts.cell), kind="stable")
    bounds = np.searchsorted(np.asarray(counts.cell)[order], np.arange(cells + 1))
    weight = jnp.asarray(counts.weight if typ.weight is None else typ.weight, jnp.int32)
    okw = jnp.where(ok, weight[:, None], 0)[order]                                 # (K, N)
    per = jnp.stack([jnp.sum(okw[a:b], axis=0) for a, b in zip(bounds[:-1], bounds[1:])])
    return per.reshape((len(counts.milli), len(counts.levels)) + per.shape[1:])


def _kept(usable: jax.Array, count: jax.Array, fit_weight: jax.Array, levels) -> jax.Array:
    """sum_t w_t [t fits] usable_t over the shapes, from the per-milli usable milli and GPU
    counts (J, ..., N) and `_fit_weight` (J, L, N): (..., N) int32. Shape t fits when at
    least its GPU count of GPUs has its milli free."""
    extra = (1,) * (count.ndim - 2)
    w = sum(jnp.where(count >= n, fit_weight[:, l].reshape((-1,) + extra + fit_weight.shape[-1:]), 0)
            for l, n in enumerate(levels))
    return jnp.sum(usable * w, axis=0)


def fgd_gain(state: State, pod: Pod, spec: Spec) -> tuple[jax.Array, jax.Array]:
    """FGD's fragmentation gradient: ((N,) float32 milli-GPU, (N,) int32 GPU).

    The expected fragmentation the placement removes, sum_t p_t (f_t before - f_t after)
    over the typical pods, on each node (negative: it adds fragmentation). A shared pod
    tries each fitting GPU and keeps the GPU of the best published score (the lowest index
    on ties), returned second; other pods take their least sufficient GPUs.

    Computed exactly in integers with p_t = w_t / scale (`cluster.Counts`): since
    f_t = L - [t fits] usable_t, the gain x scale is scale (L - L_after) - kept + kept_after
    with kept = sum_t w_t [t fits] usable_t; the shapes of one per-GPU milli share their usable
    milli and GPU count, so the per-GPU work is over the J distinct milli, not the K shapes.
    A placement that changes nothing gains exactly 0."""
    typ = spec.typical
    counts = typ.counts
    if counts is None:
        raise ValueError("spec.typical has no counts: build the spec with cluster.make_spec "
                         "(or the typical pods with cluster.with_counts)")
    levels = counts.levels
    gpu_free, cpu_free, model = state.gpu_free, state.cpu_free, spec.model
    m_j = jnp.asarray(counts.milli, jnp.int32)[:, None, None]               # (J, 1, 1)
    ge = (gpu_free[None] >= m_j) & (m_j > 0)                                # (J, G, N)
    count = jnp.sum(ge, axis=1)                                             # (J, N)
    usable = jnp.sum(jnp.where(ge, gpu_free[None], 0), axis=1)              # (J, N)
    allowed = model_allowed(model[None], typ.model_mask[:, None])           # (K, N)
    kept = _kept(usable, count, _fit_weight(counts, typ, allowed, cpu_free), levels)  # (N,)
    after_weight = _fit_weight(counts, typ, allowed, cpu_free - pod.cpu_milli)

    # The weights' sum: static for one trace; a workload's own for a bank of several
    # traces (`Typical.weight`, the same exact integers).
    scale = counts.scale if typ.weight is None else jnp.sum(typ.weight.astype(jnp.int32))

    def gain(freed, kept_after):                                            # milli-GPU, float32
        total = scale * freed + (kept_after - kept)
        return total.astype(jnp.float32) / jnp.asarray(scale, jnp.float32)

    # Shared pod on GPU i: only GPU i changes (free_i -> free_i - m), so each group's count
    # and usable milli move by GPU i's own terms: (J, G, N).
    g_after = gpu_free[None] - pod.gpu_milli                                # (1, G, N)
    now = (g_after >= m_j) & (m_j > 0)
    count_i = count[:, None] - ge + now
    usable_i = usable[:, None] - jnp.where(ge, gpu_free[None], 0) + jnp.where(now, g_after, 0)
    gain_i = gain(pod.gpu_milli, _kept(usable_i, count_i, after_weight, levels))  # (G, N)
    per_gpu = jnp.where(fitting_gpus(gpu_free, pod.gpu_milli), fgd_score(gain_i), -1)
    shared_gpu = jnp.argmax(per_gpu, axis=0).astype(jnp.int32)
    shared_gain = jnp.take_along_axis(gain_i, shared_gpu[None], axis=0)[0]

    # Whole-GPU, multi-GPU and CPU-only pods: one hypothetical placement per node.
    take = least_sufficient(gpu_free, pod.gpu_milli, pod.num_gpus) & (pod.num_gpus > 0)
    after = gpu_free - jnp.where(take, pod.gpu_milli, 0)
    ge_a = (after[None] >= m_j) & (m_j > 0)
    kept_a = _kept(jnp.sum(jnp.where(ge_a, after[None], 0), axis=1), jnp.sum(ge_a, axis=1),
                   after_weight, levels)
    other_gain = gain(jnp.sum(jnp.where(take, pod.gpu_milli, 0), axis=0), kept_a)
    return jnp.where(is_shared(pod), shared_gain, other_gain), shared_gpu


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

NODE_LOCAL: frozenset[Policy] = frozenset({dot_product, gpu_clustering, gpu_packing, fgd})
"""The policies whose score and GPU of a node read only that node's column of the state and
spec (and the pod): a planner recomputes one column after a placement instead of all
(`lookahead.node_column`). BestFit and the PWR mixes rescale over the feasible nodes,
Random draws per call, a network pools over the nodes: not node-local."""

