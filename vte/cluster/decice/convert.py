"""Conversion between DECICE's cluster state and vte's view of a cluster.

    view = cluster_view(request.cluster, params)            # ClusterState -> vte
    reqs, why = task_requests(request.tasks, view)         # [Task] -> Requests (T,), reasons
    state = cluster_state(env_state, params)                # vte -> ClusterState (export)
    tasks = tasks_from_requests(env_state.queue, ...)       # vte queue -> [Task]

Vertex pools become sites (in the order they are listed), links become the sites' delay
matrix, node metrics become the twin's report (utilisation, free resources, power), GPU
model and count, tier and labels come from `node_info`, `vertexpool_labels` and devices,
and running pods become the nodes' jobs. What DECICE does not report takes the defaults
of the table in `vte/cluster/decice/SERVE.md`. What DECICE accepts and vte cannot use is ignored,
as DECICE ignores it, never refused: a node without id or name, a GPU model or a label
vte does not know, a link naming no pool, a negative bandwidth, disk or delay (not
reported); a task vte cannot place (a GPU model on no node, an origin naming no pool) is
left out of the placement with its reason. The conversion is exact for what DECICE reports:
`cluster_view(cluster_state(s))` gives back every reported field of `s` (float32).

Arrays are NumPy, padded to a node bucket N (`NODE_BUCKETS`) and a site bucket S
(`SITE_BUCKETS`) so that a compiled policy serves many cluster sizes; padded nodes are
masked off (`Cluster.mask`). The one error left, a request larger than the largest
bucket, raises `ConversionError` naming the field, the value and what is allowed.
"""

from __future__ import annotations

import dataclasses
import math
import uuid
from dataclasses import dataclass

import numpy as np

from vte.cluster import catalogue as C
from vte.cluster.params import EnvParams
from vte.cluster.decice import schemas as S
from vte.cluster.types import Cluster, EnvState, Requests, Twin

# What became of each task (`place.place_tasks`' third output; `placements` words them).
PLACED, NO_NODE_FITS, DEFERRED, MASKED = range(4)
NODE_BUCKETS = (16, 64, 256, 1024, 4096)  # padded node counts N
SITE_BUCKETS = (4, 16, 64)                # padded vertex-pool counts S
TASK_BUCKETS = (1, 8, 64, 512)            # padded tasks per request T

DEFAULT_WORK_S = 3600.0                   # run time of a task that states none, s
# Delay between two pools without a link: two sites half the unit square apart.
DEFAULT_LINK_DELAY_MS = C.LINK_BASE_DELAY_MS + 0.5 * C.LINK_DELAY_MS_PER_UNIT
GPU_PREFIX = "nvidia-"
# Pod statuses that hold resources on their node (compared lower-case; None counts too).
RUNNING_STATUSES = ("running",)
MAX_POD_GPUS = 64                         # the most GPUs `Pod.info.gpus` can say a pod holds


class ConversionError(ValueError):
    """A request vte cannot convert (the server answers 422 with the message at `loc`)."""

    def __init__(self, message: str, loc: tuple = ("body",), kind: str = "too_large"):
        super().__init__(message)
        self.loc = loc
        self.kind = kind


# --------------------------------------------------------------------------
# Names
# --------------------------------------------------------------------------

def gpu_index(name) -> int | None:
    """Index into `catalogue.GPU_MODELS` of a GPU model name such as "nvidia-a100" (the
    prefix and case are optional: "A100" works too); None for a name vte does not know."""
    key = str(name).strip().lower()
    for prefix in (GPU_PREFIX, "nvidia_", "nvidia "):
        key = key[len(prefix):] if key.startswith(prefix) else key
    for i, model in enumerate(C.GPU_MODELS[1:], start=1):
        if key == model.lower():
            return i
    return None


def gpu_name(index: int) -> str:
    """DECICE's name of GPU model `index` ("nvidia-a100")."""
    return GPU_PREFIX + C.GPU_MODELS[index].lower()


