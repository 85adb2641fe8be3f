"""Heuristic schedulers: the baselines users compare a learned scheduler against.

`ALL` maps a name to a policy `(key, obs, params) -> action` (() int32). A policy sees
only the observation, as a real scheduler sees only the digital twin: it reads feature
columns by their names (`vte.NODE_FEATURE_NAMES`, `vte.REQUEST_FEATURE_NAMES`), decoded to
their units by the observation's own feature table (`vte.cluster.observation.decode`). It picks
among the nodes the action mask allows (ties to the lowest index) and defers only when
none is allowed; the mask is the truth's feasibility unless
`EnvParams.mask_from_twin` makes it the twin's. Every policy is pure, deterministic per key, and works under jit and
vmap.

| name | picks the allowed node with |
|---|---|
| random | a uniform draw (the key) |
| round_robin | the first index at or after `step mod N`, cyclically |
| first_fit | the lowest index |
| best_fit | the highest kube-scheduler MostAllocated score (bin packing) |
| least_allocated | the highest LeastAllocated score (kube-scheduler's default NodeResourcesFit) |
| balanced_allocation | the highest BalancedAllocation score |
| kube_default | the highest weighted sum of kube-scheduler's default score plugins |
| min_completion_time | the least expected completion time (MCT) |
| lowest_energy | the least extra energy |
| most_reliable | the least probability of a failure during the job |

**Memory across steps.** Only round robin needs it, and the observation carries it: the
decision index of the episode is `progress * episode_len`, so the pointer is that index
mod N. No policy keeps a state of its own.

**kube-scheduler scores** (MaxNodeScore 100, computed in floats rather than integers):
"requested" on a node is what the twin reports in use (`capacity - free`, other
tenants' load included, as kubelet-reported pods would be) plus the incoming request;
capacity is allocatable. Over cpu and memory, weight 1 each:
  - LeastAllocated: mean of `(cap - req) * 100 / cap`, 0 for a resource with req > cap;
  - MostAllocated: mean of `min(req, cap) * 100 / cap`;
  - BalancedAllocation: `(1 - std(min(req / cap, 1))) * 100`.
The filters (fit, unmatched required labels, untolerated taints, unschedulable nodes)
are the action mask. `kube_default` sums the default plugins with their default
weights, keeping those that tell nodes apart here:
  - NodeResourcesFit (LeastAllocated) x1 and BalancedAllocation x1;
  - NodeAffinity x2 on its preferred terms: each preferred label of the request is a
    term of weight 1, a node scores the number it carries, normalised to 100 by the best
    allowed node (kube's default normalisation; 0 everywhere when none carries any);
  - TaintToleration x3, PodTopologySpread x2, InterPodAffinity x2, ImageLocality x1 give
    every node the same score here (rejected labels are hard NoSchedule taints, already
    filtered; requests are single pods with no spread constraints, pod affinities or
    known images), so they are left out: a constant changes no argmax.

**Cost-model heuristics** (MCT, lowest energy, most reliable) estimate a node's
completion time, energy and failure probability with the project's scoring code
(`vte.cluster.scoring.score`) applied to the twin's view rebuilt from the observation
(`twin_view`, with the delays the observation reports from the request's origin), never
to the ground truth; with the default exact twin the estimates are the true values, with
a noisy or stale twin they are not.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from vte.cluster import catalogue as C
from vte.cluster import dynamics, scoring
from vte.cluster.observation import NODE_TABLE, REQUEST_TABLE, decode
from vte.cluster.params import EnvParams
from vte.cluster.types import Cluster, Metrics, Observation, Requests

Policy = Callable[[jax.Array, Observation, EnvParams], jax.Array]

MAX_NODE_SCORE = 100.0
# Default plugin weights of kube-scheduler that tell nodes apart here (module doc).
KUBE_WEIGHTS = {"NodeResourcesFit": 1.0, "BalancedAllocation": 1.0, "NodeAffinity": 2.0}


# --------------------------------------------------------------------------
# Reading the observation by feature name
# --------------------------------------------------------------------------

def node_feature(obs: Observation, name: str, params: EnvParams | None = None) -> jax.Array:
    """(N,) the node feature `name` in its unit (`vte.cluster.observation.decode`; `params` is
    needed only for "jobs/slots")."""
    return decode(NODE_TABLE, obs.nodes, name, params)


def request_feature(obs: Observation, name: str) -> jax.Array:
    """() the head request's feature `name` in its unit."""
    return decode(REQUEST_TABLE, obs.request, name)


def _bits(read, obs: Observation, prefix: str, items: tuple[str, ...], offset: int = 0):
    """Bitmask from one 0/1 feature per item (`read` is node_ or request_feature): bit
    (offset + i) is set when feature prefix + items[i] is."""
    return sum(read(obs, prefix + it).astype(jnp.int32) << (offset + i)
               for i, it in enumerate(items))


_RESOURCE_NAMES = ("cpu_cores/64", "memory_gib/256", "gpus/8", "disk_gib/1000")
_FREE_NAMES = ("free_cores/64", "free_memory_gib/256", "free_gpus/8", "free_disk_gib/1000")
_GPUS = C.GPU_MODELS[1:]   # model 0 is "no GPU"


