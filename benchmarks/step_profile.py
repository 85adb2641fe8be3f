"""Where the time of a batched step goes: a `jax.profiler` trace of the environment-only
rollout of `throughput.py` (random valid actions), with the time of every XLA operation
summed per function of `vte` that produced it.

    python benchmarks/step_profile.py                       # 4096 environments x 64 nodes
    python benchmarks/step_profile.py --num-envs 1024 --num-nodes 256 --top 40
    python benchmarks/step_profile.py --program ppo --out benchmarks/results/profile_ppo.json
    python benchmarks/step_profile.py --program imitate --out benchmarks/results/profile_imitate.json
    python benchmarks/step_profile.py --program imitate --num-envs 128 --trainer-flags \
        "--env openb --teacher fgd --num-steps 16 --num-minibatches 4 --hidden 64"

`--program ppo` (or `imitate`) profiles one training update of `train/ppo.py` (or
`train/imitate.py`) instead, with the trainer's defaults but `--num-envs` and
`--num-nodes`: collection (environment, observation, network forward, the all-actions
scoring), the gradient steps (forward and backward, marked "(backward)") and the optimizer,
attributed to the functions of `vte` and `train`.

Prints the wall time per step (timed without the profiler), the number of XLA operations
per step and two tables: operation time per `vte` function, and the slowest operations
with their output shapes. An instruction belongs to the innermost `vte` function on its
call stack (as recorded in the compiled HLO); a fusion to the function most of its fused
instructions belong to. Operation times are self times (a `cond` or `while` without the
operations inside it) summed over threads: XLA runs independent operations on several
threads at once, so they can add up to more than the wall time. A large fusion that XLA
splits over threads appears once, with the time of the part run by the thread that
started it (the trace marks the other threads' parts only by their end). The profiler
also slows every operation down; read the shares, not the absolute times.

Writes the tables to `--out` (JSON) and, under `--artifacts-dir`, `step.hlo.txt` (the
compiled rollout, to read a fusion's instructions) and `trace/` (open it in Perfetto or
TensorBoard's profile plugin).
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import re
import shlex
import statistics
import sys
import time
from typing import NamedTuple

import jax

import vte

try:        # imported from the repository root (the tests)
    from benchmarks.throughput import ROLLOUT_UNROLL, machine, make_rollout, time_rollout
except ImportError:   # run as a script: its own directory comes first on the path
    from throughput import ROLLOUT_UNROLL, machine, make_rollout, time_rollout

_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2,
          "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8}
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%([\w.\-]+) = (.+?) ([a-z][\w\-]*)\(")
_COMPUTATION = re.compile(r"^(?:ENTRY )?%([\w.\-]+) .*\{\s*$")
_CALLS = re.compile(r"(?:calls|to_apply|body|condition)=%([\w.\-]+)")
_BRANCHES = re.compile(r"branch_computations=\{([^}]*)\}")
TOP_OPS_SAVED = 100
OTHER = "(no vte frame: the benchmark loop, loop control, scan carries)"
BACKWARD = " (backward)"
PROGRAMS = ("env", "ppo", "imitate")   # appended to the function of an operation of a gradient


class Instruction(NamedTuple):
    shape: str            # result shape as HLO prints it, e.g. "f32[4096,64]{1,0}"
    opcode: str           # "fusion", "copy", "conditional", ...
    calls: list[str]      # computations it calls (fused computation, branches, loop body)
    source: str | None    # innermost vte function on its own call stack, if any


def _table(text: str, name: str) -> dict[int, str]:
    """One of the id tables that follow the HLO module in its text form."""
    match = re.search(r"^%s\n(.*?)(?:\n\n|\Z)" % name, text, re.M | re.S)
    if match is None:
        return {}
    rows = (line.split(" ", 1) for line in match.group(1).splitlines() if line.strip())
    return {int(key): value for key, value in rows}


class Hlo:
    """The instructions of a compiled module's text (`Compiled.as_text()`): shape, opcode,
    called computations and the function of `packages` (directory names: `vte`, and `train`
    for a training update) each comes from, through its stack frame; an operation of a
    gradient (a transpose in its op_name) gets its forward function's name + BACKWARD."""

    def __init__(self, text: str, packages: tuple[str, ...] = ("vte",)):
        self.packages = packages
        header = re.match(r"HloModule ([\w.\-]+)", text)
        self.module = header.group(1) if header else None
        files = {k: v.strip('"') for k, v in _table(text, "FileNames").items()}
        funcs = {k: v.strip('"') for k, v in _table(text, "FunctionNames").items()}
        locations = {}
        for key, value in _table(text, "FileLocations").items():
            fields = dict(re.findall(r"(\w+)=(\d+)", value))
            locations[key] = (files.get(int(fields["file_name_id"]), "?"),
                              funcs.get(int(fields["function_name_id"]), "?"))
        self._frames = {}
        for key, value in _table(text, "StackFrames").items():
            fields = dict(re.findall(r"(\w+)=(\d+)", value))
            self._frames[key] = (int(fields["file_location_id"]), int(fields["parent_frame_id"]))
        self._locations = locations
        self.instructions: dict[str, Instruction] = {}
        members = collections.defaultdict(list)   # computation -> sources of its instructions
        computation = None
        for line in text.splitlines():
            head = _COMPUTATION.match(line)
            if head:
                computation = head.group(1)
                continue
            match = _INSTRUCTION.match(line)
            if not match:
                continue
            frame = re.search(r"stack_frame_id=(\d+)", line)
            source = self._source(int(frame.group(1))) if frame else None
            if source is not None and re.search(r'op_name="[^"]*transpose\(', line):
                source += BACKWARD   # a gradient's operation: the forward's frames
            calls = _CALLS.findall(line)
            for branches in _BRANCHES.findall(line):
                calls += re.findall(r"%([\w.\-]+)", branches)
            self.instructions[match.group(1)] = Instruction(match.group(2), match.group(3),
                                                            calls, source)
            if computation is not None and source is not None:
                members[computation].append(source)
        self._members = members

    def _source(self, frame: int) -> str | None:
        """The innermost frame inside one of `packages` (directory names, e.g. "vte"), as
        "vte/module.py:function" ("vte/openb/env.py:step" in a subpackage), walking from
        `frame` to its callers (a frame's `parent_frame_id` is its caller's id plus one, so
        1 for an outermost frame)."""
        seen = set()
        while frame in self._frames and frame not in seen:
            seen.add(frame)
            location, parent = self._frames[frame]
            path, func = self._locations.get(location, ("?", "?"))
            parts = path.replace("\\", "/").split("/")
            for i in range(len(parts) - 2, max(len(parts) - 4, -1), -1):   # 1-2 levels up
                if parts[i] in self.packages:
                    return f"{'/'.join(parts[i:])}:{func}"
            frame = parent - 1
        return None

    def source(self, name: str) -> str:
        """The vte function an instruction belongs to: for a fusion, the most common one
        among its fused instructions; otherwise (or if none of those has one) its own."""
        inst = self.instructions[name]
        if inst.opcode == "fusion":
            inner = collections.Counter(s for c in inst.calls for s in self._members.get(c, ()))
            if inner:
                return inner.most_common(1)[0][0]
        return inst.source or OTHER

    def out_bytes(self, name: str) -> int:
        """Bytes of an instruction's result (all elements of a tuple)."""
        total = 0
        for dtype, dims in re.findall(r"\b([a-z]+\d*)\[([\d,]*)\]", self.instructions[name].shape):
            size = 1
            for d in filter(None, dims.split(",")):
                size *= int(d)
            total += size * _BYTES.get(dtype, 0)
        return total