def label_mask(names) -> int:
    """Bitmask over `catalogue.LABELS` of label names (names that are not vte labels are
    ignored: DECICE's labels are free-form)."""
    mask = 0
    for name in names or ():
        if name in C.LABELS:
            mask |= 1 << C.LABELS.index(name)
    return mask


def label_names(mask: int) -> list[str]:
    return [name for i, name in enumerate(C.LABELS) if (int(mask) >> i) & 1]


def bucket(n: int, buckets: tuple[int, ...], what: str) -> int:
    """The least bucket >= n."""
    for b in buckets:
        if n <= b:
            return b
    raise ConversionError(f"{what}: {n} is too many: allowed at most {buckets[-1]}",
                          kind="too_many")


_NO_INFO = S.NodeInfo()
_NO_METRICS = S.NodeMetrics()
_BIT = {name: 1 << i for i, name in enumerate(C.LABELS)}
_TIER_BITS = np.array([_BIT[t] for t in C.TIERS], np.int32)
_KIND_EDGE = C.NODE_KINDS.index("edge")
_KIND_CLOUD_CPU = C.NODE_KINDS.index("cloud_cpu")
_KIND_HPC_CPU = C.NODE_KINDS.index("hpc_cpu")
_KIND_PAD = 0                             # the kind of a padded node (masked off)


def _mids(table: np.ndarray, log: bool = False) -> np.ndarray:
    """The midpoint of each kind's catalogue range (geometric for log-uniform ones)."""
    return np.array([_mid(table, k, log) for k in range(len(C.NODE_KINDS))], np.float64)


def _reported(value: float | None) -> float | None:
    """A metric DECICE leaves unbounded: a negative value is "not reported" (None)."""
    return None if value is None or value < 0 else value


def has(x: np.ndarray) -> np.ndarray:
    """Where a gathered value was reported (not NaN)."""
    return ~np.isnan(x)


def _mid(table: np.ndarray, kind: int, log: bool = False) -> float:
    """Midpoint of a catalogue range (geometric for log-uniform ones)."""
    lo, hi = (float(x) for x in table[kind])
    return math.sqrt(lo * hi) if log else 0.5 * (lo + hi)


_MID_BANDWIDTH = _mids(C.KIND_BANDWIDTH_MBPS, log=True)
_MID_SPEED = _mids(C.KIND_SPEED)
_MID_IDLE = _mids(C.KIND_IDLE_W)
_MID_PEAK = _mids(C.KIND_PEAK_W)


# --------------------------------------------------------------------------
# ClusterState -> vte
# --------------------------------------------------------------------------

@dataclass
class ClusterView:
    """A DECICE cluster as vte sees it.

    cluster:  `vte.Cluster`, NumPy arrays padded to N nodes and S sites.
    twin:     `vte.Twin`, the nodes' reported metrics (age 0), padded the same way.
    node_ids: the DECICE id of node i, for i < number of real nodes.
    pool_ids: the id of vertex pool s (site s), for s < number of pools.
    """

    cluster: Cluster
    twin: Twin
    node_ids: list[str]
    pool_ids: list[str | None]

    @property
    def num_nodes(self) -> int:
        return self.cluster.mask.shape[0]

    @property
    def num_sites(self) -> int:
        return self.cluster.link_delay.shape[0]


def pad_view(view: ClusterView, num_nodes: int, num_sites: int) -> ClusterView:
    """`view` padded to larger buckets: absent nodes (mask off, every field 0, as
    `cluster_view` pads) and unused sites (the default link delay, the intra-site delay on
    the diagonal). The same as converting the request at those sizes, so a request can run
    in any compiled shape that holds it; `view` itself when the sizes are its own."""
    n, s = view.num_nodes, view.num_sites
    if num_nodes < n or num_sites < s:
        raise ConversionError(f"padded sizes N={num_nodes}, S={num_sites} are smaller than "
                              f"the view's N={n}, S={s}")
    if (num_nodes, num_sites) == (n, s):
        return view

    def nodes(x):                        # the node axis is the last one of every field
        x = np.asarray(x)
        return np.concatenate([x, np.zeros(x.shape[:-1] + (num_nodes - n,), x.dtype)], -1)

    delay = np.full((num_sites, num_sites), DEFAULT_LINK_DELAY_MS, np.float32)
    np.fill_diagonal(delay, C.INTRA_SITE_DELAY_MS)
    delay[:s, :s] = view.cluster.link_delay
    fields = {f.name: nodes(getattr(view.cluster, f.name))
              for f in dataclasses.fields(view.cluster) if f.name != "link_delay"}
    twin = view.twin.replace(**{f.name: nodes(getattr(view.twin, f.name))
                                for f in dataclasses.fields(view.twin)})
    return dataclasses.replace(view, cluster=view.cluster.replace(**fields, link_delay=delay),
                               twin=twin)


