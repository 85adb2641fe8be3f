"""The GPU-sharing cluster of the OpenB replay: state, filter, GPU assignment, fragmentation.

Pure functions on pytrees with static shapes; they work under `jax.jit` and `jax.vmap`.
Shapes: N nodes, G = 8 GPU slots per node, K typical pods. Per-node arrays keep the node
axis last (`(G, N)`), the layout XLA on CPU vectorises best. Formulas: `OPENB.md` beside
this file, sections 3 (filter), 5 (fragmentation) and 6 (GPU assignment).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from vte.openb.trace import MAX_GPUS_PER_NODE, MILLI, NodeTable

MAX_PODS_PER_NODE = 1001      # Kubernetes' pod limit of the simulated nodes ("fewer than 1001")
SHARE_CLASS = 0               # GpuClustering's class bit of a shared pod; bit k is "k-GPU"


@dataclasses.dataclass(frozen=True)
class Counts:
    """The typical pods as exact integers, for FGD's gain (`policies.fgd_gain`): each shape's
    frequency is weight / scale. Static (compile-time) structure: the shapes are grouped by
    their per-GPU milli, since which GPUs a shape can use depends on that milli only (J
    distinct values, J <= K), and by their GPU count (L distinct values)."""

    milli: tuple[int, ...]   # (J,) the distinct per-GPU milli of the GPU shapes
    levels: tuple[int, ...]  # (L,) the distinct GPU counts of the GPU shapes
    cell: tuple[int, ...]    # (K,) j x L + l of each GPU shape; -1 for a CPU-only one
    weight: tuple[int, ...]  # (K,) each shape's count (or integer weight)
    scale: int               # sum of the weights: prob = weight / scale


@struct.dataclass
class Typical:
    """FGD's target workload: the most frequent pod shapes of a trace and their weights."""

    cpu_milli: jax.Array     # (K,) int32, thousandths of a core
    gpu_milli: jax.Array     # (K,) int32, milli-GPU per GPU; 0 for a CPU-only shape
    num_gpus: jax.Array      # (K,) int32
    model_mask: jax.Array    # (K,) int32, bitmask over the node models; 0 = any
    prob: jax.Array          # (K,) float32, frequency, summing to 1
    counts: Counts | None = struct.field(pytree_node=False, default=None)  # the same as exact
                             # integers (`typical_counts`, static); `with_counts` fills it
    weight: jax.Array | None = None
                             # (K,) int32 exact weights that replace `counts.weight` (and
                             # their sum `counts.scale`) when given: a bank of several traces
                             # shares the shapes (`counts`' static grouping) and gives each
                             # workload its own trace's weights, 0 on the other traces' shapes
                             # (`workload.typical_union`); `prob` is then weight / its sum


PROB_SCALE = 2 ** 17          # integer weight of a frequency 1 when a Typical has no counts


def typical_counts(gpu_milli, num_gpus, weight) -> Counts:
    """`Counts` of typical shapes ((K,) integer arrays): weights as given, grouped by per-GPU
    milli and GPU count."""
    gpu_milli, num_gpus = np.asarray(gpu_milli).tolist(), np.asarray(num_gpus).tolist()
    milli = sorted({m for m, n in zip(gpu_milli, num_gpus) if n > 0})
    levels = sorted({n for n in num_gpus if n > 0})
    cell = [milli.index(m) * len(levels) + levels.index(n) if n > 0 else -1
            for m, n in zip(gpu_milli, num_gpus)]
    weight = [int(w) for w in np.asarray(weight).tolist()]
    return Counts(milli=tuple(milli), levels=tuple(levels), cell=tuple(cell),
                  weight=tuple(weight), scale=sum(weight))


def with_counts(typical: Typical) -> Typical:
    """`typical` with its `Counts`; one built by hand without them (concrete arrays, outside
    jit) gets the weights round(prob x PROB_SCALE)."""
    if typical.counts is not None:
        return typical
    weight = np.round(np.asarray(typical.prob, np.float64) * PROB_SCALE).astype(np.int64)
    return typical.replace(counts=typical_counts(typical.gpu_milli, typical.num_gpus, weight))


