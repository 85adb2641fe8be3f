"""Labels per second of the planning teachers: what an expert-iteration round costs.

    python benchmarks/plan_labels.py                              # the chain's two teachers
    python benchmarks/plan_labels.py --teachers round --num-envs 32 --json out.json

`train/imitate.py --env openb` with a planning teacher spends most of an update labelling
its states (`TrainEnv.labels`: the teacher over every environment at once, one vmapped
call). This script builds the training environment and teacher from the trainer's own flags
(`train.run.parse`, `train.envs.make_env`), plays the environments `--warm-steps` steps
under FGD so that the clusters are partly full, then times one labelling call of the whole
batch, compiled first and apart: `--repeats` times, each on fresh keys. Teachers (the
training runs of `train/openb_evidence_chain.sh`):

  round     the planner over FGD at its defaults (4 candidates x 8 futures x 8 pods),
            counting failed pods: `--teacher plan_fgd --plan-pods-first`;
  evidence  the horizon-32 planner over a network (`--run`), FGD playing the futures,
            choosing by evidence: `--teacher plan:RUN --plan-rollouts fgd --plan-horizon 32
            --plan-confidence 2`.

Prints labels per second (the batch over the fastest repeat, and over the median) and the
seconds one update of `--num-envs` x 16 states spends labelling at the median.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import jax

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.throughput import machine  # noqa: E402
from train import run  # noqa: E402
from train.config import ImitateConfig  # noqa: E402
from train.envs import make_env  # noqa: E402
from vte.openb import env as oenv  # noqa: E402
from vte.openb.policies import POLICIES  # noqa: E402

TEACHERS = {
    "round": ["--teacher", "plan_fgd", "--plan-pods-first"],
    "evidence": ["--teacher", "plan:{run}", "--plan-rollouts", "fgd", "--plan-horizon", "32",
                 "--plan-confidence", "2"],
}
STEPS_PER_UPDATE = 16          # the chain's --num-steps


def measure(teacher: str, run_dir: str, trace: str, num_nodes: int, num_envs: int,
            warm_steps: int, repeats: int, seed: int = 0, workloads: int = 256) -> dict:
    """One teacher's labelling of `num_envs` states: compile and repeat times (s)."""
    flags = [f.format(run=run_dir) for f in TEACHERS[teacher]]
    config, *_ = run.parse(["--env", "openb", "--trace", trace, "--num-nodes", str(num_nodes),
                            "--num-envs", str(num_envs), "--workloads", str(workloads),
                            "--hidden", "64", *flags],
                           ImitateConfig, "plan_labels")
    env = make_env(config)
    fgd = oenv.policy_action(POLICIES["fgd"])
    keys = jax.random.split(jax.random.key(seed), num_envs)
    obs, states = jax.jit(jax.vmap(env.reset))(keys)

    @jax.jit
    def fgd_step(keys, states):
        action = jax.vmap(lambda k, s: fgd(k, s, env.params))(keys, states)
        return jax.vmap(env.step)(keys, states, action)[:2]
    for t in range(warm_steps):
        obs, states = fgd_step(jax.random.split(jax.random.key(seed + 1 + t), num_envs), states)
    labels = jax.jit(env.labels)
    start = time.perf_counter()
    compiled = labels.lower(keys, states, obs).compile()
    compile_s = time.perf_counter() - start
    times = []
    for r in range(repeats + 1):                       # the first call apart: a warm-up
        keys = jax.random.split(jax.random.key(10_000 + r), num_envs)
        start = time.perf_counter()
        jax.block_until_ready(compiled(keys, states, obs))
        times.append(time.perf_counter() - start)
    repeat_s = times[1:]
    median = statistics.median(repeat_s)
    return {"teacher": teacher, "flags": flags, "trace": trace, "num_nodes": num_nodes,
            "num_envs": num_envs, "workloads": workloads, "warm_steps": warm_steps,
            "compile_s": compile_s,
            "repeat_s": repeat_s, "labels_per_s_best": num_envs / min(repeat_s),
            "labels_per_s_median": num_envs / median,
            "label_s_per_update": median * STEPS_PER_UPDATE}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--teachers", default="round,evidence",
                   help=f"comma-separated, of {', '.join(TEACHERS)}")
    p.add_argument("--run", default="zoo:openb-evidence",
                   help="the network the evidence teacher plans over (an OpenB run directory "
                   "or zoo:NAME; the chain's is its round 3, the same 64-unit network "
                   "before the evidence round, measured until the zoo shipped only the "
                   "evidence network)")
    p.add_argument("--trace", default="default,gpushare100,cpu250")
    p.add_argument("--num-nodes", type=int, default=64)
    p.add_argument("--num-envs", type=int, default=128)
    p.add_argument("--workloads", type=int, default=256,
                   help="training workloads of the bank, as the trainer's --workloads")
    p.add_argument("--warm-steps", type=int, default=60)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", default=None, help="write the figures here")
    args = p.parse_args(argv)
    teachers = [t for t in args.teachers.split(",") if t]
    bad = [t for t in teachers if t not in TEACHERS]
    if bad or not teachers:
        p.error(f"--teachers={args.teachers!r} is invalid: allowed a comma-separated list of "
                f"{', '.join(TEACHERS)}")
    for name in ("num_nodes", "num_envs", "repeats", "workloads"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')}={getattr(args, name)} is invalid: allowed an "
                    "integer >= 1")
    if args.warm_steps < 0:
        p.error(f"--warm-steps={args.warm_steps} is invalid: allowed an integer >= 0")
    rows = []
    for teacher in teachers:
        row = measure(teacher, args.run, args.trace, args.num_nodes, args.num_envs,
                      args.warm_steps, args.repeats, workloads=args.workloads)
        rows.append(row)
        print(f"{teacher:9s} {row['labels_per_s_best']:8.1f} labels/s best, "
              f"{row['labels_per_s_median']:8.1f} median; {row['label_s_per_update']:6.1f} s "
              f"labelling per update of {args.num_envs} x {STEPS_PER_UPDATE} states; "
              f"compile {row['compile_s']:.1f} s", flush=True)
    result = {"machine": machine(), "teachers": rows}
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