def _pool_index(pool_ids: list[str | None]) -> dict[str, int]:
    """Site index of each vertex-pool id (the first pool of a repeated id; no id: none)."""
    index: dict[str, int] = {}
    for s, p in enumerate(pool_ids):
        if p is not None:
            index.setdefault(p, s)
    return index


def _truthy_labels(labels: dict | None) -> set[str]:
    """vte label names set in a DECICE labels dict (a key that is a label with a true
    value, or the value of a "tier" key)."""
    out = set()
    for key, value in (labels or {}).items():
        if key in C.LABELS and value not in (False, None, 0, "false", "False", ""):
            out.add(key)
        if key == "tier" and value in C.TIERS:
            out.add(value)
    return out


def _running_pods(cs: S.ClusterState, index: dict[str, int], names: dict[str, int]):
    """Running jobs and GPUs they hold per node index: (dict jobs, dict gpus)."""
    jobs: dict[int, int] = {}
    gpus: dict[int, float] = {}
    for j, job in enumerate(cs.jobs or []):
        for p, pod in enumerate(job.pods or []):
            if pod.scheduled is False:
                continue
            if pod.status is not None and pod.status.lower() not in RUNNING_STATUSES:
                continue
            i = index.get(pod.node_id) if pod.node_id is not None else names.get(pod.nodename)
            if i is None:
                continue        # a pod on a node outside this view (documented)
            held = (pod.info or {}).get("gpus", 0)
            if (isinstance(held, bool) or not isinstance(held, (int, float))
                    or not 0 <= held <= MAX_POD_GPUS):
                held = 0            # not a GPU count (documented: reads as 0)
            jobs[i] = jobs.get(i, 0) + 1
            gpus[i] = gpus.get(i, 0.0) + float(held)
    return jobs, gpus


