"""An upper bound on the GPU allocation any scheduler can reach on an OpenB workload.

    bound = allocation_bound(pods, nodes, workload)        # {"100": %, "end": %}
    python -m vte.openb.lab.bound --pods default --seeds 10 --first-seed 42

The bound is a linear program over what has arrived (OPENB.md section 7: "used" after a
prefix of the submitted pods), solved with HiGHS (scipy). No scheduler, online or
offline, can allocate more GPU milli after a prefix than the LP's optimum for that prefix,
because the LP relaxes every constraint a placement obeys:

  variables   y[g, t] >= 0: how many pods of shape g sit on nodes of type t (pods of equal
              CPU, memory, GPU count, per-GPU milli and model list form one shape; nodes of
              equal CPU, memory, GPU count and model one type, n_t of them);
  objective   max sum y[g, t] * gpus_g * milli_g   (allocated milli-GPU);
  arrived     sum_t y[g, t] <= c_g, the pods of shape g in the prefix;
  fit         y[g, t] = 0 unless one node of type t can hold one pod of g (CPU, memory,
              GPU count, model list: OPENB.md section 3);
  capacity    per type t: CPU, memory and GPU milli summed over its pods <= n_t x the node's;
  per GPU     per type t and j = 1..4: a GPU holds at most j shared pods of more than
              1000 / (j + 1) milli, and a whole-GPU pod fills its GPUs:
              sum_{g shared, milli_g > 1000/(j+1)} y[g, t] + j sum_{g whole} gpus_g y[g, t]
              <= j n_t G_t;
  patterns    per GPU model m: z[p, m] >= 0 GPUs hold their shared pods in pattern p, one of
              the maximal multisets of the shared sizes present whose milli sum to at most
              1000 (`shared_patterns`); the pods of each shared size on m's types are at
              most sum_p z[p, m] x p's count of that size, and whole GPUs taken on m plus
              sum_p z[p, m] are at most m's GPUs (so an 810-milli share and a 300-milli one
              never pair on a GPU, which the milli and per-GPU counts alone allow).

It ignores that a pod's resources must come from one node (only per-type sums), that
pods arrive in an order and cannot move; so it is an upper bound, not an achievable value.
`power_bound` is the same relaxation's least power of placing every arrived pod. "@100 %" is the bound after the
longest prefix whose arrived GPU demand rounds to 100 % (it bounds every event the
published figure averages); "end" after all pods. Figures are % of the cluster's GPUs.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from vte.openb.trace import NodeTable, PodTable

MILLI = 1000
PER_GPU_LEVELS = (1, 2, 3, 4)     # j: at most j shared pods above 1000 / (j + 1) milli per GPU


def _groups(*columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(unique rows (K, C), index of each input row's group (M,))."""
    table = np.stack(columns, axis=1)
    unique, inverse = np.unique(table, axis=0, return_inverse=True)
    return unique, inverse.reshape(-1)


def _node_types(nodes: NodeTable):
    """Node types: (cpu, mem, gpus, model) rows and how many nodes each has."""
    types, index = _groups(nodes.cpu_milli, nodes.memory_mib, nodes.num_gpus, nodes.model)
    return types.astype(np.int64), np.bincount(index, minlength=len(types))


def _pairs(cpu, mem, gpus, milli, mask, nodes: NodeTable):
    """The LPs' index sets: pod shapes (K, 5) int64 rows (cpu, mem, gpus, milli, mask) with
    their counts (K,), node types (T, 4) with their node counts (T,), and every (shape,
    type) pair where one node of the type holds one pod of the shape (CPU, memory, GPU
    count, model list: OPENB.md section 3) as index arrays (V,), (V,)."""
    shapes, index = _groups(cpu, mem, gpus, milli, mask)
    count = np.bincount(index, minlength=len(shapes)).astype(np.float64)
    types, n_t = _node_types(nodes)
    s_cpu, s_mem, s_gpus, _, s_mask = (shapes[:, k].astype(np.int64) for k in range(5))
    t_cpu, t_mem, t_gpus, t_model = (types[:, k] for k in range(4))
    wants_gpu = s_gpus[:, None] > 0
    model_ok = (s_mask[:, None] == 0) | ((t_model[None, :] >= 0)
                                         & ((s_mask[:, None] >> np.maximum(t_model, 0)[None, :])
                                            & 1).astype(bool))
    fits = ((s_cpu[:, None] <= t_cpu[None, :]) & (s_mem[:, None] <= t_mem[None, :])
            & (~wants_gpu | ((t_gpus[None, :] >= s_gpus[:, None]) & model_ok)))
    g_idx, t_idx = np.nonzero(fits)
    return shapes.astype(np.int64), count, types, n_t, g_idx, t_idx


