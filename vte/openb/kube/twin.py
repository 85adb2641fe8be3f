"""The extender's state: the cluster as it knows it, and the policy scoring on it.

`Twin` holds, per node, its capacities (`objects.NodeRow`) and what is used: CPU, memory,
pods, the free milli of each GPU, GpuClustering's classes. Pods are counted when bound:
from the snapshot at start, by the extender's own binds, and (with `--watch`) when the API
server reports a pod bound or gone. Every method takes one lock, so HTTP handlers and
the watch thread may call it concurrently.

What it does with what it has not seen:
  * a node first met in a request's `Nodes` (sent in full) is added then; a node known
    by name whose allocatable or model label changed is updated (its used resources
    kept); a name in `NodeNames` it has never seen fails with the reason "unknown".
  * a pod bound by someone else (snapshot or watch) with the convention's index
    annotation takes those GPUs; without it, its GPUs are assigned when first seen by
    the whole-GPU rule (the least sufficient GPUs: the fitting GPUs of least free milli,
    lowest index on ties), shared pods included.
  * a pod asked about at bind that no filter or prioritize showed: its spec is fetched
    with the kube client when there is one, else the bind answers an Error.

Scoring (`score`) runs the replay's policy (`vte.openb.policies`' signature) on every
known node, as the replay does (a network pools over the whole cluster), with the
feasible mask = the filter's rule and the request's nodes; only that call is jitted,
compiled per node-count bucket: the next power of two (at least 8) with infeasible
padding for the six published policies, whose scores of a node read only that node or
the feasible ones; the exact node count for other policies (a network's pooling and
its rank feature see every node), so a new node compiles again (`warm`).
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import threading
import time
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from vte.openb.kube.objects import NodeRow, PodRow
from vte.openb import cluster
from vte.openb.cluster import MAX_PODS_PER_NODE, SHARE_CLASS, Pod, Spec, State, Typical
from vte.openb.policies import POLICIES
from vte.openb.trace import MAX_GPUS_PER_NODE, MILLI

G = MAX_GPUS_PER_NODE
MIN_BUCKET = 8
MAX_SCORE = 10               # k8s.io/kube-scheduler/extender/v1 MaxExtenderPriority
SEEN_LIMIT = 100_000         # pods remembered between filter and bind (oldest dropped)


def bucket(n: int, padded: bool) -> int:
    """The node count a call compiles for: the next power of two >= n (at least 8) when
    padding is allowed, else n."""
    if not padded:
        return max(n, 1)
    b = MIN_BUCKET
    while b < n:
        b *= 2
    return b


def least_sufficient(free: np.ndarray, milli: int, count: int) -> tuple[int, ...]:
    """The `count` GPUs with at least `milli` free and the least free milli, lowest index on
    ties (`cluster.least_sufficient`); () when fewer fit."""
    fit = [g for g in range(len(free)) if free[g] >= milli and milli > 0]
    fit.sort(key=lambda g: (free[g], g))
    return tuple(sorted(fit[:count])) if len(fit) >= count else ()


def pod_class(num_gpus: int, gpu_milli: int) -> int:
    """GpuClustering's class bit of a pod (`cluster.place`): 0 for a CPU-only pod."""
    if num_gpus == 0:
        return 0
    shared = num_gpus == 1 and gpu_milli < MILLI
    return SHARE_CLASS if shared else num_gpus


@dataclasses.dataclass(frozen=True)
class Bound:
    node: int
    gpus: tuple[int, ...]
    row: PodRow


@dataclasses.dataclass(frozen=True)
class Decision:
    """A prioritize's outcome on the request's nodes (index order of the request)."""
    scores: list[int]          # 0..10 per requested node
    raw: np.ndarray            # the policy's scores of the requested nodes
    chosen: str | None         # the node the replay would bind the pod to (None: none fits)


def _score_all(policy, typical: Typical, cpu_cap, mem_cap, num_gpus, model, cpu_free,
               mem_free, gpu_free, pods, classes, rank, arrived, pod_vec, feasible, key):
    """One call of the policy on the whole padded cluster: (scores, shared GPU, chosen)."""
    spec = Spec(cpu_milli=cpu_cap, memory_mib=mem_cap, num_gpus=num_gpus, model=model,
                gpu_exists=jnp.arange(G)[:, None] < num_gpus[None, :], typical=typical)
    frag = cluster.fragmentation(gpu_free, cpu_free, model, typical)
    state = State(cpu_free=cpu_free, mem_free=mem_free, gpu_free=gpu_free, pods=pods,
                  classes=classes, frag=frag, rank=rank, arrived=arrived)
    pod = Pod(cpu_milli=pod_vec[0], memory_mib=pod_vec[1], num_gpus=pod_vec[2],
              gpu_milli=pod_vec[3], model_mask=pod_vec[4], valid=jnp.bool_(True))
    scores, shared = policy(key, state, pod, feasible, spec)
    return scores, shared, cluster.select(scores, feasible, rank)


