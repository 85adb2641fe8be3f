"""A lookahead planner: a replay policy that simulates possible futures before it decides.

    policy = planner(policies.fgd, candidates=4, futures=8, horizon=8)
    python -m vte.openb --pods default --policies fgd,plan:fgd --seeds 10
    python -m vte.openb --pods default --policies fgd,runs/openb_imitate,plan:runs/openb_imitate

At each pod the base policy ranks the feasible nodes; for each of its `candidates` best
nodes the planner binds the pod there, then replays `futures` sampled sequences of
`horizon` pods under the base policy, and keeps the candidate with the most milli-GPU
allocated at the horizon, summed over the futures (OPENB.md section 12). The futures are
drawn from the trace's pod distribution, FGD's typical pods (`Spec.typical`: the shapes and
their frequencies), never from the workload's own next pods: the planner sees only what a
real scheduler sees (the cluster, the pod in hand, the shape statistics FGD already
assumes). Every candidate is scored on the same futures (common random numbers), so a
difference between candidates is the placement's, not the draw's.

Ties (the usual case while the cluster has room: every future pod fits whatever the
candidate) go to the candidate whose futures end with less fragmentation (`State.frag`,
summed), then to the base policy's order; with `pods_first`, first to the candidate whose
futures bind more pods (CPU-only ones too, which allocate no GPU). A sampled future pod
asks for no memory (the typical pods have no memory field; memory binds almost never on
the bundled nodes).

Cost: `candidates x futures x horizon` rollout steps per planned decision, all
`candidates x futures` rollouts of a decision in one vmapped call. For a node-local policy
playing the futures (the base, or `rollouts`; `policies.NODE_LOCAL`: FGD, DotProd,
GpuClustering, GpuPacking: a node's score reads only that node) the planner scores every
typical shape on every node once per decision (`shape_tables`, K x N), reads each
future's rows (its H pods on every node) off it, and a rollout step then recomputes only
the column of the node it changed, for the future's pods still to come (`node_column`):
the same choices at a fraction of the cost; any other (BestFit, the PWR mixes, a network)
scores all nodes at every rollout step. `start` limits planning to the pods submitted
once the arrived GPU demand reaches `start` x the cluster's GPUs (the base policy decides
alone before; a real scheduler knows its own arrivals), and a pod with fewer than two
feasible nodes is never planned. Both tests are `lax.cond`s, which skip the rollouts only
when the policy runs unbatched, so the replay runs a planner's seeds one after another
(`Policy.one_seed_at_a_time`, `simulator.replay`); under `vmap` the planner is still
correct, only as slow as when it plans every pod.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from vte.openb import cluster
from vte.openb.cluster import Pod, Spec, State
from vte.config import check_fields, option
from vte.openb.policies import NODE_LOCAL, Policy
from vte.registry import flag_error

MAX_FUTURES = 256             # the summed milli-GPU of the futures stays inside int32
ROLL_BLOCK = 8                # pods per scan of a node-local rollout (`planner_regrets`)


def _check(name: str, value, low: int, high: int) -> int:
    if isinstance(value, bool) or int(value) != value or not low <= int(value) <= high:
        raise ValueError(f"{name}={value!r} is invalid: allowed an integer in [{low}, {high}]")
    return int(value)


def check_settings(candidates, futures, horizon, start) -> tuple[int, int, int, float]:
    """The planner's settings, checked (ValueError naming the bad one and what is allowed)."""
    k = _check("candidates", candidates, 1, 64)
    m = _check("futures", futures, 1, MAX_FUTURES)
    h = _check("horizon", horizon, 1, 4096)
    if isinstance(start, bool) or not 0.0 <= float(start) <= 10.0:
        raise ValueError(f"start={start!r} is invalid: allowed a number in [0, 10] (a fraction "
                         "of the cluster's GPUs)")
    return k, m, h, float(start)


def shape_pods(spec: Spec) -> Pod:
    """(K,) pods, one per typical shape of `spec.typical`, asking for no memory; all valid."""
    typ = spec.typical
    return Pod(cpu_milli=typ.cpu_milli, memory_mib=jnp.zeros_like(typ.cpu_milli),
               num_gpus=typ.num_gpus, gpu_milli=typ.gpu_milli, model_mask=typ.model_mask,
               valid=jnp.ones(typ.cpu_milli.shape, bool))


