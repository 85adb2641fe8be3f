"""The replay: pods submitted one at a time, bound at once or failed, and the measurement.

`replay` runs one policy over a batch of seeds as one compiled program (`lax.scan` over
pods, `jax.vmap` over seeds), in chunks so that a progress bar can follow it. `binned`
turns the per-pod log into the published curves (OPENB.md section 7).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from vte.openb import cluster
from vte.openb.cluster import Pod, Spec, State
from vte.openb.policies import Policy
from vte.openb.power import datacenter_power


@dataclasses.dataclass(frozen=True)
class Log:
    """What the simulator logs after every submitted pod; (S, T) NumPy arrays."""

    valid: np.ndarray        # bool, a submitted pod (False on padding)
    placed: np.ndarray       # bool, the pod was bound
    arrived: np.ndarray      # int64, milli-GPU asked for by the pods submitted so far, failed ones included
    used: np.ndarray         # int64, milli-GPU allocated after this pod
    frag: np.ndarray         # float64, milli-GPU, the cluster's fragmentation (sum of node F)
    idle: np.ndarray         # int64, free milli-GPU after this pod
    power_cpu: np.ndarray | None = None   # int64 W, the datacenter's CPUs after this pod
    power_gpu: np.ndarray | None = None   # int64 W, its GPUs (both with `replay(power=...)`)


def pod_step(policy: Policy, spec: Spec, state: State, pod: Pod, key: jax.Array):
    """Submits one pod: filter, score, choose (ties to the smallest rank), bind or fail."""
    feasible = cluster.feasible(state, pod, spec)
    scores, shared_gpu = policy(key, state, pod, feasible, spec)
    node = cluster.select(scores, feasible, state.rank)
    placed = jnp.any(feasible)
    state = cluster.submit(cluster.place(state, spec, pod, node, shared_gpu[node], placed), pod)
    out = (placed, cluster.used_milli(state, spec), jnp.sum(state.frag))
    return state, out


@functools.partial(jax.jit, static_argnums=0)
def _run_chunk(policy: Policy, spec: Spec, state: State, pods: Pod, keys: jax.Array, start: jax.Array,
               power=None):
    """(S,)-batched states, (S, C) pods and (S,) keys -> states and (S, C) logs; with a
    `power.PowerModel` the logs end with the datacenter's CPU and GPU watts. A policy with
    the attribute `one_seed_at_a_time` (`lookahead.planner`) runs its seeds one after
    another (`lax.map`), unbatched, so that its `lax.cond`s skip the work they guard."""
    def one_seed(state, pods, key):
        def body(state, xs):
            pod, t = xs
            state, out = pod_step(policy, spec, state, pod, jax.random.fold_in(key, t))
            if power is not None:
                out = out + datacenter_power(state, spec, power)
            return state, out
        steps = start + jnp.arange(pods.valid.shape[0])
        return jax.lax.scan(body, state, (pods, steps))
    if getattr(policy, "one_seed_at_a_time", False):     # its lax.conds skip work (lookahead)
        return jax.lax.map(lambda args: one_seed(*args), (state, pods, keys))
    return jax.vmap(one_seed)(state, pods, keys)


def replay(policy: Policy, spec: Spec, pods: Pod, ranks: np.ndarray, keys: jax.Array,
           chunk: int = 2048, progress: Callable[[int], None] | None = None, power=None) -> Log:
    """Replays (S, T) `pods` under `policy`, one seed per row.

    ranks: (S, N) int32 tie-break ranks; keys: (S,) keys of the policy's own draws (Random's).
    The scan runs `chunk` pods per compiled call (one compilation for all chunks) and calls
    `progress(pods_done)` after each. power: a `power.PowerModel` (`power_model(nodes.models)`)
    to log the datacenter's watts after every pod (`Log.power_cpu`, `Log.power_gpu`).
    """
    num_seeds, length = pods.valid.shape
    if chunk < 1:
        raise ValueError(f"chunk={chunk}: must be >= 1")
    chunk = min(chunk, length)
    padded = -(-length // chunk) * chunk
    # Padded and cut into chunks on the host (op by op with jax, each leaf's pad and every
    # chunk's slice compiled a small program of its own on a first replay).
    pods = jax.tree_util.tree_map(
        lambda x: np.pad(np.asarray(x), ((0, 0), (0, padded - length))), pods)
    state = jax.vmap(lambda r: cluster.empty_state(spec, r))(jnp.asarray(ranks))
    parts = []
    for start in range(0, padded, chunk):
        part = jax.tree_util.tree_map(lambda x: x[:, start:start + chunk], pods)
        state, out = _run_chunk(policy, spec, state, part, keys, jnp.int32(start), power)
        parts.append(jax.device_get(out))
        if progress is not None:
            progress(min(chunk, length - start))
    placed, used, frag, *watts = (np.concatenate(x, axis=1)[:, :length] for x in zip(*parts))
    valid = np.asarray(pods.valid)[:, :length]
    demand = (np.asarray(pods.num_gpus)[:, :length].astype(np.int64)
              * np.asarray(pods.gpu_milli)[:, :length])
    total = int(spec.total_gpu_milli)
    used = used.astype(np.int64)
    return Log(valid=valid, placed=placed & valid, arrived=np.cumsum(np.where(valid, demand, 0), axis=1),
               used=used, frag=frag.astype(np.float64), idle=total - used,
               **dict(zip(("power_cpu", "power_gpu"), (w.astype(np.int64) for w in watts))))


# How the artifact bins each curve (OPENB.md section 8): decimals each event's value is rounded
# to before the bin's mean, and decimals the mean is rounded to (None: not rounded).
BINNING = {"alloc": (2, 2), "frag": (None, 2), "frag_ratio": (None, None)}


def binned(log: Log, values: np.ndarray, total_gpus: int, max_x: int,
           event_decimals: int | None = 2, mean_decimals: int | None = 2) -> np.ndarray:
    """(S, max_x + 1) float64: per seed, the mean of `values` (S, T) (a % per event, rounded
    to `event_decimals`) over the events whose arrived GPU demand rounds to x % of
    `total_gpus`, for x = 0..max_x, rounded to `mean_decimals`; an empty bin takes the events
    within x +- 1; NaN if those are empty too. Padding events (not `log.valid`) never count."""
    out = np.full((log.valid.shape[0], max_x + 1), np.nan)
    xs = np.arange(max_x + 1)
    for s in range(log.valid.shape[0]):
        v = log.valid[s]
        # arrived never decreases, so each bin (and each x +- 1) is one contiguous run of
        # events: its mean is numpy's over that slice, the artifact's own summation.
        pct = np.round(log.arrived[s][v] / total_gpus / 10).astype(np.int64)
        val = np.asarray(values[s][v], np.float64)
        if event_decimals is not None:
            val = np.round(val, event_decimals)
        lo, hi = np.searchsorted(pct, xs, "left"), np.searchsorted(pct, xs, "right")
        near_lo, near_hi = np.searchsorted(pct, xs - 1, "left"), np.searchsorted(pct, xs + 1, "right")
        for x in xs:
            a, b = (lo[x], hi[x]) if hi[x] > lo[x] else (near_lo[x], near_hi[x])
            if b > a:
                out[s, x] = val[a:b].mean()
    return out if mean_decimals is None else np.round(out, mean_decimals)


def curves(log: Log, total_gpus: int, max_x: int) -> dict[str, np.ndarray]:
    """The published curves, (S, max_x + 1) each, binned as the artifact bins them (`BINNING`):
    allocation (% of the cluster's GPUs, `allo_discrete`), fragmentation (% of the cluster's
    GPUs, `frag_discrete`) and fragmentation as % of idle milli-GPU (`frag_ratio_discrete`)."""
    values = {"alloc": log.used / total_gpus / 10,
              "frag": log.frag / total_gpus / 10,
              "frag_ratio": np.where(log.idle > 0, 100 * log.frag / np.maximum(log.idle, 1), 0.0)}
    return {k: binned(log, v, total_gpus, max_x, *BINNING[k]) for k, v in values.items()}
