"""A NumPy reference of the environment: the same model, written as a user would write it
without JAX, for one environment at a time.

It serves two purposes: a test oracle (`tests/test_reference.py` checks that on the same
scenario and the same random words it gives the same rewards, optimal actions and next
state as `vte.step`), and the baseline that `benchmarks/throughput.py` measures the
speed-up of `vte` against. It is deliberately independent of `vte.cluster.scoring` and
`vte.cluster.env` (only the constant tables of `vte.cluster.catalogue` are shared), so that a mistake
in one shows up as a disagreement with the other.

    rng = np.random.default_rng(0)
    state = reset(rng, params)
    state, reward, truncated, info = step(state, action, rng, params)
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from vte.cluster import catalogue as C

f32 = np.float32
_GOLDEN, _M1, _M2 = np.uint32(0x9E3779B9), np.uint32(0x7FEB352D), np.uint32(0x846CA68B)
NUM_NODE_WORDS, NUM_REQUEST_WORDS = 16, 14
# The ids of vte.rng.STEP_* (this oracle imports no JAX; tests/test_reference.py checks they agree)
_STREAM_NODES, _STREAM_ARRIVALS, _STREAM_REQUESTS, _STREAM_TWIN = 0x11, 0x22, 0x33, 0x7417
_BG_SHARE = np.array([1.0, C.MEM_BG_RATIO, 0.0, 0.0], f32)
REQUEST_FIELDS = ("valid", "demand", "work", "gpu_models", "required", "rejected", "preferred",
                  "origin", "latency_bound", "data_gb", "archetype")


@dataclass
class State:
    """One environment. Node arrays are (N,), resource arrays (R, N), slot arrays (J, N),
    queue fields have a leading (K,) axis. Units as in `vte.cluster.types`."""

    # cluster (fixed per episode)
    mask: np.ndarray
    tier: np.ndarray
    capacity: np.ndarray
    gpu_model: np.ndarray
    labels: np.ndarray
    site: np.ndarray
    speed: np.ndarray
    bandwidth: np.ndarray
    power_idle: np.ndarray
    power_peak: np.ndarray
    failure_rate: np.ndarray
    step_fail_prob: np.ndarray
    bg_mean: np.ndarray
    link_delay: np.ndarray
    # nodes
    bg_load: np.ndarray
    bg_next: np.ndarray
    up: np.ndarray
    alloc: np.ndarray
    job_active: np.ndarray
    job_demand: np.ndarray
    job_end: np.ndarray
    # queue: dict field -> array with leading K; incoming: the next step's candidates
    queue: dict
    incoming: dict
    # twin
    twin: dict
    weights: np.ndarray
    time: float
    steps: int


# ------------------------------------------------------------------ random words


def hash32(x):
    """lowbias32, uint32 -> uint32 (multiplications wrap modulo 2**32)."""
    with np.errstate(over="ignore"):
        x = np.asarray(x, np.uint32)
        x = x ^ (x >> np.uint32(16))
        x = x * _M1
        x = x ^ (x >> np.uint32(15))
        x = x * _M2
        return x ^ (x >> np.uint32(16))


def words(seed, stream: int, shape) -> np.ndarray:
    """`vte.rng.words`: `seed` one uint32 word or two (a 64-bit seed, mixed into every word)."""
    if np.ndim(seed) == 1:
        w0, w1 = (int(x) for x in np.asarray(seed, np.uint32))
        with np.errstate(over="ignore"):
            mix = hash32(np.asarray(w1, np.uint32)
                         ^ hash32(np.asarray(stream, np.uint32) * _GOLDEN + np.uint32(2)))
        return hash32(words(w0, stream, shape) ^ mix)
    with np.errstate(over="ignore"):
        base = hash32(np.asarray(seed, np.uint32)
                      ^ hash32(np.asarray(stream, np.uint32) * _GOLDEN + np.uint32(1)))
        idx = np.arange(int(np.prod(shape)), dtype=np.uint32).reshape(shape)
        return hash32(base + idx * _GOLDEN)


def uniform(w):
    return (np.asarray(w, np.uint32) >> np.uint32(8)).astype(f32) * f32(1.0 / (1 << 24))


# ------------------------------------------------------------------ sampling


def _cat(u, probs):
    cdf = np.cumsum(np.asarray(probs, f32), axis=-1)[..., :-1]
    return np.sum(u[..., None] >= cdf, axis=-1).astype(np.int32)


def _between(u, lohi):
    return lohi[..., 0] + u * (lohi[..., 1] - lohi[..., 0])


def _int_between(u, lohi):
    return np.minimum(np.floor(lohi[..., 0] + u * (lohi[..., 1] - lohi[..., 0] + f32(1))),
                      lohi[..., 1])


def _log_between(u, lohi):
    lo, hi = np.log(lohi[..., 0]), np.log(lohi[..., 1])
    return np.exp(lo + u * (hi - lo)).astype(f32)


def _label_bits(w, probs):
    nib = (w[..., None] >> (4 * np.arange(C.NUM_LABELS, dtype=np.uint32))) & np.uint32(15)
    hit = nib < np.round(probs * 16).astype(np.uint32)
    return np.sum(np.where(hit, 1 << np.arange(C.NUM_LABELS), 0), axis=-1).astype(np.int32)


def sample_requests(w: np.ndarray, params) -> dict:
    """Requests from words (M, NUM_REQUEST_WORDS) uint32, as dict of (M, ...) arrays."""
    u = uniform(w)
    a = _cat(u[:, 0], params.archetype_shares)
    T = lambda t: np.asarray(t, f32)[a]  # noqa: E731
    cores = _int_between(u[:, 1], T(C.ARCH_CORES))
    mem = np.maximum(np.round(_log_between(u[:, 2], T(C.ARCH_MEM_GIB))), 1)
    wants = u[:, 3] < T(C.ARCH_P_GPU)
    gpus = np.where(wants, _int_between(u[:, 4], T(C.ARCH_GPUS)), 0)
    gpu_models = np.where(wants, np.where(u[:, 5] < T(C.ARCH_P_GPU_ALT), C.ARCH_GPU_MASK_ALT[a],
                                          C.ARCH_GPU_MASK[a]), 0).astype(np.int32)
    work = _between(u[:, 6], T(C.ARCH_SECONDS))
    data_gb = _log_between(u[:, 7], T(C.ARCH_DATA_GB))
    preferred = _label_bits(w[:, 8], T(C.ARCH_P_PREFER))
    required = _label_bits(w[:, 9], T(C.ARCH_P_REQUIRE))
    rejected = _label_bits(w[:, 10], T(C.ARCH_P_REJECT)) & ~required
    preferred = preferred & ~rejected
    bound = np.where(u[:, 11] < T(C.ARCH_P_LATENCY), _between(u[:, 12], T(C.ARCH_LATENCY_MS)),
                     C.NO_LATENCY_BOUND_MS)
    origin = np.minimum(np.floor(u[:, 13] * params.num_sites), params.num_sites - 1)
    return {
        "valid": np.ones(len(a), bool),
        "demand": np.stack([cores, mem, gpus, np.ceil(data_gb)], axis=-1).astype(f32),
        "work": work.astype(f32), "gpu_models": gpu_models, "required": required,
        "rejected": rejected, "preferred": preferred, "origin": origin.astype(np.int32),
        "latency_bound": bound.astype(f32), "data_gb": data_gb.astype(f32),
        "archetype": a,
    }


def _daily_mean(s: State, t) -> np.ndarray:
    n_sites = s.link_delay.shape[0]
    day = f32(t) / f32(86400) + np.arange(n_sites, dtype=f32) / f32(n_sites)
    profile = f32(1) + f32(C.DAILY_AMPLITUDE) * np.sin(f32(2 * np.pi) * day)
    return np.clip(s.bg_mean * profile[s.site], 0, C.BG_MAX).astype(f32)


def _per_step(rate_per_h, params):
    """Probability of a Poisson event of `rate_per_h` within one step."""
    return (-np.expm1(-np.asarray(rate_per_h, f32) * f32(params.step_seconds / 3600.0))).astype(f32)


def _unit_noise(w):
    return (f32(2) * uniform(w) - f32(1)) * f32(1.7320508)


def _bg_move(s: State, bg, z, t, params):
    """The background load one step later, at time t (z: unit-variance noise)."""
    bg = bg + f32(params.bg_reversion) * (_daily_mean(s, t) - bg)
    return np.clip(bg + f32(params.bg_volatility) * z, 0, C.BG_MAX).astype(f32)


def reset(rng: np.random.Generator, params) -> State:
    """A fresh scenario drawn with NumPy's generator (same distributions as `vte.reset`)."""
    n, s = params.num_nodes, params.num_sites
    w = rng.integers(0, 2**32, (n, NUM_NODE_WORDS), dtype=np.uint32)
    u = uniform(w)
    tier = _cat(u[:, 0], params.tier_shares)
    has_gpu = (tier != C.EDGE) & (u[:, 1] < params.gpu_node_share)
    kind = np.where(tier == C.EDGE, 4, np.where(tier == C.CLOUD, 0, 2) + has_gpu)
    K = lambda t: np.asarray(t, f32)[kind]  # noqa: E731
    cores = _int_between(u[:, 2], K(C.KIND_CORES))
    mem = np.round(_log_between(u[:, 3], K(C.KIND_MEM_GIB)))
    gpus = _int_between(u[:, 4], K(C.KIND_GPUS))
    model = _cat(u[:, 5], K(C.KIND_GPU_MODEL_P))
    disk = np.round(_log_between(u[:, 6], K(C.KIND_DISK_GIB)))
    bandwidth = _log_between(u[:, 8], K(C.KIND_BANDWIDTH_MBPS))
    idle = _between(u[:, 9], K(C.KIND_IDLE_W))
    labels = ((1 << tier) | np.where(gpus > 0, C.L_GPU, 0)
              | np.where(mem >= C.BIGMEM_GIB, C.L_BIGMEM, 0)
              | np.where(u[:, 11] < K(C.KIND_P_ARM), C.L_ARM64, 0)
              | np.where(u[:, 12] < K(C.KIND_P_SSD), C.L_SSD, 0)
              | np.where(bandwidth >= C.HIGHNET_MBPS, C.L_HIGHNET, 0)).astype(np.int32)
    site = np.minimum(np.floor(u[:, 13] * s), s - 1).astype(np.int32)
    level = _cat(u[:, 14], params.load_shares)
    pos = rng.random((s, 2), dtype=f32)
    dist = np.sqrt(((pos[:, None] - pos[None]) ** 2).sum(-1))
    active = params.active_nodes if params.active_nodes > 0 else n
    state = State(
        mask=np.arange(n) < active, tier=tier, capacity=np.stack([cores, mem, gpus, disk]).astype(f32),
        gpu_model=np.where(gpus > 0, model, 0).astype(np.int32), labels=labels, site=site,
        speed=_between(u[:, 7], K(C.KIND_SPEED)), bandwidth=bandwidth, power_idle=idle,
        power_peak=np.maximum(_between(u[:, 10], K(C.KIND_PEAK_W)), idle),
        failure_rate=K(C.KIND_FAILURE_RATE) * f32(params.failure_rate_scale),
        step_fail_prob=_per_step(K(C.KIND_FAILURE_RATE) * f32(params.failure_rate_scale), params),
        bg_mean=_between(u[:, 15], np.asarray(C.LOAD_LEVELS, f32)[level]),
        link_delay=np.where(np.eye(s, dtype=bool), C.INTRA_SITE_DELAY_MS,
                            C.LINK_BASE_DELAY_MS + C.LINK_DELAY_MS_PER_UNIT * dist).astype(f32),
        bg_load=np.zeros(n, f32), bg_next=np.zeros(n, f32), up=np.ones(n, bool), alloc=np.zeros((4, n), f32),
        job_active=np.zeros((params.slots_per_node, n), bool),
        job_demand=np.zeros((4, params.slots_per_node, n), np.uint16),
        job_end=np.zeros((params.slots_per_node, n), f32),
        queue={}, incoming={}, twin={}, weights=np.asarray(params.weights, f32), time=0.0, steps=0)
    state.bg_load = _daily_mean(state, 0.0)
    state.bg_next = _bg_move(state, state.bg_load,
                             _unit_noise(rng.integers(0, 2**32, n, dtype=np.uint32)),
                             f32(params.step_seconds), params)
    k = params.queue_len
    state.queue = sample_requests(rng.integers(0, 2**32, (k, NUM_REQUEST_WORDS), dtype=np.uint32),
                                  params)
    state.incoming = sample_requests(
        rng.integers(0, 2**32, (C.MAX_ARRIVALS, NUM_REQUEST_WORDS), dtype=np.uint32), params)
    state.queue["valid"] = np.arange(k) < round(params.initial_queue_fill * k)
    if params.sample_weights:
        state.weights = (3 * rng.dirichlet(np.ones(3))).astype(f32)
    state.twin = _measure(state)
    state.twin["age"] = np.zeros(n, f32)
    return state


