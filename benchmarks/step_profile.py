"""Where the time of a batched step goes: a `jax.profiler` trace of the environment-only
rollout of `throughput.py` (random valid actions), with the time of every XLA operation
summed per function of `vte` that produced it.

    python benchmarks/step_profile.py                       # 4096 environments x 64 nodes
    python benchmarks/step_profile.py --num-envs 1024 --num-nodes 256 --top 40

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
    called computations and the `vte` function each comes from (through its stack frame)."""

    def __init__(self, text: str):
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
            calls = _CALLS.findall(line)
            for branches in _BRANCHES.findall(line):
                calls += re.findall(r"%([\w.\-]+)", branches)
            self.instructions[match.group(1)] = Instruction(match.group(2), match.group(3),
                                                            calls, source)
            if computation is not None and source is not None:
                members[computation].append(source)
        self._members = members

    def _source(self, frame: int) -> str | None:
        """The innermost frame inside the vte package, as "vte/module.py:function", walking
        from `frame` to its callers (a frame's `parent_frame_id` is its caller's id plus
        one, so 1 for an outermost frame)."""
        seen = set()
        while frame in self._frames and frame not in seen:
            seen.add(frame)
            location, parent = self._frames[frame]
            path, func = self._locations.get(location, ("?", "?"))
            parts = path.replace("\\", "/").split("/")
            if len(parts) >= 2 and parts[-2] == "vte":
                return f"vte/{parts[-1]}:{func}"
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

    trace_dir = os.path.join(artifacts_dir, "trace")
    key = jax.random.PRNGKey(10_000)   # made before tracing: only the rollout is traced
    started = time.time()
    with jax.profiler.trace(trace_dir):
        state, mask, total = rollout(state, mask, key)
        total.block_until_ready()
    traces = [p for p in glob.glob(os.path.join(trace_dir, "**", "*.trace.json.gz"),
                                   recursive=True) if os.path.getmtime(p) >= started - 1]
    if not traces:
        raise RuntimeError(f"jax.profiler wrote no *.trace.json.gz under {trace_dir}")
    with gzip.open(max(traces, key=os.path.getmtime)) as f:
        events = json.load(f)["traceEvents"]

    hlo = Hlo(text)
    events = module_events(events, hlo)
    if not events:
        raise RuntimeError(f"the trace holds no operation of {hlo.module}; "
                           f"was the rollout compiled for another device?")
    times = self_times(events)
    counts = collections.Counter(e["name"] for e in events)
    op_us = sum(times.values())
    groups = collections.defaultdict(lambda: [0.0, 0])
    for name, us in times.items():
        g = groups[hlo.source(name)]
        g[0] += us
        g[1] += counts[name]

    def per_step(us):   # µs in the traced scan -> ms per step
        return us / steps / 1000.0

    median = statistics.median(wall)
    result = {
        "machine": machine(),
        "argv": sys.argv[1:],
        "num_envs": num_envs, "num_nodes": num_nodes, "steps": steps,
        "steps_per_scan_iteration": ROLLOUT_UNROLL,
        "wall_ms_per_step": median / steps * 1000.0,
        "decisions_per_s": num_envs * steps / median,
        "wall_repeat_s": wall,
        "op_ms_per_step": per_step(op_us),
        "ops_per_step": sum(counts.values()) / steps,
        "by_function": [
            {"function": src, "ms_per_step": per_step(us), "share": us / op_us,
             "ops_per_step": n / steps}
            for src, (us, n) in sorted(groups.items(), key=lambda kv: -kv[1][0])],
        "top_ops": [
            {"op": name, "opcode": hlo.instructions[name][1],
             "shape": hlo.instructions[name][0], "out_bytes": hlo.out_bytes(name),
             "function": hlo.source(name), "ms_per_step": per_step(us),
             "runs_per_step": counts[name] / steps}
            for name, us in times.most_common(max(TOP_OPS_SAVED, top))],
    }
    if os.path.dirname(out):
        os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    return result


def report(result: dict, top: int) -> None:
    """Print the header line and the first `top` rows of both tables of `profile`'s result."""
    print(f"# {result['num_envs']} environments x {result['num_nodes']} nodes, "
          f"{result['steps']} steps ({result['steps_per_scan_iteration']} per scan iteration); "
          f"{result['machine']['backend']} {result['machine']['device']}, "
          f"jax {result['machine']['jax']}")
    print(f"wall {result['wall_ms_per_step']:.2f} ms/step ({result['decisions_per_s']:,.0f} "
          f"decisions/s, without the profiler); XLA operations {result['ops_per_step']:.0f} "
          f"per step, {result['op_ms_per_step']:.2f} ms/step of thread time under the profiler")
    print(f"\n{'ms/step':>8} {'share':>6} {'ops/step':>8}  function")
    for g in result["by_function"][:top]:
        print(f"{g['ms_per_step']:8.3f} {100 * g['share']:5.1f}% {g['ops_per_step']:8.1f}  "
              f"{g['function']}")
    print(f"\n{'ms/step':>8}  {'operation':32s} {'output':34s} function")
    for op in result["top_ops"][:top]:
        shape = op["shape"] if len(op["shape"]) <= 34 else op["shape"][:31] + "..."
        print(f"{op['ms_per_step']:8.3f}  {op['op'][:32]:32s} {shape:34s} {op['function']}")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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
    if args.steps % ROLLOUT_UNROLL:
        p.error(f"--steps must be a multiple of {ROLLOUT_UNROLL} (steps per scan iteration), "
                f"got {args.steps}")
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    result = profile(args.num_envs, args.num_nodes, args.steps, args.repeats, args.out,
                     args.artifacts_dir, args.top)
    report(result, args.top)
    print(f"\nwrote {args.out}, and step.hlo.txt and trace/ under {args.artifacts_dir}")
    return result


if __name__ == "__main__":
    main()
