"""Trained policies on disk: a run directory, its checkpoints, and loading a policy.

A training run (`train/ppo.py`, `train/imitate.py`) writes

    DIR/config.json        the run's configuration (network size, environment, ...)
    DIR/checkpoints/STEP/  orbax checkpoints: `policy` (network parameters, one set per
                           seed, stacked on a leading axis) and `state` (the full training
                           state, for `--resume`)
    DIR/checksums.json     a SHA-256 of every saved checkpoint, verified before a restore:
                           a damaged checkpoint is named and skipped for the newest good one

and one call turns it back into a policy:

    policy = vte.load_policy("runs/ppo")          # (key, obs, params) -> action
    action = policy(key, obs, params)             # vmap it over a batch of envs

A run directory names its newest checkpoint; `DIR@STEP` names checkpoint STEP of it
(`split_step`), wherever a run directory is read: `load_config`, `load_variables`,
`load_policy`, `python -m vte.openb --policies`, `plan:` bases, `--init-from`, `--teacher`.
There, too, a scheduler shipped with vte is named `zoo:NAME` (or `NAME` alone, where no
path of that name exists): `split_step` resolves it to its folder (`vte.zoo.resolve`).

    policy = vte.load_policy("openb-evidence")   # vte/zoo/openb-evidence; vte.zoo.names()
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from typing import Any, Callable

import jax
import orbax.checkpoint as ocp

from vte.files import atomic_write_text
from vte import registry

CONFIG_FILE = "config.json"
CHECKPOINT_DIR = "checkpoints"
CHECKSUM_FILE = "checksums.json"


class CheckpointError(ValueError):
    """A run directory whose configuration or checkpoints cannot be trusted; one line."""


def save_config(run_dir: str, config: dict) -> None:
    """Write the run's configuration (JSON) next to its checkpoints, atomically."""
    os.makedirs(run_dir, exist_ok=True)
    atomic_write_text(os.path.join(run_dir, CONFIG_FILE),
                      json.dumps(config, indent=2, sort_keys=True))


def split_step(name: str) -> tuple[str, int | None]:
    """`(run_dir, step)` of `DIR@STEP` (checkpoint STEP of the run directory DIR), or
    `(name, None)` for anything else: a directory named as written (its newest checkpoint),
    or a name that is not a run at all (the caller's own error names it). A directory whose
    own name holds an '@' is taken as written. A zoo name (`zoo:NAME`, `zoo:NAME@STEP`, or
    NAME where no such path exists) is its folder in `vte/zoo/` (`vte.zoo.resolve`, the one
    place names become paths). Raises ValueError, naming the checkpoints DIR has, when it
    has no checkpoint STEP, and naming the zoo's schedulers for `zoo:` before another name."""
    from vte import zoo
    name = zoo.resolve(name)
    if os.path.isdir(name):
        return name, None
    head, sep, tail = name.rpartition("@")
    if not (sep and head and tail.isdigit() and os.path.isdir(head)):
        return name, None
    steps = checkpoint_steps(head)
    if int(tail) not in steps:
        raise ValueError(f"{name!r}: the run {head!r} has no checkpoint {int(tail)} "
                         f"(its checkpoints: {steps or 'none'})")
    return head, int(tail)


def is_run_path(name: str) -> bool:
    """Whether `name` is a directory, `DIR@STEP` of one, or a zoo name (`split_step`): a
    run to load, rather than a policy's name."""
    return os.path.isdir(split_step(name)[0])


def load_config(run_dir: str) -> dict:
    """The configuration of a run directory (or `DIR@STEP`: DIR's); a clear error when it is
    not one or is damaged."""
    run_dir = split_step(run_dir)[0]
    path = os.path.join(run_dir, CONFIG_FILE)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"{run_dir!r} is not a training run directory: no {CONFIG_FILE} in it "
            "(expected the --out directory of train/ppo.py or train/imitate.py)")
    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{path} is damaged: not valid JSON ({err})") from None
    if not isinstance(config, dict) or "hidden" not in config:
        raise CheckpointError(f"{path} is damaged: not a training configuration "
                              "(a JSON object with the run's flags, 'hidden' among them)")
    return config


def checkpoint_digest(run_dir: str, step: int) -> str:
    """SHA-256 over the names and bytes of every file of checkpoint `step`."""
    root = os.path.join(run_dir, CHECKPOINT_DIR, str(step))
    digest = hashlib.sha256()
    for folder, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(folder, name)
            digest.update(os.path.relpath(path, root).encode() + b"\0")
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    digest.update(block)
            digest.update(b"\0")
    return digest.hexdigest()


def _checksums(run_dir: str) -> dict[str, str]:
    path = os.path.join(run_dir, CHECKSUM_FILE)
    if not os.path.isfile(path):
        return {}
    try:
        with open(path) as f:
            table = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return {"damaged": "checksums.json"}                     # every step then fails verify
    return table if isinstance(table, dict) else {"damaged": "checksums.json"}


def record_checksum(run_dir: str, step: int) -> None:
    """Store the digest of a just-saved checkpoint (and forget steps no longer on disk)."""
    on_disk = checkpoint_steps(run_dir)                  # listed once, not once per entry
    table = {k: v for k, v in _checksums(run_dir).items() if k.isdigit() and int(k) in on_disk}
    table[str(step)] = checkpoint_digest(run_dir, step)
    atomic_write_text(os.path.join(run_dir, CHECKSUM_FILE), json.dumps(table, indent=1, sort_keys=True))