@struct.dataclass
class Spec:
    """The fixed part of a cluster: node capacities and FGD's typical pods."""

    cpu_milli: jax.Array     # (N,) int32, CPU capacity, thousandths of a core
    memory_mib: jax.Array    # (N,) int32, memory capacity, MiB
    num_gpus: jax.Array      # (N,) int32, in [0, G]
    model: jax.Array         # (N,) int32, GPU model index; -1 for a node without GPUs
    gpu_exists: jax.Array    # (G, N) bool, slot g < num_gpus
    typical: Typical

    @property
    def total_gpu_milli(self) -> jax.Array:
        return jnp.sum(self.num_gpus) * MILLI


@struct.dataclass
class Pod:
    """One scheduling request; a workload has a leading (T,) axis on every field."""

    cpu_milli: jax.Array     # () int32, thousandths of a core
    memory_mib: jax.Array    # () int32, MiB
    num_gpus: jax.Array      # () int32, 0 = CPU-only
    gpu_milli: jax.Array     # () int32, milli-GPU on each of its GPUs, in (0, 1000]; 0 if CPU-only
    model_mask: jax.Array    # () int32, bitmask over the node models; 0 = any
    valid: jax.Array         # () bool, False for the padding after a workload's last pod


@struct.dataclass
class State:
    """What changes while pods are bound."""

    cpu_free: jax.Array      # (N,) int32, unrequested CPU, thousandths of a core
    mem_free: jax.Array      # (N,) int32, unrequested memory, MiB
    gpu_free: jax.Array      # (G, N) int32, free milli of each GPU; 0 on a missing slot
    pods: jax.Array          # (N,) int32, pods bound to the node
    classes: jax.Array       # (N,) int32, GpuClustering's classes held (bit 0 share, bit k k-GPU)
    frag: jax.Array          # (N,) float32, milli-GPU, each node's fragmentation F (kept current)
    rank: jax.Array          # (N,) int32, tie-break order of this seed (smaller wins)
    arrived: jax.Array       # () int32, milli-GPU asked for by the pods submitted so far,
                             # failed ones included (`submit`); what a learned policy sees


def make_spec(nodes: NodeTable, typical: Typical) -> Spec:
    slots = np.arange(MAX_GPUS_PER_NODE)[:, None]
    return Spec(cpu_milli=jnp.asarray(nodes.cpu_milli), memory_mib=jnp.asarray(nodes.memory_mib),
                num_gpus=jnp.asarray(nodes.num_gpus), model=jnp.asarray(nodes.model),
                gpu_exists=jnp.asarray(slots < nodes.num_gpus[None, :]), typical=with_counts(typical))


def empty_state(spec: Spec, rank: jax.Array, frag: jax.Array | None = None) -> State:
    """The cluster with nothing bound; `rank` (N,) int32 is the seed's tie-break order.

    `frag` (N,) float32: the empty nodes' fragmentation when the caller has it already
    (an environment's reset), else computed here."""
    gpu_free = jnp.where(spec.gpu_exists, MILLI, 0).astype(jnp.int32)
    if frag is None:
        frag = fragmentation(gpu_free, spec.cpu_milli, spec.model, spec.typical)
    return State(cpu_free=spec.cpu_milli, mem_free=spec.memory_mib, gpu_free=gpu_free,
                 pods=jnp.zeros_like(spec.num_gpus), classes=jnp.zeros_like(spec.num_gpus),
                 frag=jnp.asarray(frag, jnp.float32), rank=jnp.asarray(rank, jnp.int32),
                 arrived=jnp.zeros((), jnp.int32))


STATE_COLUMNS = ("cpu_free", "mem_free", "gpu_free", "pods", "classes", "frag", "rank")
SPEC_COLUMNS = ("cpu_milli", "memory_mib", "num_gpus", "model", "gpu_exists")


def column(state: State, spec: Spec, node: jax.Array) -> tuple[State, Spec]:
    """Node `node`'s column of `state` and `spec`: a one-node cluster ((1,) and (G, 1)
    fields; `arrived` and the typical pods unchanged). A node's FGD gain and GPU, power
    increase and feasibility read only its own column, so computing them on this cluster
    gives column `node` of the whole cluster's at 1/N of the work."""
    def cut(tree, fields):
        return tree.replace(**{f: jax.lax.dynamic_slice_in_dim(getattr(tree, f), node, 1, axis=-1)
                               for f in fields})
    return cut(state, STATE_COLUMNS), cut(spec, SPEC_COLUMNS)


