"""The PWR paper's experiment on one trace (CCGrid 2025): every policy replayed on every
seed with the power log, summarised as the paper's figures beside its readings, as a table
and as its figures. Formulas: OPENB.md section 11 (`vte.openb.power`)."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Sequence

import jax
import numpy as np

from vte.openb import cluster, workload
from vte.openb.lab import simulator
from vte.openb.lab.experiment import DISPLAY, replay_concurrently, style_of
from vte.openb.policies import Policy
from vte.openb.power import (GRID_STEP, MILLI, PLATEAU, READINGS, WEIGHT_TOTAL, WHOLE,
                             curves_on_grid, datacenter_power, grid, parse_name,
                             power_model, summary)
from vte.openb.trace import DATA_DIR, NODE_FILES, POD_FILES

BOUND_STEP = 0.025          # x between two LPs of the power bound (a multiple of GRID_STEP)

# The paper's figures on `default` (POWER.md section 5, read from its figures: about +-0.5
# point of savings and +-0.003 of GRAR): GRAR at x = 1.0, the savings against FGD over the
# plateau x = 0.2..0.8 (low, high) and at x = 1.0, in %. FGD draws about 1.40 MW at x = 1.0.
PUBLISHED_POWER: dict[str, dict[str, dict]] = {
    "default": {
        "fgd": {"grar": 0.952, "plateau": (0.0, 0.0), "at_end": 0.0, "power_mw_at_end": 1.40},
        "pwr": {"grar": 0.904, "plateau": (13.5, 15.5), "at_end": 7.5},
        "pwr_fgd:500": {"grar": 0.919, "plateau": (13.5, 15.5), "at_end": 5.5},
        "pwr_fgd:200": {"grar": 0.928, "plateau": (13.0, 15.5), "at_end": 5.0},
        "pwr_fgd:100": {"grar": 0.928, "plateau": (13.0, 14.5), "at_end": 5.0},
        "pwr_fgd:50": {"grar": 0.926, "plateau": (13.0, 14.5), "at_end": 5.0},
        "best_fit": {"grar": 0.929, "plateau": (2.0, 5.0), "at_end": 2.5},
        "gpu_packing": {"grar": 0.918, "plateau": (0.0, 2.0), "at_end": 3.0},
    },
}


def measure(nodes, pods, policies: dict[str, Policy], seeds: Sequence[int], tune: float = 1.3,
            chunk: int = 2048, progress: bool = False, top: float = 1.0,
            workers: int | None = None, bound: bool = False,
            bound_step: float = BOUND_STEP) -> dict:
    """The PWR experiment on one trace: every policy (name -> policy; "fgd" among them, the
    reference of the savings) replayed on every seed with the power log, then `summary`.

    nodes, pods: a `NodeTable` and `PodTable`. Returns a JSON-ready dict: the trace, the
    seeds, per policy the `summary` figures and seconds, and the paper's readings of the
    bundled trace when there are some (`PUBLISHED_POWER`). workers: policies replayed at
    once, in threads (None: one per CPU core); the figures do not depend on it (each
    policy's seconds are its wall time beside the others). bound: also the least power any
    scheduler could draw having placed every pod (`bound.power_bound`, an LP per seed at
    every `bound_step` of x; needs scipy) and each policy's share of FGD's gap to it
    (`bound_figures`)."""
    if "fgd" not in policies:
        raise ValueError(f"policies {sorted(policies)}: 'fgd' is needed, the savings' reference")
    seeds = [int(s) for s in seeds]
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds {seeds}: give at least one seed, none twice")
    if bound:
        _check_bound_step(bound_step)
    table = power_model(nodes.models)
    start = time.perf_counter()
    spec = cluster.make_spec(nodes, workload.typical_pods(pods))
    works = [workload.build_workload(pods, nodes, s, tune) for s in seeds]
    batch = workload.pod_arrays(pods, works)
    ranks = np.stack([w.rank for w in works])
    keys = jax.vmap(jax.random.PRNGKey)(np.asarray(seeds, np.uint32))
    capacity = int(spec.total_gpu_milli)
    curves, seconds, placed = {}, {}, {}

    def replay(position: int, name: str):
        t0 = time.perf_counter()
        bar = None
        if progress:
            from tqdm import tqdm
            bar = tqdm(total=int(batch.valid.shape[1]), unit="pod", desc=name, unit_scale=True,
                       dynamic_ncols=True, position=position)
        log = simulator.replay(policies[name], spec, batch, ranks, keys, chunk=chunk, power=table,
                               progress=bar.update if bar is not None else None)
        if bar is not None:
            bar.close()
        placed[name] = log.placed
        return curves_on_grid(log, capacity, top=top), round(time.perf_counter() - t0, 2)

    # The policies replay concurrently in threads; the results do not depend on it.
    jobs = {name: (lambda i=i, name=name: replay(i, name)) for i, name in enumerate(policies)}
    done = dict(replay_concurrently(jobs, workers))
    for name in policies:                               # in the policies' order
        curves[name], seconds[name] = done[name]
    figures = summary(curves, capacity)
    trace = next((k for k, f in POD_FILES.items() if Path(pods.path) == DATA_DIR / f), None)
    bundled = Path(nodes.path) == DATA_DIR / NODE_FILES["gpu"] and tune == 1.3
    published = PUBLISHED_POWER.get(trace, {}) if bundled else {}
    empty = cluster.empty_state(spec, ranks[0])
    extra = {"power_bound": bound_figures(pods, nodes, works, curves, placed, top, bound_step)} \
        if bound else {}
    return {
        "trace": {"nodes": Path(nodes.path).name, "pods": Path(pods.path).name,
                  "num_nodes": len(nodes), "num_gpus": capacity // MILLI},
        "tune": tune, "seeds": seeds, "grid_step": GRID_STEP, "top": top,
        "empty_cluster_w": int(sum(datacenter_power(empty, spec, table))),
        "seconds": round(time.perf_counter() - start, 2),
        "platform": jax.default_backend(),
        "policies": {name: {**figures[name], "seconds": seconds[name],
                            "published": published.get(name)} for name in policies},
        **extra,
    }


# ------------------------------------------------------- the least power: a lower bound

def _check_bound_step(step: float) -> None:
    number = isinstance(step, (int, float)) and not isinstance(step, bool)
    ratio = step / GRID_STEP if number and math.isfinite(step) else 0.0
    if not (ratio > 0 and abs(ratio - round(ratio)) < 1e-9):
        raise ValueError(f"bound_step={step!r}: allowed a positive multiple of {GRID_STEP}")


def bound_figures(pods, nodes, works, curves: dict[str, dict], placed: dict[str, np.ndarray],
                  top: float = 1.0, step: float = BOUND_STEP) -> dict:
    """The least power (`bound.power_bound`) beside a replay's curves (`curves_on_grid` per
    policy, "fgd" among them; `works` the seeds' `workload.Workload`s): per seed and x (every
    `step` up to `top`) the bound in W where every pod that arrived can be placed, its seed
    mean, its savings against FGD as the policies' (`summary`, over each reading's x where it
    is defined on every seed), and per policy the x up to which it placed every pod on every
    seed (the bound holds for it there: `placed_all_through`) and the share of FGD's gap to
    the bound it closes, (P_FGD - P) / (P_FGD - bound) of the seed means, averaged over each
    reading's x where the bound is defined and holds for both (`gap_closed`). And per policy
    (`placed` its `Log.placed`, (S, T)) the least power of the pods it placed itself, below
    its power at every x whatever it failed (`own`): seed means on x, and its excess over
    it, (P - own) / P x 100, averaged over each reading's x (seed means, and per seed)."""
    from vte.openb.lab import bound as lp

    xs = grid(top, step)
    fine = curves["fgd"]["x"]
    at = np.searchsorted(fine, xs - 1e-9)                    # xs lie on the replay's grid
    per_seed = [lp.power_bound_curve(pods, nodes, w.order, xs) for w in works]
    watts = np.stack([w for w, _ in per_seed])               # (S, X)
    solved = np.stack([s for _, s in per_seed]).all(axis=0)  # (X,)
    ref = curves["fgd"]["power"][:, at]                      # (S, X)
    mean = np.where(solved, watts.mean(axis=0), 0.0)
    ref_mean = ref.mean(axis=0)
    saving = np.where(solved, (ref_mean - mean) / ref_mean * 100, 0.0)
    out = {"x": xs.tolist(), "step": step,
           "defined": solved.tolist(),
           "power_w": [round(float(w), 1) if ok else None for w, ok in zip(mean, solved)],
           "per_seed_w": [[round(float(w), 1) if ok else None for w, ok in zip(row, ok_row)]
                          for row, (_, ok_row) in zip(watts, per_seed)],
           "savings_pct": [round(float(v), 3) if ok else None for v, ok in zip(saving, solved)],
           "placed_all_through": {}, "gap_closed": {}}
    in_reading = {reading: (xs >= low - 1e-9) & (xs <= high + 1e-9)
                  for reading, (low, high) in READINGS.items()}
    seed_saving = (ref - watts) / ref * 100
    for reading, span in in_reading.items():
        within = span & solved
        out[f"savings_{reading}_pct"] = (
            {stat: round(float(f(saving[within])), 2)
             for stat, f in (("min", np.min), ("mean", np.mean), ("max", np.max))}
            if within.any() else None)
        out[f"savings_{reading}_per_seed_pct"] = (
            np.round(seed_saving[:, within].mean(axis=1), 2).tolist() if within.any() else None)
        out[f"{reading}_defined_x"] = [round(float(x), 4) for x in xs[within]]
    for name, c in curves.items():
        clean = (c["failed"] == 0).all(axis=0)               # (fine X,) no failure on any seed
        first_fail = np.flatnonzero(~clean)
        out["placed_all_through"][name] = round(float(
            fine[first_fail[0] - 1] if len(first_fail) and first_fail[0] > 0
            else (fine[-1] if not len(first_fail) else 0.0)), 4)
    gap = ref_mean - mean
    out["own"] = {}
    for name, c in curves.items():
        mine = c["power"][:, at]                             # (S, X)
        holds = xs <= min(out["placed_all_through"][name], out["placed_all_through"]["fgd"]) + 1e-9
        out["gap_closed"][name] = {}
        for reading, span in in_reading.items():
            within = span & solved & holds & (gap > 1e-9)
            out["gap_closed"][name][reading] = (
                round(float(np.mean((ref_mean - mine.mean(axis=0))[within] / gap[within])), 4)
                if within.any() else None)
        own, ok = map(np.stack, zip(*(lp.power_bound_curve(pods, nodes, w.order, xs,
                                                           placed[name][s, :len(w.order)])
                                      for s, w in enumerate(works))))    # (S, X)
        if not ok.all():                 # the replay placed them, so the relaxation can
            raise RuntimeError(f"the least power of {name}'s own placed pods has no solution")
        excess = (mine - own) / mine * 100
        seed_mean = (mine.mean(axis=0) - own.mean(axis=0)) / mine.mean(axis=0) * 100
        row = {"power_w": np.round(own.mean(axis=0), 1).tolist()}
        for reading, span in in_reading.items():
            row[f"excess_{reading}_pct"] = round(float(seed_mean[span].mean()), 2)
            row[f"excess_{reading}_per_seed_pct"] = np.round(
                excess[:, span].mean(axis=1), 2).tolist()
        out["own"][name] = row
    return out


