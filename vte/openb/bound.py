"""An upper bound on the GPU allocation any scheduler can reach on an OpenB workload.

    bound = allocation_bound(pods, nodes, workload)        # {"100": %, "end": %}
    python -m vte.openb.bound --pods default --seeds 10 --first-seed 42

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
              <= j n_t G_t.

It ignores that a pod's resources must come from one node (only per-type sums), that
pods arrive in an order and cannot move, and packing within a GPU beyond the per-GPU
counts; so it is an upper bound, not an achievable value. "@100 %" is the bound after the
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


def lp_bound(cpu: np.ndarray, mem: np.ndarray, gpus: np.ndarray, milli: np.ndarray,
             mask: np.ndarray, nodes: NodeTable) -> float:
    """The most milli-GPU the pods (arrays (M,), one per pod) can be given on `nodes`
    under the relaxation of the module doc. A pod with `gpus` 0 asks for no GPU."""
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    if len(cpu) == 0:
        return 0.0
    shapes, index = _groups(cpu, mem, gpus, milli, mask)
    count = np.bincount(index, minlength=len(shapes)).astype(np.float64)
    types, n_t = _node_types(nodes)
    s_cpu, s_mem, s_gpus, s_milli, s_mask = (shapes[:, k].astype(np.int64) for k in range(5))
    t_cpu, t_mem, t_gpus, t_model = (types[:, k] for k in range(4))
    wants_gpu = s_gpus[:, None] > 0
    model_ok = (s_mask[:, None] == 0) | ((t_model[None, :] >= 0)
                                         & ((s_mask[:, None] >> np.maximum(t_model, 0)[None, :])
                                            & 1).astype(bool))
    fits = ((s_cpu[:, None] <= t_cpu[None, :]) & (s_mem[:, None] <= t_mem[None, :])
            & (~wants_gpu | ((t_gpus[None, :] >= s_gpus[:, None]) & model_ok)))
    g_idx, t_idx = np.nonzero(fits)
    v = len(g_idx)
    if v == 0:
        return 0.0
    value = (s_gpus * s_milli).astype(np.float64)
    rows, cols, vals, rhs = [], [], [], []

    def constraint(row_of: np.ndarray, coef: np.ndarray, bounds: np.ndarray):
        """Rows `sum_v coef[v] y[v] <= bounds[row_of[v]]`, after the rows so far."""
        keep = coef != 0
        rows.append(sum(len(b) for b in rhs) + row_of[keep])
        cols.append(np.arange(v)[keep])
        vals.append(coef[keep].astype(np.float64))
        rhs.append(np.asarray(bounds, np.float64))

    constraint(g_idx, np.ones(v), count)                                   # arrived
    constraint(t_idx, s_cpu[g_idx], n_t * t_cpu)                           # capacity
    constraint(t_idx, s_mem[g_idx], n_t * t_mem)
    constraint(t_idx, value[g_idx], n_t * t_gpus * MILLI)
    whole = (s_milli == MILLI) & (s_gpus > 0)
    for j in PER_GPU_LEVELS:                                               # per GPU
        shared_big = (s_gpus == 1) & (s_milli < MILLI) & (s_milli * (j + 1) > MILLI)
        coef = np.where(shared_big[g_idx], 1.0, 0.0) + np.where(whole[g_idx],
                                                                 j * s_gpus[g_idx], 0.0)
        constraint(t_idx, coef, j * n_t * t_gpus)
    a = coo_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                   shape=(sum(len(r) for r in rhs), v)).tocsr()
    result = linprog(-value[g_idx], A_ub=a, b_ub=np.concatenate(rhs), bounds=(0, None),
                     method="highs")
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
    from vte.openb.experiment import DISPLAY
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

    parser = argparse.ArgumentParser(prog="python -m vte.openb.bound", description=__doc__,
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


__all__ = ["lp_bound", "allocation_bound", "arrived_prefix_100", "attach", "format_shares", "main"]