def module_events(events: list[dict], hlo: Hlo) -> list[dict]:
    """The complete ("X") trace events of `hlo`'s operations (other programs that ran while
    tracing can have operations of the same name)."""
    return [e for e in events
            if e.get("ph") == "X" and e.get("name") in hlo.instructions
            and (e.get("args") or {}).get("hlo_module", hlo.module) == hlo.module]


def self_times(events: list[dict]) -> collections.Counter:
    """Microseconds per operation name, excluding the time of the operations nested in it
    on the same thread (the branches of a `cond`, the body of a `while`)."""
    out = collections.Counter()
    by_thread = collections.defaultdict(list)
    for e in events:
        by_thread[(e.get("pid"), e.get("tid"))].append(e)
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e["ts"], -e.get("dur", 0)))
        stack = []   # [end, name]
        for e in evs:
            start, dur = e["ts"], e.get("dur", 0)
            while stack and stack[-1][0] <= start:
                stack.pop()
            if stack:   # nested: not part of its parent's own time
                out[stack[-1][1]] -= dur
            out[e["name"]] += dur
            stack.append([start + dur, e["name"]])
    return out



def trace(run, text: str, artifacts_dir: str, packages: tuple[str, ...] = ("vte",)):
    """Runs `run()` (a call of the compiled program whose text is `text`; it returns an
    array to wait for) once under `jax.profiler`, its trace under `artifacts_dir`/trace.
    Returns (Hlo, self time in µs per operation, runs per operation) of that program."""
    trace_dir = os.path.join(artifacts_dir, "trace")
    started = time.time()
    with jax.profiler.trace(trace_dir):
        jax.block_until_ready(run())
    traces = [p for p in glob.glob(os.path.join(trace_dir, "**", "*.trace.json.gz"),
                                   recursive=True) if os.path.getmtime(p) >= started - 1]
    if not traces:
        raise RuntimeError(f"jax.profiler wrote no *.trace.json.gz under {trace_dir}")
    with gzip.open(max(traces, key=os.path.getmtime)) as f:
        events = json.load(f)["traceEvents"]
    hlo = Hlo(text, packages)
    events = module_events(events, hlo)
    if not events:
        raise RuntimeError(f"the trace holds no operation of {hlo.module}; "
                           f"was the program compiled for another device?")
    return hlo, self_times(events), collections.Counter(e["name"] for e in events)