def capacity(obs: Observation) -> jax.Array:
    """(R, N) node capacity: cores, GiB, GPUs, GiB."""
    return jnp.stack([node_feature(obs, n) for n in _RESOURCE_NAMES])


def free(obs: Observation) -> jax.Array:
    """(R, N) free resources the twin reports."""
    return jnp.stack([node_feature(obs, n) for n in _FREE_NAMES])


def demand(obs: Observation) -> jax.Array:
    """(R,) the head request's demand."""
    return jnp.stack([request_feature(obs, n) for n in _RESOURCE_NAMES])


def twin_view(obs: Observation, params: EnvParams
              ) -> tuple[Cluster, Metrics, Requests, jax.Array]:
    """The cluster, metrics and head request as the observation shows them, in the types
    `vte.cluster.scoring.score` takes, and the delays (N,) ms the observation reports from the
    head request's origin (pass them to `score`: the view has no sites of its own)."""
    n = obs.nodes.shape[0]
    gpu_onehot = jnp.stack([node_feature(obs, f"gpu_{m}") for m in _GPUS])   # (M-1, N)
    gpu_model = jnp.sum(gpu_onehot * jnp.arange(1, len(_GPUS) + 1)[:, None], axis=0)
    zeros = jnp.zeros((n,), jnp.float32)
    failure_rate = node_feature(obs, "failures_per_hour*100")
    cluster = Cluster(
        mask=node_feature(obs, "exists") > 0.5,
        tier=jnp.argmax(jnp.stack([node_feature(obs, f"tier_{t}") for t in C.TIERS]), 0),
        kind=jnp.zeros((n,), jnp.int32),
        capacity=capacity(obs),
        gpu_model=gpu_model.astype(jnp.int32),
        labels=_bits(node_feature, obs, "label_", C.LABELS),
        site=jnp.zeros((n,), jnp.int32),
        speed=node_feature(obs, "speed"),
        bandwidth=node_feature(obs, "bandwidth_gbps/10") * 1000.0,          # Mbit/s
        power_idle=node_feature(obs, "power_idle_w/100"),
        power_peak=node_feature(obs, "power_peak_w/1000"),
        failure_rate=failure_rate,
        step_fail_prob=dynamics.step_event_prob(failure_rate, params),
        bg_mean=zeros,
        link_delay=jnp.zeros((1, 1), jnp.float32),     # one site; the delays come apart
    )
    metrics = Metrics(
        util=node_feature(obs, "cpu_util"),
        mem_util=node_feature(obs, "mem_util"),
        free=free(obs),
        power=node_feature(obs, "power_w/1000"),
        up=node_feature(obs, "up") > 0.5,
        jobs=jnp.round(node_feature(obs, "jobs/slots", params)),
    )
    bound = request_feature(obs, "has_latency_bound") > 0.5
    request = Requests(
        valid=request_feature(obs, "valid") > 0.5,
        demand=demand(obs),
        work=request_feature(obs, "work_hours") * 3600.0,                    # s
        gpu_models=_bits(request_feature, obs, "accepts_", _GPUS, offset=1),
        required=_bits(request_feature, obs, "required_", C.LABELS),
        rejected=_bits(request_feature, obs, "rejected_", C.LABELS),
        preferred=_bits(request_feature, obs, "preferred_", C.LABELS),
        origin=jnp.zeros((), jnp.int32),
        latency_bound=jnp.where(bound, request_feature(obs, "latency_bound_ms/100"),
                                C.NO_LATENCY_BOUND_MS),
        data_gb=request_feature(obs, "data_gb/100"),
        archetype=jnp.zeros((), jnp.int32),
    )
    return cluster, metrics, request, node_feature(obs, "delay_from_origin_ms/100")


def estimates(obs: Observation, params: EnvParams) -> scoring.Breakdown:
    """Per-node completion time, energy, failure probability, ... of the head request,
    from `vte.cluster.scoring.score` on the twin's view (`twin_view`)."""
    cluster, metrics, request, delay = twin_view(obs, params)
    _, _, breakdown = scoring.score(cluster, metrics, request, obs.weights, params, delay)
    return breakdown


# --------------------------------------------------------------------------
# Choosing among the allowed nodes
# --------------------------------------------------------------------------

def _allowed(obs: Observation) -> jax.Array:
    return obs.action_mask[:-1]


def best_allowed(obs: Observation, score: jax.Array) -> jax.Array:
    """The allowed node of the highest score (ties to the lowest index), or defer
    (`num_nodes`) when the mask allows no node. () int32."""
    allowed = _allowed(obs)
    lowest = jnp.finfo(jnp.float32).min
    # Any allowed node, even one scored NaN or -inf, beats every node not allowed.
    score = jnp.nan_to_num(score.astype(jnp.float32), nan=lowest, neginf=lowest)
    node = jnp.argmax(jnp.where(allowed, score, -jnp.inf)).astype(jnp.int32)
    return jnp.where(jnp.any(allowed), node, allowed.shape[0]).astype(jnp.int32)