class Twin:
    """The cluster the extender knows (module doc). `policy`: a replay policy;
    `typical`: FGD's typical pods (`workload.typical_pods` of a trace, with counts);
    `models`: the GPU model vocabulary (pods' model masks and the nodes' model index);
    `padded`: pad nodes to power-of-two buckets (default: for the published policies);
    `seed`: the key of randomised policies and of the default tie-break ranks."""

    def __init__(self, policy, typical: Typical, models: tuple[str, ...],
                 padded: bool | None = None, seed: int = 0):
        self.policy = policy
        self.models = tuple(models)
        self.model_index = {m: i for i, m in enumerate(self.models)}
        self.typical = cluster.with_counts(typical)
        self.padded = (policy in POLICIES.values()) if padded is None else padded
        self.seed = seed
        self.key = jax.random.PRNGKey(seed)
        self.lock = threading.RLock()
        self.rows: list[NodeRow] = []
        self.index: dict[str, int] = {}
        self.cap = 0
        self._alloc(64)
        self.bound: dict[str, Bound] = {}
        self.seen: collections.OrderedDict[str, tuple[PodRow, int, int]] = collections.OrderedDict()
        self.arrived = 0                 # milli-GPU asked for by the pods seen so far
        self.arrivals = 0                # pods seen so far (the key of each one's draws)
        self.fixed_rank: dict[str, int] | None = None
        self._rank_dirty = True
        self._jit = jax.jit(lambda *a: _score_all(self.policy, self.typical, *a))
        self.compiled: set[int] = set()

    # --- nodes ---------------------------------------------------------------------------
    def _alloc(self, cap: int) -> None:
        old = self.cap
        def grow(name, shape, dtype, fill=0):
            new = np.full(shape, fill, dtype)
            if old:
                cur = getattr(self, name)
                new[..., :old] = cur
            setattr(self, name, new)
        grow("cpu_cap", (cap,), np.int32); grow("mem_cap", (cap,), np.int32)
        grow("num_gpus", (cap,), np.int32); grow("model", (cap,), np.int32, -1)
        grow("pod_limit", (cap,), np.int32); grow("cpu_used", (cap,), np.int64)
        grow("mem_used", (cap,), np.int64); grow("gpu_used", (G, cap), np.int32)
        grow("pods", (cap,), np.int32); grow("class_count", (G + 1, cap), np.int32)
        grow("rank", (cap,), np.int32)
        self.cap = cap

    @property
    def num_nodes(self) -> int:
        return len(self.rows)

    def add_node(self, row: NodeRow) -> str | None:
        """Adds or updates a node (module doc); returns a reason when its model is outside
        the vocabulary (then it holds GPUs no pod can use: it is kept without them)."""
        with self.lock:
            reason = None
            model = -1
            if row.num_gpus:
                if row.model in self.model_index:
                    model = self.model_index[row.model]
                else:
                    reason = (f"GPU model {row.model!r} is outside the extender's vocabulary "
                              f"{list(self.models)}")
            i = self.index.get(row.name)
            if i is None:
                if self.num_nodes == self.cap:
                    self._alloc(2 * self.cap)
                i = self.num_nodes
                self.index[row.name] = i
                self.rows.append(row)
                self._rank_dirty = True
            else:
                self.rows[i] = row
            self.cpu_cap[i], self.mem_cap[i] = row.cpu_milli, row.memory_mib
            self.num_gpus[i] = row.num_gpus if model >= 0 else 0
            self.model[i] = model
            self.pod_limit[i] = row.pod_limit
            return reason

    def node_changed(self, row: NodeRow) -> bool:
        i = self.index.get(row.name)
        return i is None or self.rows[i] != row

    def set_ranks(self, ranks: dict[str, int]) -> None:
        """Fixes the tie-break ranks (smaller wins) by node name, e.g. a replay's workload
        ranks; nodes not named rank after, by the default order."""
        with self.lock:
            self.fixed_rank = dict(ranks)
            self._rank_dirty = True

    def _ranks(self) -> np.ndarray:
        if self._rank_dirty:
            n = self.num_nodes
            def digest(name):
                return hashlib.sha256(f"{self.seed}:{name}".encode()).digest()
            fixed = self.fixed_rank or {}
            order = sorted(range(n), key=lambda i: (
                (0, fixed[self.rows[i].name], b"") if self.rows[i].name in fixed
                else (1, 0, digest(self.rows[i].name))))
            self.rank[:n][np.asarray(order, np.int64)] = np.arange(n, dtype=np.int32)
            self._rank_dirty = False
        return self.rank[:self.num_nodes]

    # --- pods ----------------------------------------------------------------------------
    def mask(self, pod: PodRow) -> tuple[int, list[str]]:
        """The pod's model mask over the vocabulary and the models it names outside it."""
        mask, unknown = 0, []
        for m in pod.models:
            if m in self.model_index:
                mask |= 1 << self.model_index[m]
            else:
                unknown.append(m)
        return mask, unknown

    def see(self, pod: PodRow) -> tuple[int, int]:
        """Counts a pod's arrival once (its GPU demand into `arrived`, the replay's
        `State.arrived`); returns (arrived before it, its arrival number)."""
        with self.lock:
            if pod.key in self.seen:
                _, before, number = self.seen.pop(pod.key)
            else:
                before, number = self.arrived, self.arrivals
                self.arrived += pod.demand
                self.arrivals += 1
            self.seen[pod.key] = (pod, before, number)
            while len(self.seen) > SEEN_LIMIT:
                self.seen.popitem(last=False)
            return before, number

    def seen_pod(self, key: str) -> PodRow | None:
        with self.lock:
            item = self.seen.get(key)
            return None if item is None else item[0]

    def reasons(self, pod: PodRow, nodes: np.ndarray) -> list[tuple[str, bool] | None]:
        """Per node index: None when the pod fits (`cluster.feasible`'s rule, with the
        node's own pod limit), else (reason, resolvable): resolvable when removing pods
        could make it fit (kube-scheduler's FailedNodes), not when the node can never hold
        it (FailedAndUnresolvableNodes)."""
        with self.lock:
            return self._reasons(pod, nodes)

    def _checks(self, pod, nodes):
        """Per check of the filter, (N,) bool over `nodes`: True where the check passes."""
        mask, _ = self.mask(pod)
        i = nodes
        gpus = self.num_gpus[i]
        free = MILLI - self.gpu_used[:, i]
        fitting = ((free >= pod.gpu_milli) & (np.arange(G)[:, None] < gpus)).sum(axis=0)
        model = self.model[i]
        want = np.bool_(pod.num_gpus > 0)
        return {
            "count": ~want | (gpus >= pod.num_gpus),
            "known": np.full(len(i), not (want and pod.models and not mask)),
            "model": ~want | (mask == 0) | ((model >= 0) & ((mask >> np.maximum(model, 0)) & 1 == 1)),
            "cpu": pod.cpu_milli <= self.cpu_cap[i] - self.cpu_used[i],
            "memory": pod.memory_mib <= self.mem_cap[i] - self.mem_used[i],
            "pods": self.pods[i] < np.minimum(self.pod_limit[i], MAX_PODS_PER_NODE),
            "gpu": ~want | (fitting >= pod.num_gpus)}, fitting

    def fits(self, pod: PodRow, nodes: np.ndarray) -> np.ndarray:
        """(len(nodes),) bool: the filter's verdict (`reasons` is None) on node indices."""
        with self.lock:
            checks, _ = self._checks(pod, nodes)
            return np.logical_and.reduce(list(checks.values())) if len(nodes) else np.zeros(0, bool)

    def _reasons(self, pod, nodes):
        checks, fitting = self._checks(pod, nodes)
        ok = np.logical_and.reduce(list(checks.values())) if len(nodes) else np.zeros(0, bool)
        out: list = [None] * len(nodes)
        for j in np.flatnonzero(~ok):
            i = nodes[j]
            if not checks["count"][j]:
                have = int(self.num_gpus[i])
                out[j] = (f"the node has {have} usable GPU{'s' * (have != 1)}; the pod asks "
                          f"for {pod.num_gpus}", False)
            elif not checks["known"][j]:
                out[j] = (f"the pod asks for GPU models {list(pod.models)}, none of which "
                          "the extender knows", False)
            elif not checks["model"][j]:
                out[j] = (f"GPU model {self.models[self.model[i]]!r} is not among the pod's "
                          f"{list(pod.models)}", False)
            elif not checks["cpu"][j]:
                free = int(self.cpu_cap[i] - self.cpu_used[i])
                out[j] = (f"insufficient cpu: {pod.cpu_milli}m asked, {free}m unrequested",
                          pod.cpu_milli <= self.cpu_cap[i])
            elif not checks["memory"][j]:
                free = int(self.mem_cap[i] - self.mem_used[i])
                out[j] = (f"insufficient memory: {pod.memory_mib}Mi asked, {free}Mi "
                          "unrequested", pod.memory_mib <= self.mem_cap[i])
            elif not checks["pods"][j]:
                limit = min(int(self.pod_limit[i]), MAX_PODS_PER_NODE)
                out[j] = (f"too many pods: {int(self.pods[i])} of {limit}", True)
            else:
                out[j] = (f"insufficient GPU: {pod.num_gpus} GPU(s) with {pod.gpu_milli} "
                          f"milli free asked, {int(fitting[j])} have it", True)
        return out

    # --- scoring -------------------------------------------------------------------------
    def _arrays(self, b: int):
        n = self.num_nodes
        def pad(x, fill=0):
            out = np.full(x.shape[:-1] + (b,), fill, x.dtype)
            out[..., :n] = x[..., :n]
            return out
        rank = np.arange(b, dtype=np.int32)
        rank[:n] = self._ranks()
        gpu_free = np.where(np.arange(G)[:, None] < self.num_gpus[None, :],
                            MILLI - self.gpu_used, 0).astype(np.int32)
        classes = np.zeros(self.cap, np.int32)
        for c in range(G + 1):
            classes |= np.where(self.class_count[c] > 0, 1 << c, 0).astype(np.int32)
        return (pad(self.cpu_cap), pad(self.mem_cap), pad(self.num_gpus), pad(self.model, -1),
                pad((self.cpu_cap - self.cpu_used).astype(np.int32)),
                pad((self.mem_cap - self.mem_used).astype(np.int32)),
                pad(gpu_free), pad(self.pods), pad(classes), rank)

    def warm(self, sizes=()) -> float:
        """Compiles the scoring for the current node count and each of `sizes` (node
        counts); returns the seconds it took."""
        start = time.perf_counter()
        with self.lock:
            for n in sorted({self.num_nodes or 1, *sizes}):
                b = bucket(n, self.padded)
                if b in self.compiled:
                    continue
                z = np.zeros(b, np.int32)
                self._jit(z, z, z, z - 1, z, z, np.zeros((G, b), np.int32), z, z,
                          np.arange(b, dtype=np.int32), np.int32(0), np.zeros(5, np.int32),
                          np.zeros(b, bool), self.key)[0].block_until_ready()
                self.compiled.add(b)
        return time.perf_counter() - start

    def _run(self, pod: PodRow, candidates: np.ndarray, arrived: int, number: int):
        """The policy on every known node, feasible = fits and in `candidates` (node
        indices): (scores (n,), shared GPU (n,), chosen index or -1)."""
        n = self.num_nodes
        b = bucket(n, self.padded)
        feasible = np.zeros(b, bool)
        ok = candidates[self.fits(pod, candidates)]
        feasible[ok] = True
        mask, _ = self.mask(pod)
        pod_vec = np.asarray([pod.cpu_milli, pod.memory_mib, pod.num_gpus, pod.gpu_milli,
                              mask], np.int32)
        key = jax.random.fold_in(self.key, number)
        scores, shared, chosen = self._jit(*self._arrays(b), np.int32(arrived), pod_vec,
                                           feasible, key)
        self.compiled.add(b)
        scores, shared = np.asarray(scores)[:n], np.asarray(shared)[:n]
        return scores, shared, (int(chosen) if len(ok) else -1), ok

    def prioritize(self, pod: PodRow, names: list[str]) -> Decision:
        """Scores 0..10 of the named nodes (unknown ones 0): 10 for exactly the node the
        replay would choose (highest policy score, ties to the smallest rank), then 9, 8,
        ..., 1 for the next distinct policy scores among the feasible named nodes, 0 for
        the rest and for nodes that do not fit."""
        with self.lock:
            arrived, number = self.see(pod)
            idx = np.asarray([self.index.get(name, -1) for name in names], np.int64)
            known = idx[idx >= 0]
            scores, _, chosen, ok = self._run(pod, known, arrived, number)
        fits = set(ok.tolist())
        raw = np.where(idx >= 0, scores[np.maximum(idx, 0)], np.nan).astype(np.float64)
        values = scores[ok].astype(np.float64)
        others = sorted(set(values[(ok != chosen) & ~np.isnan(values)].tolist()), reverse=True)
        level = {v: max(MAX_SCORE - 1 - k, 0) for k, v in enumerate(others)}
        out = []
        for i in idx.tolist():
            if i < 0 or i not in fits:
                out.append(0)
            elif i == chosen:
                out.append(MAX_SCORE)
            else:
                out.append(level.get(float(scores[i]), 0))
        return Decision(scores=out, raw=raw,
                        chosen=None if chosen < 0 else self.rows[chosen].name)

    # --- binding -------------------------------------------------------------------------
    def choose_gpus(self, pod: PodRow, node: str) -> tuple[tuple[int, ...] | None, str]:
        """The GPUs the pod takes on `node` (the replay's rule: whole-GPU pods the least
        sufficient GPUs, a shared pod the GPU its policy chose there), or (None, reason)
        when it does not fit now."""
        with self.lock:
            i = self.index.get(node)
            if i is None:
                return None, f"node {node!r} is unknown to the extender"
            reason = self._reasons(pod, np.asarray([i]))[0]
            if reason is not None:
                return None, f"the pod no longer fits node {node!r}: {reason[0]}"
            if pod.num_gpus == 0:
                return (), ""
            if pod.num_gpus == 1 and pod.gpu_milli < MILLI:
                item = self.seen.get(pod.key)
                arrived, number = (item[1], item[2]) if item else self.see(pod)
                _, shared, _, _ = self._run(pod, np.asarray([i]), arrived, number)
                return (int(shared[i]),), ""
            free = MILLI - self.gpu_used[:self.num_gpus[i], i]
            return least_sufficient(free, pod.gpu_milli, pod.num_gpus), ""

    def bind(self, pod: PodRow, node: str, gpus: tuple[int, ...]) -> None:
        """Records `pod` bound to `node` on `gpus` (its resources counted there)."""
        with self.lock:
            if pod.key in self.bound:
                self.release(pod.key)
            i = self.index[node]
            self.cpu_used[i] += pod.cpu_milli
            self.mem_used[i] += pod.memory_mib
            self.pods[i] += 1
            for g in gpus:
                self.gpu_used[g, i] += pod.gpu_milli
            if pod.num_gpus:
                self.class_count[pod_class(pod.num_gpus, pod.gpu_milli), i] += 1
            self.bound[pod.key] = Bound(i, tuple(gpus), pod)

    def release(self, key: str) -> bool:
        """Forgets a bound pod (deleted, finished); False when it was not bound here."""
        with self.lock:
            b = self.bound.pop(key, None)
            if b is None:
                return False
            pod, i = b.row, b.node
            self.cpu_used[i] -= pod.cpu_milli
            self.mem_used[i] -= pod.memory_mib
            self.pods[i] -= 1
            for g in b.gpus:
                self.gpu_used[g, i] -= pod.gpu_milli
            if pod.num_gpus:
                self.class_count[pod_class(pod.num_gpus, pod.gpu_milli), i] -= 1
            return True

    def observe(self, pod: PodRow) -> str | None:
        """A pod the API server reports (snapshot or watch): counted when bound and active,
        forgotten when gone or terminal. Its GPUs: its index annotation, else the rule of
        the module doc. Returns a reason when it could not be counted."""
        with self.lock:
            if not pod.active or not pod.node:
                self.release(pod.key)
                return None
            if pod.key in self.bound:
                return None                  # already counted (our own bind, or earlier)
            if pod.node not in self.index:
                return f"pod {pod.namespace}/{pod.name}: node {pod.node!r} is unknown"
            self.see(pod)
            i = self.index[pod.node]
            gpus: tuple[int, ...] = ()
            if pod.num_gpus:
                if pod.gpu_index is not None and len(pod.gpu_index) == pod.num_gpus and all(
                        g < self.num_gpus[i] for g in pod.gpu_index):
                    gpus = pod.gpu_index
                else:
                    free = MILLI - self.gpu_used[:self.num_gpus[i], i]
                    gpus = least_sufficient(free, pod.gpu_milli, pod.num_gpus)
                    if not gpus:
                        # over-committed by others: take the least used, as many as asked
                        order = np.argsort(self.gpu_used[:self.num_gpus[i], i], kind="stable")
                        gpus = tuple(sorted(int(g) for g in order[:pod.num_gpus]))
            self.bind(pod, pod.node, gpus)
            return None

    def allocation(self) -> dict[str, tuple[str, tuple[int, ...]]]:
        """Every bound pod's (node, GPUs), by pod key."""
        with self.lock:
            return {k: (self.rows[b.node].name, b.gpus) for k, b in self.bound.items()}

    def used_milli(self) -> int:
        with self.lock:
            return int(self.gpu_used[:, :self.num_nodes].sum())

    def total_milli(self) -> int:
        with self.lock:
            return int(self.num_gpus[:self.num_nodes].sum()) * MILLI


__all__ = ["Twin", "Decision", "Bound", "bucket", "least_sufficient", "MAX_SCORE"]
