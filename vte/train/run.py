"""Running a training: the command line, the run loop and the run directory.

`train/ppo.py` and `train/imitate.py` each define the algorithm (`make_update`, a jitted
`make_train`); `main` parses their configuration (`vte/train/config.py`) and `run` executes
it in a Python loop that returns every `--log-every` updates, writing the run directory:

    OUT/config.json         the configuration (what `vte.load_policy` and `--resume` read)
    OUT/metrics.jsonl       one row per update and seed
    OUT/learning_curve.png  the logged metrics against env steps
    OUT/checkpoints/        orbax checkpoints (every --checkpoint-every updates, at the end;
                            the newest --keep-checkpoints of them, 3 by default)
    OUT/checksums.json      a SHA-256 of each checkpoint, verified before it is restored
    OUT/eval.json           the trained policy against the baselines (`TrainEnv.evaluate`),
                            its row named by the run (the directory's name)
    OUT/tensorboard/        with --tensorboard: metrics.jsonl's scalars as TensorBoard event
                            files, one stream per seed (`vte/train/tensorboard.py`)

Several devices (`--devices N`, default every local device) run the same program, data
parallel: the compiled update takes its inputs with the environments split over a
one-axis mesh (`vte.distributed.AXIS`) and the parameters replicated, and XLA partitions
it (GSPMD). Each device steps its own environments; each minibatch is split over the
devices, so the gradient of the mean loss is summed across devices by an all-reduce in
the backward pass, and the metrics (means over environments) are global. Keys,
shuffling and initialisation are those of the one-device program (JAX's random numbers
do not depend on the sharding), so N devices give the metrics of one, up to float
rounding. Several hosts: `vte/train/multihost.py`; only process 0 writes the outputs.

Stopping: Ctrl-C checkpoints and stops at once. SIGTERM (a preempted job) is noted and
the run checkpoints and stops at the end of the current chunk; with several processes
orbax's preemption check (`CheckpointManager.reached_preemption`, JAX's preemption sync
point) decides, so every process saves at the same update.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import signal
import sys
import warnings
import time
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from jax.sharding import NamedSharding, PartitionSpec as P

from vte.train import multihost, tensorboard
from vte.config import RenamedWarning
from vte.train.config import TrainConfig, invalid
from vte.train.core import Runner, over_seeds, seed_keys
from vte.train.envs import make_env, run_name, trained_entry
from vte import checkpoint as ckpt
from vte import compilation_cache, registry
from vte.compilation_cache import DEFAULT_CACHE, tilde as _tilde  # noqa: F401 (DEFAULT_CACHE: the trainers' default, for callers)
from vte import distributed as dist
from vte.files import atomic_write, atomic_write_text

# --------------------------------------------------------------------------
# The command line
# --------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """Errors in one line (the usage block of every flag would bury the message)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (`{self.prog} --help` lists every flag)\n")


def blame(err: ValueError, given: set[str], values: argparse.Namespace) -> str:
    """The message of a bad flag, saying which flags the user passed made a default
    invalid when the flag named was not passed itself (a cross-check)."""
    if not isinstance(err, registry.FlagError):
        return str(err)
    flag = "--" + err.name.replace("_", "-")
    reg = registry.registration(getattr(values, "env", None) or "synthetic")
    old = {"--" + o.replace("_", "-") for o, n in reg.renamed.items() if n == err.name}
    if flag in given or old & given:          # given, perhaps under its old name
        return str(err)
    passed = [d for d in err.depends if "--" + d.replace("_", "-") in given]
    if not passed:
        return f"{err} ({flag} was not given: {err.value!r} is its default)"
    with_ = ", ".join(f"--{d.replace('_', '-')}={getattr(values, d, '?')!r}" for d in passed)
    return (f"{err} ({flag} was not given: its default {err.value!r} does not fit "
            f"{with_}; pass {flag} too)")