def format_table(result: dict) -> str:
    """The power figures as a text table, beside the paper's readings when there are some."""
    lines = [f"{result['trace']['pods']} on {result['trace']['nodes']}, tune {result['tune']}, "
             f"{len(result['seeds'])} seeds; empty cluster {result['empty_cluster_w'] / 1e3:.1f} kW; "
             f"savings against FGD in %, plateau x {PLATEAU[0]}..{PLATEAU[1]} (min..max, mean), "
             f"whole x {WHOLE[0]}..{WHOLE[1]} (mean)",
             f"{'policy':<13}{'GRAR@1.0':>9}{'paper':>7}{'MW@1.0':>8}{'CPU MW':>8}"
             f"{'plateau vte':>22}{'paper':>12}{'whole':>7}{'@1.0':>7}{'paper':>7}{'s':>7}"]
    for name, r in result["policies"].items():
        pub = r["published"] or {}
        plat = r["savings_plateau_pct"]
        paper_plat = "{:.1f}..{:.1f}".format(*pub["plateau"]) if pub else "-"
        whole = r.get("savings_whole_pct", {}).get("mean", float("nan"))
        lines.append(
            f"{name:<13}{r['grar']:>9.4f}{pub.get('grar', float('nan')):>7.3f}"
            f"{r['power_mw_at_end']:>8.3f}{r['cpu_mw_at_end']:>8.3f}"
            f"{plat['min']:>8.2f}..{plat['max']:<6.2f}({plat['mean']:5.2f}){paper_plat:>12}"
            f"{whole:>7.2f}{r['savings_at_end_pct']:>7.2f}{pub.get('at_end', float('nan')):>7.1f}"
            f"{r['seconds']:>7.1f}")
    b = result.get("power_bound")
    if b is not None and b["savings_plateau_pct"] is not None:
        plat = b["savings_plateau_pct"]
        lines.append(f"{'least power (LP bound; no scheduler placing every pod draws less)':<66}"
                     f"savings plateau {plat['min']:.2f}..{plat['max']:.2f} ({plat['mean']:.2f})")
        lines.append("share of FGD's gap to it closed, plateau (placed every pod through x): " + ", ".join(
            f"{display_name(n)} {'-' if g['plateau'] is None else format(g['plateau'], '.3f')} "
            f"({b['placed_all_through'][n]:.3f})" for n, g in b["gap_closed"].items()))
    if b is not None:
        lines.append("power above the least for its own placed pods, plateau / whole (%): " + ", ".join(
            f"{display_name(n)} {o['excess_plateau_pct']:.2f} / {o['excess_whole_pct']:.2f}"
            for n, o in b["own"].items()))
    lines.append(f"{result['seconds']:.1f} s in all on {result['platform']}")
    return "\n".join(lines)