def sample_shapes(key: jax.Array, spec: Spec, futures: int, horizon: int) -> jax.Array:
    """(futures, horizon) int32 typical-shape indices drawn independently with the typical
    pods' frequencies (`spec.typical.prob`)."""
    return jax.random.categorical(key, jnp.log(spec.typical.prob), shape=(futures, horizon))


def sample_futures(key: jax.Array, spec: Spec, futures: int, horizon: int) -> Pod:
    """(futures, horizon) pods of `sample_shapes`' shapes (`shape_pods`)."""
    shape = sample_shapes(key, spec, futures, horizon)
    return jax.tree_util.tree_map(lambda x: x[shape], shape_pods(spec))


def pod_tables(base: Policy, key: jax.Array, state: State, spec: Spec, pods: Pod):
    """The base scores, GPUs and feasibility of each of `pods` ((P,) fields) on every node:
    (P, N) each."""
    def one(pod):
        feasible = cluster.feasible(state, pod, spec)
        return base(key, state, pod, feasible, spec) + (feasible,)
    return jax.vmap(one)(pods)


def shape_tables(base: Policy, key: jax.Array, state: State, spec: Spec):
    """Every typical shape's base scores, GPUs and feasibility on every node: (K, N) each."""
    return pod_tables(base, key, state, spec, shape_pods(spec))


def node_column(base: Policy, key: jax.Array, state: State, spec: Spec, node,
                pods: Pod | None = None):
    """Column `node` of `pod_tables` for `pods` ((P,) each; None: the typical shapes,
    `shape_tables`' column, (K,) each), computed on that node alone (P x 1 work instead of
    P x N); exact for a node-local base only (`policies.NODE_LOCAL`)."""
    pods = shape_pods(spec) if pods is None else pods
    column = pod_tables(base, key, *cluster.column(state, spec, node), pods)
    return tuple(c[:, 0] for c in column)


def top_nodes(scores: jax.Array, feasible: jax.Array, rank: jax.Array, k: int):
    """The base policy's `k` best feasible nodes in its own order (`cluster.select`, ties to
    the smallest rank): ((k,) int32 nodes, (k,) bool valid; False past the feasible ones)."""
    nodes, valid = [], []
    left = feasible
    for _ in range(k):
        node = cluster.select(scores, left, rank)
        nodes.append(node)
        valid.append(left[node])
        left = left.at[node].set(False)
    return jnp.stack(nodes), jnp.stack(valid)


DEFAULTS = {"candidates": 4, "futures": 8, "horizon": 8, "start": 0.0}   # `planner`'s, the CLI's