def build_parser(config_cls: type[TrainConfig], description: str) -> argparse.ArgumentParser:
    """The config's flags (generated from its fields) and the run's own flags."""
    script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    p = _Parser(prog=script if script.startswith("vte-") else f"train/{config_cls.algorithm}.py",
                                description=description,
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    groups = config_cls.add_flags(p)
    o = groups["outputs"]
    o.add_argument("--out", metavar="DIR", default=f"runs/{config_cls.algorithm}",
                   help="run directory")
    o.add_argument("--resume", metavar="DIR", default=None,
                   help="continue the interrupted run in DIR from its newest good checkpoint "
                        "with its saved configuration; only --stop-after-updates and the "
                        "device and host flags may be given with it (others are refused)")
    o.add_argument("--overwrite", action="store_true",
                   help="replace the run already in --out (its config, metrics, curve, "
                        "evaluation and checkpoints); without it a non-empty --out is refused")
    o.add_argument("--stop-after-updates", type=int, default=None, metavar="U",
                   help="stop after U updates as if interrupted (checkpoint saved); "
                        "continue with --resume")
    compilation_cache.add_flag(o, "a run compiling what an earlier run compiled (another "
                                  "seed, the same configuration again: about half a minute "
                                  "at the defaults)")
    h = p.add_argument_group("devices and hosts")
    h.add_argument("--devices", type=int, default=argparse.SUPPRESS, metavar="N",
                   help="local devices to split the environments and minibatches over, "
                        "data parallel (default: every local device); with --seeds, every "
                        "seed is split so; the metrics do not depend on N")
    multihost.add_flags(h)
    return p


def use_compilation_cache(path: str | None) -> str | None:
    """JAX's persistent compilation cache for this run (`vte.compilation_cache.use`: the
    one rule of every vte command), before anything compiles; the directory in use."""
    return compilation_cache.use(path)


def check_devices(config: TrainConfig, devices: int | None) -> int:
    """The number of local devices to use (None: all), checked against the run: the
    environments and each minibatch must split evenly over the devices of every process.
    Raises ValueError naming `--devices`, its value and the counts allowed."""
    local, hosts = jax.local_device_count(), jax.process_count()
    n = local if devices is None else devices
    minibatch = config.minibatch_size

    def fits(d):
        return config.num_envs % (d * hosts) == 0 and minibatch % (d * hosts) == 0

    if not (isinstance(n, int) and 1 <= n <= local):
        hint = (" (on a CPU, XLA_FLAGS=--xla_force_host_platform_device_count=N gives N "
                "devices)" if jax.local_devices()[0].platform == "cpu" else "")
        raise invalid("devices", n, f"1..{local}, the number of devices of this process{hint}")
    if not fits(n):
        allowed = ", ".join(str(d) for d in range(1, local + 1) if fits(d)) or "none"
        times = f", times {hosts} processes," if hosts > 1 else ""
        raise invalid("devices", n,
                      f"{allowed}: device counts up to {local}{times} that divide num_envs = "
                      f"{config.num_envs} and the minibatch, num_envs * num_steps / "
                      f"num_minibatches = {minibatch}")
    return n


def parse(argv, config_cls: type[TrainConfig], description: str):
    """Parse and check the flags: (config, out_dir, resume, stop_after, devices, overwrite).
    Errors exit with a message naming the flag before any work starts."""
    parser = build_parser(config_cls, description)
    args = parser.parse_args(argv)
    use_compilation_cache(getattr(args, "compilation_cache", None))   # '' refused by argparse
    try:
        multihost.initialize(args)
    except (ValueError, RuntimeError) as err:
        parser.error(str(err))
    with warnings.catch_warnings():                 # an old name: one line, when read
        warnings.simplefilter("always", RenamedWarning)
        shown = warnings.showwarning

        def show(message, category, *rest, **kw):
            if issubclass(category, RenamedWarning):
                print(f"note: {message}", file=sys.stderr)
            else:
                shown(message, category, *rest, **kw)

        warnings.showwarning = show
        config, out, resume = _parse_config(parser, args, config_cls,
                                            argv if argv is not None else sys.argv[1:])
    if args.stop_after_updates is not None and args.stop_after_updates < 1:
        parser.error(f"--stop-after-updates={args.stop_after_updates} is invalid: "
                     "allowed an integer >= 1")
    try:
        devices = check_devices(config, getattr(args, "devices", None))
    except ValueError as err:
        parser.error(str(err))
    if config.tensorboard:
        try:
            tensorboard.require()
        except RuntimeError as err:
            parser.error(str(err))
    return config, out, resume, args.stop_after_updates, devices, args.overwrite


# Flags --resume accepts: they change how the run continues, not what it is.
RESUME_FLAGS = {"--resume", "--stop-after-updates", "--devices", "--compilation-cache",
                "--coordinator", "--num-processes", "--process-id"}


def _flags_given(parser: argparse.ArgumentParser, argv: list[str]) -> set[str]:
    """The long option names written on the command line (abbreviations resolved)."""
    names = {opt for action in parser._actions for opt in action.option_strings
             if opt.startswith("--")}
    given = set()
    for token in argv:
        if not token.startswith("--") or token == "--":
            continue
        word = token.split("=", 1)[0]
        match = [n for n in names if n == word] or [n for n in names if n.startswith(word)]
        if len(match) == 1:
            given.add(match[0])
    return given


RUN_FILES = (ckpt.CONFIG_FILE, "metrics.jsonl", "learning_curve.png", "eval.json",
             ckpt.CHECKSUM_FILE, ckpt.CHECKPOINT_DIR, tensorboard.DIR)


def check_out_dir(out: str, overwrite: bool) -> None:
    """Raise ValueError unless `out` may receive a new run: absent or empty, or (with
    `overwrite`) holding only a previous run's own files. Nothing is deleted here."""
    if not out:
        raise ValueError("--out '' is invalid: allowed a directory path")
    if os.path.exists(out) and not os.path.isdir(out):
        raise ValueError(f"--out {out!r} is a file: allowed a directory (new or empty)")
    if not os.path.isdir(out):
        return
    present = sorted(os.listdir(out))
    if not present:
        return
    if not overwrite and ckpt.checkpoint_steps(out):
        raise ValueError(f"--out {out!r} already holds a run's checkpoints: continue it with "
                         f"--resume {out}, replace it with --overwrite, or choose another --out")
    if not overwrite:
        listed = ", ".join(present[:5]) + (" ..." if len(present) > 5 else "")
        raise ValueError(f"--out {out!r} already holds files ({listed}): a new run needs an "
                         "empty or new directory (--overwrite replaces a previous run's "
                         "files), or choose another --out")
    foreign = [name for name in present if name not in RUN_FILES]
    if foreign:
        raise ValueError(f"--out {out!r} holds files that are not a run's ({', '.join(foreign[:5])}): "
                         "--overwrite replaces a previous run only; choose another --out")


def clear_run_files(out: str) -> None:
    """Delete a previous run's own files from `out` (after `check_out_dir(out, True)`)."""
    import shutil
    for name in RUN_FILES:
        path = os.path.join(out, name)
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.exists(path):
            os.unlink(path)


def _parse_config(parser, args, config_cls: type[TrainConfig], argv: list[str] = ()):
    """(config, out_dir, resume) of the flags: a run to continue, or a new one."""
    if args.resume is not None:
        try:
            saved = ckpt.load_config(args.resume)
        except (FileNotFoundError, ckpt.CheckpointError) as err:
            parser.error(str(err))
        refused = _flags_given(parser, argv) - RESUME_FLAGS
        if refused:
            parser.error(f"--resume {args.resume!r} continues the run with its saved "
                         f"configuration, so {', '.join(sorted(refused))} would be ignored: "
                         f"drop {'them' if len(refused) > 1 else 'it'} (allowed with --resume: "
                         f"{', '.join(sorted(RESUME_FLAGS - {'--resume'}))})")
        if saved.get("algorithm") != config_cls.algorithm:
            parser.error(f"--resume {args.resume!r} is a {saved.get('algorithm')!r} run, "
                         f"not {config_cls.algorithm!r}")
        try:
            config = config_cls.from_dict(saved)
        except KeyError as err:
            parser.error(f"--resume {args.resume!r}: its config.json lacks {err.args[0]} "
                         "(not written by this version of the trainer)")
        except (TypeError, ValueError) as err:
            parser.error(f"--resume {args.resume!r}: its config.json is invalid: {err}")
        if not ckpt.checkpoint_steps(args.resume):
            parser.error(f"--resume {args.resume!r} holds no checkpoint: the run stopped before "
                         "its first one was saved; start it again with a fresh --out")
        return config, args.resume, True
    try:
        config = config_cls.from_namespace(args)
    except ValueError as err:
        parser.error(blame(err, _flags_given(parser, argv), args))
    if config.init_from is not None:
        try:
            source = ckpt.load_config(config.init_from)       # DIR, or DIR@STEP (checked)
        except (FileNotFoundError, ValueError) as err:        # CheckpointError among them
            parser.error(f"--init-from: {err}")
        if source["hidden"] != config.hidden:
            parser.error(f"--init-from {config.init_from!r} holds a network of --hidden "
                         f"{source['hidden']}, this run asks for --hidden {config.hidden}")
        theirs = registry.of_run(source).flag
        if theirs != config.env:
            parser.error(f"--init-from {config.init_from!r} trained on --env {theirs}, this "
                         f"run asks for --env {config.env}")
        check = config.registration.init_check
        problem = check(source, config) if check is not None else None
        if problem is not None:
            parser.error(f"--init-from {config.init_from!r} {problem}")
        if not ckpt.checkpoint_steps(config.init_from):
            parser.error(f"--init-from {config.init_from!r} holds no checkpoint to start from")
    # Process 0 alone judges --out: the others would race with its first writes there.
    if jax.process_index() == 0:
        try:
            check_out_dir(args.out, args.overwrite)
        except ValueError as err:
            parser.error(str(err))
    return config, args.out, False


# --------------------------------------------------------------------------
# The run loop
# --------------------------------------------------------------------------

def _initial_params(config: TrainConfig):
    """Network parameters to start from (--init-from), or None for a fresh init."""
    if not config.init_from:
        return None
    return ckpt.load_variables(config.init_from, seed=0)


def training_mesh(devices: int) -> jax.sharding.Mesh:
    """The one-axis mesh of a run: the first `devices` local devices of every process."""
    chosen = [d for p in range(jax.process_count())
              for d in [d for d in jax.devices() if d.process_index == p][:devices]]
    return dist.make_mesh(chosen)


def runner_shardings(runner: Runner, mesh: jax.sharding.Mesh) -> Runner:
    """Where the leaves of a Runner batched over seeds live: environment states and
    observations split along their environment axis (axis 1, after the seeds), the
    parameters, optimiser state, key and update count replicated on every device."""
    split = NamedSharding(mesh, P(None, dist.AXIS))
    replicated = NamedSharding(mesh, P())

    def every(tree, sharding):
        return jax.tree_util.tree_map(lambda _: sharding, tree)

    return Runner(params=every(runner.params, replicated),
                  opt_state=every(runner.opt_state, replicated),
                  env_state=every(runner.env_state, split), obs=every(runner.obs, split),
                  rng=replicated, update=replicated)


def _on_mesh(tree, sharding: NamedSharding):
    """Host values (the same on every process) as global arrays with `sharding`."""
    def put(x):
        x = np.asarray(x)
        return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])
    return jax.tree_util.tree_map(put, tree)


