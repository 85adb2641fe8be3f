"""The FGD paper's experiment: a grid of policies x seeds on one trace, against the published means.

`run_grid` is the library call behind `python -m vte.openb`; it returns a JSON-ready dict.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Sequence

import jax
import numpy as np

from vte.openb import cluster, published, simulator, workload
from vte.openb.policies import POLICIES, Policy
from vte.openb.published import PUBLISHED_SEEDS, PUBLISHED_TUNE
from vte.openb.trace import NodeTable, PodTable

DISPLAY = {"random": "Random", "dot_product": "DotProd", "gpu_clustering": "GpuClustering",
           "gpu_packing": "GpuPacking", "best_fit": "BestFit", "fgd": "FGD"}


# One colour, line style and marker per published policy in every figure, whatever the
# order of --policies; GpuClustering and GpuPacking can coincide, so they differ in style.
STYLES = {"random": dict(color="tab:gray", ls="-", marker=None),
          "dot_product": dict(color="tab:purple", ls="-.", marker=None),
          "gpu_clustering": dict(color="tab:olive", ls="--", marker="x", markevery=10),
          "gpu_packing": dict(color="tab:orange", ls="-", marker=None),
          "best_fit": dict(color="tab:blue", ls="-", marker=None),
          "fgd": dict(color="tab:red", ls="-", marker=None)}
_OTHER_COLORS = ("tab:green", "tab:brown", "tab:pink", "tab:cyan", "black")


def style_of(name: str) -> dict:
    """Matplotlib line keywords of a policy: fixed for the published ones; a trained run
    or another name gets a colour of its own, from its name (the same in every figure)."""
    if name in STYLES:
        return dict(STYLES[name])
    digest = sum((i + 1) * ord(c) for i, c in enumerate(name))
    return dict(color=_OTHER_COLORS[digest % len(_OTHER_COLORS)], ls=":", marker=".",
                markevery=10)


def published_for(pods: PodTable, tune: float, nodes: NodeTable) -> dict | None:
    """The published figures of a bundled pod file on the bundled GPU nodes at tune 1.3
    (policy -> metric -> {"100": (mean, std), "end": (mean, std), "curve", "seeds"}, read
    from the artifact's files by `published.bundled`), else None."""
    from vte.openb.trace import DATA_DIR, NODE_FILES, POD_FILES
    if tune != PUBLISHED_TUNE or Path(nodes.path) != DATA_DIR / NODE_FILES["gpu"]:
        return None
    for name, file in POD_FILES.items():
        if Path(pods.path) == DATA_DIR / file:
            return published.bundled().get(name)
    return None


def _stats(values: np.ndarray) -> dict | None:
    """Mean and sample standard deviation (ddof 1, as the published ±) of per-seed values;
    a seed whose bin is empty (NaN: no event near that arrived share) is left out and
    counted, and with no seed left the result is None (JSON null, never NaN)."""
    values = np.asarray(values, np.float64)
    seen = values[~np.isnan(values)]
    if len(seen) == 0:
        return None
    mean, std = published.mean_std(seen)
    return {"mean": mean, "std": std,
            "per_seed": [None if np.isnan(v) else round(float(v), 2) for v in values],
            "seeds_without_events": int(len(values) - len(seen))}


def _seed_mean(curve: np.ndarray) -> list[float | None]:
    """(S, X) -> X means over seeds, None where every seed's bin is empty."""
    seen = ~np.isnan(curve)
    total = np.where(seen, curve, 0.0).sum(axis=0)
    count = seen.sum(axis=0)
    return [round(float(t / c), 3) if c else None for t, c in zip(total, count)]


def run_grid(nodes: NodeTable, pods: PodTable, policies: Sequence[str] | dict[str, Policy],
             seeds: Sequence[int] = PUBLISHED_SEEDS, tune: float = PUBLISHED_TUNE,
             chunk: int = 2048, progress: bool = False) -> dict:
    """Replays every policy on every seed (seeds batched with vmap, one program per policy).

    policies: names from `POLICIES`, or a dict name -> policy function (a learned policy).
    Returns per policy the allocation at 100 % arrived and at the end (x = 100 tune), the
    failed pods, the fragmentation, the mean curves over seeds and the seconds it took.
    """
    if isinstance(policies, dict):
        chosen = dict(policies)
    else:
        unknown = [p for p in policies if p not in POLICIES]
        if unknown:
            raise ValueError(f"unknown policies {unknown}; known: {sorted(POLICIES)}")
        chosen = {p: POLICIES[p] for p in policies}
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ValueError("seeds is empty: give at least one seed")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds {seeds} repeat a seed")
    end_x = int(round(100 * tune))
    total_gpus = int(nodes.num_gpus.sum())
    if total_gpus == 0:
        raise ValueError(f"{nodes.path}: the cluster has no GPU; the replay measures GPU allocation")
    start = time.perf_counter()
    spec = cluster.make_spec(nodes, workload.typical_pods(pods))
    works = [workload.build_workload(pods, nodes, s, tune) for s in seeds]
    batch = workload.pod_arrays(pods, works)
    ranks = np.stack([w.rank for w in works])
    keys = jax.vmap(jax.random.PRNGKey)(np.asarray(seeds, np.uint32))
    reference = published_for(pods, tune, nodes)
    steps = len(chosen) * int(batch.valid.shape[1])
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=steps, unit="pod", desc="replay", unit_scale=True, dynamic_ncols=True)
    results = {}
    for name, policy in chosen.items():
        t0 = time.perf_counter()
        if bar is not None:
            bar.set_description(name)
        log = simulator.replay(policy, spec, batch, ranks, keys, chunk=chunk,
                                progress=bar.update if bar is not None else None)
        curves = simulator.curves(log, total_gpus, end_x)
        failed = (log.valid & ~log.placed).sum(axis=1)
        results[name] = {
            "alloc_at_100": _stats(curves["alloc"][:, 100]) if end_x >= 100 else None,
            "alloc_at_end": _stats(curves["alloc"][:, end_x]),
            "frag_at_100": _stats(curves["frag"][:, 100]) if end_x >= 100 else None,
            "failed_pods": {"mean": float(failed.mean()), "per_seed": failed.tolist()},
            "pods": log.valid.sum(axis=1).tolist(),
            "curves": {k: _seed_mean(c) for k, c in curves.items()},
            "published": reference.get(name) if reference else None,
            "seconds": round(time.perf_counter() - t0, 2),
        }
    if bar is not None:
        bar.close()
    seconds = time.perf_counter() - start
    return {
        "trace": {"nodes": os.path.basename(nodes.path), "pods": os.path.basename(pods.path),
                  "num_nodes": len(nodes), "num_gpus": total_gpus, "num_pods": len(pods),
                  "typical_pods": int(spec.typical.prob.shape[0])},
        "tune": tune, "seeds": seeds, "end_percent": end_x,
        "device": str(jax.devices()[0].device_kind), "platform": jax.default_backend(),
        "jax_version": jax.__version__,
        "seconds": round(seconds, 2),
        "seconds_per_experiment": round(seconds / (len(chosen) * len(seeds)), 3),
        "policies": results,
    }