def model_allowed(model: jax.Array, model_mask: jax.Array) -> jax.Array:
    """Whether a node of GPU `model` (-1 = none) satisfies a model list `model_mask` (0 = any)."""
    bit = jnp.right_shift(model_mask, jnp.maximum(model, 0)) & 1
    return (model_mask == 0) | ((model >= 0) & (bit == 1))


def is_shared(pod: Pod) -> jax.Array:
    """A 1-GPU pod asking for less than a whole GPU."""
    return (pod.num_gpus == 1) & (pod.gpu_milli < MILLI)


def fitting_gpus(gpu_free: jax.Array, gpu_milli: jax.Array) -> jax.Array:
    """(G, ...) bool, GPUs with at least `gpu_milli` free (never a missing slot: milli > 0)."""
    return (gpu_free >= gpu_milli) & (gpu_milli > 0)


def feasible(state: State, pod: Pod, spec: Spec) -> jax.Array:
    """(N,) bool, the filter: NodeResourcesFit (CPU, memory, pod limit) and Open-Gpu-Share."""
    fits = ((pod.cpu_milli <= state.cpu_free) & (pod.memory_mib <= state.mem_free)
            & (state.pods < MAX_PODS_PER_NODE))
    enough = jnp.sum(fitting_gpus(state.gpu_free, pod.gpu_milli), axis=0) >= pod.num_gpus
    gpu_ok = (spec.num_gpus > 0) & model_allowed(spec.model, pod.model_mask) & enough
    return fits & jnp.where(pod.num_gpus > 0, gpu_ok, True) & pod.valid


def least_sufficient(gpu_free: jax.Array, gpu_milli: jax.Array, num_gpus: jax.Array) -> jax.Array:
    """(G, ...) bool, the `num_gpus` fitting GPUs with the least free milli (lowest index on ties).

    For whole-GPU pods these are the lowest-indexed idle GPUs (section 6).
    """
    fit = fitting_gpus(gpu_free, gpu_milli)
    g = gpu_free.shape[0]
    idx = jnp.arange(g).reshape((g,) + (1,) * (gpu_free.ndim - 1))
    a, b = gpu_free[:, None], gpu_free[None, :]                       # (G, G, ...): k, j
    before = fit[:, None] & ((a < b) | ((a == b) & (idx[:, None] < idx[None, :])))
    order = jnp.sum(before, axis=0)                                   # fitting GPUs ahead of j
    return fit & (order < num_gpus)


def best_fit_gpu(gpu_free: jax.Array, gpu_milli: jax.Array) -> jax.Array:
    """(...) int32, the GPU with the least free milli that fits (lowest index on ties; 0 when
    none fits). `least_sufficient(..., 1)` as one argmin over G, not its G x G comparison
    (which XLA on CPU fused into the argmax and recomputed: 5x slower BestFit)."""
    big = jnp.iinfo(jnp.int32).max
    fit = fitting_gpus(gpu_free, gpu_milli)
    return jnp.argmin(jnp.where(fit, gpu_free, big), axis=0).astype(jnp.int32)


def taken_gpus(gpu_free: jax.Array, pod: Pod, shared_gpu: jax.Array) -> jax.Array:
    """(G, ...) bool, the GPUs a pod takes: `shared_gpu` for a shared pod, else least sufficient."""
    one = jnp.arange(gpu_free.shape[0]).reshape((-1,) + (1,) * (gpu_free.ndim - 1)) == shared_gpu
    return jnp.where(is_shared(pod), one, least_sufficient(gpu_free, pod.gpu_milli, pod.num_gpus))


def frag_terms(gpu_free: jax.Array, cpu_free: jax.Array, model: jax.Array,
               typical: Typical) -> tuple[jax.Array, jax.Array]:
    """The per-shape parts of F: (K, ...) int32 `usable` milli and (K, ...) bool `fits`.

    A typical shape t fits a node when its model is allowed, its CPU fits and enough GPUs
    have at least m_t free; the usable milli are those on such GPUs. Then
    f_t = L - usable_t when t fits and f_t = L otherwise (a CPU-only shape never "fits":
    to it every free milli-GPU is fragment).
    """
    m = typical.gpu_milli.reshape((-1, 1) + (1,) * cpu_free.ndim)        # (K, 1, ...)
    ge = (gpu_free[None] >= m) & (m > 0)                                 # (K, G, ...)
    count = jnp.sum(ge, axis=1)
    usable = jnp.sum(jnp.where(ge, gpu_free[None], 0), axis=1)
    fits = _shape_fits(count, cpu_free, model, typical)
    return usable, fits