def _requested_fraction(obs: Observation) -> tuple[jax.Array, jax.Array]:
    """(requested (2, N), capacity (2, N)) for cpu and memory, incoming request included."""
    cap = capacity(obs)[:2]
    requested = cap - free(obs)[:2] + demand(obs)[:2, None]
    return requested, cap


def least_allocated_score(obs: Observation) -> jax.Array:
    """(N,) kube-scheduler LeastAllocated score, 0..100."""
    req, cap = _requested_fraction(obs)
    per = jnp.where((cap > 0) & (req <= cap),
                    (cap - req) * MAX_NODE_SCORE / jnp.maximum(cap, 1e-6), 0.0)
    return jnp.mean(per, axis=0)


def most_allocated_score(obs: Observation) -> jax.Array:
    """(N,) kube-scheduler MostAllocated score, 0..100."""
    req, cap = _requested_fraction(obs)
    per = jnp.where(cap > 0, jnp.clip(req, 0.0, cap) * MAX_NODE_SCORE / jnp.maximum(cap, 1e-6),
                    0.0)
    return jnp.mean(per, axis=0)


def balanced_allocation_score(obs: Observation) -> jax.Array:
    """(N,) kube-scheduler BalancedAllocation score, 0..100."""
    req, cap = _requested_fraction(obs)
    fraction = jnp.clip(req / jnp.maximum(cap, 1e-6), 0.0, 1.0)
    return (1.0 - jnp.std(fraction, axis=0)) * MAX_NODE_SCORE


def node_affinity_score(obs: Observation) -> jax.Array:
    """(N,) NodeAffinity preferred-term score: preferred labels a node carries,
    normalised to 100 by the best allowed node (0 when none carries any)."""
    carried = sum(request_feature(obs, f"preferred_{lb}") * node_feature(obs, f"label_{lb}")
                  for lb in C.LABELS)
    best = jnp.max(jnp.where(_allowed(obs), carried, 0.0))
    return jnp.where(best > 0, carried * MAX_NODE_SCORE / jnp.maximum(best, 1e-6), 0.0)


# --------------------------------------------------------------------------
# Policies
# --------------------------------------------------------------------------

def random(key, obs, params):
    """A uniform draw among the allowed nodes."""
    return best_allowed(obs, jax.random.uniform(key, _allowed(obs).shape))


def round_robin(key, obs, params):
    """The first allowed node at or after `step mod N` (step from `obs.progress`)."""
    n = _allowed(obs).shape[0]
    step = jnp.round(obs.progress * params.episode_len).astype(jnp.int32)
    order = (jnp.arange(n) - step) % n          # 0 for the pointer, then onwards, cyclically
    return best_allowed(obs, -order)


def first_fit(key, obs, params):
    """The allowed node of the lowest index."""
    return best_allowed(obs, jnp.zeros(_allowed(obs).shape))


def best_fit(key, obs, params):
    """Bin packing: the highest MostAllocated score."""
    return best_allowed(obs, most_allocated_score(obs))


def least_allocated(key, obs, params):
    """Spreading: the highest LeastAllocated score (kube-scheduler's default fit score)."""
    return best_allowed(obs, least_allocated_score(obs))


def balanced_allocation(key, obs, params):
    """The highest BalancedAllocation score (cpu and memory used evenly)."""
    return best_allowed(obs, balanced_allocation_score(obs))


def kube_default(key, obs, params):
    """kube-scheduler's default profile: filters, then the weighted plugin scores."""
    w = KUBE_WEIGHTS
    score = (w["NodeResourcesFit"] * least_allocated_score(obs)
             + w["BalancedAllocation"] * balanced_allocation_score(obs)
             + w["NodeAffinity"] * node_affinity_score(obs))
    return best_allowed(obs, score)


def min_completion_time(key, obs, params):
    """MCT: the least expected completion time on the twin's view."""
    return best_allowed(obs, -estimates(obs, params).completion_time)


def lowest_energy(key, obs, params):
    """The least extra energy on the twin's view."""
    return best_allowed(obs, -estimates(obs, params).energy)


def most_reliable(key, obs, params):
    """The least probability that the node fails while the job runs, on the twin's view."""
    return best_allowed(obs, -estimates(obs, params).failure_prob)


# Compiled (jax.jit): fast in a plain Python loop, inlined inside the caller's own jit/vmap.
ALL: dict[str, Policy] = {name: jax.jit(fn) for name, fn in {
    "random": random,
    "round_robin": round_robin,
    "first_fit": first_fit,
    "best_fit": best_fit,
    "least_allocated": least_allocated,
    "balanced_allocation": balanced_allocation,
    "kube_default": kube_default,
    "min_completion_time": min_completion_time,
    "lowest_energy": lowest_energy,
    "most_reliable": most_reliable,
}.items()}

__all__ = ["ALL", "Policy", "best_allowed", "twin_view", "estimates", "node_feature",
           "request_feature", "capacity", "free", "demand", "least_allocated_score",
           "most_allocated_score", "balanced_allocation_score", "node_affinity_score",
           *ALL]