@dataclasses.dataclass(frozen=True)
class PlanSettings:
    """The planner's settings, declared once: `python -m vte.openb`'s `--plan-*` flags, a
    planning teacher's (`train/imitate.py --teacher plan_fgd` or `plan:<base>`, recorded
    under "plan" in its config.json) and their checks. `planner(base, **settings.kwargs())`
    builds it; `rollouts` names a policy (the caller resolves it). A bad value raises
    ValueError naming its flag (`--plan-NAME`) and what is allowed."""

    candidates: int = option(DEFAULTS["candidates"], "the base policy's best nodes compared "
                             "at each decision", low=1, high=64, group="planner")
    futures: int = option(DEFAULTS["futures"], "sampled futures per candidate", low=1,
                          high=MAX_FUTURES, group="planner")
    horizon: int = option(DEFAULTS["horizon"], "pods per future", low=1, high=4096,
                          group="planner")
    start: float = option(DEFAULTS["start"], "plan once the arrived GPU demand reaches this "
                          "fraction of the cluster's GPUs (0: every pod)", low=0.0, high=10.0,
                          group="planner")
    pods_first: bool = option(False, "between candidates that allocate as much, the one whose "
                              "futures bind more pods (fail fewer, CPU-only pods too) first, "
                              "then less fragmentation", group="planner")
    rollouts: str | None = option(None, "the policy that places the futures' pods (a "
                                  "published policy or a run directory); default: the base "
                                  "itself, which still ranks the candidates", group="planner")
    confidence: float = option(0.0, "z > 0 leaves the base's best node only for a candidate "
                               "whose gain over it, paired future by future, is above z "
                               "standard errors; 0: the lexicographic choice", low=0.0,
                               high=10.0, group="planner")
    pod_value: float = option(0.0, "with --plan-confidence: milli-GPU each pod bound at the "
                              "horizon is worth beside the GPUs in the gain (CPU-only pods "
                              "too); 0: pods count through their GPUs only", low=0.0,
                              high=1e5, group="planner")

    PREFIX = "plan_"              # flags --plan-NAME, flag errors name plan_NAME

    def __post_init__(self):
        check_fields(self, self.PREFIX)
        object.__setattr__(self, "start", float(self.start))
        try:
            z = check_confidence(self.confidence, self.futures, self.pods_first)
        except ValueError:
            raise flag_error("plan_confidence", self.confidence, "0 with --plan-pods-first or "
                             "--plan-futures 1 (the evidence needs a standard deviation over "
                             "two futures at least)",
                             depends=("plan_pods_first", "plan_futures")) from None
        try:
            check_pod_value(self.pod_value, z)
        except ValueError:
            raise flag_error("plan_pod_value", self.pod_value, "0 unless the planner chooses "
                             "by evidence (--plan-confidence above 0)",
                             depends=("plan_confidence",)) from None

    def kwargs(self, rollouts: Policy | None = None) -> dict:
        """`planner`'s keywords: these settings, `rollouts` resolved by the caller."""
        return {"candidates": self.candidates, "futures": self.futures,
                "horizon": self.horizon, "start": self.start, "pods_first": self.pods_first,
                "rollouts": rollouts, "confidence": self.confidence,
                "pod_value": self.pod_value}


def planner(base: Policy, candidates: int = DEFAULTS["candidates"],
            futures: int = DEFAULTS["futures"], horizon: int = DEFAULTS["horizon"],
            start: float = DEFAULTS["start"], pods_first: bool = False,
            rollouts: Policy | None = None, confidence: float = 0.0,
            pod_value: float = 0.0) -> Policy:
    """`base` with lookahead, as a policy of the replay: `(key, state, pod, feasible, spec)
    -> (scores, shared_gpu)`, the first two outputs of `planner_regrets`, whose arguments
    these are (the same choices, one definition).
    """
    plan = planner_regrets(base, candidates, futures, horizon, start, pods_first, rollouts,
                           confidence, pod_value)

    def policy(key: jax.Array, state: State, pod: Pod, feasible: jax.Array, spec: Spec):
        scores, shared_gpu, _ = plan(key, state, pod, feasible, spec)
        return scores, shared_gpu

    policy.one_seed_at_a_time = True
    return policy