def _save(mngr: ocp.CheckpointManager, runner: Runner, out: str) -> None:
    """Save the runner (as sharded: every process writes its part) and the policy's
    parameters as host arrays, which load on any devices (`vte.load_policy`), then record
    the checkpoint's checksum. Ctrl-C is held off until both are done, so a second one
    while saving leaves no half-written checkpoint."""
    step = int(np.asarray(runner.update)[0])
    if step in mngr.all_steps():
        if ckpt.verify_checkpoint(out, step) is None:
            return
        mngr.delete(step)                      # a damaged copy of this step: save it afresh
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:   # not the main thread: signals cannot be set, nor arrive here
        previous = None
    try:
        mngr.save(step, args=ocp.args.Composite(
            state=ocp.args.StandardSave(runner),
            policy=ocp.args.StandardSave({"params": jax.device_get(runner.params["params"])})))
        mngr.wait_until_finished()
        if jax.process_index() == 0:
            ckpt.record_checksum(out, step)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def _restore(mngr: ocp.CheckpointManager, abstract: Runner, shardings: Runner,
             out: str) -> Runner:
    """The newest checkpoint that verifies against its checksum and restores, placed as
    `shardings` asks, whatever devices saved it; damaged ones are named and skipped."""
    target = jax.tree_util.tree_map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), abstract, shardings)

    def restore(step):
        return mngr.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(target))).state
    _, runner = ckpt.restore_newest_good(out, restore, sorted(mngr.all_steps()))
    return runner


