"""Workload construction (OPENB.md section 2) and FGD's typical pods (section 5), in NumPy.

One run is (trace, policy, seed). The seed fixes the pod order (shuffle, then resample or
remove to reach `tune` x the cluster's GPU milli) and the node ranks that break ties; it is
drawn from NumPy's PCG64 stream (Go's math/rand stream of the original cannot be replayed,
section 8, so only seed-averaged figures compare).
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import jax.numpy as jnp
import numpy as np

from vte.openb.cluster import Pod, Typical, typical_counts
from vte.openb.trace import NodeTable, PodTable

TYPICAL_COVERAGE = 0.95


def typical_pods(pods: PodTable, coverage: float = TYPICAL_COVERAGE) -> Typical:
    """The most frequent pod shapes of the original trace, covering `coverage` of its pods.

    Shapes are (CPU milli, per-GPU milli, GPU count, model list), CPU-only pods included,
    sorted by count with ties to the larger CPU, then milli, then count, then model list;
    their frequencies are renormalised to sum to 1.
    """
    if not 0.0 < coverage <= 1.0:
        raise ValueError(f"coverage={coverage}: must be in (0, 1]")
    groups: dict[tuple, int] = {}
    mask_of: dict[str, int] = {}
    for i in range(len(pods)):
        key = (int(pods.cpu_milli[i]), int(pods.gpu_milli[i]), int(pods.num_gpus[i]), pods.gpu_spec[i])
        groups[key] = groups.get(key, 0) + 1
        mask_of[pods.gpu_spec[i]] = int(pods.model_mask[i])
    order = sorted(groups.items(), key=lambda kv: (kv[1],) + kv[0], reverse=True)
    kept, covered = [], 0
    for key, count in order:
        kept.append((key, count))
        covered += count
        if covered >= coverage * len(pods):
            break
    total = float(sum(c for _, c in kept))
    gpu_milli = np.array([k[1] for k, _ in kept])
    num_gpus = np.array([k[2] for k, _ in kept])
    return Typical(
        cpu_milli=jnp.asarray([k[0] for k, _ in kept], jnp.int32),
        gpu_milli=jnp.asarray(gpu_milli, jnp.int32),
        num_gpus=jnp.asarray(num_gpus, jnp.int32),
        model_mask=jnp.asarray([mask_of[k[3]] for k, _ in kept], jnp.int32),
        prob=jnp.asarray([c / total for _, c in kept], jnp.float32),
        counts=typical_counts(gpu_milli, num_gpus, np.array([c for _, c in kept])))


def typical_union(tables: Sequence[PodTable],
                  coverage: float = TYPICAL_COVERAGE) -> tuple[Typical, np.ndarray]:
    """The typical pods of several traces on one set of shapes, for a bank that mixes them.

    Returns (shapes, weights): `shapes` the union of each trace's `typical_pods` (K,), the
    first trace's in its order, then each further trace's new ones in theirs (a shape is its
    CPU, per-GPU milli, GPU count and model mask), weighted by the traces' summed counts;
    `weights` (len(tables), K) int64, row i trace i's own counts, 0 on the shapes it does
    not have. With row i as `Typical.weight` (and prob = row / its sum), FGD's gain is the
    same exact integer as with trace i's own typical pods: a shape of weight 0 adds 0."""
    if not tables:
        raise ValueError("tables is empty: give at least one pod table")
    index: dict[tuple, int] = {}
    rows: list[dict[int, int]] = []
    for table in tables:
        typ = typical_pods(table, coverage)
        row = {}
        for c, m, n, mask, w in zip(*(np.asarray(x).tolist() for x in (
                typ.cpu_milli, typ.gpu_milli, typ.num_gpus, typ.model_mask)), typ.counts.weight):
            row[index.setdefault((c, m, n, mask), len(index))] = int(w)
        rows.append(row)
    weights = np.zeros((len(tables), len(index)), np.int64)
    for i, row in enumerate(rows):
        weights[i, list(row)] = list(row.values())
    shapes = np.array(list(index), np.int64).reshape(-1, 4)
    total = weights.sum(axis=0)
    return Typical(
        cpu_milli=jnp.asarray(shapes[:, 0], jnp.int32), gpu_milli=jnp.asarray(shapes[:, 1], jnp.int32),
        num_gpus=jnp.asarray(shapes[:, 2], jnp.int32), model_mask=jnp.asarray(shapes[:, 3], jnp.int32),
        prob=jnp.asarray(total / total.sum(), jnp.float32),
        counts=typical_counts(shapes[:, 1], shapes[:, 2], total)), weights


@dataclasses.dataclass(frozen=True)
class Workload:
    """The pods of one run in submission order, as indices into the trace, and the node ranks."""

    seed: int
    order: np.ndarray        # (T,) int64, row of the pod file of each submitted pod
    rank: np.ndarray         # (N,) int32, tie-break rank of each node (a permutation of 0..N-1)


def build_workload(pods: PodTable, nodes: NodeTable, seed: int, tune: float = 1.3) -> Workload:
    """Shuffle the trace, then resample (with replacement) or remove pods until the GPU
    demand reaches `tune` x the cluster's GPU milli; rank the nodes at random."""
    if not tune > 0:
        raise ValueError(f"tune={tune}: must be > 0 (the target GPU demand, as a multiple of the cluster's GPUs)")
    rng = np.random.default_rng(seed)
    rng.random()                                       # one draw discarded, as the original does
    by_name = np.argsort(np.asarray(pods.names), kind="stable")
    order = list(by_name[rng.permutation(len(by_name))])
    demand = pods.gpu_demand
    target = tune * nodes.total_gpu_milli
    total = int(demand.sum())
    if total < target:
        while True:
            draw = int(by_name[rng.integers(len(by_name))])
            if total + int(pods.gpu_milli[draw]) > target:   # the stop test uses the per-GPU milli
                break
            order.append(draw)
            total += int(demand[draw])
    else:
        while total > target and order:
            gone = order.pop(int(rng.integers(len(order))))
            total -= int(demand[gone])
    by_node_name = np.argsort(np.asarray(nodes.names), kind="stable")
    rank = np.empty(len(nodes), np.int32)
    rank[by_node_name] = rng.permutation(len(nodes)).astype(np.int32)
    return Workload(seed=seed, order=np.asarray(order, np.int64), rank=rank)


def pod_arrays(pods: PodTable, workloads: list[Workload], length: int | None = None) -> Pod:
    """Stacks workloads into a (S, T) `Pod`, padded with invalid pods to a common length T."""
    longest = max(len(w.order) for w in workloads)
    length = longest if length is None else length
    if length < longest:
        raise ValueError(f"length={length} is shorter than the longest workload ({longest} pods)")
    idx = np.zeros((len(workloads), length), np.int64)
    valid = np.zeros((len(workloads), length), bool)
    for s, w in enumerate(workloads):
        idx[s, :len(w.order)] = w.order
        valid[s, :len(w.order)] = True

    def take(x):
        return jnp.asarray(np.where(valid, x[idx], 0).astype(np.int32))
    return Pod(cpu_milli=take(pods.cpu_milli), memory_mib=take(pods.memory_mib),
               num_gpus=take(pods.num_gpus), gpu_milli=take(pods.gpu_milli),
               model_mask=take(pods.model_mask), valid=jnp.asarray(valid))
