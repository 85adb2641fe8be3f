"""The FGD paper's experiment: a grid of policies x seeds on one trace, against the published means.

`run_grid` is the library call behind `python -m vte.openb`; it returns a JSON-ready dict.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
import time
from pathlib import Path
from typing import Callable, Iterator, Sequence, TypeVar

import jax
import numpy as np

from vte.openb import cluster, workload
from vte.openb.lab import published, simulator
from vte.openb.policies import POLICIES, Policy
from vte.openb.lab.published import PUBLISHED_SEEDS, PUBLISHED_TUNE
from vte.openb.lab.cache import RunCache
from vte.openb.trace import POD_PREFIX, NodeTable, PodTable

T = TypeVar("T")

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


# The measured curves (`simulator.curves`), each compared with the artifact's file of it.
METRICS = {"alloc": "GPU allocation in % of the cluster's GPUs",
           "frag": "fragmented GPUs in % of the cluster's GPUs",
           "frag_ratio": "fragmentation in % of the idle GPU milli"}


SHORT_LABELS = {"alloc": "GPU allocation (%)", "frag": "fragmented GPUs (%)",
                "frag_ratio": "fragmentation (% of idle GPU milli)"}


def _points(end_x: int) -> dict[str, int | None]:
    """The two compared x of a curve: 100 % arrived (None below tune 1) and the end."""
    return {"100": 100 if end_x >= 100 else None, "end": end_x}


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


def _chosen(policies: Sequence[str] | dict[str, Policy]) -> dict[str, Policy]:
    """Policy names (of `POLICIES`) or a dict name -> policy, as a dict; ValueError on an unknown name."""
    if isinstance(policies, dict):
        return dict(policies)
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        raise ValueError(f"unknown policies {unknown}; known: {sorted(POLICIES)}")
    return {p: POLICIES[p] for p in policies}


def _check_seeds(seeds: Sequence[int]) -> list[int]:
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ValueError("seeds is empty: give at least one seed")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds {seeds} repeat a seed")
    return seeds


def plan(nodes: NodeTable, pods: PodTable, chosen: dict[str, Policy], seeds: list[int],
         tune: float, cache: RunCache | None = None, force: bool = False):
    """Which runs are still to do: ({policy: {seed: cached record}}, {policy: [seeds to run]},
    {(policy, seed): cache key}). Only the published policies are cached; `force` reads nothing."""
    done, todo, keys = {name: {} for name in chosen}, {}, {}
    for name, policy in chosen.items():
        cacheable = cache is not None and POLICIES.get(name) is policy
        for seed in seeds:
            if cacheable:
                keys[name, seed] = key = cache.key(nodes.path, pods.path, tune, name, seed)
                record = None if force else cache.get(key)
                if record is not None:
                    done[name][seed] = record
                    continue
            todo.setdefault(name, []).append(seed)
    return done, todo, keys


def _record(curves: dict[str, np.ndarray], failed: int, pods: int, seconds: float) -> dict:
    """One run's result, JSON-ready: its binned curves (None for an empty bin), failed and
    submitted pods, and the seconds it took (its share of its batch)."""
    return {"curves": {k: [None if np.isnan(v) else float(v) for v in c] for k, c in curves.items()},
            "failed": int(failed), "pods": int(pods), "seconds": round(seconds, 3)}



def replay_concurrently(jobs: dict[str, Callable[[], T]], workers: int | None = None,
                        ) -> Iterator[tuple[str, T]]:
    """Runs each job (name -> function of no argument) in a pool of `workers` threads (None:
    one per CPU core), started in the dict's order, and yields (name, result) as each ends.

    Replays run concurrently because XLA runs a compiled program without holding the GIL.
    A job's exception is raised here; it, an abandoned iteration or Ctrl-C cancels the jobs
    not yet started (a running replay cannot be interrupted: it ends in its thread, named
    "vte-replay-...").
    """
    workers = max(1, min(len(jobs), workers or os.cpu_count() or 1))
    pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="vte-replay")
    try:
        futures = {pool.submit(job): name for name, job in jobs.items()}
        for future in concurrent.futures.as_completed(futures):
            yield futures[future], future.result()
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()


def run_grid(nodes: NodeTable, pods: PodTable, policies: Sequence[str] | dict[str, Policy],
             seeds: Sequence[int] = PUBLISHED_SEEDS, tune: float = PUBLISHED_TUNE,
             chunk: int = 512, progress: bool = False, reference: dict | None = None,
             cache: RunCache | None = None, force: bool = False, bar=None,
             workers: int | None = None) -> dict:
    """Replays every policy on every seed (seeds batched with vmap, one program per policy).

    policies: names from `POLICIES`, or a dict name -> policy function (a learned policy).
    reference: published figures to compare with, policy -> metric -> {"100": (mean, std),
    "end": (mean, std)} (`published.load(dir)[trace]`); None: the bundled ones of a bundled
    trace (`published_for`).
    cache: finished (policy, seed) runs of this trace are read from it and new ones written to
    it as each policy's batch ends (`force`: recompute them all); the result is the same
    whether a run was computed now or read. bar: a tqdm bar counting runs to advance
    (`progress`: a bar of this grid's own). workers: policies replayed at once, in threads
    (None: one per CPU core); the figures do not depend on it, only the time (each policy's
    `seconds` is then its wall time beside the others, not its cost alone).
    Returns per policy each metric of `METRICS` at 100 % arrived and at the end (x = 100
    tune) as `{metric}_at_100` and `{metric}_at_end`, the failed pods, the mean curves over
    seeds, the published figures and the seconds it took.
    """
    chosen = _chosen(policies)
    seeds = _check_seeds(seeds)
    end_x = int(round(100 * tune))
    total_gpus = int(nodes.num_gpus.sum())
    if total_gpus == 0:
        raise ValueError(f"{nodes.path}: the cluster has no GPU; the replay measures GPU allocation")
    start = time.perf_counter()
    spec = cluster.make_spec(nodes, workload.typical_pods(pods))
    if reference is None:
        reference = published_for(pods, tune, nodes)
    records, todo, cache_keys = plan(nodes, pods, chosen, seeds, tune, cache, force)
    own_bar = bar is None and progress
    if own_bar:
        from tqdm import tqdm
        runs = len(chosen) * len(seeds)
        bar = tqdm(total=runs, initial=runs - sum(map(len, todo.values())), unit="run",
                   dynamic_ncols=True, bar_format=BAR_FORMAT)
    works = {s: workload.build_workload(pods, nodes, s, tune)
             for s in sorted({s for run in todo.values() for s in run})}
    lock = threading.Lock()

    def replay_policy(name: str, run_seeds: list[int]):
        t0 = time.perf_counter()
        batch = workload.pod_arrays(pods, [works[s] for s in run_seeds])
        ranks = np.stack([works[s].rank for s in run_seeds])
        keys = jax.vmap(jax.random.PRNGKey)(np.asarray(run_seeds, np.uint32))
        length = int(batch.valid.shape[1])

        pods_done = 0

        def step(done):
            # The bar advances by the runs' share of pods replayed, computed afresh from the
            # pods done (not summed from float shares, which could pass the total).
            nonlocal pods_done
            with lock:
                before = len(run_seeds) * min(pods_done, length) / length
                pods_done += done
                bar.set_description(f"{trace_name(pods)} {name}")
                advance(bar, len(run_seeds) * min(pods_done, length) / length - before)
        log = simulator.replay(chosen[name], spec, batch, ranks, keys, chunk=chunk,
                               progress=step if bar is not None else None)
        curves = simulator.curves(log, total_gpus, end_x)
        failed = (log.valid & ~log.placed).sum(axis=1)
        return curves, failed, log.valid.sum(axis=1), time.perf_counter() - t0

    # The longest (a planner, then FGD, the others' cost several times over) first, so the
    # cheap ones fill the other cores.
    order = sorted(todo, key=lambda n: (not getattr(chosen[n], "one_seed_at_a_time", False),
                                        n != "fgd"))
    seconds = {}
    for name, (curves, failed, submitted, seconds[name]) in replay_concurrently(
            {name: (lambda name=name: replay_policy(name, todo[name])) for name in order},
            workers):
        run_seeds = todo[name]
        for i, seed in enumerate(run_seeds):       # cached as each policy ends
            record = _record({k: c[i] for k, c in curves.items()}, failed[i],
                             submitted[i], seconds[name] / len(run_seeds))
            records[name][seed] = record
            if (name, seed) in cache_keys:
                cache.put(cache_keys[name, seed], record)
    if own_bar:
        close_bar(bar)
    results = {}
    for name in chosen:
        per_seed = [records[name][s] for s in seeds]
        curves = {k: np.array([[np.nan if v is None else v for v in r["curves"][k]] for r in per_seed])
                  for k in per_seed[0]["curves"]}
        failed = np.array([r["failed"] for r in per_seed])
        results[name] = {
            **{f"{metric}_at_{point}": _stats(curves[metric][:, x]) if x is not None else None
               for metric in METRICS for point, x in _points(end_x).items()},
            "failed_pods": {"mean": float(failed.mean()), "per_seed": failed.tolist()},
            "pods": [r["pods"] for r in per_seed],
            "curves": {k: _seed_mean(c) for k, c in curves.items()},
            "published": reference.get(name) if reference else None,
            "runs_computed": len(todo.get(name, ())),
            "seconds": round(seconds.get(name, 0.0), 2),
        }
    elapsed = time.perf_counter() - start
    computed = sum(map(len, todo.values()))
    return {
        "trace": {"nodes": os.path.basename(nodes.path), "pods": os.path.basename(pods.path),
                  "num_nodes": len(nodes), "num_gpus": total_gpus, "num_pods": len(pods),
                  "typical_pods": int(spec.typical.prob.shape[0])},
        "tune": tune, "seeds": seeds, "end_percent": end_x,
        "device": str(jax.devices()[0].device_kind), "platform": jax.default_backend(),
        "jax_version": jax.__version__,
        "runs_computed": computed, "runs_cached": len(chosen) * len(seeds) - computed,
        "seconds": round(elapsed, 2),
        "seconds_per_experiment": round(elapsed / computed, 3) if computed else None,
        "policies": results,
    }


# The progress bar: runs done of all, elapsed and estimated time left.
BAR_FORMAT = "{desc:<22} {percentage:3.0f}%|{bar}| {n:.1f}/{total} runs [{elapsed}<{remaining}]"


def advance(bar, amount: float) -> None:
    """`bar.update(amount)`, never past the bar's total: a bar counting in fractions of a
    run ends exactly at it (past it tqdm warns "clamping frac" and shows a negative time
    left)."""
    if bar.total is not None:
        amount = min(amount, bar.total - bar.n)
    if amount > 0:
        bar.update(amount)


def close_bar(bar) -> None:
    """Closes a bar counting fractions of runs, its count rounded where float sums left it
    a hair off a whole number of runs."""
    if abs(bar.n - round(bar.n)) < 1e-6:
        bar.n = round(bar.n)
        bar.refresh()
    bar.close()


def run_traces(nodes: NodeTable, traces: Sequence[PodTable], policies: Sequence[str] | dict[str, Policy],
               seeds: Sequence[int] = PUBLISHED_SEEDS, tune: float = PUBLISHED_TUNE,
               chunk: int = 512, progress: bool = False, cache: RunCache | None = None,
               force: bool = False, on_trace=None, workers: int | None = None) -> dict[str, dict]:
    """`run_grid` on every trace, under one progress bar over the whole grid (runs already in
    `cache` count as done from the start, so the time estimate covers what is left).
    on_trace(name, result) is called as each trace ends (to write its files at once).
    Returns trace short name -> `run_grid` result."""
    chosen = _chosen(policies)
    seeds = _check_seeds(seeds)
    names = [trace_name(p) for p in traces]
    if len(set(names)) != len(names):
        raise ValueError(f"traces {names} name a trace twice")
    bar = None
    if progress:
        from tqdm import tqdm
        left = sum(sum(map(len, plan(nodes, p, chosen, seeds, tune, cache, force)[1].values()))
                   for p in traces)
        runs = len(traces) * len(chosen) * len(seeds)
        bar = tqdm(total=runs, initial=runs - left, unit="run", dynamic_ncols=True,
                   bar_format=BAR_FORMAT)
    results = {}
    try:
        for name, pods in zip(names, traces):
            results[name] = run_grid(nodes, pods, chosen, seeds, tune, chunk=chunk, cache=cache,
                                     force=force, bar=bar, workers=workers)
            if on_trace is not None:
                on_trace(name, results[name])
    finally:
        if bar is not None:
            close_bar(bar)
    return results


def trace_name(pods: PodTable) -> str:
    """The short name of a pod file: "openb_pod_list_default.csv" -> "default"."""
    return Path(pods.path).stem.removeprefix(POD_PREFIX)


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


def format_table(result: dict, metrics=tuple(METRICS)) -> str:
    """The grid as a text table, one block per metric, beside the published means when there
    are some (diff = vte's mean - the published mean)."""
    end = result["end_percent"]
    head = (f"{result['trace']['pods']} on {result['trace']['nodes']} ({result['trace']['num_nodes']} "
            f"nodes, {result['trace']['num_gpus']} GPUs), tune {result['tune']}, "
            f"{len(result['seeds'])} seeds; mean ± std")
    lines = [head]

    def cell(s):
        return f"{s['mean']:.2f} ± {s['std']:.2f}" if s else "-"
    for metric in metrics:
        lines.append(f"{METRICS[metric] + ':':<46}{'@100 vte':>16}{'published':>16}{'diff':>7}"
                     f"{'@' + str(end) + ' vte':>16}{'published':>16}{'diff':>7}"
                     + (f"{'failed pods':>13}" if metric == "alloc" else ""))
        for name, r in result["policies"].items():
            pub = (r["published"] or {}).get(metric, {})
            row = f"  {DISPLAY.get(name, name):<44}"
            for point in ("100", "end"):
                mine, ref = r.get(f"{metric}_at_{point}"), pub.get(point)
                diff = f"{mine['mean'] - ref[0]:+.2f}" if (mine and ref) else "-"
                row += f"{cell(mine):>16}{(f'{ref[0]:.2f} ± {ref[1]:.2f}' if ref else '-'):>16}{diff:>7}"
            if metric == "alloc":
                row += f"{r['failed_pods']['mean']:>13.1f}"
            lines.append(row)
    warning = seed_warning(result)
    if warning:
        lines.append(warning)
    per = result.get("seconds_per_experiment")
    lines.append(f"{result['seconds']:.1f} s in all"
                 + (f" ({per:.2f} s per policy x seed, compilation included)" if per else "")
                 + (f", {result['runs_cached']} of {result['runs_cached'] + result['runs_computed']}"
                    " runs read from the cache" if result.get("runs_cached") else "")
                 + f" on {result['platform']} ({result['device']}), jax {result['jax_version']}")
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


def _curve(values: list) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in values], float)