def _rows(metrics: dict, first_update: int, config: TrainConfig, sps: float, elapsed: float,
          devices: int):
    """metrics: name -> (seeds, n) arrays; yields one JSON row per update and seed."""
    batch = config.batch_size
    arrays = {k: np.asarray(v) for k, v in metrics.items()}
    seeds, n = next(iter(arrays.values())).shape
    for i in range(n):
        update = first_update + i + 1
        for s in range(seeds):
            row = {"update": update, "seed": s, "step": update * batch}
            for k, v in arrays.items():
                x = float(v[s, i])
                row[k] = x if math.isfinite(x) else None
            row["sps"] = sps
            row["time"] = elapsed
            row["devices"] = devices
            yield row


def read_rows(path: str, max_update: int | None = None) -> list[dict]:
    """The rows of a `metrics.jsonl`, up to update `max_update` if given (a line cut short
    by an interrupt is dropped)."""
    if not os.path.exists(path):
        return []
    rows = []
    with open(path) as f:
        for line in f:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return [r for r in rows if max_update is None or r["update"] <= max_update]


class _Preemption:
    """SIGTERM noted, not raised: the loop checkpoints and stops at a chunk's end. With
    several processes orbax's preemption check decides (the same update everywhere)."""

    def __init__(self, mngr: ocp.CheckpointManager):
        self.mngr, self.signalled, self.previous = mngr, False, None

    def __enter__(self):
        if jax.process_count() == 1:
            try:
                self.previous = signal.signal(signal.SIGTERM, self._note)
            except ValueError:   # signals can only be set from the main thread
                self.previous = None
        return self

    def _note(self, signum, frame):
        self.signalled = True

    def reached(self, update: int) -> bool:
        if jax.process_count() > 1:
            return bool(self.mngr.reached_preemption(update))
        return self.signalled

    def __exit__(self, *exc):
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)
        return False


