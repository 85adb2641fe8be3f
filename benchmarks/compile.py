"""What a first call waits for: the size of the step's program, where its operations come
from, the compile seconds of reset, step and a PPO update, and the step against a kernel.

    python benchmarks/compile.py                       # 8 and 64 nodes, the kernel at 4096 x 64
    python benchmarks/compile.py --nodes 8 --no-kernel --json out.json

For each node count:

- **the step's program**: `jax.jit(vte.cluster.env.step).lower(...)`, its StableHLO text in
  characters and operations (lines that define a StableHLO or CHLO operation);
- **operations per phase**: every operation of that program attributed, by the call stack
  JAX records in its location, to a phase of the step: the auto-reset (a fresh scenario
  drawn inside `step`), scenario draws, dynamics, twin, scoring, observation, the
  environment protocol (action checks, the auto-reset's selection) and the step's own glue
  (`vte/cluster/env.py`); helpers (`vte.cluster.fusion`, `vte.rng`) count for the phase that called them,
  the operations of a nested function for the phase of its call, and the constants JAX
  hoists without a call stack on their own line;
- **compile seconds** (lowering included, the persistent cache off) of `reset`, `step`,
  `step` under `vmap` (64 environments) and one PPO update of `train/ppo.py` at that node
  count (its defaults otherwise, 64 environments).

Then, unless `--no-kernel`, `benchmarks/kernel.py` at 4096 environments x 64 nodes: the
batched step's decisions/s against a minimal kernel of the same work, in the same process.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import vte  # noqa: E402
from vte.cluster import env as E  # noqa: E402

OP = re.compile(r"=\s*\"?(stablehlo|chlo)\.")
# The module of a frame decides its phase; helpers defer to the frame that called them.
PHASES = {"scenario.py": "scenario draws", "dynamics.py": "dynamics", "twin.py": "twin",
          "scoring.py": "scoring", "observation.py": "observation",
          "environment.py": "environment protocol", "env.py": "step glue (env.py)"}
HELPERS = ("fusion.py", "rng.py", "types.py", "params.py", "catalogue.py")
RESET_FRAMES = ("reset_state", "reset_env", "_fresh")


def frames(location: str) -> list[tuple[str, str]]:
    """(function, file name) of every frame of an MLIR location, innermost first."""
    return [(fn, path.rsplit("/", 1)[-1])
            for fn, path in re.findall(r'"([^"]+)"\("([^"]+\.py)":\d+', location)]


def phase_of(location: str) -> str:
    chain = frames(location)
    if any(fn.split(".")[-1] in RESET_FRAMES for fn, _ in chain):
        return "auto-reset (a fresh scenario)"
    for fn, name in chain:
        if name in PHASES:
            return PHASES[name]
        if name in HELPERS:
            continue
    return "other (JAX, outside vte)"


def program(n: int):
    params = vte.EnvParams(num_nodes=n)
    key = jax.random.PRNGKey(0)
    _, state = vte.reset(key, params)
    return params, key, state


def step_program(n: int) -> dict:
    """Characters, operations and operations per phase of the step's StableHLO."""
    params, key, state = program(n)
    lowered = jax.jit(E.step).lower(key, state, jnp.int32(0), params)
    text = lowered.as_text()
    ops = sum(1 for line in text.splitlines() if OP.search(line))
    module = lowered.compiler_ir("stablehlo")
    # Operations of a nested function (jit inside jit, custom_vmap) often carry no call
    # stack of their own: they take the phase of the call that runs their function.
    funcs = {str(f.attributes["sym_name"]).strip('"'): f for f in module.body.operations
             if f.operation.name == "func.func"}
    calls: dict[str, str] = {}

    def find_calls(op, phase):
        for region in op.regions:
            for block in region.blocks:
                for o in block.operations:
                    if o.operation.name == "func.call":
                        callee = str(o.attributes["callee"]).lstrip("@")
                        own = phase_of(str(o.location))
                        calls.setdefault(callee, own if not own.startswith("other") else phase)
                    find_calls(o, phase)

    per_phase: collections.Counter = collections.Counter()

    def walk(op, phase):
        for region in op.regions:
            for block in region.blocks:
                for o in block.operations:
                    if o.operation.name.startswith(("stablehlo.", "chlo.")):
                        own = phase_of(str(o.location))
                        if own.startswith("other") and o.operation.name == "stablehlo.constant":
                            own = "constants (hoisted, no call stack)"
                        per_phase[own if not own.startswith("other") else phase] += 1
                    walk(o, phase)

    order = ["main"] + [f for f in funcs if f != "main"]
    for name in order:                      # callers before callees (calls: main first)
        find_calls(funcs[name], calls.get(name, "other (JAX, outside vte)"))
    for name in order:
        walk(funcs[name], calls.get(name, "other (JAX, outside vte)"))
    return {"characters": len(text), "operations": ops, "per_phase": dict(per_phase.most_common())}


def compile_seconds(n: int) -> dict:
    """Seconds to lower and compile reset, step, step under vmap and a PPO update."""
    from vte.train import ppo
    from vte.train.config import PPOConfig
    params, key, state = program(n)
    keys = jax.random.split(key, 64)
    states = jax.vmap(lambda k: vte.reset(k, params)[1])(keys)
    out = {}

    def timed(name, fn, *args):
        jax.clear_caches()                  # no program reused from an earlier compile
        t0 = time.perf_counter()
        jax.jit(fn).lower(*args).compile()
        out[name] = round(time.perf_counter() - t0, 2)
        print(f"  {n:3d} nodes: {name:22s} {out[name]:6.2f} s", flush=True)

    timed("reset", E.reset, key, params)
    timed("step", E.step, key, state, jnp.int32(0), params)
    timed("step, vmap 64 envs", jax.vmap(E.step, in_axes=(0, 0, 0, None)), keys, states,
          jnp.zeros(64, jnp.int32), params)
    config = PPOConfig.of(num_envs=64, num_nodes=n)
    init, update = ppo.make_update(config)
    runner = jax.jit(init)(jax.random.PRNGKey(0))
    timed("PPO update, 64 envs", update, runner)
    return out


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", default="8,64", help="node counts (default 8,64)")
    parser.add_argument("--no-kernel", action="store_true", help="skip the kernel comparison")
    parser.add_argument("--json", default=None, help="write the figures to this file")
    args = parser.parse_args(argv)
    jax.config.update("jax_enable_compilation_cache", False)   # every compile really runs
    result = {"jax_version": jax.__version__, "device": jax.devices()[0].device_kind,
              "nodes": {}}
    for n in (int(x) for x in args.nodes.split(",")):
        print(f"{n} nodes: the step's program", flush=True)
        prog = step_program(n)
        print(f"  {prog['characters']:,} characters, {prog['operations']:,} operations", flush=True)
        for phase, count in prog["per_phase"].items():
            print(f"    {phase:32s} {count:6d}", flush=True)
        result["nodes"][n] = {**prog, "compile_s": compile_seconds(n)}
    if not args.no_kernel:
        from benchmarks import kernel
        k = kernel.main(["--num-envs", "4096", "--num-nodes", "64", "--rounds", "3"])
        result["kernel_4096x64"] = {"decisions_per_s": k["decisions_per_s"],
                                    "environment_over_kernel": k["environment_over_kernel"],
                                    "loop_over_kernel": k["loop_over_kernel"]}
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
