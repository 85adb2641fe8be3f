"""How often the lookahead planner agrees with itself and with FGD: the noise in its labels.

    python benchmarks/plan_agreement.py                      # 16 sub-clusters of 64 nodes
    python benchmarks/plan_agreement.py --futures 32 --json out.json
    python benchmarks/plan_agreement.py --horizon 32 --pods-first
    python benchmarks/plan_agreement.py --horizon 32 --confidence 1

Distilling the planner (`train/imitate.py --env openb --teacher plan_fgd`) trains the
network on one planner decision per state. The planner draws its futures from its key
(`vte.openb.lookahead`), so two labels of one state can differ; this script measures how
often. `--envs` OpenB environments (64-node sub-clusters of the training workloads, seeds
10_000..) are stepped under FGD; every `--every` decisions from decision `--start` on, each
state is labelled three times, by the planner with two independent keys and by FGD, and
the agreements are counted. Self-agreement bounds what a network can match of one label
per state: the rest is the futures' draw, not the state.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import vte  # noqa: E402
from vte.openb import env as oenv  # noqa: E402
from vte.openb.lookahead import DEFAULTS, check_confidence, planner  # noqa: E402
from vte.openb.policies import POLICIES  # noqa: E402
from vte.openb.registration import TRAIN_SEED0  # noqa: E402


def agreement(pods: str = "default", num_nodes: int = 64, envs: int = 16, steps: int = 48,
              start: int = 6, every: int = 3, futures: int = DEFAULTS["futures"],
              seed: int = 0, horizon: int = DEFAULTS["horizon"], pods_first: bool = False,
              confidence: float = 0.0) -> dict:
    """Counts of planner/planner and planner/FGD agreement over the labelled states; the
    planner over FGD with `futures`, `horizon`, `pods_first` and `confidence`
    (`lookahead.planner`)."""
    env, params = vte.make("OpenB-v0", pods=pods, subset=num_nodes,
                           seeds=range(TRAIN_SEED0, TRAIN_SEED0 + envs))
    fgd = oenv.policy_action(POLICIES["fgd"])
    plan = oenv.policy_action(planner(POLICIES["fgd"], futures=futures, horizon=horizon,
                                      pods_first=pods_first, confidence=confidence))

    def batched(policy):
        return jax.jit(lambda k, s: jax.vmap(policy, (0, 0, None))(jax.random.split(k, envs),
                                                                    s, params))
    label_fgd, label_plan = batched(fgd), batched(plan)
    step = jax.jit(lambda k, s, a: jax.vmap(env.step, (0, 0, 0, None))(
        jax.random.split(k, envs), s, a, params)[1])
    _, state = jax.vmap(env.reset, (0, None))(jax.random.split(jax.random.key(seed), envs), params)
    key = jax.random.key(seed + 1)
    same, with_fgd, states = 0, 0, 0
    for t in range(steps):
        key, k_fgd, k_a, k_b = jax.random.split(key, 4)
        action = label_fgd(k_fgd, state)
        if t >= start and (t - start) % every == 0:
            a, b = np.asarray(label_plan(k_a, state)), np.asarray(label_plan(k_b, state))
            same += int((a == b).sum())
            with_fgd += int((a == np.asarray(action)).sum())
            states += envs
        state = step(k_fgd, state, action)
    return {"pods": pods, "num_nodes": num_nodes, "futures": futures, "horizon": horizon,
            "pods_first": pods_first, "confidence": confidence, "states": states,
            "planner_with_itself": same / max(states, 1),
            "planner_with_fgd": with_fgd / max(states, 1)}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pods", default="default", help="a bundled pod file (default: default)")
    p.add_argument("--num-nodes", type=int, default=64)
    p.add_argument("--envs", type=int, default=16)
    p.add_argument("--steps", type=int, default=48, help="decisions per environment")
    p.add_argument("--start", type=int, default=6, help="first labelled decision")
    p.add_argument("--every", type=int, default=3, help="label every this many decisions")
    p.add_argument("--futures", type=int, default=DEFAULTS["futures"],
                   help="the planner's sampled futures per candidate")
    p.add_argument("--horizon", type=int, default=DEFAULTS["horizon"],
                   help="pods per sampled future")
    p.add_argument("--pods-first", action="store_true",
                   help="the planner's pods-first tie-break (`--plan-pods-first`)")
    p.add_argument("--confidence", type=float, default=0.0,
                   help="the planner's choice by evidence, z standard errors "
                        "(`--plan-confidence`; default 0: the lexicographic choice)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="write the figures here")
    args = p.parse_args(argv)
    for name in ("num_nodes", "envs", "steps", "every", "futures", "horizon"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if not 0 <= args.start < args.steps:
        p.error(f"--start must be in [0, --steps), got {args.start}")
    try:
        check_confidence(args.confidence, args.futures, args.pods_first)
    except ValueError as err:
        p.error(f"--confidence: {err}")
    result = agreement(args.pods, args.num_nodes, args.envs, args.steps, args.start,
                       args.every, args.futures, args.seed, args.horizon, args.pods_first,
                       args.confidence)
    print(f"{result['states']} states, {args.futures} futures of {args.horizon} pods"
          f"{' (pods first)' if args.pods_first else ''}"
          f"{f' (evidence, z = {args.confidence:g})' if args.confidence else ''}: the planner agrees with itself "
          f"(another key) on {result['planner_with_itself']:.3f}, with FGD on "
          f"{result['planner_with_fgd']:.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