def cluster_view(cs: S.ClusterState, params: EnvParams, num_nodes: int | None = None,
                 num_sites: int | None = None) -> ClusterView:
    """vte's view of a DECICE cluster (see the module doc and SERVE.md for the rules).

    Args:
      cs: the validated cluster state.
      params: the environment parameters (failure-rate scale).
      num_nodes, num_sites: the padded sizes N and S; by default the least buckets.
    """
    pools = cs.vertexpools or []
    nodes = [(s, node) for s, pool in enumerate(pools) for node in (pool.nodes or [])
             if node.key is not None]          # a node no answer could name is left out
    n_real = len(nodes)
    n = num_nodes or bucket(n_real, NODE_BUCKETS, "cluster nodes")
    s_pad = num_sites or bucket(max(len(pools), 1), SITE_BUCKETS, "cluster.vertexpools")
    if n < n_real or s_pad < len(pools):
        raise ConversionError(f"padded sizes N={n}, S={s_pad} are too small for {n_real} "
                              f"nodes in {len(pools)} vertex pools")
    node_ids = [node.key for _, node in nodes]
    index, names = {}, {}                     # the first node of a repeated id or name
    for i, (_, node) in enumerate(nodes):
        index.setdefault(node_ids[i], i)
        if node.name is not None:
            names.setdefault(node.name, i)
    pool_ids = [p.id for p in pools]

    # GPUs attached to a node as devices of its pool (device_info names node_id, gpu_model).
    device_gpus: dict[int, list[int]] = {}
    for s, pool in enumerate(pools):
        for d, dev in enumerate(pool.devices or []):
            info = dev.device_info or {}
            i = index.get(info.get("node_id")) if isinstance(info.get("node_id"), str) else None
            model = gpu_index(info["gpu_model"]) if info.get("gpu_model") else None
            if i is not None and model is not None:   # a model vte does not know: ignored
                device_gpus.setdefault(i, []).append(model)
    jobs, held_gpus = _running_pods(cs, index, names)

    # One pass over the nodes gathers the reported values (NaN: not reported); the
    # defaults and derived fields are then computed for all nodes at once.
    f32, f64, nan = np.float32, np.float64, float("nan")
    pool_labels = [label_mask(_truthy_labels(p.vertexpool_labels)) for p in pools]
    rows, tiers, models, counts, masks, sites, ready = [], [], [], [], [], [], []
    known = set(C.LABELS)
    for i, (s, node) in enumerate(nodes):
        info = node.node_info or _NO_INFO
        m = node.metrics or _NO_METRICS
        mask = pool_labels[s] | (label_mask(known.intersection(info.labels)) if info.labels
                                 else 0)
        if info.tier is not None:
            t = C.TIERS.index(info.tier)
        else:
            t = (C.EDGE if mask & _BIT["edge"] else C.HPC if mask & _BIT["hpc"] else C.CLOUD)
        # GPUs of a model vte does not know, or of no model at all, are not offered.
        named = gpu_index(info.gpu_model) if info.gpu_model else None
        devs = device_gpus.get(i, ())
        model = named if named is not None else (devs[0] if devs else 0)
        count = info.gpu_count if info.gpu_count is not None else (
            len(devs) if devs else int(named is not None))
        if (info.gpu_model and named is None) or model == 0 or count == 0:
            model, count = 0, 0
        tiers.append(t)
        models.append(model)
        counts.append(count)
        masks.append(mask)
        sites.append(s)
        ready.append(info.ready is not False and m.cpu_cores is not None
                     and m.mem_total is not None)
        rows.append([nan if v is None else v for v in (
            m.cpu_cores, m.mem_total, m.total_disk_gb, m.free_disk_gb,
            m.network_bandwidth_mbps, m.util, m.mem_util, m.power_watts, info.speed,
            info.power_idle_watts, info.power_peak_watts, info.failures_per_hour,
            held_gpus.get(i, 0.0), jobs.get(i, 0))])

    real = np.arange(n) < n_real
    raw = np.full((n, 14), nan, f64)
    if rows:
        raw[:n_real] = rows
    (cores, mem, total_gb, free_gb, bw, util_pct, mem_util_pct, power_w, speed_in, idle_in,
     peak_in, rate_in, held, njobs) = raw.T
    for col in (total_gb, free_gb, bw):      # DECICE leaves these unbounded: < 0 = not reported
        col[col < 0] = nan
    tier = np.zeros(n, np.int32)
    gpu_model = np.zeros(n, np.int32)
    count = np.zeros(n, f64)
    label_bits = np.zeros(n, np.int32)
    site = np.zeros(n, np.int32)
    tier[:n_real], gpu_model[:n_real], count[:n_real] = tiers, models, counts
    label_bits[:n_real], site[:n_real] = masks, sites
    up = np.zeros(n, bool)
    up[:n_real] = ready
    kind = np.where(tier == C.EDGE, _KIND_EDGE,
                    np.where(tier == C.CLOUD, _KIND_CLOUD_CPU, _KIND_HPC_CPU) + (count > 0))
    kind = np.where(real, kind, _KIND_PAD).astype(np.int32)

    cores = np.where(has(cores), cores, 0.0)
    mem = np.where(has(mem), mem, 0.0)
    disk_total = np.where(has(total_gb), total_gb, np.where(has(free_gb), free_gb, 0.0))
    disk_free = np.where(has(free_gb), free_gb, disk_total)
    bandwidth = np.where(has(bw), bw, _MID_BANDWIDTH[kind]).astype(f32)
    u = (np.where(has(util_pct), util_pct, 0.0) / 100.0).astype(f32)
    mu = (np.where(has(mem_util_pct), mem_util_pct, 0.0) / 100.0).astype(f32)
    cap = np.stack([cores, mem, count, disk_total]).astype(f32)
    speed = np.where(has(speed_in), speed_in, _MID_SPEED[kind]).astype(f32)
    p_idle = np.where(has(idle_in), idle_in, _MID_IDLE[kind]).astype(f32)
    p_peak = np.maximum(np.where(has(peak_in), peak_in, _MID_PEAK[kind]).astype(f32), p_idle)
    rate = np.where(has(rate_in), rate_in, C.KIND_FAILURE_RATE[kind].astype(f64)
                    * float(params.failure_rate_scale)).astype(f32)
    derived = (_TIER_BITS[tier] | np.where(count > 0, _BIT["gpu"], 0)
               | np.where(mem >= C.BIGMEM_GIB, _BIT["bigmem"], 0)
               | np.where(bandwidth >= C.HIGHNET_MBPS, _BIT["highnet"], 0))
    labels = np.where(real, label_bits | derived, 0).astype(np.int32)
    held = np.where(real, held, 0.0)
    free = np.stack([cap[C.CPU] * (f32(1.0) - u), cap[C.MEM] * (f32(1.0) - mu),
                     (count - held).astype(f32), disk_free.astype(f32)]).astype(f32)
    # A node that reports no power draws what the power model of `vte.cluster.dynamics.measure`
    # gives at its utilisation and held GPUs (0 when down).
    modelled = p_idle + (p_peak - p_idle) * u + C.GPU_WATTS[gpu_model] * held.astype(f32)
    power = np.where(has(power_w), power_w, np.where(up, modelled, 0.0)).astype(f32)
    njobs = np.where(real, njobs, 0.0).astype(f32)
    util, mem_util = np.where(real, u, f32(0)), np.where(real, mu, f32(0))
    for arr in (cap, free):
        arr[:, ~real] = 0.0
    for arr in (speed, bandwidth, p_idle, p_peak, rate, power):
        arr[~real] = 0.0

    delay = np.full((s_pad, s_pad), DEFAULT_LINK_DELAY_MS, f32)
    np.fill_diagonal(delay, C.INTRA_SITE_DELAY_MS)
    pool_index = _pool_index(pool_ids)
    given = set()
    for link in cs.links or []:
        a = pool_index.get(link.vertexpool_a_id)
        b = pool_index.get(link.vertexpool_b_id)
        ms = _reported(link.network_delay_ms)
        if a is None or b is None or ms is None:
            continue            # a link naming no pool of this cluster, or no delay: ignored
        delay[a, b] = ms
        given.add((a, b))
        if (b, a) not in given:
            delay[b, a] = ms

    step_fail = -np.expm1(-rate.astype(np.float64) * float(params.step_seconds) / 3600.0)
    cluster = Cluster(
        mask=np.arange(n) < n_real, tier=tier, kind=kind, capacity=cap, gpu_model=gpu_model,
        labels=labels, site=site, speed=speed, bandwidth=bandwidth, power_idle=p_idle,
        power_peak=p_peak, failure_rate=rate, step_fail_prob=step_fail.astype(f32),
        bg_mean=np.zeros(n, f32), link_delay=delay)
    twin = Twin(util=util, mem_util=mem_util, free=free, power=power.astype(f32), up=up,
                jobs=njobs, age=np.zeros(n, f32))
    return ClusterView(cluster=cluster, twin=twin, node_ids=node_ids, pool_ids=pool_ids)