# The power policies' lines in every figure (the published ones keep `experiment.STYLES`).
STYLES = {"pwr": dict(color="tab:green", ls="-"), "pwr_fgd:500": dict(color="tab:brown", ls="--"),
          "pwr_fgd:300": dict(color="tab:pink", ls="--"), "pwr_fgd:200": dict(color="tab:cyan", ls="-"),
          "pwr_fgd:100": dict(color="black", ls="--"), "pwr_fgd:50": dict(color="tab:purple", ls=":"),
          "pwr_fgd:25": dict(color="tab:olive", ls=":")}


def display_name(name: str) -> str:
    """The paper's legend: "PWR", "PWR 200" for pwr_fgd:200, the published policies' names."""
    a = parse_name(name)
    return DISPLAY.get(name, name) if a is None else ("PWR" if a == WEIGHT_TOTAL else f"PWR {a}")


def plot(result: dict, path: str) -> None:
    """Datacenter power against arrived GPU demand and savings against FGD per policy (the
    paper's figures), seed means."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, r in result["policies"].items():
        x = 100 * np.asarray(r["x"])
        style = STYLES.get(name) or style_of(name)
        axes[0].plot(x, np.asarray(r["power_w"]) / 1e6, label=display_name(name), lw=1.4, **style)
        if name != "fgd":
            axes[1].plot(x, r["savings_pct"], label=display_name(name), lw=1.4, **style)
    b = result.get("power_bound")
    if b is not None and any(b["defined"]):
        ok = np.asarray(b["defined"])
        x = 100 * np.asarray(b["x"])[ok]
        style = dict(color="0.3", ls=(0, (2, 2)), lw=1.2, label="least power (LP bound)")
        axes[0].plot(x, np.asarray([w for w in b["power_w"] if w is not None]) / 1e6, **style)
        axes[1].plot(x, [v for v in b["savings_pct"] if v is not None], **style)
    axes[0].set(xlabel="arrived GPU demand (% of cluster GPUs)", ylabel="datacenter power (MW)",
                title="power (CPUs + GPUs of all nodes)")
    axes[1].set(xlabel="arrived GPU demand (% of cluster GPUs)", ylabel="power savings vs FGD (%)",
                title="savings against FGD")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{result['trace']['pods']}, tune {result['tune']}, mean of "
                 f"{len(result['seeds'])} seeds")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ------------------------------------------------ a learned front against the published mixes

def mixes(result: dict) -> list[str]:
    """The PWR+FGD mixes and PWR alone among a result's policies (a > 0)."""
    return [n for n in result["policies"] if (parse_name(n) or 0) > 0]


