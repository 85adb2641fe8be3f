"""Pytrees of the environment: the ground truth, the twin and the observation.

Shapes use N = num_nodes, K = queue_len, S = num_sites, J = slots_per_node,
R = 4 resources (cpu cores, memory GiB, GPUs, disk GiB). Under `jax.vmap` every
field gains the leading batch axis.

Per-node arrays keep the node axis last (`(R, N)`, `(J, N)`): XLA on CPU vectorises
along the minor axis, and a minor axis of 4 resources or 8 slots runs several times
slower than one of N nodes.
"""

from __future__ import annotations

import jax
from flax import struct


@struct.dataclass
class Cluster:
    """Nodes and sites of one scenario; fixed for the whole episode."""

    mask: jax.Array          # (N,) bool, node exists (index < active_nodes)
    tier: jax.Array          # (N,) int32, catalogue.CLOUD / EDGE / HPC
    kind: jax.Array          # (N,) int32, index into catalogue.NODE_KINDS
    capacity: jax.Array      # (R, N) float32, cores, GiB, GPUs, GiB (resource-major)
    gpu_model: jax.Array     # (N,) int32, index into catalogue.GPU_MODELS (0 = none)
    labels: jax.Array        # (N,) int32, bitmask over catalogue.LABELS
    site: jax.Array          # (N,) int32, in [0, S)
    speed: jax.Array         # (N,) float32, per-core speed relative to a reference core
    bandwidth: jax.Array     # (N,) float32, Mbit/s to its site
    power_idle: jax.Array    # (N,) float32, W
    power_peak: jax.Array    # (N,) float32, W at 100 % CPU (GPUs add GPU_WATTS each)
    failure_rate: jax.Array  # (N,) float32, failures per hour (already scaled)
    step_fail_prob: jax.Array  # (N,) float32, probability that an up node fails within one
                             # step, 1 - exp(-failure_rate * step_seconds / 3600)
    bg_mean: jax.Array       # (N,) float32, long-run mean of background CPU load, fraction
    link_delay: jax.Array    # (S, S) float32, ms between sites


@struct.dataclass
class Nodes:
    """Dynamic ground truth of the nodes."""

    bg_load: jax.Array       # (N,) float32, background CPU load of other tenants, fraction
    bg_next: jax.Array       # (N,) float32, the background load at the next step (the load
                             # is exogenous, so its path is drawn one step ahead)
    up: jax.Array            # (N,) bool, healthy; a failed node accepts nothing
    alloc: jax.Array         # (R, N) float32, resources held by running jobs (the sum over
                             # active slots of job_demand, kept up to date incrementally)
    jobs: jax.Array          # (N,) float32, running jobs (the number of active slots, kept
                             # up to date incrementally like alloc)
    job_active: jax.Array    # (J, N) bool, slot holds a running job
    job_demand: jax.Array    # (R, J, N) uint16, resources the job holds, whole units
                             # (`dynamics.held_demand`: the demand rounded up)
    job_end: jax.Array       # (J, N) float32, s, simulated time the job completes


@struct.dataclass
class Requests:
    """Scheduling requests; a queue has a leading (K,) axis, a single request none."""

    valid: jax.Array          # () bool, slot holds a request
    demand: jax.Array         # (R,) float32, cores, GiB, GPUs, GiB of disk
    work: jax.Array           # () float32, s of run time on a reference node (speed 1, A100)
    gpu_models: jax.Array     # () int32, bitmask of accepted GPU models (0 = no GPU wanted)
    required: jax.Array       # () int32, label bitmask the node must have
    rejected: jax.Array       # () int32, label bitmask the node must not have
    preferred: jax.Array      # () int32, label bitmask wanted softly
    origin: jax.Array         # () int32, site the request comes from
    latency_bound: jax.Array  # () float32, ms, max delay origin -> node site
    data_gb: jax.Array        # () float32, GB of input data to move to the node
    archetype: jax.Array      # () int32, index into catalogue.ARCHETYPES (generator metadata)


@struct.dataclass
class Twin:
    """The digital twin: the cluster as the scheduler last heard of it."""

    util: jax.Array          # (N,) float32, reported CPU utilisation, fraction
    mem_util: jax.Array      # (N,) float32, reported memory utilisation, fraction
    free: jax.Array          # (R, N) float32, reported free cores, GiB, GPUs, GiB
    power: jax.Array         # (N,) float32, reported power draw, W
    up: jax.Array            # (N,) bool, reported health
    jobs: jax.Array          # (N,) float32, reported running jobs
    age: jax.Array           # (N,) float32, steps since the last report