def planner_regrets(base: Policy, candidates: int = DEFAULTS["candidates"],
                    futures: int = DEFAULTS["futures"], horizon: int = DEFAULTS["horizon"],
                    start: float = DEFAULTS["start"], pods_first: bool = False,
                    rollouts: Policy | None = None, confidence: float = 0.0,
                    pod_value: float = 0.0):
    """The planner with what it saw: `(key, state, pod, feasible, spec) -> (scores,
    shared_gpu, regret)`, `planner`'s policy plus each candidate's regret, a distillation
    target richer than the choice alone.

    candidates: the base policy's best nodes compared (1: the base policy itself, exactly,
    a policy that draws, Random, drawing from a key split off `key`);
    futures: sampled pod sequences per candidate, in [1, 256]; horizon: pods per sequence;
    start: plan once the arrived GPU demand is at least `start` x the cluster's GPU milli
    (0: from the first pod), in [0, 10]; pods_first: between candidates that allocate as
    much, the one whose futures bind more pods (fail fewer) wins before the fragmentation
    tie-break (CPU-only pods, which allocate no GPU, count there);
    rollouts: the policy that places the futures' pods (None: `base`); `base` still ranks
    the candidates, its best node is the one kept without evidence, and its GPU is the pod's.
    A node-local `rollouts` (FGD) makes a planner over a network as cheap as one over FGD;
    confidence: z >= 0. 0: the lexicographic choice below. z > 0: the choice by evidence: a
    candidate other than the base's best wins only if its gain over the base's best, in GPUs
    allocated less GPUs fragmented at the horizon, paired future by future, has a mean above
    z standard errors (the futures' sample standard deviation / sqrt(futures)); of those the
    largest mean gain wins (ties: the base's order); none: the base's best. It needs
    futures >= 2 and excludes `pods_first`;
    pod_value: milli-GPU each pod bound at the horizon is worth beside the GPUs, in [0, 1e5]
    (0: pods count only through their GPUs): the gain of the choice by evidence and the
    regret add pod_value x the pods bound (CPU-only ones too, which allocate no GPU), so a
    future pod that fails costs its GPUs and pod_value. Above 0 it needs confidence > 0.
    scores: (N,) int32, `candidates` + 1 on the planner's choice, `candidates` - i on the
    base policy's i-th best node otherwise, 0 on every other node; shared_gpu: the base
    policy's (a shared pod takes the GPU the base would give it); regret: (N,) float32 >= 0
    in GPUs, on each candidate how far its futures end below the best candidate's in GPUs
    allocated less GPUs fragmented (`State.frag` summed; both at the horizon, the mean over
    the futures), plus pod_value / 1000 per pod bound: a GPU left fragmented counts as one
    not allocated. It ranks with the choice's two criteria at once, where the choice is
    lexicographic (OPENB.md section 12; the pods bound of `pods_first` are not in it); +inf
    on every other node. A pod that is not planned (before `start`, fewer than two
    candidates) has regret 0 on the base's choice only; with no feasible node, +inf
    everywhere.
    Raises ValueError on a setting outside those ranges."""
    k, m, h, start = check_settings(candidates, futures, horizon, start)
    if not isinstance(pods_first, bool):
        raise ValueError(f"pods_first={pods_first!r} is invalid: allowed True or False")
    z = check_confidence(confidence, m, pods_first)
    w = check_pod_value(pod_value, z)
    from vte.openb.lab.simulator import pod_step     # the replay imports the policies' module

    roller = base if rollouts is None else rollouts
    local = roller in NODE_LOCAL

    def rollout(state: State, shapes: jax.Array, keys: jax.Array, tables, spec: Spec):
        """Milli-GPU allocated, the cluster's fragmentation and the pods bound after the
        typical shapes `shapes` (H,) are submitted under `roller`, from `state` (the pod in
        hand bound).

        A node-local base reads its scores from `tables`: (`shape_tables` before the pod in
        hand, (node,) the pod's node, its column after), gathered into H rows, one per
        future pod; the node a step binds gets its column of the later pods' rows
        recomputed. Any other policy scores every node at every pod (`pod_step`)."""
        pods = shape_pods(spec)
        if not local:
            def full(s, xs):
                _, shape, key = xs
                pod = jax.tree_util.tree_map(lambda x: x[shape], pods)
                return pod_step(roller, spec, s, pod, key)[0], None
            end, _ = jax.lax.scan(full, state, (jnp.arange(h), shapes, keys))
            return cluster.used_milli(end, spec), jnp.sum(end.frag), jnp.sum(end.pods)

        # Row i: the scores, GPUs and feasibility of future pod i on every node, read off
        # the tables before the pod in hand, with the pod's node's column after it.
        (whole, node, column) = tables
        rows = tuple(w[shapes].at[:, node].set(c[shapes]) for w, c in zip(whole, column))
        future = jax.tree_util.tree_map(lambda x: x[shapes], pods)              # (H,) pods

        def body(carry, xs):
            s, rows, future = carry     # rows, future: the pods still to come, from this one
            i, shape, key = xs          # i: this pod's row
            pod = jax.tree_util.tree_map(lambda x: x[shape], pods)
            scores, gpus, feasible = (r[i] for r in rows)
            node = cluster.select(scores, feasible, s.rank)
            s = cluster.submit(cluster.place(s, spec, pod, node, gpus[node], jnp.any(feasible)), pod)
            # The node changed: its column of the rows still to come, on the node alone.
            column = node_column(roller, key, s, spec, node, future)
            rows = tuple(r.at[:, node].set(c) for r, c in zip(rows, column))
            return (s, rows, future), None

        # Blocks of ROLL_BLOCK pods, each a scan: a block recomputes the columns of its own
        # and the later blocks' pods only (the rows before it are read no more). One-pod
        # blocks (the rollout unrolled) ran 1.3-1.6x faster again, but fused the float32 sums
        # of the fragmentation differently: candidates whose futures fragment equally then
        # differed in the last bit, and the tie-break followed; blocks of 8 pods keep every
        # label, and so every network trained on them, bit for bit what it was.
        end = state
        for first in range(0, h, ROLL_BLOCK):
            last = min(first + ROLL_BLOCK, h)
            (end, rows, _), _ = jax.lax.scan(
                body, (end, rows, jax.tree_util.tree_map(lambda x: x[first:], future)),
                (jnp.arange(last - first), shapes[first:last], keys[first:last]))
            rows = tuple(r[last - first:] for r in rows)
        return cluster.used_milli(end, spec), jnp.sum(end.frag), jnp.sum(end.pods)

    def policy(key: jax.Array, state: State, pod: Pod, feasible: jax.Array, spec: Spec):
        # Three keys: the base's draws (Random's), the futures', the rollouts'.
        k_base, k_future, k_roll = jax.random.split(key, 3)
        scores, shared_gpu = base(k_base, state, pod, feasible, spec)
        nodes, valid = top_nodes(scores, feasible, state.rank, k)
        is_candidate = (jnp.arange(feasible.shape[0])[:, None] == nodes[None]) & valid[None]
        base_order = jnp.max(jnp.where(is_candidate, k - jnp.arange(k), 0), axis=1).astype(jnp.int32)
        if k == 1:
            return base_order, shared_gpu, jnp.where(base_order > 0, 0.0, jnp.inf)

        def plan(_):
            shapes = sample_shapes(k_future, spec, m, h)        # (M, H), shared by candidates
            keys = jax.random.split(k_roll, m * h).reshape(m, h, -1)
            tables = shape_tables(roller, k_base, state, spec) if local else None

            def candidate(node):
                after = cluster.submit(cluster.place(state, spec, pod, node, shared_gpu[node],
                                                     jnp.bool_(True)), pod)
                mine = ((tables, node, node_column(roller, k_base, after, spec, node))
                        if local else None)
                return jax.vmap(rollout, (None, 0, 0, None, None))(after, shapes, keys, mine, spec)

            per_used, per_frag, per_bound = jax.vmap(candidate)(nodes)      # (k, M) each
            used, frag, bound = (jnp.sum(x, axis=1) for x in (per_used, per_frag, per_bound))
            low = jnp.iinfo(jnp.int32).min
            used = jnp.where(valid, used, low)
            if z > 0:
                chosen = _by_evidence(per_used, per_frag, per_bound, valid, z, w)
            else:
                # Lexicographic: most allocated, (pods_first: most pods bound,) then least
                # fragmentation, then the base's order.
                best_used = used == jnp.max(used)
                if pods_first:
                    bound = jnp.where(best_used, bound, low)
                    best_used = best_used & (bound == jnp.max(bound))
                best = best_used & (frag == jnp.min(jnp.where(best_used, frag, jnp.inf)))
                chosen = jnp.argmax(best)                                     # first in base order
            plan_order = jnp.where(jnp.arange(k) == chosen, k + 1, k - jnp.arange(k))
            # The regret's value: GPUs allocated less GPUs fragmented (plus w per pod bound)
            # at the horizon, the mean over the futures. The used sums are whole milli-GPU,
            # at most MAX_FUTURES x the cluster's GPU milli: their differences exact in int32
            # (masked first: no wrap-around), then float32.
            used_gap = jnp.where(valid, jnp.max(used) - used, 0).astype(jnp.float32)
            frag_gap = jnp.where(valid, frag - jnp.min(jnp.where(valid, frag, jnp.inf)), 0.0)
            gap = used_gap + frag_gap
            if w > 0:        # pod counts: small integers, exact in float32
                most = jnp.max(jnp.where(valid, bound, low))
                gap = gap + w * jnp.where(valid, most - bound, 0).astype(jnp.float32)
            regret = jnp.where(valid, (gap - jnp.min(jnp.where(valid, gap, jnp.inf)))
                               / (1000.0 * m), jnp.inf)
            return (jnp.max(jnp.where(is_candidate, plan_order[None], 0), axis=1).astype(jnp.int32),
                    on_nodes(regret))

        def unplanned(_):
            return base_order, on_nodes(jnp.where(valid & (jnp.arange(k) == 0), 0.0, jnp.inf))

        def on_nodes(regret):        # (k,) per candidate -> (N,), +inf off the candidates
            return jnp.min(jnp.where(is_candidate, regret[None], jnp.inf), axis=1)

        go = (state.arrived >= jnp.float32(start) * spec.total_gpu_milli) & (jnp.sum(valid) >= 2)
        scores, regret = jax.lax.cond(go, plan, unplanned, None)
        return scores, shared_gpu, regret

    policy.one_seed_at_a_time = True
    return policy