# --------------------------------------------------------------------------
# Task -> vte request
# --------------------------------------------------------------------------

_ALL_GPUS = sum(1 << i for i in range(1, C.NUM_GPU_MODELS))


def gpu_model_present(accepted: int, view: ClusterView) -> bool:
    """Whether some node of the view carries a GPU model of the bitmask `accepted`."""
    models = view.cluster.gpu_model[view.cluster.mask]
    return bool(np.any((accepted >> models) & 1 & (models > 0)))


def _accepted_gpus(task: S.Task, ext: S.TaskExtension) -> tuple[int, int, list[str]]:
    """(GPUs wanted, bitmask of accepted catalogue models, names vte does not know)."""
    r = task.requirements
    names = ext.accepted_gpus if ext.accepted_gpus is not None else (
        [r.required_gpu] if r.required_gpu else [])
    gpus = ext.gpus if ext.gpus is not None else int(bool(r.required_gpu))
    accepted, unknown = 0, []
    for name in names:
        i = gpu_index(name)
        if i is None:
            unknown.append(name)
        else:
            accepted |= 1 << i
    if gpus > 0 and not names:
        accepted = _ALL_GPUS          # GPUs of any model
    return gpus, accepted, unknown


def task_requests(tasks: list[S.Task], view: ClusterView, num_tasks: int | None = None
                  ) -> tuple[Requests, list[str | None]]:
    """The tasks as vte requests, and why each cannot be placed.

    Returns:
      requests: `Requests` with leading axis T (padded with invalid slots to `num_tasks`,
        by default the least of `TASK_BUCKETS`);
      reasons: per task, None, or why no node can host it whatever the policy: it wants
        GPUs of models no node of the view carries (or only models vte does not know), or
        its `vte.origin_pool` names no vertex pool. Such a task is an invalid slot (the
        placement skips it and books nothing) and is answered `target_node_ids: []`.
    """
    t_real = len(tasks)
    t = num_tasks or bucket(max(t_real, 1), TASK_BUCKETS, "tasks")
    if t < t_real:
        raise ConversionError(f"padded size T={t} is too small for {t_real} tasks")
    f32 = np.float32
    demand = np.zeros((t, C.NUM_RESOURCES), f32)
    work = np.full(t, DEFAULT_WORK_S, f32)
    gpu_models, required, rejected, preferred, origin = (np.zeros(t, np.int32) for _ in range(5))
    latency = np.full(t, C.NO_LATENCY_BOUND_MS, f32)
    data_gb = np.zeros(t, f32)
    valid = np.arange(t) < t_real
    reasons: list[str | None] = [None] * t_real
    pool_index = _pool_index(view.pool_ids)
    no_ext = S.TaskExtension()

    for k, task in enumerate(tasks):
        r, ext = task.requirements, task.vte or no_ext
        gpus, accepted, unknown = _accepted_gpus(task, ext)
        if gpus > 0 and not gpu_model_present(accepted, view):
            wanted = [gpu_name(m) for m in range(1, C.NUM_GPU_MODELS) if (accepted >> m) & 1]
            have = sorted({gpu_name(int(m)) for m in view.cluster.gpu_model[view.cluster.mask]
                           if m > 0})
            reasons[k] = (f"GPU model {wanted + unknown} is on no node vte can use (the "
                          f"nodes offer {have or 'no GPU'}; vte knows "
                          f"{[gpu_name(m) for m in range(1, C.NUM_GPU_MODELS)]})")
        if ext.origin_pool is not None:
            if ext.origin_pool in pool_index:
                origin[k] = pool_index[ext.origin_pool]
            else:
                reasons[k] = (f"vte.origin_pool={ext.origin_pool!r} names no vertex pool of "
                              f"the cluster (its pools: {sorted(pool_index)})")
        data = ext.data_gb if ext.data_gb is not None else 0.0
        disk = ext.disk_gb if ext.disk_gb is not None else math.ceil(data)
        demand[k] = (r.required_cpu, r.required_memory / 1024.0, gpus, disk)
        limit = task.time_limit if task.time_limit is not None and task.time_limit > 0 else None
        work[k] = ext.work_s if ext.work_s is not None else (
            limit if limit is not None else DEFAULT_WORK_S)
        gpu_models[k] = accepted if gpus > 0 else 0
        required[k] = label_mask(ext.required_labels)
        rejected[k] = label_mask(ext.rejected_labels)
        preferred[k] = label_mask(ext.preferred_labels)
        if ext.latency_bound_ms is not None:
            latency[k] = ext.latency_bound_ms
        data_gb[k] = data
        valid[k] = reasons[k] is None

    requests = Requests(valid=valid, demand=demand, work=work, gpu_models=gpu_models,
                        required=required, rejected=rejected, preferred=preferred,
                        origin=origin, latency_bound=latency, data_gb=data_gb,
                        archetype=np.zeros(t, np.int32))
    return requests, reasons