def plot_overview(results: dict[str, dict], path: str, metric: str = "alloc") -> None:
    """One small panel per trace: each policy's mean `metric` curve (solid; a trained run
    or other unpublished policy dashed) over the published one (thin dotted, same colour),
    against arrived GPU demand."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    cols = min(len(results), 5)
    rows = -(-len(results) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.6 * rows), squeeze=False,
                             sharex=True, sharey=True)
    for ax, (trace, result) in zip(axes.flat, results.items()):
        for name, r in result["policies"].items():
            style = style_of(name)
            ys = _curve(r["curves"][metric])
            ax.plot(np.arange(len(ys)), ys, lw=1.1, label=DISPLAY.get(name, name),
                    **{**style, "marker": None, "ls": "-" if name in STYLES else "--"})
            pub = (r["published"] or {}).get(metric)
            if pub:
                ax.plot(np.arange(len(pub["curve"])), pub["curve"], lw=0.8, ls=":",
                        color=style["color"])
        ax.set_title(trace, fontsize=9)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
    for ax in axes.flat[len(results):]:
        ax.axis("off")
    if metric == "alloc":
        axes.flat[0].set_ylim(60, 100)
        axes.flat[0].set_xlim(60, 131)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    unpublished = any(name not in STYLES for r in results.values() for name in r["policies"])
    fig.suptitle(f"vte (solid{'; unpublished policies dashed' if unpublished else ''}) and "
                 f"the published artifact (dotted), mean of "
                 f"{len(next(iter(results.values()))['seeds'])} seeds", fontsize=10)
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.955 if rows > 1 else 0.9),
               ncol=len(labels), fontsize=8, frameon=False)
    fig.supxlabel("arrived GPU demand (% of the cluster's GPUs)", fontsize=9)
    fig.supylabel(SHORT_LABELS[metric], fontsize=9)
    fig.tight_layout(rect=(0.0, 0.0, 1, 0.93 if rows > 1 else 0.82))
    fig.savefig(path, dpi=100)
    plt.close(fig)


def ordering(result: dict, metric: str = "alloc", point: str = "end") -> dict:
    """Whether vte orders the policies as the artifact does: every pair whose published means
    differ by more than the sum of their standard deviations, and those of them vte ranks the
    other way round. {"pairs": n, "reversed": [(better published, worse published), ...]}."""
    pub = {n: r["published"][metric][point] for n, r in result["policies"].items()
           if r["published"] and metric in r["published"]}
    mine = {n: result["policies"][n][f"{metric}_at_{point}"] for n in pub}
    pairs, reversed_ = 0, []
    names = [n for n in pub if mine[n]]
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            (ma, sa), (mb, sb) = pub[a], pub[b]
            if abs(ma - mb) <= sa + sb:
                continue
            pairs += 1
            hi, lo = (a, b) if ma > mb else (b, a)
            if mine[hi]["mean"] <= mine[lo]["mean"]:
                reversed_.append((hi, lo))
    return {"pairs": pairs, "reversed": reversed_}


def summary(results: dict[str, dict], metrics=("alloc", "frag", "frag_ratio")) -> list[dict]:
    """One row per trace x policy: per metric vte's mean at 100 and at the end, the published
    one and the difference (None where there is nothing to compare)."""
    rows = []
    for trace, result in results.items():
        for name, r in result["policies"].items():
            row = {"trace": trace, "policy": name}
            for metric in metrics:
                pub = (r["published"] or {}).get(metric, {})
                for point in ("100", "end"):
                    mine, ref = r.get(f"{metric}_at_{point}"), pub.get(point)
                    row[f"{metric}_{point}"] = mine["mean"] if mine else None
                    row[f"{metric}_{point}_published"] = ref[0] if ref else None
                    row[f"{metric}_{point}_diff"] = (round(mine["mean"] - ref[0], 2)
                                                     if mine and ref else None)
            rows.append(row)
    return rows


def format_summary(results: dict[str, dict], metrics=("alloc", "frag")) -> str:
    """The summary as text: per trace x policy and per metric, vte @100, published, diff,
    vte @end, published, diff; then per trace whether the published ordering holds."""
    def num(v, sign=False):
        return "-" if v is None else (f"{v:+.2f}" if sign else f"{v:.2f}")
    group = f"{'':<27}" + "".join(f"  {METRICS[m][:48]:-^48}" for m in metrics)
    head = f"{'trace':<12}{'policy':<15}" + ("  " + "".join(
        f"{label:>8}" for label in ("@100", "pub", "diff", "@end", "pub", "diff"))) * len(metrics)
    lines = [group, head]
    worst = {}
    for row in summary(results, metrics):
        line = f"{row['trace']:<12}{DISPLAY.get(row['policy'], row['policy']):<15}"
        for metric in metrics:
            line += "  "
            for point in ("100", "end"):
                line += (f"{num(row[f'{metric}_{point}']):>8}{num(row[f'{metric}_{point}_published']):>8}"
                         f"{num(row[f'{metric}_{point}_diff'], True):>8}")
                diff = row[f"{metric}_{point}_diff"]
                if diff is not None:
                    worst[metric] = max(worst.get(metric, 0.0), abs(diff))
        lines.append(line)
    for trace, result in results.items():
        order = ordering(result)
        if order["pairs"]:
            verdict = ("reproduced" if not order["reversed"] else "reversed: " + ", ".join(
                f"{DISPLAY.get(a, a)} > {DISPLAY.get(b, b)}" for a, b in order["reversed"]))
            lines.append(f"{trace}: published ordering at the end ({order['pairs']} pairs apart by "
                         f"more than their stds) {verdict}")
    if worst:
        lines.append("largest |diff|: " + ", ".join(f"{m} {v:.2f} points" for m, v in worst.items()))
    return "\n".join(lines)


table = format_table   # the name `Registration.evaluate_module` promises