class _Rows:
    """Sparse rows `sum_v coef[v] x[v] <= bound` of an LP, added in blocks."""

    def __init__(self):
        self.rows, self.cols, self.vals, self.rhs = [], [], [], []

    def add(self, row_of: np.ndarray, col: np.ndarray, coef: np.ndarray, bounds) -> None:
        """Row `row_of[i]` (of this block) gets `coef[i]` at column `col[i]`; the block has
        len(bounds) rows."""
        coef = np.asarray(coef, np.float64)
        keep = coef != 0
        self.rows.append(sum(len(b) for b in self.rhs) + np.asarray(row_of)[keep])
        self.cols.append(np.asarray(col)[keep])
        self.vals.append(coef[keep])
        self.rhs.append(np.atleast_1d(np.asarray(bounds, np.float64)))

    def matrix(self, num_cols: int):
        from scipy.sparse import coo_matrix
        if not self.rhs:
            return None, None
        rows = np.concatenate(self.rows) if self.rows else np.zeros(0, np.int64)
        return (coo_matrix((np.concatenate(self.vals), (rows, np.concatenate(self.cols))),
                           shape=(sum(len(r) for r in self.rhs), num_cols)).tocsr(),
                np.concatenate(self.rhs))


def _per_gpu_coef(shapes: np.ndarray, g_idx: np.ndarray, j: int) -> np.ndarray:
    """(V,) float64, each pair's count in the per-GPU row of level j (`PER_GPU_LEVELS`): 1
    for a shared pod of more than 1000 / (j + 1) milli, j per GPU for a whole-GPU pod, 0
    otherwise; a type's row sum is at most j x its GPUs (busy GPUs in the power bound)."""
    s_gpus, s_milli = shapes[g_idx, 2], shapes[g_idx, 3]
    shared_big = (s_gpus == 1) & (s_milli < MILLI) & (s_milli * (j + 1) > MILLI)
    whole = (s_milli == MILLI) & (s_gpus > 0)
    return np.where(shared_big, 1.0, 0.0) + np.where(whole, j * s_gpus, 0.0)


def lp_bound(cpu: np.ndarray, mem: np.ndarray, gpus: np.ndarray, milli: np.ndarray,
             mask: np.ndarray, nodes: NodeTable) -> float:
    """The most milli-GPU the pods (arrays (M,), one per pod) can be given on `nodes`
    under the relaxation of the module doc. A pod with `gpus` 0 asks for no GPU."""
    from scipy.optimize import linprog

    if len(cpu) == 0:
        return 0.0
    shapes, count, types, n_t, g_idx, t_idx = _pairs(cpu, mem, gpus, milli, mask, nodes)
    v = len(g_idx)
    if v == 0:
        return 0.0
    s_cpu, s_mem, s_gpus, s_milli = (shapes[:, k] for k in range(4))
    t_cpu, t_mem, t_gpus = (types[:, k] for k in range(3))
    value = (s_gpus * s_milli).astype(np.float64)
    ub = _Rows()
    ub.add(g_idx, np.arange(v), np.ones(v), count)                         # arrived
    ub.add(t_idx, np.arange(v), s_cpu[g_idx], n_t * t_cpu)                 # capacity
    ub.add(t_idx, np.arange(v), s_mem[g_idx], n_t * t_mem)
    ub.add(t_idx, np.arange(v), value[g_idx], n_t * t_gpus * MILLI)
    for j in PER_GPU_LEVELS:                                               # per GPU
        ub.add(t_idx, np.arange(v), _per_gpu_coef(shapes, g_idx, j), j * n_t * t_gpus)
    num = v + _pattern_rows(ub, shapes, g_idx, t_idx, types, n_t, v)       # shared patterns
    a, b = ub.matrix(num)
    result = linprog(np.concatenate([-value[g_idx], np.zeros(num - v)]), A_ub=a, b_ub=b,
                     bounds=(0, None), method="highs")
    if result.status != 0:
        raise RuntimeError(f"the bound's LP did not solve: {result.message}")
    return float(-result.fun)


