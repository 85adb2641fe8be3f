"""Which pods fail: the failed pods of an OpenB replay broken down by what they ask for.

    python benchmarks/failed_pods.py --pods cpu250 --policies fgd,zoo:openb-evidence
    python benchmarks/failed_pods.py --pods gpuspec25 --policies fgd,RUN_DIR@16 --seeds 4 --first-seed 100
    python benchmarks/failed_pods.py --pods cpu250 --policies RUN_DIR --cpu-pods-by fgd

`python -m vte.openb` counts the failed pods of each policy; this script says which ones:
per policy, the mean per seed of the pods that failed among the CPU-only pods, the shared
ones (one GPU, a fraction of it), the whole-GPU ones (one GPU or more, each whole), and
across those, the pods asking for a GPU model (`gpu_spec`), with how many were submitted
of each kind, the same for each GPU model list asked for (`by_model`; the cluster's GPUs
of each model are written beside), and the arrived GPU demand (% of the cluster's GPUs) at
each seed's first failure. Every seed is replayed as `python -m vte.openb` replays it (the
same workloads, tie-break ranks and keys), so the totals equal its `failed_pods`.

`--cpu-pods-by P` adds, for each policy, a row where P places the CPU-only pods and the
policy the others (`cpu_pods_by`): how much of a policy's failures, and of its GPU
allocation (its GRAR at the end, the replay's own binning), come from where it puts the
pods that ask for no GPU. Besides the policies `python -m vte.openb` knows, P may be one of
`CPU_RULES`: FGD's score with another tie-break for these pods (every node where a
CPU-only pod strands no typical pod scores FGD's 50), to ask whether a better place for
them exists.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vte.checkpoint import is_run_path  # noqa: E402
from vte.files import atomic_write_text, check_output_path  # noqa: E402
from vte.openb import cluster, workload  # noqa: E402
from vte.openb.lab import simulator
from vte.openb.policies import CPU_NORM, GPU_NORM, Policy, fgd  # noqa: E402
from vte.openb.lab.experiment import PUBLISHED_TUNE  # noqa: E402
from vte.openb.power import policy_by_name  # noqa: E402
from vte.openb.registration import learned_policy  # noqa: E402
from vte.openb.trace import load_nodes, load_pods, model_names  # noqa: E402

KINDS = ("cpu_only", "shared", "whole", "gpu_model")


def kinds_of(pods) -> dict[str, np.ndarray]:
    """(S, T) bool masks of each kind of `KINDS` over (S, T) pods (`cluster.Pod`); a pod
    asking for a GPU model is also counted as shared or whole."""
    num_gpus, shared = np.asarray(pods.num_gpus), np.asarray(cluster.is_shared(pods))
    return {"cpu_only": num_gpus == 0, "shared": shared, "whole": (num_gpus >= 1) & ~shared,
            "gpu_model": np.asarray(pods.model_mask) != 0}


def fgd_then_cpu_fit(key, state, pod, feasible, spec):
    """FGD's score; among its best nodes, the one with the least CPU left after the pod
    (binned in 1000 steps of the largest node's CPU), then the seed's node rank."""
    score, gpu = fgd(key, state, pod, feasible, spec)
    left = jnp.clip(state.cpu_free - pod.cpu_milli, 0, CPU_NORM)
    return score * 1000 + (999 - left * 999 // CPU_NORM), gpu


def fgd_then_gpu_full(key, state, pod, feasible, spec):
    """FGD's score; among its best nodes, the one with the least free GPU (its CPU is of the
    least use to later GPU pods), binned in 1000 steps of the largest node's GPUs, then the
    least CPU left (10 bins), then the seed's node rank."""
    score, gpu = fgd(key, state, pod, feasible, spec)
    free = jnp.clip(jnp.sum(state.gpu_free, axis=0), 0, GPU_NORM)
    left = jnp.clip(state.cpu_free - pod.cpu_milli, 0, CPU_NORM)
    return score * 10_000 + (999 - free * 999 // GPU_NORM) * 10 + (9 - left * 9 // CPU_NORM), gpu


CPU_RULES: dict[str, Policy] = {"fgd_then_cpu_fit": fgd_then_cpu_fit,
                                "fgd_then_gpu_full": fgd_then_gpu_full}


def cpu_pods_by(cpu_policy: Policy, policy: Policy) -> Policy:
    """A replay policy: `cpu_policy`'s node for a CPU-only pod, `policy`'s (and its GPU)
    for any other. Each policy's node is chosen as the replay chooses (`cluster.select`);
    the mix scores that node 1 and every other 0, so the two policies' score scales never
    meet."""
    def mixed(key, state, pod, feasible, spec):
        cpu_node = cluster.select(cpu_policy(key, state, pod, feasible, spec)[0], feasible, state.rank)
        scores, gpu = policy(key, state, pod, feasible, spec)
        node = jnp.where(pod.num_gpus == 0, cpu_node, cluster.select(scores, feasible, state.rank))
        return (jnp.arange(feasible.shape[0]) == node).astype(jnp.int32), gpu
    return mixed


def model_lists(pods, models: tuple[str, ...]) -> dict[str, np.ndarray]:
    """(S, T) bool masks of the pods asking for each distinct GPU model list, keyed by the
    list as `trace.model_names` writes it (a pod's `model_mask` is a bitmask over
    `models`)."""
    mask = np.asarray(pods.model_mask)
    return {model_names(v, models): mask == v for v in sorted(set(np.unique(mask).tolist()) - {0})}


def breakdown(log: simulator.Log, pods, total_gpu_milli: int, models: tuple[str, ...]) -> dict:
    """Per kind the failed and submitted pods, means per seed, and per seed the arrived GPU
    demand (% of the cluster's GPUs) at the first failure (None: nothing failed);
    `by_model`: the same counts for the pods of each GPU model list (`model_lists`)."""
    failed = log.valid & ~log.placed
    seeds = failed.shape[0]
    out = {kind: {"failed": float((failed & mask).sum() / seeds),
                  "submitted": float((log.valid & mask).sum() / seeds)}
           for kind, mask in kinds_of(pods).items()}
    out["all"] = {"failed": float(failed.sum() / seeds), "submitted": float(log.valid.sum() / seeds)}
    arrived = log.arrived / total_gpu_milli * 100
    out["first_failure_at"] = [round(float(arrived[s][failed[s]].min()), 2) if failed[s].any()
                               else None for s in range(seeds)]
    out["by_model"] = {name: {"failed": float((failed & mask).sum() / seeds),
                              "submitted": float((log.valid & mask).sum() / seeds)}
                       for name, mask in model_lists(pods, models).items()}
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", default="default", help="a bundled trace name or a pod file")
    parser.add_argument("--nodes", default="gpu", help="a bundled node file name or a node file")
    parser.add_argument("--policies", default="fgd", help="comma-separated published policies "
                        "or OpenB run directories (DIR@STEP: one checkpoint)")
    parser.add_argument("--seeds", type=int, default=4, help="workloads replayed")
    parser.add_argument("--first-seed", type=int, default=42, help="the first workload's seed")
    parser.add_argument("--cpu-pods-by", default=None, metavar="P", help="also each policy "
                        "with P (a published policy, a run directory or one of "
                        f"{', '.join(CPU_RULES)}) placing its CPU-only pods")
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args(argv)
    if not 1 <= args.seeds <= 256:
        parser.error(f"--seeds={args.seeds} is invalid: allowed an integer in [1, 256]")
    if not 0 <= args.first_seed <= 2**32 - 1 - args.seeds:
        parser.error(f"--first-seed={args.first_seed} is invalid: allowed an integer in "
                     f"[0, 2**32 - 1 - seeds]")
    names = [n for n in args.policies.split(",") if n]
    if not names:
        parser.error(f"--policies={args.policies!r} is invalid: allowed one name at least")
    try:
        if args.json is not None:
            check_output_path(args.json, "--json")
        nodes = load_nodes(args.nodes)
        pod_table = load_pods(args.pods, nodes)
    except ValueError as err:
        parser.error(str(err))
    models = max(len(nodes.models), 1)

    def resolve(name, flag):
        try:
            return (learned_policy(name, models) if is_run_path(name)
                    else policy_by_name(name, nodes.models))
        except ValueError as err:
            parser.error(f"{flag}: {err}")
    chosen = {name: resolve(name, "--policies") for name in names}   # all checked first
    if args.cpu_pods_by is not None:
        cpu_policy = CPU_RULES.get(args.cpu_pods_by) or resolve(args.cpu_pods_by, "--cpu-pods-by")
        chosen.update({f"{name}+cpu_pods_by:{args.cpu_pods_by}": cpu_pods_by(cpu_policy, policy)
                       for name, policy in list(chosen.items())})
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    spec = cluster.make_spec(nodes, workload.typical_pods(pod_table))
    works = [workload.build_workload(pod_table, nodes, s, PUBLISHED_TUNE) for s in seeds]
    pods = workload.pod_arrays(pod_table, works)
    ranks = np.stack([w.rank for w in works])
    keys = jax.vmap(jax.random.PRNGKey)(np.asarray(seeds, np.uint32))
    end, total_gpus = int(round(100 * PUBLISHED_TUNE)), int(nodes.num_gpus.sum())
    result = {"pods": args.pods, "seeds": seeds, "policies": {},
              "gpus_by_model": {m: int(nodes.num_gpus[nodes.model == i].sum())
                                for i, m in enumerate(nodes.models)}}
    print(f"{args.pods}, seeds {seeds[0]}..{seeds[-1]}: failed pods per seed (of submitted); the "
          "cluster's GPUs: " + ", ".join(f"{m} {n}" for m, n in result["gpus_by_model"].items()))
    for name, policy in chosen.items():
        log = simulator.replay(policy, spec, pods, ranks, keys)
        row = result["policies"][name] = breakdown(log, pods, 1000 * total_gpus, nodes.models)
        grar = simulator.curves(log, total_gpus, end)["alloc"][:, end]
        row["alloc_at_end"] = [float(x) for x in grar]
        cells = ", ".join(f"{k} {row[k]['failed']:.1f} of {row[k]['submitted']:.0f}"
                          for k in KINDS + ("all",))
        first = [x for x in row["first_failure_at"] if x is not None]
        print(f"  {name}: {cells}; first failure at {min(first) if first else '-'}.."
              f"{max(first) if first else '-'} % arrived; GRAR at the end "
              f"{np.mean(row['alloc_at_end']):.2f} %")
        if row["by_model"]:
            print("    asking for " + "; ".join(f"{m}: {c['failed']:.1f} of {c['submitted']:.0f}"
                                             for m, c in row["by_model"].items()))
    if args.json:
        atomic_write_text(args.json, json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