def _most_free(view: ClusterView) -> str:
    """The most of each resource any ready node reported free, each resource on its own
    (before the request's first task); or that no node is ready."""
    up = view.cluster.mask & view.twin.up
    if not np.any(up):
        return "no node is ready (every node is down or reports no CPU or memory)"
    free = np.asarray(view.twin.free)[:, up].max(axis=1)
    return (f"before this request, the most free on any node, each resource on its own: "
            f"{free[C.CPU]:g} cores, {free[C.MEM] * 1024:g} MiB, {free[C.GPU]:g} GPUs, "
            f"{free[C.DISK]:g} GB of disk; labels, a latency bound or the tasks placed before "
            "it may also rule nodes out")


def placements(tasks: list[S.Task], view: ClusterView, nodes, outcome, reasons: list,
               name: str) -> list[S.TaskPlacement]:
    """The answer per task: its node, or [] with the reason it was not placed.

    The reasons, each true whatever happened (`place.place_tasks`' outcome): the task
    wants a GPU model no node carries, or names a pool the cluster lacks (`task_requests`);
    the cluster has no node; no node could host it when its turn came (with the most of
    each resource one node reported free); the policy chose no node although some node
    could host it; the policy chose a node that cannot host it (masked) although some
    other node could."""
    no_node = not np.any(view.cluster.mask)
    out = []
    for k, task in enumerate(tasks):
        node, what = int(nodes[k]), int(outcome[k])
        if node >= 0:
            out.append(S.TaskPlacement(task_id=task.id, strategy_used=name,
                                       target_node_ids=[view.node_ids[node]]))
            continue
        if reasons[k]:
            reason = reasons[k]
        elif no_node:
            reason = "the cluster has no node (no vertex pool holds a node with an id)"
        elif what == NO_NODE_FITS:
            reason = ("no node can host it on the reported metrics when its turn came, after "
                      f"the tasks before it ({_most_free(view)})")
        elif what == DEFERRED:
            reason = f"the policy {name!r} chose no node, although some node could host it"
        elif what == MASKED:
            reason = (f"the policy {name!r} chose a node that cannot host it, although some "
                      "other node could")
        else:
            raise AssertionError(f"task {k}: not placed with outcome {what}")
        out.append(S.TaskPlacement(task_id=task.id, strategy_used=name, target_node_ids=[],
                                   reason=reason))
    return out