def by_function(hlo: Hlo, times: collections.Counter, counts: collections.Counter) -> dict:
    """function -> [µs, operations run] over the traced program."""
    groups = collections.defaultdict(lambda: [0.0, 0])
    for name, us in times.items():
        g = groups[hlo.source(name)]
        g[0] += us
        g[1] += counts[name]
    return groups



def tables(hlo: Hlo, times: collections.Counter, counts: collections.Counter, runs: int,
           unit: str, top: int) -> dict:
    """The result's operation tables, in ms (and operations) per `unit` of the traced
    program, which ran `runs` of them: the total, per function, and the slowest operations
    (at least TOP_OPS_SAVED)."""
    op_us = sum(times.values())

    def ms(us):
        return us / runs / 1000.0

    return {
        f"op_ms_per_{unit}": ms(op_us),
        f"ops_per_{unit}": sum(counts.values()) / runs,
        "by_function": [
            {"function": src, f"ms_per_{unit}": ms(us), "share": us / op_us,
             f"ops_per_{unit}": n / runs}
            for src, (us, n) in sorted(by_function(hlo, times, counts).items(),
                                       key=lambda kv: -kv[1][0])],
        "top_ops": [
            {"op": name, "opcode": hlo.instructions[name][1],
             "shape": hlo.instructions[name][0], "out_bytes": hlo.out_bytes(name),
             "function": hlo.source(name), f"ms_per_{unit}": ms(us),
             f"runs_per_{unit}": counts[name] / runs}
            for name, us in times.most_common(max(TOP_OPS_SAVED, top))],
    }


def _write(result: dict, out: str) -> dict:
    if os.path.dirname(out):
        os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    return result