# ------------------------------------------------------------------ scoring


def _measure(s: State) -> dict:
    used = s.capacity * (_BG_SHARE[:, None] * s.bg_load) + s.alloc
    util = np.clip(used[0] / np.maximum(s.capacity[0], 1), 0, 1)
    mem_util = np.clip(used[1] / np.maximum(s.capacity[1], 1), 0, 1)
    power = (s.power_idle + (s.power_peak - s.power_idle) * util
             + C.GPU_WATTS[s.gpu_model] * s.alloc[2])
    return {"util": util, "mem_util": mem_util, "free": s.capacity - used,
            "power": np.where(s.up, power, 0).astype(f32), "up": s.up.copy(),
            "jobs": s.job_active.sum(0).astype(f32)}


def _head(s: State) -> dict:
    return {k: v[0] for k, v in s.queue.items()}


def costs(s: State, params):
    """(costs (N+1,), feasible (N+1,), per-node completion s, energy J, failure prob)."""
    m, q = _measure(s), _head(s)
    d = q["demand"]
    delay = s.link_delay[q["origin"]][s.site]
    feasible = _feasible(s, m, params)
    speed = np.where(d[2] > 0, C.GPU_SPEED[s.gpu_model], s.speed)
    run = q["work"] / np.maximum(speed, f32(1e-3)) * (f32(1) + f32(params.contention) * m["util"])
    completion = run + q["data_gb"] * f32(C.MBIT_PER_GB) / np.maximum(s.bandwidth, 1) + delay / f32(1000)
    share = np.clip(d[0] / np.maximum(s.capacity[0], 1), 0, 1)
    rise = (s.power_peak - s.power_idle) * share + C.GPU_WATTS[s.gpu_model] * d[2]
    energy = (rise + np.where(m["jobs"] == 0, s.power_idle, 0)) * run
    p_fail = -np.expm1(-s.failure_rate / f32(3600) * completion)
    work = max(q["work"], f32(1))
    ref_e = work * (f32(C.REF_WATTS_PER_CORE) * max(d[0], f32(1)) + f32(C.REF_WATTS_PER_GPU) * d[2])
    missing = np.array([bin(int(x)).count("1") for x in (q["preferred"] & ~s.labels)], f32)
    w = s.weights
    cost = (w[0] * completion / work + w[1] * energy / ref_e + w[2] * p_fail / f32(C.RELIABILITY_REF)
            + f32(params.pref_penalty) * missing).astype(f32)
    defer = cost[feasible].max() + f32(params.defer_penalty) if feasible.any() else f32(0)
    return (np.append(cost, f32(defer)), np.append(feasible, True), completion, energy, p_fail)