# --------------------------------------------------------------------------
# vte -> ClusterState and tasks (export)
# --------------------------------------------------------------------------

def _f(x) -> float:
    """A float32 value as the Python float that reads back to the same float32."""
    return float(np.float32(x))


def cluster_state(state: EnvState, last_updated: float | None = None) -> S.ClusterState:
    """One environment state (no batch axis) as a DECICE `ClusterState`: sites become
    vertex pools "pool-s", nodes "node-i" with their twin's report as metrics and vte's
    static facts as `node_info`, site delays become links, running jobs become pods (their
    held resources and remaining seconds in `Pod.info`)."""
    cl, tw, nd = state.cluster, state.twin, state.nodes
    mask = np.asarray(cl.mask)
    s_count = np.asarray(cl.link_delay).shape[0]
    pools = [S.VertexPool(id=f"pool-{s}", vertexpool_labels={}, nodes=[], devices=[])
             for s in range(s_count)]
    cap, free = np.asarray(cl.capacity), np.asarray(tw.free)
    pods = []
    active, demand = np.asarray(nd.job_active), np.asarray(nd.job_demand)
    job_end, now = np.asarray(nd.job_end), float(np.asarray(state.time))
    for i in np.flatnonzero(mask):
        model = int(cl.gpu_model[i])
        tier = C.TIERS[int(cl.tier[i])]
        info = S.NodeInfo(
            gpu_model=gpu_name(model) if model else None, gpu_count=int(cap[C.GPU, i]),
            tier=tier, labels=label_names(cl.labels[i]), ready=bool(tw.up[i]),
            speed=_f(cl.speed[i]), power_idle_watts=_f(cl.power_idle[i]),
            power_peak_watts=_f(cl.power_peak[i]), failures_per_hour=_f(cl.failure_rate[i]))
        metrics = S.NodeMetrics(
            util=_f(np.float32(tw.util[i]) * np.float32(100.0)),
            mem_util=_f(np.float32(tw.mem_util[i]) * np.float32(100.0)),
            network_bandwidth_mbps=_f(cl.bandwidth[i]),
            free_disk_gb=_f(max(free[C.DISK, i], 0.0)), total_disk_gb=_f(cap[C.DISK, i]),
            cpu_cores=_f(cap[C.CPU, i]), mem_total=_f(cap[C.MEM, i]),
            power_watts=_f(tw.power[i]))
        node_id = f"node-{i}"
        pools[int(cl.site[i])].nodes.append(S.Node(
            id=node_id, name=node_id, system=tier, node_info=info, metrics=metrics))
        for j in np.flatnonzero(active[:, i]):
            held = demand[:, j, i]
            pods.append(S.Pod(
                id=f"pod-{i}-{j}", name=f"pod-{i}-{j}", scheduled=True, status="Running",
                node_id=node_id, job_id="running",
                info={"cpu_cores": int(held[C.CPU]), "memory_gib": int(held[C.MEM]),
                      "gpus": int(held[C.GPU]), "disk_gib": int(held[C.DISK]),
                      "remaining_s": _f(job_end[j, i] - now)}))
    delay = np.asarray(cl.link_delay)
    links = [S.Link(vertexpool_a_id=f"pool-{a}", vertexpool_b_id=f"pool-{b}",
                    network_delay_ms=_f(delay[a, b]))
             for a in range(s_count) for b in range(s_count) if a != b]
    links += [S.Link(vertexpool_a_id=f"pool-{s}", vertexpool_b_id=f"pool-{s}",
                     network_delay_ms=_f(delay[s, s])) for s in range(s_count)]
    jobs = [S.Job(id="running", pods=pods)] if pods else []
    return S.ClusterState(lastUpdated=last_updated, vertexpools=pools, links=links, jobs=jobs,
                          cluster_info={"source": "vte"})