def arrived_prefix_100(pods: PodTable, order: np.ndarray, total_gpu_milli: int) -> int:
    """The number of submitted pods after which the arrived GPU demand last rounds to
    100 % of the cluster (OPENB.md section 7's binning); the whole workload if it never
    reaches 100 %."""
    arrived = np.cumsum(pods.gpu_demand[order].astype(np.int64))
    percent = np.round(arrived / total_gpu_milli * 100.0)
    at = np.flatnonzero(percent <= 100)
    return int(at[-1]) + 1 if len(at) else 0


def allocation_bound(pods: PodTable, nodes: NodeTable, order: np.ndarray) -> dict[str, float]:
    """The bound, % of the cluster's GPUs, at 100 % arrived and at the end of a workload
    whose submitted pods are `order` (rows of the pod table, `Workload.order`)."""
    order = np.asarray(order, np.int64)
    total = nodes.total_gpu_milli
    cols = (pods.cpu_milli, pods.memory_mib, pods.num_gpus, pods.gpu_milli, pods.model_mask)
    out = {}
    for key, k in (("100", arrived_prefix_100(pods, order, total)), ("end", len(order))):
        sub = [np.asarray(c)[order[:k]].astype(np.int64) for c in cols]
        out[key] = 100.0 * lp_bound(*sub, nodes) / total
    return out


# ------------------------------------------------------------ the least power (PWR's model)

PATTERN_LIMIT = 20_000      # most per-GPU patterns of shared pods (the smallest sizes dropped beyond)