def _feasible(s: State, m: dict, params) -> np.ndarray:
    """(N,) whether the head request fits each node according to metrics `m`."""
    q = _head(s)
    d = q["demand"]
    delay = s.link_delay[q["origin"]][s.site]
    return (q["valid"] & s.mask & m["up"] & np.all(m["free"] >= d[:, None] - f32(1e-4), 0)
            & ((s.labels & q["required"]) == q["required"]) & ((s.labels & q["rejected"]) == 0)
            & ((d[2] <= 0) | (((q["gpu_models"] >> s.gpu_model) & 1) == 1))
            & (delay <= q["latency_bound"]) & (m["jobs"] < params.slots_per_node))


def action_mask(s: State, params) -> np.ndarray:
    """The observation's mask: feasibility on the ground truth, or on the twin with
    `params.mask_from_twin`; defer (last) always allowed."""
    if getattr(params, "mask_from_twin", False):
        return np.append(_feasible(s, s.twin, params), True)
    return costs(s, params)[1]


def optimal_action(s: State, params) -> int:
    c, feasible = costs(s, params)[:2]
    return int(np.argmin(np.where(feasible, c, np.inf)))


# ------------------------------------------------------------------ step


def step(state: State, action: int, seed_or_rng, params):
    """One decision and one time advance; auto-resets (with NumPy's generator) at the end of
    an episode when given a Generator. Returns (state, reward, truncated, info).

    `seed_or_rng`: the two 32-bit words `vte.step_env` draws from its key
    (`vte.rng.seed_from_key`, for exact comparison), or a `np.random.Generator` to draw
    them from.
    """
    rng = seed_or_rng if isinstance(seed_or_rng, np.random.Generator) else None
    seed = (rng.integers(0, 2**32, size=2) if rng is not None
            else np.asarray(seed_or_rng)).astype(np.uint32)
    if seed.shape != (2,):
        raise ValueError(f"seed_or_rng has shape {seed.shape}: allowed two uint32 words "
                         "(vte.rng.seed_from_key) or a np.random.Generator")
    s = copy.deepcopy(state)
    alloc_before = s.alloc.copy()
    n, k = params.num_nodes, params.queue_len
    c, feasible, completion, energy, p_fail = costs(s, params)
    opt = int(np.argmin(np.where(feasible, c, np.inf)))
    valid = 0 <= action <= n and bool(feasible[action])
    head = _head(s)
    place = valid and action < n
    defer = valid and action == n and bool(head["valid"])
    worst = float(np.max(np.where(feasible, c, -np.inf)) - c[opt])   # defer: always feasible
    regret = float(c[action] - c[opt]) if valid else worst + float(params.invalid_penalty)

    if place:
        slot = int(np.argmin(s.job_active[:, action]))
        s.job_active[slot, action] = True
        held = np.ceil(np.clip(head["demand"], 0, 65535)).astype(np.uint16)  # whole units
        s.job_demand[:, slot, action] = held
        s.job_end[slot, action] = f32(s.time) + completion[action]
        s.alloc[:, action] += held
    if place or defer:
        count = int(s.queue["valid"].sum())
        order = list(range(1, count)) + ([0] if defer else [])
        for name, v in s.queue.items():
            moved = v.copy()
            moved[:len(order)] = v[order]
            s.queue[name] = moved
        s.queue["valid"] = np.arange(k) < (count - 1 if place else count)

    t1 = f32(s.steps + 1) * f32(params.step_seconds)          # from the step count: no drift
    w = words(seed, _STREAM_NODES, (n, 2))
    # An up node fails with its per-step probability; a failed one is repaired with the
    # per-step probability of a repair (mean repair_hours).
    p_flip = np.where(s.up, s.step_fail_prob, _per_step(1.0 / params.repair_hours, params))
    down = ~(s.up != (uniform(w[:, 0]) < p_flip))
    # Every job of a node that is down after the step is lost (even one that would have
    # finished within the step); on the other nodes, jobs past their end finish.
    lost = s.job_active & down
    finished = s.job_active & (s.job_end <= t1) & ~down
    s.job_active = s.job_active & ~(lost | finished)
    s.alloc = s.alloc - np.where((finished | lost)[None], s.job_demand.astype(f32), 0).sum(1)
    # The background load is exogenous: its value at t1 was drawn a step ahead.
    s.bg_load = s.bg_next
    s.bg_next = _bg_move(s, s.bg_load, _unit_noise(w[:, 1]), t1 + f32(params.step_seconds),
                         params)
    s.up = ~down

    n_new = int((uniform(words(seed, _STREAM_ARRIVALS, (C.MAX_ARRIVALS,)))
                 < f32(params.arrival_rate) / f32(C.MAX_ARRIVALS)).sum())
    count = int(s.queue["valid"].sum())
    fit = min(n_new, k - count)
    for name in s.queue:
        s.queue[name][count:count + fit] = s.incoming[name][:fit]
    dropped = n_new - fit
    s.incoming = sample_requests(
        words(seed, _STREAM_REQUESTS, (C.MAX_ARRIVALS, NUM_REQUEST_WORDS)), params)

    m = _measure(s)
    u = uniform(words(seed, _STREAM_TWIN, (n, 3)))
    report = u[:, 0] < f32(params.twin_report_prob)
    e = _unit_noise(words(seed, _STREAM_TWIN, (n, 3))[:, 1:]) * f32(params.twin_noise)
    util = np.clip(m["util"] * (1 + e[:, 0]), 0, 1)
    mem_util = np.clip(m["mem_util"] * (1 + e[:, 0]), 0, 1)
    free = m["free"].copy()
    free[0] += s.capacity[0] * (m["util"] - util)
    free[1] += s.capacity[1] * (m["mem_util"] - mem_util)
    fresh = {"util": util, "mem_util": mem_util,
             "power": np.maximum(m["power"] * (1 + e[:, 1]), 0)}
    for name, v in fresh.items():
        s.twin[name] = np.where(report, v, s.twin[name])
    stale_free = s.twin["free"] - (s.alloc - alloc_before)   # own placements and releases
    s.twin["free"] = np.where(report, free, stale_free).astype(f32)
    # Free GPUs and disk, health and jobs: the scheduler's bookkeeping, always exact.
    s.twin["free"][2:] = m["free"][2:]
    s.twin["up"], s.twin["jobs"] = m["up"], m["jobs"]
    s.twin["age"] = np.where(report, 0, s.twin["age"] + 1).astype(f32)

    s.time, s.steps = float(t1), s.steps + 1
    truncated = s.steps >= params.episode_len
    info = {"optimal_action": opt, "regret": regret, "invalid_action": not valid,
            "placed": place, "deferred": defer, "dropped": dropped,
            "jobs_lost": int(lost.sum()), "completed": int(finished.sum()),
            "energy": float(energy[action]) if place else 0.0}
    if truncated and rng is not None:
        s = reset(rng, params)
    return s, -regret, truncated, info