# Compiled programs by configuration: runs of one configuration in a process (a resumed
# run, a sweep over output settings) compile once. Keys leave out what only shapes outputs.
# Only the COMPILED_KEPT most recent are kept, so a process that trains many
# configurations does not keep every executable alive.
_COMPILED: "collections.OrderedDict" = collections.OrderedDict()
COMPILED_KEPT = 8
_OUTPUT_KEYS = ("log_every", "checkpoint_every", "keep_checkpoints", "eval_episodes", "init_from",
                "tensorboard")


def _compiled(config: TrainConfig, what, build: Callable):
    key = (type(config).__name__,
           json.dumps({k: v for k, v in config.to_dict().items() if k not in _OUTPUT_KEYS},
                      sort_keys=True), what)
    if key in _COMPILED:
        _COMPILED.move_to_end(key)
    else:
        _COMPILED[key] = build()
        while len(_COMPILED) > COMPILED_KEPT:
            _COMPILED.popitem(last=False)
    return _COMPILED[key]


def clear_compiled() -> None:
    """Drops the programs compiled for runs of this process (see `_COMPILED`)."""
    _COMPILED.clear()


def run(config: TrainConfig, make_update: Callable, out: str, resume: bool = False,
        stop_after: int | None = None, progress: bool = True,
        devices: int | None = None, overwrite: bool = False) -> dict:
    """Train (or continue) a run on `devices` local devices of every process (None: all);
    write its outputs (process 0). Returns the evaluation (or {}).

    A new run needs `out` absent or empty; `overwrite` first deletes a previous run's own
    files there (and refuses a directory holding anything else)."""
    from tqdm.auto import tqdm

    t_begin = time.perf_counter()
    mesh = training_mesh(check_devices(config, devices))
    primary = jax.process_index() == 0
    say = progress and primary
    if config.tensorboard:
        tensorboard.require()      # before any work: one line naming the install command
    if not resume and primary:     # process 0 alone: the others would race with its writes
        check_out_dir(out, overwrite)
        if overwrite:
            clear_run_files(out)
    if say:
        print(first_line(config, out, resume, mesh.size), file=sys.stderr, flush=True)
    board = None
    mngr = ckpt.checkpoint_manager(out, max_to_keep=config.keep_checkpoints or None)
    try:   # closed on every exit: no orbax thread outlives the run
        if primary:
            ckpt.save_config(out, config.to_dict())
        env = make_env(config)       # its curves and evaluation (the update builds its own)
        init, update = make_update(config)
        num_updates, log_every = config.num_updates, config.log_every
        ckpt_every = math.ceil(config.checkpoint_every / log_every) * log_every
        replicated = NamedSharding(mesh, P())
        keys = _on_mesh(seed_keys(config), replicated)
        metrics_path = os.path.join(out, "metrics.jsonl")
        placement = tuple(d.id for d in mesh.devices.flat)   # compiled programs depend on it

        init_params = None if resume else _on_mesh(_initial_params(config), replicated)
        batched_init = jax.vmap(init, (0, None))
        abstract = jax.eval_shape(batched_init, keys, None)
        shardings = runner_shardings(abstract, mesh)
        if resume:
            runner = _restore(mngr, abstract, shardings, out)
            start = int(np.asarray(runner.update)[0])
            rows = read_rows(metrics_path, start) if primary else []
            elapsed = rows[-1]["time"] if rows else 0.0
        else:
            runner = _compiled(config, ("init", init_params is None, placement),
                               lambda: jax.jit(batched_init, out_shardings=shardings)
                               )(keys, init_params)
            start, rows, elapsed = 0, [], 0.0
        if primary:   # rows past the restored checkpoint are dropped, in one atomic write
            atomic_write_text(metrics_path, "".join(json.dumps(row) + "\n" for row in rows))
        if primary and config.tensorboard:   # a resumed stream restarts after the checkpoint
            board = tensorboard.Writer(out, config.seeds,
                                       start * config.batch_size + 1 if resume else None,
                                       None if resume else config.to_dict())

        def get_chunk():
            """`chunk(runner, length)`: `length` (1..log_every) updates of every seed at
            once, metrics stacked to (seeds, log_every) of which the first `length` are
            filled; compiled ahead of time for the mesh, once for every length (a run whose
            updates are not a multiple of --log-every ends with a shorter chunk, which a
            program per length would compile a second time: 13-18 s at the defaults)."""
            def chunk(runner, length):
                def one(r):
                    _, shapes = jax.eval_shape(update, r)
                    rows = jax.tree_util.tree_map(
                        lambda m: jnp.zeros((log_every,) + m.shape, m.dtype), shapes)

                    def body(i, carry):
                        r, rows = carry
                        r, m = update(r)
                        return r, jax.tree_util.tree_map(lambda a, x: a.at[i].set(x), rows, m)
                    return jax.lax.fori_loop(0, length, body, (r, rows))
                return over_seeds(one, config.seeds)(runner)

            def build():
                with jax.set_mesh(mesh):   # split_over_devices reads it
                    return jax.jit(chunk, in_shardings=(shardings, replicated),
                                   out_shardings=(shardings, replicated)).lower(
                        runner, jnp.int32(log_every)).compile()
            return _compiled(config, ("chunk", log_every, placement), build)

        end = num_updates if stop_after is None else min(num_updates, start + stop_after)
        batch = config.batch_size * config.seeds
        u, bar = start, None
        with _Preemption(mngr) as preemption:
            try:
                if u < end:
                    fn = get_chunk()
                    if say:
                        print(f"{config.algorithm}: compiled in "
                              f"{time.perf_counter() - t_begin:.0f} s; training",
                              file=sys.stderr, flush=True)
                bar = tqdm(total=num_updates, initial=start, unit="update",
                           disable=not (progress and primary), desc=config.algorithm,
                           dynamic_ncols=True)
                while u < end:
                    length = min(log_every, end - u)
                    t0 = time.perf_counter()
                    new_runner, metrics = fn(runner, _on_mesh(np.int32(length), replicated))
                    jax.block_until_ready(new_runner)
                    dt = time.perf_counter() - t0
                    metrics = {k: np.asarray(v)[:, :length] for k, v in metrics.items()}
                    sps = length * batch / dt
                    new_rows = list(_rows(metrics, u, config, sps, elapsed + dt, mesh.size))
                    if primary:
                        with open(metrics_path, "a") as f:
                            for row in new_rows:
                                f.write(json.dumps(row) + "\n")
                        if board is not None:
                            board.rows(new_rows)
                    # The runner advances once its rows are written: an interrupt saves a state
                    # whose every update is logged (rows past it are dropped on resume).
                    runner, elapsed, u = new_runner, elapsed + dt, u + length
                    rows.extend(new_rows)
                    bar.update(length)
                    bar.set_postfix(_postfix(new_rows[-config.seeds:], sps, env.curves))
                    if u % ckpt_every == 0 or u == end:
                        _save(mngr, runner, out)
                    if u < end and preemption.reached(u):
                        raise KeyboardInterrupt
            except KeyboardInterrupt:
                _save(mngr, runner, out)
                if bar is not None:
                    bar.close()
                print(f"\ninterrupted after {int(np.asarray(runner.update)[0])} updates; "
                      f"checkpoint saved. Continue with: --resume {out}", file=sys.stderr)
                raise
        if bar is not None:
            bar.close()
        if not primary:
            return {}
        plot_learning_curve(rows, os.path.join(out, "learning_curve.png"), config, env.curves)
        results = {}
        if u < num_updates:
            print(f"stopped after {u} of {num_updates} updates; continue with --resume {out}")
        elif config.eval_episodes != 0:
            results = env.evaluate(config, jax.device_get(runner.params), out)
            if board is not None:
                board.evaluation([trained_entry(results, out, s) for s in range(config.seeds)],
                                 u * config.batch_size)
        print(outputs_summary(config, out, len(rows), u, num_updates, sorted(mngr.all_steps()),
                              bool(results), time.perf_counter() - t_begin))
        return results
    finally:
        if board is not None:
            board.close()
        mngr.close()