def check_confidence(confidence, futures: int, pods_first: bool) -> float:
    """The evidence rule's z (`planner_regrets`), checked: a number in [0, 10]; above 0 it
    needs futures >= 2 (a standard deviation) and no `pods_first`."""
    if isinstance(confidence, bool) or not 0.0 <= float(confidence) <= 10.0:
        raise ValueError(f"confidence={confidence!r} is invalid: allowed a number in [0, 10] "
                         "(standard errors; 0: the lexicographic choice)")
    z = float(confidence)
    if z > 0 and futures < 2:
        raise ValueError(f"confidence={z} needs futures >= 2 (a standard deviation over them); "
                         f"futures={futures}")
    if z > 0 and pods_first:
        raise ValueError(f"confidence={z} and pods_first are two different choices: give one")
    return z


def check_pod_value(pod_value, z: float) -> float:
    """The milli-GPU a pod bound is worth in the choice by evidence (`planner_regrets`),
    checked: a number in [0, 1e5]; above 0 it needs the choice by evidence (z > 0)."""
    if isinstance(pod_value, bool) or not 0.0 <= float(pod_value) <= 1e5:
        raise ValueError(f"pod_value={pod_value!r} is invalid: allowed a number in [0, 100000] "
                         "(milli-GPU per pod bound; 0: pods count through their GPUs only)")
    if float(pod_value) > 0 and z == 0:
        raise ValueError(f"pod_value={float(pod_value)} counts in the choice by evidence only: "
                         "give a confidence above 0 too")
    return float(pod_value)