def from_jax(state) -> State:
    """Convert a single (unbatched) `vte.EnvState` to the reference's `State`."""
    g = lambda x: np.array(x)  # noqa: E731
    cl, nd = state.cluster, state.nodes
    return State(
        mask=g(cl.mask), tier=g(cl.tier), capacity=g(cl.capacity), gpu_model=g(cl.gpu_model),
        labels=g(cl.labels), site=g(cl.site), speed=g(cl.speed), bandwidth=g(cl.bandwidth),
        power_idle=g(cl.power_idle), power_peak=g(cl.power_peak),
        failure_rate=g(cl.failure_rate), step_fail_prob=g(cl.step_fail_prob),
        bg_mean=g(cl.bg_mean), link_delay=g(cl.link_delay), bg_load=g(nd.bg_load),
        bg_next=g(nd.bg_next), up=g(nd.up),
        alloc=g(nd.alloc), job_active=g(nd.job_active), job_demand=g(nd.job_demand),
        job_end=g(nd.job_end),
        queue={name: g(getattr(state.queue, name)) for name in REQUEST_FIELDS},
        incoming={name: g(getattr(state.incoming, name)) for name in REQUEST_FIELDS},
        twin={name: g(getattr(state.twin, name)) for name in
              ("util", "mem_util", "free", "power", "up", "jobs", "age")},
        weights=g(state.weights), time=float(state.time), steps=int(state.steps))