ALGORITHMS = {"ppo": "PPO", "imitate": "imitation"}


def first_line(config: TrainConfig, out: str, resume: bool, devices: int) -> str:
    """What the run is about to compile, how long that takes and where it is cached."""
    what = ALGORITHMS.get(config.algorithm, config.algorithm)
    teacher = getattr(config, "teacher", None)
    if config.algorithm == "imitate" and teacher:
        what += f" of {teacher}"
    shape = (f"{config.num_envs:,} environments x {config.env_config.summary()}"
             + (f" x {config.seeds} seeds" if config.seeds > 1 else "")
             + (f" on {devices} devices" if devices > 1 else "")
             + (f", --env {config.env}"
                if config.env != type(config).__dataclass_fields__["env"].default else ""))
    cache = (jax.config.jax_compilation_cache_dir
             if jax.config.jax_enable_compilation_cache else None)
    cached = (f"cached in {_tilde(cache)} after (the next run of this configuration loads it)"
              if cache else "the compilation cache is off (--compilation-cache off): every "
              "run compiles")
    doing = f"continuing {out}" if resume else f"into {out}"
    return (f"{config.algorithm}: compiling the training program ({what}, {shape}; "
            f"{config.num_updates:,} updates of {config.batch_size:,} env steps, {doing}); "
            f"the first time takes ~0.5-1.5 min on a 2-core CPU, {cached}")