def tasks_from_requests(queue: Requests, ids: list[uuid.UUID]) -> list[S.Task]:
    """The valid requests of a queue (leading axis K, no batch axis) as DECICE tasks, with
    vte's extra fields in `Task.vte`; `ids[k]` names request k."""
    tasks = []
    for k in np.flatnonzero(np.asarray(queue.valid)):
        d = np.asarray(queue.demand[k])
        accepted = int(queue.gpu_models[k])
        names = [gpu_name(m) for m in range(1, C.NUM_GPU_MODELS) if (accepted >> m) & 1]
        gpus = int(d[C.GPU])
        bound = float(queue.latency_bound[k])
        tasks.append(S.Task(
            id=ids[k],
            requirements=S.HardwareRequirements(
                required_cpu=int(d[C.CPU]), required_memory=int(round(float(d[C.MEM]) * 1024)),
                required_gpu=names[0] if gpus > 0 and names else None),
            time_limit=max(int(math.ceil(float(queue.work[k]))), 1),
            vte=S.TaskExtension(
                gpus=gpus, accepted_gpus=names if gpus > 0 else [], work_s=_f(queue.work[k]),
                data_gb=_f(queue.data_gb[k]), disk_gb=_f(d[C.DISK]),
                required_labels=label_names(queue.required[k]),
                rejected_labels=label_names(queue.rejected[k]),
                preferred_labels=label_names(queue.preferred[k]),
                origin_pool=f"pool-{int(queue.origin[k])}",
                latency_bound_ms=None if bound >= C.NO_LATENCY_BOUND_MS else _f(bound))))
    return tasks


__all__ = ["ConversionError", "ClusterView", "cluster_view", "task_requests", "placements",
           "cluster_state",
           "tasks_from_requests", "gpu_index", "gpu_name", "label_mask", "label_names",
           "bucket", "NODE_BUCKETS", "SITE_BUCKETS", "TASK_BUCKETS", "DEFAULT_WORK_S",
           "DEFAULT_LINK_DELAY_MS"]
