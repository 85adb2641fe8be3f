"""Trained policies on disk: a run directory, its checkpoints, and loading a policy.

A training run (`train/ppo.py`, `train/imitate.py`) writes

    DIR/config.json        the run's configuration (network size, environment, ...)
    DIR/checkpoints/STEP/  orbax checkpoints: `policy` (network parameters, one set per
                           seed, stacked on a leading axis) and `state` (the full training
                           state, for `--resume`)

and one call turns it back into a policy:

    policy = vte.load_policy("runs/ppo")          # (key, obs, params) -> action
    action = policy(key, obs, params)             # vmap it over a batch of envs
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable

import jax
import orbax.checkpoint as ocp

from vte.network import SchedulerNet, make_policy

CONFIG_FILE = "config.json"
CHECKPOINT_DIR = "checkpoints"


def save_config(run_dir: str, config: dict) -> None:
    """Write the run's configuration (JSON) next to its checkpoints."""
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, CONFIG_FILE), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)


def load_config(run_dir: str) -> dict:
    """The configuration of a run directory; a clear error when it is not one."""
    path = os.path.join(run_dir, CONFIG_FILE)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"{run_dir!r} is not a training run directory: no {CONFIG_FILE} in it "
            "(expected the --out directory of train/ppo.py or train/imitate.py)")
    with open(path) as f:
        return json.load(f)


def checkpoint_manager(run_dir: str, max_to_keep: int | None = 3) -> ocp.CheckpointManager:
    """The orbax manager of `run_dir/checkpoints` (synchronous saves)."""
    options = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep,
                                           enable_async_checkpointing=False)
    return ocp.CheckpointManager(os.path.abspath(os.path.join(run_dir, CHECKPOINT_DIR)),
                                 options=options)


def checkpoint_steps(run_dir: str) -> list[int]:
    """The update counts a run has checkpoints of (read only: creates nothing)."""
    path = os.path.join(run_dir, CHECKPOINT_DIR)
    if not os.path.isdir(path):
        return []
    return sorted(int(name) for name in os.listdir(path) if name.isdigit())


def network_from_config(config: dict) -> SchedulerNet:
    """The network a run trained, built from its configuration."""
    return SchedulerNet(hidden=config["hidden"], head_hidden=config["hidden"])


def load_variables(run_dir: str, seed: int = 0, step: int | None = None) -> dict[str, Any]:
    """Network variables (`{"params": ...}`) of one seed at a checkpoint (default: latest)."""
    config = load_config(run_dir)
    steps = checkpoint_steps(run_dir)
    if not steps:
        raise FileNotFoundError(f"no checkpoint in {os.path.join(run_dir, CHECKPOINT_DIR)!r}")
    step = steps[-1] if step is None else step
    if step not in steps:
        raise ValueError(f"step={step} is invalid: {run_dir!r} has checkpoints {steps}")
    mngr = checkpoint_manager(run_dir, max_to_keep=None)
    stacked = mngr.restore(step, args=ocp.args.Composite(policy=ocp.args.StandardRestore()))
    seeds = config.get("seeds", 1)
    if not 0 <= seed < seeds:
        raise ValueError(f"seed={seed} is invalid: the run trained seeds 0..{seeds - 1}")
    return jax.tree_util.tree_map(lambda x: x[seed], stacked.policy)


def load_policy(run_dir: str, seed: int = 0, greedy: bool = True, step: int | None = None
                ) -> Callable:
    """A trained policy `(key, obs, params) -> action` from a run directory.

    Args:
      run_dir: the `--out` directory of a training run.
      seed: which of the run's `--seeds` models to load.
      greedy: take the most likely action (default) instead of sampling.
      step: the checkpoint (update count) to load; the latest by default.
    Returns:
      A pure, jittable function of one observation; vmap it for a batch. It works for
      any `num_nodes`.
    """
    config = load_config(run_dir)
    return make_policy(network_from_config(config), load_variables(run_dir, seed, step), greedy)


__all__ = ["load_policy", "load_variables", "load_config", "save_config",
           "checkpoint_manager", "checkpoint_steps", "network_from_config"]