def _by_evidence(used: jax.Array, frag: jax.Array, bound: jax.Array, valid: jax.Array, z: float,
                 pod_value: float = 0.0) -> jax.Array:
    """The candidate (index into the base's order) chosen by evidence: `used`, `frag` (k, M)
    milli-GPU and `bound` (k, M) pods bound, per candidate and future; the largest mean
    paired gain over candidate 0 (GPUs allocated less GPUs fragmented plus `pod_value` per
    pod bound) among the valid ones whose gain is above z standard errors, else 0
    (`planner_regrets`)."""
    m = used.shape[1]
    value = (used - used[:1]).astype(jnp.float32) - (frag - frag[:1]).astype(jnp.float32)
    if pod_value > 0:
        value = value + pod_value * (bound - bound[:1]).astype(jnp.float32)
    mean = jnp.mean(value, axis=1)
    sd = jnp.sqrt(jnp.sum((value - mean[:, None]) ** 2, axis=1) / (m - 1))
    passes = valid & (jnp.arange(used.shape[0]) > 0) & (mean > 0) & (mean > z * sd / jnp.sqrt(m))
    gain = jnp.where(passes, mean, -jnp.inf)
    return jnp.where(jnp.any(passes), jnp.argmax(gain), 0)


__all__ = ["planner", "planner_regrets", "PlanSettings", "DEFAULTS", "check_settings", "sample_futures",
           "sample_shapes", "shape_pods", "shape_tables", "node_column", "top_nodes",
           "check_confidence", "check_pod_value", "MAX_FUTURES"]
