"""The observation: what the scheduler sees.

The node features come from the cluster's static description and the digital twin,
never from the ground-truth metrics. Node features are split in two: the part fixed for
an episode (capacities, labels, power model, ...) is computed once at reset and cached
in `EnvState.node_static`; the dynamic part (the twin's latest report and the delay from
the head request's origin) is computed every step. The scoring's costs and the optimum
are never in it. The action mask is the feasibility of the head request (a scheduler's
filter stage): by default on the ground truth, so it allows exactly the valid actions;
with `EnvParams.mask_from_twin` on the twin, so a stale or noisy twin shows in it too.
The two are the same in the states `reset` and `step` make while the twin is exact (the
default parameters); a state edited by hand and rescored (`vte.rescore`) keeps its old
twin until the next step.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from vte import catalogue as C
from vte import scoring, twin
from vte.params import EnvParams
from vte.types import Cluster, EnvState, Observation, Requests

NODE_STATIC_FEATURE_NAMES = (
    "tier_cloud", "tier_edge", "tier_hpc",
    "cpu_cores/64", "memory_gib/256", "gpus/8", "disk_gib/1000",
    "gpu_T4", "gpu_A100", "gpu_H100",
    *(f"label_{name}" for name in C.LABELS),
    "speed", "bandwidth_gbps/10", "power_idle_w/100", "power_peak_w/1000",
    "failures_per_hour*100", "exists",
)
NODE_DYNAMIC_FEATURE_NAMES = (
    "up", "cpu_util", "mem_util",
    "free_cores/64", "free_memory_gib/256", "free_gpus/8", "free_disk_gib/1000",
    "power_w/1000", "jobs/slots", "delay_from_origin_ms/100", "report_age_steps/10",
)
NODE_FEATURE_NAMES = NODE_STATIC_FEATURE_NAMES + NODE_DYNAMIC_FEATURE_NAMES
REQUEST_FEATURE_NAMES = (
    "valid", "cpu_cores/64", "memory_gib/256", "gpus/8", "disk_gib/1000", "work_hours",
    "accepts_T4", "accepts_A100", "accepts_H100",
    *(f"required_{name}" for name in C.LABELS),
    *(f"rejected_{name}" for name in C.LABELS),
    *(f"preferred_{name}" for name in C.LABELS),
    "has_latency_bound", "latency_bound_ms/100", "data_gb/100",
)
NODE_STATIC_FEATURES = len(NODE_STATIC_FEATURE_NAMES)
NODE_FEATURES = len(NODE_FEATURE_NAMES)
REQUEST_FEATURES = len(REQUEST_FEATURE_NAMES)
RESOURCE_SCALE = (64.0, 256.0, 8.0, 1000.0)  # cores, GiB, GPUs, GiB: features are x / scale


def _bits(x: jax.Array, n: int) -> jax.Array:
    return ((x[..., None] >> jnp.arange(n)) & 1).astype(jnp.float32)


def static_node_features(cluster: Cluster) -> jax.Array:
    """(N, NODE_STATIC_FEATURES) float32, the per-episode part of the node features."""
    feats = jnp.concatenate([
        jax.nn.one_hot(cluster.tier, 3),
        cluster.capacity.T / jnp.asarray(RESOURCE_SCALE),
        jax.nn.one_hot(cluster.gpu_model, C.NUM_GPU_MODELS)[:, 1:],
        _bits(cluster.labels, C.NUM_LABELS),
        jnp.stack([cluster.speed, cluster.bandwidth / 10000.0, cluster.power_idle / 100.0,
                   cluster.power_peak / 1000.0, cluster.failure_rate * 100.0,
                   cluster.mask.astype(jnp.float32)], axis=-1),
    ], axis=-1)
    return jnp.where(cluster.mask[:, None], feats, 0.0)


def request_features(req: Requests) -> jax.Array:
    """(..., REQUEST_FEATURES) float32 features of requests (any leading shape)."""
    bound = req.latency_bound < C.NO_LATENCY_BOUND_MS
    parts = [
        req.valid[..., None].astype(jnp.float32),
        req.demand / jnp.asarray(RESOURCE_SCALE),
        (req.work / 3600.0)[..., None],
        _bits(req.gpu_models, C.NUM_GPU_MODELS)[..., 1:],
        _bits(req.required, C.NUM_LABELS),
        _bits(req.rejected, C.NUM_LABELS),
        _bits(req.preferred, C.NUM_LABELS),
        bound[..., None].astype(jnp.float32),
        jnp.where(bound, req.latency_bound / 100.0, 0.0)[..., None],
        (req.data_gb / 100.0)[..., None],
    ]
    out = jnp.concatenate(parts, axis=-1)
    return jnp.where(req.valid[..., None], out, 0.0)


def get_obs(state: EnvState, params: EnvParams) -> Observation:
    """The observation of a state (see `vte.types.Observation` for fields and shapes)."""
    cl, tw = state.cluster, state.twin
    head = scoring.head(state.queue)
    delay = scoring.link_delay(cl, head.origin)
    dynamic = jnp.concatenate([
        jnp.stack([tw.up.astype(jnp.float32), tw.util, tw.mem_util], axis=-1),
        tw.free.T / jnp.asarray(RESOURCE_SCALE),
        jnp.stack([tw.power / 1000.0, tw.jobs / params.slots_per_node,
                   jnp.where(head.valid, delay / 100.0, 0.0), tw.age / 10.0], axis=-1),
    ], axis=-1)
    dynamic = jnp.where(cl.mask[:, None], dynamic, 0.0)
    return Observation(
        nodes=jnp.concatenate([state.node_static, dynamic], axis=-1),
        request=request_features(head),
        queue=request_features(state.queue),
        queue_mask=state.queue.valid,
        weights=state.weights,
        progress=state.steps.astype(jnp.float32) / params.episode_len,
        action_mask=_action_mask(state, head, delay, params),
    )


def _action_mask(state: EnvState, head: Requests, delay: jax.Array,
                 params: EnvParams) -> jax.Array:
    """The allowed actions, (N + 1,) bool (the last, defer, always allowed): the cached
    ground-truth feasibility `state.scores.feasible`, or with `params.mask_from_twin` the
    feasibility of the head request on the twin (`scoring.feasibility`; `delay` is the
    head's link delay to every node, which `get_obs` already has)."""
    if not params.mask_from_twin:
        return state.scores.feasible
    believed = scoring.feasibility(state.cluster, twin.as_metrics(state.twin), head, params,
                                   delay)
    return jnp.concatenate([believed, jnp.ones((1,), bool)])