def seed_warning(result: dict) -> str | None:
    """A warning when the grid compares with published means over other seeds than theirs
    (fewer than ten, or not 42..51): a gap then may be seed noise, not a fidelity failure.
    None when nothing is compared or the seeds are the published ones."""
    compared = any(r["published"] for r in result["policies"].values())
    seeds = tuple(result["seeds"])
    if not compared or seeds == PUBLISHED_SEEDS:
        return None
    return (f"warning: the published means stand on the {len(PUBLISHED_SEEDS)} seeds "
            f"{PUBLISHED_SEEDS[0]}..{PUBLISHED_SEEDS[-1]}; this grid ran {len(seeds)} "
            f"({', '.join(map(str, seeds[:5]))}{', ...' if len(seeds) > 5 else ''}), so a diff "
            f"of a few tenths of a point may be seed noise: --seeds {len(PUBLISHED_SEEDS)} "
            "compares like with like")


def format_table(result: dict) -> str:
    """The grid as a text table, beside the published means when there are some."""
    end = result["end_percent"]
    head = (f"{result['trace']['pods']} on {result['trace']['nodes']} ({result['trace']['num_nodes']} "
            f"nodes, {result['trace']['num_gpus']} GPUs), tune {result['tune']}, "
            f"{len(result['seeds'])} seeds; GPU allocation in % of the cluster's GPUs, mean ± std")
    lines = [head, f"{'policy':<15}{'@100 vte':>16}{'published':>16}{'diff':>7}"
                   f"{'@' + str(end) + ' vte':>16}{'published':>16}{'diff':>7}{'failed pods':>13}"]

    def cell(s):
        return f"{s['mean']:.2f} ± {s['std']:.2f}" if s else "-"
    for name, r in result["policies"].items():
        pub = (r["published"] or {}).get("alloc", {})
        row = f"{DISPLAY.get(name, name):<15}"
        for mine, key in ((r["alloc_at_100"], "100"), (r["alloc_at_end"], "end")):
            ref = pub.get(key)
            diff = f"{mine['mean'] - ref[0]:+.2f}" if (mine and ref) else "-"
            row += f"{cell(mine):>16}{(f'{ref[0]:.2f} ± {ref[1]:.2f}' if ref else '-'):>16}{diff:>7}"
        row += f"{r['failed_pods']['mean']:>13.1f}"
        lines.append(row)
    warning = seed_warning(result)
    if warning:
        lines.append(warning)
    lines.append(f"{result['seconds']:.1f} s in all ({result['seconds_per_experiment']:.2f} s per "
                 f"policy x seed, compilation included) on {result['platform']} "
                 f"({result['device']}), jax {result['jax_version']}")
    return "\n".join(lines)


def plot(result: dict, path: str) -> None:
    """Allocation and fragmentation against arrived GPU demand (the paper's figures 9a and 7a)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, r in result["policies"].items():
        for ax, key in zip(axes, ("alloc", "frag")):
            ys = np.array([np.nan if v is None else v for v in r["curves"][key]], float)
            ax.plot(np.arange(len(ys)), ys, label=DISPLAY.get(name, name), lw=1.4,
                    **style_of(name))
    axes[0].plot([0, 100], [0, 100], color="grey", lw=0.8, ls=":", label="all arrived demand")
    axes[0].set(xlabel="arrived GPU demand (% of cluster GPUs)", ylabel="GPU allocation (%)",
                title="GPU allocation (paper fig. 9a)")
    axes[1].set(xlabel="arrived GPU demand (% of cluster GPUs)",
                ylabel="fragmented GPUs (% of cluster GPUs)", title="fragmentation (paper fig. 7a)")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{result['trace']['pods']}, tune {result['tune']}, mean of {len(result['seeds'])} seeds")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