@struct.dataclass
class Metrics:
    """One set of metrics as nodes report them (ground truth at a time)."""

    util: jax.Array          # (N,) float32, CPU utilisation, fraction
    mem_util: jax.Array      # (N,) float32, memory utilisation, fraction
    free: jax.Array          # (R, N) float32, free cores, GiB, GPUs, GiB (< 0: overcommitted)
    power: jax.Array         # (N,) float32, W (0 when down)
    up: jax.Array            # (N,) bool
    jobs: jax.Array          # (N,) float32, running jobs


@struct.dataclass
class Counters:
    """Episode totals (reset with the episode)."""

    placed: jax.Array        # () int32, requests placed
    deferred: jax.Array      # () int32, defer actions on a non-empty queue
    invalid: jax.Array       # () int32, invalid or infeasible actions
    dropped: jax.Array       # () int32, arrivals lost to a full queue
    jobs_lost: jax.Array     # () int32, running jobs killed by node failures
    completed: jax.Array     # () int32, jobs that finished
    matched: jax.Array       # () int32, decisions equal to the optimal action
    regret: jax.Array        # () float32, summed regret
    energy: jax.Array        # () float32, J, extra energy of placements


@struct.dataclass
class HeadScores:
    """The scoring of the request at the head of the queue on the ground truth.

    `step` computes it once per state (at the end of the step that produced the state)
    and reads it at the start of the next step and for the action mask.
    """

    cost: jax.Array          # (N + 1,) float32, cost of each action (last = defer)
    feasible: jax.Array      # (N + 1,) bool, feasible actions (defer always)
    optimum: jax.Array       # () int32, the optimal action: the least-cost feasible one, ties
                             # to the lowest index (`scoring.argmin_feasible(cost, feasible)`)
    completion: jax.Array    # (N,) float32, s, completion time on each node
    energy: jax.Array        # (N,) float32, J, extra energy of placing on each node
    failure_prob: jax.Array  # (N,) float32, probability each node fails during the job


@struct.dataclass
class EnvState:
    """Full environment state (ground truth plus the twin)."""

    cluster: Cluster
    nodes: Nodes
    queue: Requests          # fields with leading (K,)
    incoming: Requests       # fields with leading (MAX_ARRIVALS,): the candidates that join
                             # the queue at the next step (drawn one step ahead)
    twin: Twin
    scores: HeadScores       # scoring of the head request on this state; a cache of
                             # (cluster, nodes, queue, weights): after editing a state by
                             # hand, call `vte.rescore(state, params)`
    counters: Counters
    node_static: jax.Array   # (N, NODE_STATIC_FEATURES) float32, the per-episode part of the
                             # node features, computed once at reset (cache of `cluster`)
    weights: jax.Array       # (3,) float32, (performance, energy, reliability) of this episode
    time: jax.Array          # () float32, simulated seconds since the episode start
    steps: jax.Array         # () int32, decisions taken in this episode


@struct.dataclass
class Observation:
    """What the scheduler sees. Reachable as attributes or by key (`obs["action_mask"]`).

    nodes:       (N, NODE_FEATURES) float32, per-node twin features (`NODE_FEATURE_NAMES`).
    request:     (REQUEST_FEATURES,) float32, the head request (`REQUEST_FEATURE_NAMES`).
    queue:       (K, REQUEST_FEATURES) float32, the whole queue, head first.
    queue_mask:  (K,) bool, queue slot holds a request.
    weights:     (3,) float32, objective weights (performance, energy, reliability).
    progress:    () float32, share of the episode elapsed, in [0, 1].
    action_mask: (N + 1,) bool, feasible actions for the head request; last = defer (always).
                 On the ground truth, or on the twin with `EnvParams.mask_from_twin`.
    """

    nodes: jax.Array
    request: jax.Array
    queue: jax.Array
    queue_mask: jax.Array
    weights: jax.Array
    progress: jax.Array
    action_mask: jax.Array

    def __getitem__(self, key: str):
        return getattr(self, key)

    def keys(self):
        return ("nodes", "request", "queue", "queue_mask", "weights", "progress", "action_mask")
