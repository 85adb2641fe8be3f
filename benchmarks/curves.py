"""Optimal-match rate against training time, for several runs in one figure.

    python benchmarks/curves.py runs/imitate runs/ppo --out docs/images/match_vs_time.png
    python benchmarks/curves.py runs/imitate_4seeds --target 0.98

One line per run and seed: the greedy policy's match rate on the fresh states of each
rollout (`greedy_match` in `metrics.jsonl`, states the network has not trained on yet; a
trailing mean of `--smooth` updates) against the training time in minutes (the run's
`time` column: compilation, checkpoints and the final evaluation excluded). A marker at each line's end shows the held-out match
rate of that seed in the run's `eval.json`, and dashed lines the `--target` rates. Prints
one row per run and seed: minutes, updates, last training-time match and held-out match.
"""

from __future__ import annotations

import argparse
import json
import os

from vte.train.envs import trained_entry
from vte.train.run import read_rows
from vte import checkpoint as ckpt


def read_run(run_dir: str) -> dict:
    """The run's configuration, metrics rows and held-out match rate per seed (none when the
    run has no eval.json). FileNotFoundError or CheckpointError names a directory that is
    not a run or a damaged config.json."""
    config = ckpt.load_config(run_dir)
    rows = read_rows(os.path.join(run_dir, "metrics.jsonl"))
    held_out = {}
    eval_path = os.path.join(run_dir, "eval.json")
    if os.path.isfile(eval_path):
        with open(eval_path) as f:
            results = json.load(f)
        for s in range(config.get("seeds", 1)):
            entry = trained_entry(results, run_dir, s)   # the run's row, by either name
            if isinstance(entry, dict) and "match_rate" in entry:
                held_out[s] = entry["match_rate"]
    return {"config": config, "rows": rows, "held_out": held_out}


def summarize(run_dir: str, run: dict) -> list[dict]:
    """One row per seed: minutes of training, updates, last greedy_match, held-out match."""
    out = []
    for s in range(run["config"].get("seeds", 1)):
        rows = [r for r in run["rows"] if r.get("seed", 0) == s]
        if not rows:
            continue
        out.append({"run": run_dir, "algorithm": run["config"].get("algorithm"), "seed": s,
                    "minutes": rows[-1]["time"] / 60.0, "updates": rows[-1]["update"],
                    "greedy_match": rows[-1].get("greedy_match"),
                    "held_out_match": run["held_out"].get(s)})
    return out


def smooth(y, window: int) -> list[float]:
    """Trailing mean over the last `window` values (fewer at the start)."""
    out, total = [], 0.0
    for i, v in enumerate(y):
        total += v
        if i >= window:
            total -= y[i - window]
        out.append(total / min(i + 1, window))
    return out


def plot(runs: dict, path: str, targets: list[float], window: int) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (run_dir, run) in enumerate(runs.items()):
        color = colors[i % len(colors)]
        name = f"{run['config'].get('algorithm', '?')} ({os.path.basename(run_dir.rstrip('/'))})"
        for s in range(run["config"].get("seeds", 1)):
            pts = [(r["time"] / 60.0, r["greedy_match"]) for r in run["rows"]
                   if r.get("seed", 0) == s and r.get("greedy_match") is not None]
            if not pts:
                continue
            x, y = zip(*pts)
            ax.plot(x, smooth(y, window), color=color, lw=1, alpha=0.8,
                    label=name if s == 0 else None)
            if s in run["held_out"]:
                ax.plot([x[-1]], [run["held_out"][s]], "o", color=color, ms=5)
    for t in targets:
        ax.axhline(t, color="grey", ls="--", lw=0.8)
    ax.set_ylim(0.7, 1.0)
    ax.set_xlabel("training time, minutes (compilation and evaluation excluded)")
    ax.set_ylabel("optimal-match rate (greedy)")
    ax.set_title(f"lines: fresh rollout states during training (mean of {window} "
                 "updates); dots: held-out eval.json", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    if os.path.dirname(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", help="run directories (train/ppo.py, train/imitate.py)")
    p.add_argument("--out", default="match_vs_time.png", help="the figure (PNG)")
    p.add_argument("--target", type=float, nargs="*", default=[0.95, 0.98],
                   help="match rates drawn as dashed lines")
    p.add_argument("--smooth", type=int, default=10, help="updates per trailing mean")
    args = p.parse_args(argv)
    if args.smooth < 1:
        p.error(f"--smooth={args.smooth} is invalid: allowed an integer >= 1")
    for t in args.target:
        if not 0.0 <= t <= 1.0:
            p.error(f"--target={t} is invalid: allowed a match rate in [0, 1]")
    try:
        runs = {r: read_run(r) for r in args.runs}
    except (FileNotFoundError, ckpt.CheckpointError) as err:
        p.error(str(err))
    rows = [row for r, run in runs.items() for row in summarize(r, run)]
    print("| run | algorithm | seed | training min | updates | last greedy match | "
          "held-out match |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        held = "" if r["held_out_match"] is None else f"{r['held_out_match']:.3f}"
        greedy = "" if r["greedy_match"] is None else f"{r['greedy_match']:.3f}"
        print(f"| {r['run']} | {r['algorithm']} | {r['seed']} | {r['minutes']:.1f} | "
              f"{r['updates']} | {greedy} | {held} |")
    plot(runs, args.out, args.target, args.smooth)
    return rows


if __name__ == "__main__":
    main()