def lacking(result: dict, names: Sequence[str], reading: str) -> list[str]:
    """The policies of `names` in `result` without the `reading`'s savings (replayed before
    that reading was recorded). ValueError naming a reading not in `power.READINGS`."""
    if reading not in READINGS:
        raise ValueError(f"reading={reading!r}: must be one of {sorted(READINGS)}")
    return [n for n in names if f"savings_{reading}_pct" not in result["policies"][n]]


def dominance(result: dict, learned: Sequence[str], reading: str = "plateau") -> dict:
    """Whether the `learned` policies' front dominates the PWR+FGD mixes of `result`
    (`measure`), on the mean savings against FGD over the `reading`'s x range (seed means;
    "plateau": x 0.2..0.8, the paper's; "whole": x 0.2..1.0, which also sees the cluster
    filling up, `power.READINGS`) and GRAR at x = 1.0 (below, "savings" is that reading's):

    * per mix: the learned policies with at least its savings and a higher GRAR, and of
      those the one whose GRAR is higher on the most seeds (`seeds_higher` of the seeds);
    * per mix, seed by seed (`seeds_front`): on how many seeds some learned policy both
      saves at least as much as the mix on that seed (savings against FGD's replay of the
      seed) and allocates more at x = 1.0, i.e. the front measured on that seed
      dominates the mix there; the policies that do it on each seed (`front_per_seed`);
      and the one learned policy that does it on the most seeds (`single`, the first of
      `learned` on a tie; None when none does it on any seed) and on how many
      (`seeds_single`). None for a result without per-seed savings (written before they
      were recorded);
    * at FGD's GRAR: the learned policies whose GRAR is at least FGD's, their savings, and
      whether one saves more than every mix anywhere (`beats_every_mix_at_fgd_grar`, the
      strict reading: FGD's allocation with more savings than PWR alone);
    * at FGD's GRAR, seed by seed (`fgd_grar`): on how many seeds some learned policy
      allocates at least FGD's GRAR on that seed and saves more than FGD (0) and than every
      mix that also allocates at least FGD's GRAR on that seed (`seeds_front`), i.e. the
      front lies right of the mixes' at FGD's GRAR; the policies that do it per seed
      (`front_per_seed`), the one that does it on the most seeds (`single`, None when
      none does) and on how many (`seeds_single`); and per seed, the most any such mix
      saves there (`mix_savings_per_seed`, 0 where no mix reaches FGD's GRAR). None for a
      result without per-seed savings.

    ValueError naming the reading when it is not one of `power.READINGS`, or when a policy
    of the judgement lacks it (a result written before the whole reading was recorded)."""
    pol = result["policies"]
    judged = list(learned) + mixes(result)
    missing = lacking(result, judged, reading)
    if missing:
        raise ValueError(f"reading={reading!r}: {missing} have no savings_{reading}_pct (a "
                         "result written before that reading was recorded: replay them)")
    sav = f"savings_{reading}_per_seed_pct"
    per_seed = all(sav in pol[p] for p in judged)

    def front_per_seed(m):
        """Per seed, the learned policies dominating mix `m` on that seed."""
        grar = "grar_per_seed"
        return [[p for p in learned
                 if pol[p][sav][s] >= pol[m][sav][s] and pol[p][grar][s] > pol[m][grar][s]]
                for s in range(len(result["seeds"]))]

    def saving(name):
        return pol[name][f"savings_{reading}_pct"]["mean"]

    def seeds_higher(a, b):
        return int(np.sum(np.asarray(pol[a]["grar_per_seed"]) > np.asarray(pol[b]["grar_per_seed"])))

    per_mix = {}
    for m in mixes(result):
        better = [p for p in learned if saving(p) >= saving(m) and pol[p]["grar"] > pol[m]["grar"]]
        best = max(better, key=lambda p: seeds_higher(p, m), default=None)
        per_mix[m] = {"savings": saving(m), "grar": pol[m]["grar"], "dominated_by": better,
                      "best": best, "seeds_higher": None if best is None else seeds_higher(best, m)}
        per_mix[m].update(_counted(front_per_seed(m) if per_seed else None, learned))
    at_fgd = [p for p in learned if pol[p]["grar"] >= pol["fgd"]["grar"]]
    fgd_grar = _at_fgd_grar_per_seed(pol, learned, mixes(result), sav) if per_seed else None
    most = max((saving(m) for m in mixes(result)), default=0.0)
    beats = any(saving(p) > most for p in at_fgd)
    return {"per_mix": per_mix,
            "at_fgd_grar": {p: {"savings": saving(p), "grar": pol[p]["grar"],
                                "seeds_at_least_fgd": int(np.sum(
                                    np.asarray(pol[p]["grar_per_seed"])
                                    >= np.asarray(pol["fgd"]["grar_per_seed"])))}
                            for p in at_fgd},
            "most_mix_savings": most,
            "beats_every_mix_at_fgd_grar": beats,
            "fgd_grar": fgd_grar,
            "dominates": beats and all(v["best"] is not None
                                       and v["seeds_higher"] == len(result["seeds"])
                                       for v in per_mix.values())}


