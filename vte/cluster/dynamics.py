"""Dynamics: how the cluster's state moves between two decisions.

The slot bookkeeping of running jobs (a placed job holds its demand in a slot of its node
until it ends), the ground-truth measurement of every node (`measure`), failures and
repairs (per-step event probabilities), and the background load (a mean-reverting walk
around a daily profile). `vte.cluster.env` calls these in the named phases of a step (`place`,
`advance`); `vte.cluster.scoring` keeps the cost model and `vte.cluster.scenario` the generator of fresh
scenarios. Formulas with units: vte/cluster/MODEL.md.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from vte.cluster import catalogue as C
from vte import rng
from vte.cluster import fusion
from vte.cluster.fusion import lookup
from vte.cluster.params import EnvParams
from vte.cluster.types import Cluster, Metrics, Nodes, Requests


# --------------------------------------------------------------------------
# Jobs in slots
# --------------------------------------------------------------------------

def held_demand(demand: jax.Array) -> jax.Array:
    """The resources a placed job holds, as stored in `Nodes.job_demand`: its demand in
    whole units (cores, GiB, GPUs, GiB), rounded up, uint16.

    Sampled demands are whole numbers, so this is exact for them; a hand-made fractional
    demand is held rounded up. Values above 65535 units never fit a node, so they are
    never placed. Stored as uint16 because reading the slots' demands is the largest
    memory traffic of a step.
    """
    return jnp.ceil(jnp.clip(demand, 0.0, 65535.0)).astype(jnp.uint16)


def slot_sum(mask: jax.Array, demand: jax.Array) -> jax.Array:
    """Resources of the slots selected by `mask` (J, N), from `demand` (R, J, N): (R, N)
    float32.

    Summed slot by slot (J is small and static): XLA on CPU compiles a masked reduction
    over the slot axis into a loop several times slower than this unrolled sum.
    """
    return sum(jnp.where(mask[i], demand[:, i].astype(jnp.float32), 0.0)
               for i in range(mask.shape[0]))


def slot_count(mask: jax.Array) -> jax.Array:
    """Number of slots selected by `mask` (J, N) on each node, (N,) float32 (unrolled, as
    `slot_sum`)."""
    return sum(mask[i].astype(jnp.float32) for i in range(mask.shape[0]))


def allocated(nodes: Nodes) -> jax.Array:
    """Resources held by running jobs recomputed from the slots, (R, N) (equals `nodes.alloc`;
    `slot_count(nodes.job_active)` likewise equals `nodes.jobs`)."""
    return slot_sum(nodes.job_active, nodes.job_demand)


# Share of the background CPU load that shows on each resource (cpu, mem, gpu, disk).
_BG_SHARE = (1.0, C.MEM_BG_RATIO, 0.0, 0.0)


def measure(cluster: Cluster, nodes: Nodes) -> Metrics:
    """Ground-truth metrics of every node: what a perfect monitoring system reports."""
    cap = cluster.capacity
    alloc = nodes.alloc
    used = cap * (jnp.asarray(_BG_SHARE, jnp.float32)[:, None] * nodes.bg_load) + alloc  # (R, N)
    util = jnp.clip(used[C.CPU] / jnp.maximum(cap[C.CPU], 1.0), 0.0, 1.0)
    mem_util = jnp.clip(used[C.MEM] / jnp.maximum(cap[C.MEM], 1.0), 0.0, 1.0)
    power = (cluster.power_idle + (cluster.power_peak - cluster.power_idle) * util
             + lookup(C.GPU_WATTS, cluster.gpu_model) * alloc[C.GPU])
    return Metrics(
        util=util,
        mem_util=mem_util,
        free=cap - used,
        power=jnp.where(nodes.up, power, 0.0),
        up=nodes.up,
        jobs=nodes.jobs,
    )


# --------------------------------------------------------------------------
# Failures, repairs and the background load
# --------------------------------------------------------------------------

def daily_bg_mean(cluster: Cluster, time: jax.Array) -> jax.Array:
    """Daily profile of the background load the random walk reverts to, fraction, (N,)."""
    num_sites = cluster.link_delay.shape[-1]
    # Sites sit in time zones spread over the day: site s is s / S of a day ahead.
    day = time / 86400.0 + jnp.arange(num_sites, dtype=jnp.float32) / num_sites
    profile = 1.0 + C.DAILY_AMPLITUDE * jnp.sin(2.0 * jnp.pi * day)    # (S,), one sine per site
    mean = cluster.bg_mean * lookup(profile, cluster.site)
    return jnp.clip(mean, 0.0, C.BG_MAX)


def step_event_prob(rate_per_hour: jax.Array, params: EnvParams) -> jax.Array:
    """Probability that a Poisson event of `rate_per_hour` happens within one step:
    1 - exp(-rate * step_seconds / 3600). Used for failures (rate = failure_rate) and
    repairs (rate = 1 / repair_hours)."""
    return -jnp.expm1(-rate_per_hour * (params.step_seconds / 3600.0))


def repair_prob(params: EnvParams) -> jax.Array:
    """Probability that a failed node is repaired within one step, ()."""
    return step_event_prob(1.0 / params.repair_hours, params)


def bg_move(bg: jax.Array, noise: jax.Array, cluster: Cluster, time: jax.Array,
            params: EnvParams) -> jax.Array:
    """Background load one step later, at `time`: a mean-reverting move towards the daily
    profile plus `bg_volatility` times unit-variance `noise` (N,), clipped to [0, BG_MAX]."""
    bg = bg + params.bg_reversion * (daily_bg_mean(cluster, time) - bg)
    return jnp.clip(bg + params.bg_volatility * noise, 0.0, C.BG_MAX)


def initial_nodes(key: jax.Array, cluster: Cluster, params: EnvParams) -> Nodes:
    """Dynamic node state at time 0: no jobs, all nodes up, background load at its profile
    (and its first move drawn)."""
    n, j = params.num_nodes, params.slots_per_node
    bg = daily_bg_mean(cluster, jnp.float32(0.0))
    noise = rng.unit_noise(rng.key_words(key, rng.RESET_LOAD, (n,)))
    return Nodes(
        bg_load=bg,
        bg_next=bg_move(bg, noise, cluster, jnp.float32(params.step_seconds), params),
        up=jnp.ones((n,), bool),
        alloc=jnp.zeros((C.NUM_RESOURCES, n), jnp.float32),
        jobs=jnp.zeros((n,), jnp.float32),
        job_active=jnp.zeros((j, n), bool),
        job_demand=jnp.zeros((C.NUM_RESOURCES, j, n), jnp.uint16),
        job_end=jnp.zeros((j, n), jnp.float32),
    )


# --------------------------------------------------------------------------
# The phases of a step
# --------------------------------------------------------------------------

def place(nodes: Nodes, request: Requests, node: jax.Array, placed: jax.Array,
          end_time: jax.Array) -> Nodes:
    """`request` bound to a free slot of `node` until `end_time` (s) when `placed`;
    unchanged otherwise. The per-node totals get a one-hot add (fused with the release of
    `advance`); the slot's demand and end time are written in place, to an index past the
    end (dropped) when nothing is placed."""
    n, num_slots = nodes.jobs.shape[0], nodes.job_active.shape[0]
    slot = jnp.argmin(nodes.job_active[:, node])
    held = held_demand(request.demand)
    on_node = placed & (jnp.arange(n) == node)                                # (N,)
    on_slot = on_node & (jnp.arange(num_slots) == slot)[:, None]              # (J, N)
    w_slot = jnp.where(placed, slot, num_slots)
    return nodes.replace(
        alloc=nodes.alloc + jnp.where(on_node, held.astype(jnp.float32)[:, None], 0.0),
        jobs=nodes.jobs + on_node.astype(jnp.float32),
        job_active=nodes.job_active | on_slot,
        job_demand=nodes.job_demand.at[:, w_slot, node].set(held, mode="drop"),
        job_end=nodes.job_end.at[w_slot, node].set(end_time, mode="drop"),
    )


def advance(nodes: Nodes, cluster: Cluster, seed: jax.Array, t1: jax.Array,
            params: EnvParams) -> tuple[Nodes, jax.Array, jax.Array]:
    """One step of time, to `t1` (s): failures and repairs, completions, the background
    load. Returns (nodes, jobs lost, jobs completed), the counts () int32.

    `seed` is the step's seed of `vte.rng.words` (stream `STEP_NODES`)."""
    n = nodes.jobs.shape[0]
    w = rng.words(seed, rng.STEP_NODES, (n, 2))
    # Up nodes fail with their per-step probability, failed ones are repaired with
    # repair_prob: one uniform per node decides both.
    flip = rng.to_uniform(w[:, 0]) < jnp.where(nodes.up, cluster.step_fail_prob,
                                               repair_prob(params))
    up = nodes.up ^ flip
    # A job ends when it finishes or when its node is down after the step (then every job
    # of the node is lost, also one that would have finished within the step). Computed
    # once for the release and the slots left running.
    gone = fusion.materialize(nodes.job_active & ((nodes.job_end <= t1) | ~up))
    active = nodes.job_active & ~gone
    jobs = slot_count(active)
    lost = jnp.sum(jnp.where(up, 0.0, nodes.jobs))
    n_lost = lost.astype(jnp.int32)
    n_completed = (jnp.sum(nodes.jobs) - jnp.sum(jobs) - lost).astype(jnp.int32)
    # The load at t1 was drawn one step ahead; draw the one at t1 + dt.
    bg_next = bg_move(nodes.bg_next, rng.unit_noise(w[:, 1]), cluster,
                      t1 + params.step_seconds, params)
    nodes = nodes.replace(bg_load=nodes.bg_next, bg_next=bg_next, up=up, job_active=active,
                          jobs=jobs, alloc=nodes.alloc - slot_sum(gone, nodes.job_demand))
    return nodes, n_lost, n_completed


__all__ = ["measure", "held_demand", "slot_sum", "slot_count", "allocated", "daily_bg_mean",
           "bg_move", "step_event_prob", "repair_prob", "initial_nodes", "place", "advance"]