def shared_patterns(sizes) -> np.ndarray:
    """(P, S) int64: the maximal ways one GPU holds shared pods of the given distinct
    `sizes` (milli, each in (0, 1000)), as counts per size: the total is at most 1000 and
    no size fits in what is left. Every GPU's shared pods are counted by one of them, or by
    a pattern beyond them (`PATTERN_LIMIT`: the smallest sizes are left out of the patterns
    until they are few enough; `power_bound` leaves those sizes unconstrained)."""
    sizes = [int(x) for x in sizes]
    if any(not 0 < x < MILLI for x in sizes) or len(set(sizes)) != len(sizes):
        raise ValueError(f"sizes {sizes}: allowed distinct milli in (0, {MILLI})")
    out: list[tuple[int, ...]] = []

    def grow(i: int, left: int, counts: list[int]) -> None:
        if i == len(sizes):
            if all(left < x for x in sizes):
                out.append(tuple(counts))
            return
        for k in range(left // sizes[i], -1, -1):
            counts.append(k)
            grow(i + 1, left - k * sizes[i], counts)
            counts.pop()
            if len(out) > PATTERN_LIMIT:
                return

    grow(0, MILLI, [])
    return np.asarray(out, np.int64).reshape(len(out), len(sizes))


def _patterns_for(shapes: np.ndarray) -> tuple[list[int], np.ndarray]:
    """The shared sizes of `shapes` (largest first) that the patterns constrain and their
    patterns (`shared_patterns`, the smallest sizes dropped while over `PATTERN_LIMIT`)."""
    s_gpus, s_milli = shapes[:, 2], shapes[:, 3]
    sizes = sorted(set(s_milli[(s_gpus == 1) & (s_milli < MILLI)].tolist()), reverse=True)
    patterns = shared_patterns(sizes)
    while len(patterns) > PATTERN_LIMIT:
        sizes = sizes[:-1]
        patterns = shared_patterns(sizes)
    return sizes, (patterns if sizes else np.zeros((0, 0), np.int64))


def _pattern_rows(ub: _Rows, shapes, g_idx, t_idx, types, n_t, z0: int,
                  busy_col0: int | None = None) -> int:
    """Adds, per GPU model m, the rows of the GPUs holding shared pods: for each constrained
    size, the pods of that size on m's types <= sum_p z[p, m] x p's count of it; and the
    GPUs whole-GPU pods fill on m plus sum_p z[p, m] <= m's GPUs (`busy_col0` None), or <=
    the sum of m's types' busy-GPU columns (busy_col0 + type). z[p, m] are the columns from
    z0 on, model by model; returns how many."""
    sizes, patterns = _patterns_for(shapes)
    if not sizes:
        return 0
    s_gpus, s_milli = shapes[g_idx, 2], shapes[g_idx, 3]
    shared = (s_gpus == 1) & (s_milli < MILLI)
    whole = (s_milli == MILLI) & (s_gpus > 0)
    t_gpus, t_model = types[:, 2], types[:, 3]
    models = sorted(set(t_model[t_gpus > 0].tolist()))
    p = len(patterns)
    for mi, m in enumerate(models):
        on_m = t_model[t_idx] == m
        z_cols = z0 + mi * p + np.arange(p)
        for si, size in enumerate(sizes):
            pairs = np.flatnonzero(on_m & shared & (s_milli == size))
            ub.add(np.zeros(len(pairs) + p, np.int64), np.concatenate([pairs, z_cols]),
                   np.concatenate([np.ones(len(pairs)), -patterns[:, si]]), [0.0])
        pairs = np.flatnonzero(on_m & whole)
        of_m = np.flatnonzero(t_model == m)
        busy = [] if busy_col0 is None else busy_col0 + of_m
        ub.add(np.zeros(p + len(pairs) + len(busy), np.int64),
               np.concatenate([z_cols, pairs, busy]).astype(np.int64),
               np.concatenate([np.ones(p), s_gpus[pairs], -np.ones(len(busy))]),
               [0.0 if busy_col0 is not None else float((n_t * t_gpus)[of_m].sum())])
    return p * len(models)


def power_bound(cpu: np.ndarray, mem: np.ndarray, gpus: np.ndarray, milli: np.ndarray,
                mask: np.ndarray, nodes: NodeTable) -> float | None:
    """The least datacenter power (W, PWR's model: OPENB.md section 11) at which every one of
    the pods (arrays (M,), one per pod; `gpus` 0: a CPU-only pod) is placed on `nodes`, or
    None when the relaxation cannot place them all (then no scheduler can). No placement of
    them all draws less (the LP of OPENB.md section 11, "the least power"): y[g, t] pods of
    shape g on nodes of type t, all of each shape placed, CPU and memory per type as in
    `lp_bound`; b_t busy GPUs of type t, at least the milli placed / 1000, the per-GPU
    counts, and, per GPU model, the GPUs that whole-GPU pods fill plus the GPUs holding
    shared pods, counted by the maximal ways one GPU holds them (`shared_patterns`); a_t
    active sockets, at least the type's sockets active when empty, the busy cores / 16
    (a pod's CPU keeps at least cpu / 2000 cores busy) and the nodes holding a GPU pod
    (b_t / G_t, when every GPU pod asks for CPU). Power = every GPU idle + (busy - idle)
    per busy GPU + 15 W per socket + 105 W per active one. It relaxes that a pod sits on
    one node, the order of arrival and the sockets' and GPUs' granularity per node."""
    from scipy.optimize import linprog

    from vte.openb.power import (CORES_PER_SOCKET, CPU_MILLI_PER_CORE, SOCKET_BUSY_W,
                                 SOCKET_IDLE_W, _sockets, power_model)

    types, n_t = _node_types(nodes)
    t_cpu, t_mem, t_gpus, t_model = (types[:, k] for k in range(4))
    table = power_model(nodes.models)
    has_gpu = t_model >= 0
    idle = np.where(has_gpu, np.asarray(table.gpu_idle_w)[np.maximum(t_model, 0)], 0).astype(float)
    busy = np.where(has_gpu, np.asarray(table.gpu_busy_w)[np.maximum(t_model, 0)], 0).astype(float)
    empty_busy, sockets, empty_active = _sockets(t_cpu, t_cpu)      # the empty node's sockets
    cores = empty_busy + t_cpu // CPU_MILLI_PER_CORE
    constant = float((n_t * t_gpus * idle).sum() + SOCKET_IDLE_W * (n_t * sockets).sum())
    socket_w = float(SOCKET_BUSY_W - SOCKET_IDLE_W)
    if len(cpu) == 0:
        return constant + socket_w * float((n_t * empty_active).sum())
    shapes, count, _, _, g_idx, t_idx = _pairs(cpu, mem, gpus, milli, mask, nodes)
    s_cpu, s_mem, s_gpus, s_milli = (shapes[:, k] for k in range(4))
    if np.setdiff1d(np.arange(len(shapes)), g_idx).size:
        return None                                        # a pod no node type holds
    v, n = len(g_idx), len(types)
    b0, u0, a0, z0 = v, v + n, v + 2 * n, v + 3 * n        # column blocks: y, b, u, a, z
    ub = _Rows()
    num = z0 + _pattern_rows(ub, shapes, g_idx, t_idx, types, n_t, z0, busy_col0=b0)
    cost = np.zeros(num)
    cost[b0:u0] = busy - idle
    cost[a0:z0] = socket_w
    cols = np.arange(v)
    ub.add(t_idx, cols, s_cpu[g_idx], n_t * t_cpu)                         # capacity
    ub.add(t_idx, cols, s_mem[g_idx], n_t * t_mem)
    types_n = np.arange(n)
    ub.add(np.concatenate([t_idx, types_n]), np.concatenate([cols, b0 + types_n]),
           np.concatenate([s_gpus[g_idx] * s_milli[g_idx] / MILLI, -np.ones(n)]), np.zeros(n))
    for j in PER_GPU_LEVELS:                                               # per GPU
        ub.add(np.concatenate([t_idx, types_n]), np.concatenate([cols, b0 + types_n]),
               np.concatenate([_per_gpu_coef(shapes, g_idx, j), np.full(n, -float(j))]),
               np.zeros(n))
    if (s_cpu[s_gpus > 0] > 0).all():                      # nodes holding a GPU pod
        gpu_t = np.flatnonzero(t_gpus > 0)
        ub.add(np.concatenate([np.arange(len(gpu_t))] * 2), np.concatenate([b0 + gpu_t, u0 + gpu_t]),
               np.concatenate([1.0 / t_gpus[gpu_t], -np.ones(len(gpu_t))]), np.zeros(len(gpu_t)))
    ub.add(np.concatenate([types_n] * 2), np.concatenate([u0 + types_n, a0 + types_n]),
           np.concatenate([np.ones(n), -np.ones(n)]), np.zeros(n))
    per_socket = float(CPU_MILLI_PER_CORE * CORES_PER_SOCKET)              # busy cores / 16
    ub.add(np.concatenate([t_idx, types_n]), np.concatenate([cols, a0 + types_n]),
           np.concatenate([s_cpu[g_idx] / per_socket, -np.ones(n)]),
           -n_t * (cores - t_cpu / CPU_MILLI_PER_CORE) / CORES_PER_SOCKET)
    eq = _Rows()
    eq.add(g_idx, cols, np.ones(v), count)                                 # every pod placed
    a_ub, b_ub = ub.matrix(num)
    a_eq, b_eq = eq.matrix(num)
    bounds = ([(0, None)] * v + [(0, float(x)) for x in n_t * t_gpus]
              + [(0, float(x)) for x in n_t] + [(float(lo), float(hi)) for lo, hi in
                                                zip(n_t * empty_active, n_t * sockets)]
              + [(0, None)] * (num - z0))
    result = linprog(cost, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=b_eq, bounds=bounds,
                     method="highs")
    if result.status == 2:
        return None
    if result.status != 0:
        raise RuntimeError(f"the power bound's LP did not solve: {result.message}")
    return constant + float(result.fun)


def prefix_at(arrived: np.ndarray, x: float, total_gpu_milli: int) -> int:
    """The number of submitted pods whose power `power.on_grid` holds at x (of the cluster's
    GPUs): up to the first pod at which the arrived GPU demand (`arrived`, (M,) the running
    sum) reaches its last value at or below x; later pods only raise a run's power."""
    limit = x * total_gpu_milli
    below = arrived[arrived <= limit + 1e-6]
    if len(below) == 0:
        return 0
    return int(np.searchsorted(arrived, below[-1], side="left")) + 1


def power_bound_curve(pods: PodTable, nodes: NodeTable, order: np.ndarray, xs: np.ndarray,
                      placed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """((X,) float64 W, (X,) bool): `power_bound` of the pods submitted by each x of `xs`
    (arrived GPU demand, share of the cluster's GPUs; `prefix_at`) of a workload whose
    submitted pods are `order`, and whether it is defined there (False, and 0 W, where not
    every pod that arrived can be placed). Below every replay that placed every pod so far.
    placed: (len(order),) bool, a replay's placed pods (`simulator.Log.placed`): the bound
    of the pods it placed so far instead, below that replay's power at every x."""
    order = np.asarray(order, np.int64)
    arrived = np.cumsum(pods.gpu_demand[order].astype(np.int64))
    keep = np.ones(len(order), bool) if placed is None else np.asarray(placed, bool)
    if keep.shape != order.shape:
        raise ValueError(f"placed has shape {keep.shape}: allowed {order.shape}, one flag per "
                         "submitted pod")
    cols = [np.asarray(c)[order].astype(np.int64) for c in
            (pods.cpu_milli, pods.memory_mib, pods.num_gpus, pods.gpu_milli, pods.model_mask)]
    watts, solved, memo = np.zeros(len(xs)), np.zeros(len(xs), bool), {}
    for i, x in enumerate(np.asarray(xs, np.float64)):
        k = prefix_at(arrived, float(x), nodes.total_gpu_milli)
        if k not in memo:
            memo[k] = power_bound(*(c[:k][keep[:k]] for c in cols), nodes)
        if memo[k] is not None:
            watts[i], solved[i] = memo[k], True
    return watts, solved


POINTS = ("100", "end")
REFERENCES = ("random", "fgd")


def attach(result: dict, pods: PodTable, nodes: NodeTable) -> dict:
    """Adds the bound to a replay's result (`experiment.run_grid`; the same pods, nodes,
    tune and seeds) and returns it: `result["bound"]` the bound per seed and its mean at 100 %
    and at the end (% of the cluster's GPUs), and in each policy's row `gap_share`: for each
    of Random and FGD among the policies, (policy - reference) / (bound - reference) of the
    seed means of GPU allocation at each point (1: it reaches the bound, 0: the reference's
    level, negative: below it; None where the reference is at the bound already)."""
    from vte.openb.workload import build_workload
    per = [allocation_bound(pods, nodes, build_workload(pods, nodes, s, result["tune"]).order)
           for s in result["seeds"]]
    mean = {p: float(np.mean([b[p] for b in per])) for p in POINTS}
    result["bound"] = {p: {"mean": round(mean[p], 3), "per_seed": [round(b[p], 3) for b in per]}
                       for p in POINTS}
    rows = result["policies"]
    for row in rows.values():
        share = {}
        for ref in (r for r in REFERENCES if r in rows):
            share[ref] = {}
            for p in POINTS:
                mine, base = row.get(f"alloc_at_{p}"), rows[ref].get(f"alloc_at_{p}")
                gap = mean[p] - base["mean"] if base else 0.0
                share[ref][p] = (round((mine["mean"] - base["mean"]) / gap, 4)
                                 if mine and base and gap > 1e-9 else None)
        row["gap_share"] = share
    return result


def format_shares(result: dict) -> str:
    """The bound and each policy's share of the gap to it, as text lines."""
    from vte.openb.lab.experiment import DISPLAY
    bound = result["bound"]
    lines = [f"{'upper bound (LP; no scheduler exceeds it):':<46}{bound['100']['mean']:>16.2f}"
             f"{'':>39}{bound['end']['mean']:>16.2f}"]
    refs = [r for r in REFERENCES if r in result["policies"]]
    if refs:
        lines.append("share of the gap to the bound closed, from " + " / from ".join(
            DISPLAY.get(r, r) for r in refs) + ":")
        for name, row in result["policies"].items():
            cells = "  ".join(
                f"@{p} " + " / ".join("-" if row["gap_share"][r][p] is None
                                      else f"{row['gap_share'][r][p]:+.3f}" for r in refs)
                for p in POINTS)
            lines.append(f"  {DISPLAY.get(name, name):<44}{cells}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    from vte.openb.trace import load_nodes, load_pods
    from vte.openb.workload import build_workload

    parser = argparse.ArgumentParser(prog="python -m vte.openb.lab.bound", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", default="default", help="a bundled trace or a pod CSV")
    parser.add_argument("--nodes", default="gpu", help="gpu, all, or a node CSV")
    parser.add_argument("--seeds", type=int, default=10, help="number of seeds (default 10)")
    parser.add_argument("--first-seed", type=int, default=42, help="the first seed (default 42)")
    parser.add_argument("--tune", type=float, default=1.3)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.first_seed < 0:
        sys.exit(f"error: --seeds {args.seeds} / --first-seed {args.first_seed} are invalid: "
                 "allowed --seeds >= 1, --first-seed >= 0")
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    nodes = load_nodes(args.nodes)
    pods = load_pods(args.pods, nodes)
    per_seed = {s: allocation_bound(pods, nodes, build_workload(pods, nodes, s, args.tune).order)
                for s in seeds}
    result = {"pods": args.pods, "nodes": args.nodes, "tune": args.tune,
              "per_seed": {str(s): {k: round(v, 3) for k, v in b.items()}
                           for s, b in per_seed.items()},
              "mean": {k: round(float(np.mean([b[k] for b in per_seed.values()])), 3)
                       for k in ("100", "end")}}
    print(json.dumps(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()


__all__ = ["lp_bound", "allocation_bound", "arrived_prefix_100", "attach", "format_shares", "main",
           "shared_patterns", "power_bound", "prefix_at", "power_bound_curve"]