def _at_fgd_grar_per_seed(pol: dict, learned: Sequence[str], mix_names: Sequence[str],
                         sav: str) -> dict:
    """`dominance`'s `fgd_grar` entry: per seed, the learned policies that allocate at least
    FGD's GRAR there and save more (key `sav`, per seed) than FGD and than every mix that
    allocates at least FGD's GRAR there."""
    grar = "grar_per_seed"
    front, bar = [], []
    for s, fgd in enumerate(pol["fgd"][grar]):
        there = [pol[m][sav][s] for m in mix_names if pol[m][grar][s] >= fgd]
        bar.append(max([0.0, *there]))
        front.append([p for p in learned if pol[p][grar][s] >= fgd and pol[p][sav][s] > bar[-1]])
    return {**_counted(front, learned), "mix_savings_per_seed": bar}


def _counted(front: list[list[str]] | None, learned: Sequence[str]) -> dict:
    """A seed-by-seed judgement from `front` (per seed, the learned policies that pass; None
    without per-seed savings): the seeds some policy passes on (`seeds_front`), the one
    that passes on the most (`single`, the first of `learned` on a tie; None when none
    passes anywhere) and on how many (`seeds_single`)."""
    if front is None:
        return {"front_per_seed": None, "seeds_front": None, "single": None,
                "seeds_single": None}
    counts = {p: sum(p in f for f in front) for p in learned}
    single = max(counts, key=counts.get, default=None)
    single = single if single is not None and counts[single] else None
    return {"front_per_seed": front, "seeds_front": sum(bool(f) for f in front),
            "single": single, "seeds_single": counts.get(single, 0)}