def profile(num_envs: int, num_nodes: int, steps: int, repeats: int, out: str,
            artifacts_dir: str, top: int = TOP_OPS_SAVED) -> dict:
    """Time `repeats` environment-only rollouts of `steps` decisions over `num_envs`
    environments of `num_nodes` nodes, then trace one more; returns (and writes to `out`)
    the tables described in the module docstring (at least `top` operations, slowest
    first). Times in the result are ms per step."""
    params = vte.EnvParams(num_nodes=num_nodes)
    keys = jax.random.split(jax.random.PRNGKey(0), num_envs)
    obs, state = jax.jit(jax.vmap(vte.reset, in_axes=(0, None)))(keys, params)
    mask = obs.action_mask
    rollout = make_rollout(params, num_envs, steps)
    text = rollout.lower(state, mask, jax.random.PRNGKey(1)).compile().as_text()
    os.makedirs(artifacts_dir, exist_ok=True)
    with open(os.path.join(artifacts_dir, "step.hlo.txt"), "w") as f:
        f.write(text)
    state, mask, timing = time_rollout(rollout, state, mask, repeats)
    wall = timing.repeat_s

    key = jax.random.PRNGKey(10_000)   # made before tracing: only the rollout is traced
    hlo, times, counts = trace(lambda: rollout(state, mask, key)[2], text, artifacts_dir)

    median = statistics.median(wall)
    result = {
        "machine": machine(),
        "argv": sys.argv[1:],
        "program": "environment rollout", "unit": "step",
        "num_envs": num_envs, "num_nodes": num_nodes, "steps": steps,
        "steps_per_scan_iteration": ROLLOUT_UNROLL,
        "wall_ms_per_step": median / steps * 1000.0,
        "decisions_per_s": num_envs * steps / median,
        "wall_repeat_s": wall,
        **tables(hlo, times, counts, steps, "step", top),
    }
    return _write(result, out)



def profile_update(algorithm: str, num_envs: int, num_nodes: int, repeats: int, out: str,
                   artifacts_dir: str, top: int = TOP_OPS_SAVED,
                   trainer_flags: tuple[str, ...] = ()) -> dict:
    """One training update of `train/ppo.py` or `train/imitate.py` (`algorithm`), with its
    defaults but `num_envs`, `num_nodes` and `trainer_flags` (the trainer's own flags, e.g.
    ("--env", "openb", "--hidden", "64")), one seed: timed `repeats` times, then traced
    once. Its operations are attributed to functions of `vte` and `train` (the backward
    pass of a function as "... (backward)"). Times in the result are ms per update."""
    from vte.train import imitate, ppo
    from vte.train.config import ImitateConfig, PPOConfig
    module, config = {"ppo": (ppo, PPOConfig), "imitate": (imitate, ImitateConfig)}[algorithm]
    config = config.from_args(["--num-envs", str(num_envs), "--num-nodes", str(num_nodes),
                               *trainer_flags])
    init, update = module.make_update(config)
    runner = jax.jit(init)(jax.random.PRNGKey(0))
    start = time.perf_counter()
    compiled = jax.jit(update).lower(runner).compile()
    compile_s = time.perf_counter() - start
    text = compiled.as_text()
    os.makedirs(artifacts_dir, exist_ok=True)
    with open(os.path.join(artifacts_dir, f"{algorithm}_update.hlo.txt"), "w") as f:
        f.write(text)
    runner, metrics = jax.block_until_ready(compiled(runner))     # first run
    wall = []
    for _ in range(repeats):
        start = time.perf_counter()
        runner, metrics = jax.block_until_ready(compiled(runner))
        wall.append(time.perf_counter() - start)
    hlo, times, counts = trace(lambda: compiled(runner), text, artifacts_dir, ("vte", "train"))
    median = statistics.median(wall)
    decisions = config.num_envs * config.num_steps
    result = {
        "machine": machine(),
        "argv": sys.argv[1:],
        "program": f"{algorithm} update", "unit": "update", "env": config.env,
        "trainer_flags": list(trainer_flags),
        "num_envs": config.num_envs, "num_nodes": config.env_config.num_nodes,
        "num_steps": config.num_steps, "update_epochs": config.update_epochs,
        "num_minibatches": config.num_minibatches, "hidden": config.hidden,
        "compile_s": compile_s,
        "wall_ms_per_update": median * 1000.0,
        "decisions_per_s": decisions / median,
        "wall_repeat_s": wall,
        **tables(hlo, times, counts, 1, "update", top),
    }
    return _write(result, out)