def _shape_fits(count, cpu_free, model, typical):
    """(K, ...) bool: shape t fits, given how many GPUs have at least m_t free."""
    def col(x):
        return x.reshape((-1,) + (1,) * cpu_free.ndim)
    return ((col(typical.num_gpus) > 0) & model_allowed(model[None], col(typical.model_mask))
            & (cpu_free[None] >= col(typical.cpu_milli)) & (count >= col(typical.num_gpus)))


def fragmentation(gpu_free: jax.Array, cpu_free: jax.Array, model: jax.Array,
                  typical: Typical) -> jax.Array:
    """(...) float32, milli-GPU: F = sum_t p_t f_t of each node (OPENB.md section 5, FGD)."""
    usable, fits = frag_terms(gpu_free, cpu_free, model, typical)
    free = jnp.sum(gpu_free, axis=0)
    kept = jnp.sum(typical.prob.reshape((-1,) + (1,) * cpu_free.ndim)
                   * jnp.where(fits, usable, 0).astype(jnp.float32), axis=0)
    return free.astype(jnp.float32) - kept


def place(state: State, spec: Spec, pod: Pod, node: jax.Array, shared_gpu: jax.Array,
          placed: jax.Array) -> State:
    """Binds `pod` to `node` (its GPU `shared_gpu` if the pod is shared) when `placed`.

    Only the node's column changes; with `placed` False the state is returned unchanged.
    """
    col = state.gpu_free[:, node]                                       # (G,)
    take = taken_gpus(col, pod, shared_gpu) & (pod.num_gpus > 0)
    new_col = col - jnp.where(take, pod.gpu_milli, 0)
    cpu = state.cpu_free[node] - pod.cpu_milli
    pod_class = jnp.where(pod.num_gpus == 0, 0,
                          jnp.left_shift(1, jnp.where(is_shared(pod), SHARE_CLASS, pod.num_gpus)))
    frag = fragmentation(new_col, cpu, spec.model[node], spec.typical)

    def upd(x, new):
        return x.at[..., node].set(jnp.where(placed, new, x[..., node]))
    return state.replace(
        cpu_free=upd(state.cpu_free, cpu),
        mem_free=upd(state.mem_free, state.mem_free[node] - pod.memory_mib),
        gpu_free=upd(state.gpu_free, new_col),
        pods=upd(state.pods, state.pods[node] + 1),
        classes=upd(state.classes, state.classes[node] | pod_class),
        frag=upd(state.frag, frag))


def select(scores: jax.Array, feasible_mask: jax.Array, rank: jax.Array) -> jax.Array:
    """() int32, the feasible node with the highest score, ties to the smallest rank (section 4).

    Scores may be integers (the published policies) or floats (a learned policy; NaN ranks
    last); an infeasible node is never chosen. With no feasible node the result is meaningless and
    the caller does not bind.
    """
    if jnp.issubdtype(scores.dtype, jnp.integer):
        low = jnp.iinfo(jnp.int32).min
    else:
        low = -jnp.inf
        scores = jnp.where(jnp.isnan(scores), low, scores)          # a NaN score ranks last
    masked = jnp.where(feasible_mask, scores, low)
    top = feasible_mask & (masked == jnp.max(masked))
    return jnp.argmin(jnp.where(top, rank, jnp.iinfo(jnp.int32).max)).astype(jnp.int32)


def submit(state: State, pod: Pod) -> State:
    """Counts a submitted pod's GPU demand (num_gpus x gpu_milli) in `arrived`, whether it was
    bound or failed; padding pods count nothing."""
    demand = pod.num_gpus * pod.gpu_milli
    return state.replace(arrived=state.arrived + jnp.where(pod.valid, demand, 0).astype(jnp.int32))


def used_milli(state: State, spec: Spec) -> jax.Array:
    """() int32, milli-GPU allocated over the cluster (a shared GPU counts its allocated part)."""
    return spec.total_gpu_milli - jnp.sum(state.gpu_free)