def outputs_summary(config: TrainConfig, out: str, rows: int, done: int, updates: int,
                    steps: list[int], evaluated: bool, seconds: float) -> str:
    """Where every output of the run went, one line each."""
    def at(name):
        return os.path.join(out, name)
    minutes = seconds / 60
    head = (f"{config.algorithm}: {'done' if done == updates else 'stopped'} after {done:,} of "
            f"{updates:,} updates ({done * config.batch_size:,} env steps per seed) in "
            f"{minutes:.1f} min. Outputs:")
    lines = [head,
             f"  {at('config.json'):<40} the configuration (--resume {out} continues the run)",
             f"  {at('metrics.jsonl'):<40} {rows:,} rows, one per update and seed",
             f"  {at('learning_curve.png'):<40} the logged metrics against env steps"]
    if evaluated:
        lines.append(f"  {at('eval.json'):<40} {run_name(out)} against the baselines "
                     "(the table above)")
    if steps:
        lines.append(f"  {at(ckpt.CHECKPOINT_DIR) + os.sep:<40} checkpoints of updates "
                     f"{', '.join(map(str, steps))} (vte.load_policy({out!r}); "
                     f"{out}@{steps[-1]} names one)")
    if config.tensorboard:
        lines.append(f"  {at(tensorboard.DIR) + os.sep:<40} event files, one run per seed: "
                     f"tensorboard --logdir {at(tensorboard.DIR)}")
    return "\n".join(lines)