def report(result: dict, top: int) -> None:
    """Print the header line and the first `top` rows of both tables of `profile`'s or
    `profile_update`'s result."""
    unit = result.get("unit", "step")
    m = result["machine"]
    if unit == "step":
        print(f"# {result['num_envs']} environments x {result['num_nodes']} nodes, "
              f"{result['steps']} steps ({result['steps_per_scan_iteration']} per scan "
              f"iteration); {m['backend']} {m['device']}, jax {m['jax']}")
    else:
        print(f"# one {result['program']}: {result['num_envs']} environments x "
              f"{result['num_nodes']} nodes x {result['num_steps']} steps, "
              f"{result['update_epochs']} epochs of {result['num_minibatches']} minibatches, "
              f"hidden {result['hidden']}; {m['backend']} {m['device']}, jax {m['jax']}")
    print(f"wall {result[f'wall_ms_per_{unit}']:.2f} ms/{unit} ({result['decisions_per_s']:,.0f} "
          f"decisions/s, without the profiler); XLA operations {result[f'ops_per_{unit}']:.0f} "
          f"per {unit}, {result[f'op_ms_per_{unit}']:.2f} ms/{unit} of thread time under the "
          f"profiler")
    print(f"\n{'ms/' + unit:>9} {'share':>6} {'ops/' + unit:>10}  function")
    for g in result["by_function"][:top]:
        print(f"{g[f'ms_per_{unit}']:9.3f} {100 * g['share']:5.1f}% {g[f'ops_per_{unit}']:10.1f}  "
              f"{g['function']}")
    print(f"\n{'ms/' + unit:>9}  {'operation':32s} {'output':34s} function")
    for op in result["top_ops"][:top]:
        shape = op["shape"] if len(op["shape"]) <= 34 else op["shape"][:31] + "..."
        print(f"{op[f'ms_per_{unit}']:9.3f}  {op['op'][:32]:32s} {shape:34s} {op['function']}")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--program", choices=PROGRAMS, default="env",
                   help="what to profile: the environment-only rollout (env), or one training "
                        "update of train/ppo.py (ppo) or train/imitate.py (imitate) with "
                        "their defaults but --num-envs and --num-nodes")
    p.add_argument("--trainer-flags", default="",
                   help="with --program ppo or imitate: more of the trainer's flags, one "
                        "string, e.g. \"--env openb --num-steps 16 --hidden 64\"")
    p.add_argument("--num-envs", type=int, default=4096)
    p.add_argument("--num-nodes", type=int, default=64)
    p.add_argument("--steps", type=int, default=16, help="decisions in the profiled scan")
    p.add_argument("--repeats", type=int, default=5, help="timed scans without the profiler")
    p.add_argument("--top", type=int, default=25, help="rows of each printed table")
    p.add_argument("--out", default="benchmarks/results/profile.json",
                   help="the tables, JSON")
    p.add_argument("--artifacts-dir", default="benchmarks/results/profile",
                   help="where the compiled HLO and the trace go")
    args = p.parse_args(argv)
    for name in ("num_envs", "num_nodes", "steps", "repeats", "top"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.trainer_flags and args.program == "env":
        p.error("--trainer-flags applies to --program ppo or imitate, not env")
    if args.steps % ROLLOUT_UNROLL:
        p.error(f"--steps must be a multiple of {ROLLOUT_UNROLL} (steps per scan iteration), "
                f"got {args.steps}")
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.program == "env":
        result = profile(args.num_envs, args.num_nodes, args.steps, args.repeats, args.out,
                         args.artifacts_dir, args.top)
        hlo = "step.hlo.txt"
    else:
        try:
            result = profile_update(args.program, args.num_envs, args.num_nodes, args.repeats,
                                    args.out, args.artifacts_dir, args.top,
                                    tuple(shlex.split(args.trainer_flags)))
        except ValueError as err:      # the trainer's own check of its configuration
            raise SystemExit(f"step_profile.py: error: {err}")
        hlo = f"{args.program}_update.hlo.txt"
    report(result, args.top)
    print(f"\nwrote {args.out}, and {hlo} and trace/ under {args.artifacts_dir}")
    return result


if __name__ == "__main__":
    main()