def verify_checkpoint(run_dir: str, step: int) -> str | None:
    """None when checkpoint `step` matches its stored checksum, else what is wrong (one line).

    A checkpoint saved before checksums were kept (no checksums.json) is not verified here;
    its restore still catches a damaged one.
    """
    table = _checksums(run_dir)
    if "damaged" in table:
        return f"{os.path.join(run_dir, CHECKSUM_FILE)} is damaged"
    if not table:
        return None
    want = table.get(str(step))
    if want is None:
        return f"checkpoint {step} has no recorded checksum (its save did not finish)"
    if checkpoint_digest(run_dir, step) != want:
        return f"checkpoint {step} does not match its checksum (damaged or altered)"
    return None


def restore_newest_good(run_dir: str, restore: Callable[[int], Any], steps: list[int] | None = None):
    """(step, restored) of the newest checkpoint that verifies and restores.

    Each damaged one is reported on stderr in one line and skipped; with none left, a
    CheckpointError lists them.
    """
    steps = checkpoint_steps(run_dir) if steps is None else steps
    problems = []
    for step in sorted(steps, reverse=True):
        problem = verify_checkpoint(run_dir, step)
        if problem is None:
            try:
                return step, restore(step)
            except Exception as err:                               # orbax raises many kinds
                first = str(err).strip().splitlines()[0][:200] if str(err).strip() else ""
                problem = f"checkpoint {step} cannot be restored ({type(err).__name__}: {first})"
        problems.append(problem)
        print(f"warning: {run_dir}: {problem}; trying an older one", file=sys.stderr)
    raise CheckpointError(f"{run_dir}: no usable checkpoint"
                          + (f" ({'; '.join(problems)})" if problems else ""))


def checkpoint_manager(run_dir: str, max_to_keep: int | None = 3) -> ocp.CheckpointManager:
    """The orbax manager of `run_dir/checkpoints` (synchronous saves)."""
    options = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep,
                                           enable_async_checkpointing=False)
    return ocp.CheckpointManager(os.path.abspath(os.path.join(run_dir, CHECKPOINT_DIR)),
                                 options=options)


def checkpoint_steps(run_dir: str) -> list[int]:
    """The update counts a run has checkpoints of (read only: creates nothing); of DIR for
    `DIR@STEP`."""
    path = os.path.join(split_step(run_dir)[0], CHECKPOINT_DIR)
    if not os.path.isdir(path):
        return []
    return sorted(int(name) for name in os.listdir(path) if name.isdigit())


def network_from_config(config: dict):
    """The network a run trained, built from its configuration by its environment's
    registration (`vte.registry`)."""
    return registry.of_run(config).network(config["hidden"])


def load_variables(run_dir: str, seed: int = 0, step: int | None = None) -> dict[str, Any]:
    """Network variables (`{"params": ...}`) of one seed at a checkpoint (default: latest;
    `run_dir` may name one as `DIR@STEP`, then `step` must be None or the same)."""
    run_dir, named = split_step(run_dir)
    if named is not None:
        if step is not None and step != named:
            raise ValueError(f"step={step} is invalid: the run is named at checkpoint {named} "
                             f"({run_dir}@{named})")
        step = named
    config = load_config(run_dir)
    steps = checkpoint_steps(run_dir)
    if not steps:
        raise FileNotFoundError(f"no checkpoint in {os.path.join(run_dir, CHECKPOINT_DIR)!r}")
    if step is not None and step not in steps:
        raise ValueError(f"step={step} is invalid: {run_dir!r} has checkpoints {steps}")
    seeds = config.get("seeds", 1)
    if not 0 <= seed < seeds:
        raise ValueError(f"seed={seed} is invalid: the run trained seeds 0..{seeds - 1}")
    with checkpoint_manager(run_dir, max_to_keep=None) as mngr:   # closed: no thread left

        def restore(s):
            return mngr.restore(s, args=ocp.args.Composite(
                policy=ocp.args.StandardRestore())).policy
        # An explicit step is that checkpoint or an error; the default is the newest good one.
        _, stacked = restore_newest_good(run_dir, restore, [step] if step is not None else steps)
    return jax.tree_util.tree_map(lambda x: x[seed], stacked)


def load_policy(run_dir: str, seed: int = 0, greedy: bool = True, step: int | None = None
                ) -> Callable:
    """A trained policy `(key, obs, params) -> action` from a run directory.

    The policy is the one the run's environment registration loads
    (`Registration.load_policy`): on synthetic clusters the function above; a run on the
    OpenB trace (`--env openb`) gives a policy of the replay instead,
    `(key, state, pod, feasible, spec) -> (scores, shared_gpu)` (`vte.openb.policies`), which
    `vte.openb.lab.experiment.run_grid` and `python -m vte.openb --policies RUN_DIR` take: its
    scores are the network's logits (the replay keeps the best feasible node, so `greedy`
    does not apply), for node files of as many GPU models as the one it trained on
    (`python -m vte.openb` checks; `vte.openb.network.as_policy` to give the count).

    Args:
      run_dir: the `--out` directory of a training run, or `DIR@STEP` for its checkpoint
        STEP.
      seed: which of the run's `--seeds` models to load.
      greedy: take the most likely action (default) instead of sampling (synthetic runs;
        the replay keeps the best-scored node).
      step: the checkpoint (update count) to load; the latest by default.
    Returns:
      A pure, jittable function of one observation (one replay step for an OpenB run);
      vmap it for a batch. It works for any `num_nodes`.
    """
    config = load_config(run_dir)
    variables = load_variables(run_dir, seed, step)
    return registry.of_run(config).load_policy(config, variables, greedy)


__all__ = ["load_policy", "load_variables", "load_config", "save_config",
           "checkpoint_manager", "checkpoint_steps", "network_from_config", "CheckpointError",
           "record_checksum", "verify_checkpoint", "restore_newest_good", "checkpoint_digest",
           "split_step", "is_run_path"]