def seed_table(results: dict[str, dict], reading: str = "plateau") -> str:
    """A Markdown table of finished fronts (`results`: trace name -> a judged result, each
    with its `learned` policies): per PWR mix (rows, PWR alone first, then by weight down)
    and trace (columns, in the order of `results`), on how many seeds the trace's front
    dominates the mix (`dominance`'s `seeds_front`: each seed judged with its own savings on
    the `reading`), then in brackets the one learned policy's count (`seeds_single`); bold
    where that is every seed, "-" where the trace has no replay of the mix. A last row says
    per trace whether the front dominates every mix replayed there on every seed (in
    brackets, how many mixes; "-" for a trace without mixes). The row after it counts the
    seeds on which the front allocates at least FGD's GRAR with more savings than FGD and
    every mix that does (`dominance`'s `fgd_grar`), the one policy's count in brackets.
    "n/a" for a trace written before per-seed savings were recorded (no seed can be judged).
    ValueError naming a reading that a trace's policies lack (`dominance`)."""
    judged, at_fgd, mixes_seen = {}, {}, {}
    for trace, result in results.items():
        both = dominance(result, result["learned"], reading)
        judged[trace], at_fgd[trace] = both["per_mix"], both["fgd_grar"]
        mixes_seen.update(dict.fromkeys(judged[trace]))
    rows = sorted(mixes_seen, key=lambda m: -parse_name(m))
    lines = [f"| mix ({reading}) | " + " | ".join(f"`{t}`" for t in results) + " |",
             "|---|" + "---|" * len(results)]

    def count(trace, k):
        return f"**{k}**" if k == len(results[trace]["seeds"]) else str(k)

    def counted(trace, v):
        if v is None or v["seeds_front"] is None:
            return "n/a"
        return f"{count(trace, v['seeds_front'])} ({count(trace, v['seeds_single'])})"

    def cell(trace, mix):
        return counted(trace, judged[trace][mix]) if mix in judged[trace] else "-"

    def last(trace):
        counts = [v["seeds_front"] for v in judged[trace].values()]
        if not counts:
            return "-"
        if None in counts:
            return "n/a"
        every = all(c == len(results[trace]["seeds"]) for c in counts)
        return f"**yes** ({len(counts)})" if every else f"no ({len(counts)})"

    lines += [f"| {display_name(m)} | " + " | ".join(cell(t, m) for t in results) + " |"
              for m in rows]

    lines.append("| every mix, every seed | " + " | ".join(last(t) for t in results) + " |")
    lines.append("| at FGD's GRAR, more savings than the mixes there | "
                 + " | ".join(counted(t, at_fgd[t]) for t in results) + " |")
    return "\n".join(lines)


