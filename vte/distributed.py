"""Batches of environments sharded over a device mesh along the environment axis.

Built on JAX's own distribution: a `jax.sharding.Mesh` with one axis (`"env"` by
default), `NamedSharding(mesh, P("env"))` for every leaf of the batched state, and
`jax.shard_map` for `reset` and `step`, so each device steps its own environments with
no transfer between devices inside a step (the auto-reset's "is any env done" check is
taken per device; `check_vma=False` because a fresh scenario's constant fields are not
device-varying while the running ones are). On several hosts, call `jax.distributed.initialize()` first; the
mesh then spans every process's devices and each process feeds its local shard.

    mesh = vte.distributed.make_mesh()                   # all devices
    obs, state = vte.distributed.reset(key, params, num_envs=4096, mesh=mesh)
    step = vte.distributed.make_step(params, mesh)       # jitted, sharded in and out
    obs, state, reward, terminated, truncated, info = step(keys, state, actions)
"""

from __future__ import annotations

from typing import Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from vte import registry

AXIS = "env"


def make_mesh(devices: Sequence[jax.Device] | int | None = None, axis: str = AXIS) -> Mesh:
    """A one-axis mesh over `devices` (a list, a count of the first local devices, or None
    for every device of every process)."""
    if devices is None:
        devices = jax.devices()
    elif isinstance(devices, (int, np.integer)):
        available = jax.local_devices()
        if not 1 <= devices <= len(available):
            raise ValueError(f"devices={devices} is invalid: allowed 1..{len(available)} "
                             f"(the local devices)")
        devices = available[:devices]
    return Mesh(np.asarray(devices), (axis,))


def env_sharding(mesh: Mesh, axis: str = AXIS) -> NamedSharding:
    """Sharding of arrays whose leading axis is the environment axis."""
    return NamedSharding(mesh, P(axis))


def shard(tree, mesh: Mesh, axis: str = AXIS):
    """Place a batched pytree (leading axis = environments) on the mesh."""
    _check_divisible(jax.tree_util.tree_leaves(tree)[0].shape[0], mesh, axis)
    return jax.device_put(tree, env_sharding(mesh, axis))


def _check_divisible(num_envs: int, mesh: Mesh, axis: str):
    size = mesh.shape[axis]
    if (isinstance(num_envs, (bool, np.bool_)) or not isinstance(num_envs, (int, np.integer))
            or num_envs < 1 or num_envs % size):
        raise ValueError(f"num_envs={num_envs} is invalid: allowed a positive multiple of the "
                         f"{size} devices of mesh axis {axis!r}")


def _env(env, params):
    """The environment that steps `params`: `env`, or Cluster-v0's (the registry's)."""
    return env if env is not None else registry.registration("Cluster-v0").make(params=params)[0]


def reset(key: jax.Array, params, num_envs: int, mesh: Mesh, axis: str = AXIS, env=None):
    """`num_envs` fresh environments, sharded over `mesh`; env i uses `split(key, num_envs)[i]`
    exactly as `jax.vmap(env.reset)` would, so the result equals the unsharded one. `env`:
    any registered environment's (`vte.make`), Cluster-v0's (`vte.reset`) by default."""
    _check_divisible(num_envs, mesh, axis)
    env = _env(env, params)
    keys = jax.device_put(jax.random.split(key, num_envs), env_sharding(mesh, axis))
    fn = jax.shard_map(jax.vmap(lambda k: env.reset(k, params)), mesh=mesh,
                       in_specs=P(axis), out_specs=P(axis), check_vma=False)
    return jax.jit(fn)(keys)


def make_step(params, mesh: Mesh, axis: str = AXIS, env=None):
    """A jitted batched `env.step` (`vte.step` by default) whose inputs and outputs stay
    sharded over `mesh`.

    Returns `step(keys, states, actions) -> (obs, states, reward, terminated, truncated,
    info)`, all with the environment axis sharded; equal to `jax.vmap(env.step)`.
    """
    env = _env(env, params)
    fn = jax.shard_map(jax.vmap(lambda k, s, a: env.step(k, s, a, params)), mesh=mesh,
                       in_specs=P(axis), out_specs=P(axis), check_vma=False)
    return jax.jit(fn, donate_argnums=(1,))


__all__ = ["AXIS", "make_mesh", "env_sharding", "shard", "reset", "make_step"]