def _postfix(rows: list[dict], sps: float, curves: tuple) -> dict:
    """The progress bar's figures: the first two curves, the loss and the speed."""
    def mean(key):
        vals = [r[key] for r in rows if r.get(key) is not None]
        return float(np.mean(vals)) if vals else float("nan")
    shown = {short: f"{mean(key):.4g}" for key, _, short in curves[:2]}
    return {**shown, "loss": f"{mean('loss'):.3f}", "sps": f"{sps:,.0f}"}


# --------------------------------------------------------------------------
# Outputs: learning curve and evaluation
# --------------------------------------------------------------------------

def plot_learning_curve(rows: list[dict], path: str, config: TrainConfig,
                        curves: tuple) -> None:
    """One panel per entry of `curves` ((metric, title, short name)), any number, two per
    row, against env steps; one line per seed."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows_of_panels = max(1, math.ceil(len(curves) / 2))
    fig, axes = plt.subplots(rows_of_panels, 2, figsize=(10, 3.5 * rows_of_panels),
                             squeeze=False)
    for ax in axes.ravel()[len(curves):]:
        ax.axis("off")
    for ax, (key, title, _) in zip(axes.ravel(), curves):
        for s in range(config.seeds):
            pts = [(r["step"], r[key]) for r in rows if r["seed"] == s and r.get(key) is not None]
            if pts:
                x, y = zip(*pts)
                ax.plot(x, y, label=f"seed {s}", lw=1)
        if key == "regret" and ax.lines and all(min(ln.get_ydata()) > 0 for ln in ax.lines):
            ax.set_yscale("log")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("env steps (per seed)")
        ax.grid(alpha=0.3)
    if config.seeds > 1:
        axes[0, 0].legend(fontsize=8)
    fig.suptitle(f"{config.algorithm} on {config.env}: {config.env_config.summary()}, "
                 f"{config.num_envs} envs")
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=100, format="png"))
    plt.close(fig)


def main(argv, config_cls: type[TrainConfig], make_update: Callable, description: str) -> dict:
    """The training script: parse, run, exit 130 when interrupted, one line on a bad run
    directory."""
    config, out, resume, stop_after, devices, overwrite = parse(argv, config_cls, description)
    try:
        return run(config, make_update, out, resume=resume, stop_after=stop_after,
                   devices=devices, overwrite=overwrite)
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    except ckpt.CheckpointError as err:
        raise SystemExit(f"error: {err}") from None