def ordered_learned(names: Sequence[str]) -> list[str]:
    """Learned policy names ("learned@w", "learned+pwr@a", "learned+pwr_within@m",
    "learned+pwr_within[x/late]@m", either with "+sockets" before the @) without repeats, each group in the order it first
    appears and its members by their number: the order of a front's line."""
    names = list(dict.fromkeys(names))
    groups = list(dict.fromkeys(n.split("@")[0] for n in names))
    return sorted(names, key=lambda n: (groups.index(n.split("@")[0]), float(n.split("@")[1])))


def plot_front(results: dict[str, dict], learned: Sequence[str], path: str,
               reading: str = "plateau") -> None:
    """One panel per trace: GRAR at x = 1.0 against the mean savings against FGD over the
    `reading`'s x range (seed means; `power.READINGS`), the published policies and mixes as
    points, the `learned` ones as a line. ValueError naming an unknown reading, or a trace
    whose policies lack it, before anything is drawn."""
    key = f"savings_{reading}_pct"
    for trace, result in results.items():
        missing = lacking(result, list(result["policies"]), reading)
        if missing:
            raise ValueError(f"reading={reading!r}: {trace}'s {missing} have no {key} (replayed "
                             "before that reading was recorded)")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(len(results), 3)                      # three panels a row
    rows = -(-len(results) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.6 * cols, 6.4 * rows), squeeze=False)
    for ax in axes.flat[len(results):]:
        ax.set_visible(False)
    colors = ("magenta", "darkorange", "teal", "royalblue", "crimson", "olive")
    kinds = list(dict.fromkeys(p.split("@")[0] for p in ordered_learned(learned)))
    color_of = {kind: colors[i % len(colors)] for i, kind in enumerate(kinds)}  # every panel
    for ax, (trace, result) in zip(axes.flat, results.items()):
        pol = result["policies"]
        for name, r in pol.items():
            if name in learned:
                continue
            style = STYLES.get(name) or style_of(name)
            ax.plot(r[key]["mean"], r["grar"], "o", color=style.get("color"),
                    label=display_name(name))
        groups: dict[str, list[str]] = {}     # "learned@w", "learned+pwr@a", ...: a line each
        for p in ordered_learned(learned):
            if p in pol:
                groups.setdefault(p.split("@")[0], []).append(p)
        for group, names in groups.items():
            color = color_of[group]
            xs = [pol[p][key]["mean"] for p in names]
            ys = [pol[p]["grar"] for p in names]
            plain = group.removesuffix("+sockets")
            label = {"learned": "learned (preference w)",
                     "learned+pwr": "learned + PWR (weight a)",
                     "learned+pwr_within": "PWR within the learned margin (nats)"}.get(plain)
            if label is None and plain.startswith("learned+pwr_within["):    # [x/late]
                x, late = plain[len("learned+pwr_within["):-1].split("/")
                label = f"PWR within the learned margin (nats), {late} from x = {x}"
            if label is not None and plain != group:
                label += ", fullest sockets first"
            ax.plot(xs, ys, "-s", color=color, ms=4, label=label or group)
            for p, x, y in zip(names, xs, ys):
                ax.annotate(p.split("@")[-1], (x, y), fontsize=7, xytext=(3, -8),
                            textcoords="offset points")
        low, high = READINGS[reading]
        ax.set(xlabel=f"power savings vs FGD, mean over x {low}..{high} (%)",
               ylabel="GRAR at x = 1.0", title=f"{trace}, {len(result['seeds'])} seeds")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.13))
    fig.tight_layout()         # each legend under its panel: none covers the points
    fig.savefig(path, dpi=110)
    plt.close(fig)
