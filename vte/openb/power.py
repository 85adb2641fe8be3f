"""Power on the OpenB cluster: the PWR paper's model, its PWR policy and PWR+FGD mixes, and
its power measurement (OPENB.md section 11).

Reference: Lettich et al., "Power- and Fragmentation-aware Online Scheduling for GPU
Datacenters", IEEE/ACM CCGrid 2025, which adds a power model to the FGD experiment.

* Model: a GPU draws its busy power when any milli of it is allocated, its idle power only
  when all 1000 are free; CPUs are 16-core sockets (15 W idle, 120 W busy), two vCPUs per
  physical core. Node power = CPU + GPUs; the datacenter is the sum over all nodes (nothing
  is switched off). Integer watts, int32 (the whole trace's cluster is 1.47 MW at most).
* Policies: `pwr_fgd(a)` scores a * PWR + (1000 - a) * FGD, PWR being minus the power a
  placement adds, min-max rescaled to 0..100 over the feasible nodes; `pwr_fgd(1000)` is PWR
  alone. They have the signature of `vte.openb.policies`.
* Measurement: per-pod datacenter power (`simulator.replay(..., power=...)`) interpolated onto
  arrived demand x = 0, 0.005, ..., 1.0 (`curves_on_grid`), savings against FGD and the GPU
  resource allocation ratio (GRAR) at x = 1.0 (`summary`); the whole experiment, beside the
  paper's figures, is `vte.openb.lab.power_experiment`.

Everything on jax arrays is pure and works under `jit` and `vmap`.
"""

from __future__ import annotations

import functools
import math
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from vte.openb.cluster import MILLI, Pod, Spec, State, fitting_gpus, is_shared, least_sufficient
from vte.openb.policies import POLICIES, Policy, fgd, min_max

# The per-model table: memory (GiB), idle and busy ("max") watts of one GPU of each model of
# the trace (G2 is taken as an A10, G3 as an A100 of 40 GiB; G1 is on no node of the trace).
# The power model reads the watts; the model-agnostic observation (`vte.openb.env`, encoding
# "agnostic") reads all three, so a cluster of other GPU models needs only rows here: add them
# with `add_gpu_model` or `load_gpu_models` (a JSON file {model: {memory_gib, idle_w, max_w}}),
# or name such a file in the environment variable `GPU_MODELS_ENV` before the first look-up.
GPU_MODELS: dict[str, tuple[float, int, int]] = {
    "V100M16": (16, 30, 300), "V100M32": (32, 30, 300), "P100": (16, 25, 250),
    "T4": (16, 10, 70), "A10": (24, 30, 150), "G2": (24, 30, 150), "G3": (40, 50, 400)}
GPU_WATTS: dict[str, tuple[int, int]] = {m: (i, b) for m, (_, i, b) in GPU_MODELS.items()}
GPU_MODELS_ENV = "VTE_OPENB_GPU_MODELS"   # a JSON file of more models, read on first look-up
GPU_MODEL_FIELDS = ("memory_gib", "idle_w", "max_w")
_ENV_READ: list[str] = []


def add_gpu_model(name: str, memory_gib: float, idle_w: int, max_w: int) -> None:
    """Add (or replace) a GPU model of the per-model table: its memory in GiB and the watts
    of one GPU idle (all 1000 milli free) and busy (any milli allocated). ValueError on an
    empty name, memory <= 0, or watts that are not integers with 0 <= idle_w <= max_w."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"name={name!r} is invalid: allowed a non-empty model name")
    memory = float(memory_gib)
    if not (np.isfinite(memory) and memory > 0):
        raise ValueError(f"GPU model {name!r}: memory_gib={memory_gib!r} is invalid: allowed a "
                         "number > 0")
    if any(isinstance(w, bool) or int(w) != w for w in (idle_w, max_w)) or not \
            0 <= int(idle_w) <= int(max_w):
        raise ValueError(f"GPU model {name!r}: idle_w={idle_w!r}, max_w={max_w!r} are invalid: "
                         "allowed integer watts with 0 <= idle_w <= max_w")
    GPU_MODELS[name] = (memory, int(idle_w), int(max_w))
    GPU_WATTS[name] = (int(idle_w), int(max_w))


def load_gpu_models(path: str) -> list[str]:
    """Add every model of a JSON file `{model: {"memory_gib": .., "idle_w": .., "max_w": ..}}`
    to the per-model table (`add_gpu_model`); returns the names added. ValueError naming the
    file and the model on a missing or extra field or a bad value."""
    import json
    with open(path, encoding="utf-8") as f:
        try:
            table = json.load(f)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: not JSON ({err})") from None
    if not isinstance(table, dict):
        raise ValueError(f"{path}: allowed an object {{model: {{{', '.join(GPU_MODEL_FIELDS)}}}}}")
    for name, row in table.items():
        if not isinstance(row, dict) or set(row) != set(GPU_MODEL_FIELDS):
            raise ValueError(f"{path}: model {name!r} must give exactly "
                             f"{', '.join(GPU_MODEL_FIELDS)}; got {row!r}")
        try:
            add_gpu_model(name, **row)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{path}: {err}") from None
    return list(table)


def check_gpu_models(models: Sequence[str]) -> None:
    """ValueError, naming each model and how to add it, when a model of a node file
    (`NodeTable.models`) has no row in the per-model table (`GPU_MODELS`)."""
    import os
    extra = os.environ.get(GPU_MODELS_ENV)
    if extra and extra not in _ENV_READ:
        load_gpu_models(extra)
        _ENV_READ.append(extra)
    unknown = [m for m in models if m not in GPU_MODELS]
    if unknown:
        raise ValueError(
            f"GPU model(s) {', '.join(repr(m) for m in unknown)} are not in the per-model table "
            f"(known: {', '.join(sorted(GPU_MODELS))}): add each with "
            "vte.openb.power.add_gpu_model(name, memory_gib, idle_w, max_w), or list them in a "
            "JSON file {model: {\"memory_gib\": ..., \"idle_w\": ..., \"max_w\": ...}} given to "
            f"vte.openb.power.load_gpu_models(path) or named by ${GPU_MODELS_ENV}")


# The GPU models of the bundled node files (`NodeTable.models`, sorted): the vocabulary the
# registered power policies index by.
BUNDLED_MODELS = ("A10", "G2", "G3", "P100", "T4", "V100M16", "V100M32")
CORES_PER_SOCKET = 16         # Intel Xeon E5-2682 v4, taken for every node
SOCKET_IDLE_W = 15            # W of a socket with no busy core
SOCKET_BUSY_W = 120           # W of a socket with at least one busy core
CPU_MILLI_PER_CORE = 2000     # two vCPUs (2 x 1000 CPU milli) per physical core
WEIGHT_TOTAL = 1000           # w_PWR + w_FGD
GRID_STEP = 0.005             # the paper's x grid (arrived demand, share of the cluster's GPUs)
PLATEAU = (0.2, 0.8)          # the x range whose savings the paper calls the plateau
WHOLE = (0.2, 1.0)            # the plateau and the filling cluster: a reading that sees x > 0.8
READINGS = {"plateau": PLATEAU, "whole": WHOLE}   # the savings readings `summary` records


@struct.dataclass
class PowerModel:
    """The per-model table of a node file's GPU models, indexed like `NodeTable.models`
    (`Spec.model`): watts, and the memory the model-agnostic observation reads."""

    gpu_idle_w: jax.Array     # (M,) int32, W of a GPU with all 1000 milli free
    gpu_busy_w: jax.Array     # (M,) int32, W of a GPU with any milli allocated
    gpu_memory_gib: jax.Array | None = None   # (M,) float32, GiB of one GPU (None: unknown)


def power_model(models: Sequence[str]) -> PowerModel:
    """The per-model table of a node file's GPU models (`NodeTable.models`); ValueError
    naming a model the table lacks and how to add it (`check_gpu_models`)."""
    check_gpu_models(models)
    idle = [GPU_MODELS[m][1] for m in models] or [0]
    busy = [GPU_MODELS[m][2] for m in models] or [0]
    memory = [GPU_MODELS[m][0] for m in models] or [0.0]
    return PowerModel(gpu_idle_w=jnp.asarray(idle, jnp.int32),
                      gpu_busy_w=jnp.asarray(busy, jnp.int32),
                      gpu_memory_gib=jnp.asarray(memory, jnp.float32))


def _sockets(cpu_free: jax.Array, cpu_milli: jax.Array):
    """(busy cores, sockets, active sockets) of nodes, (...) each: cores = ceil(capacity /
    2000), idle cores = floor(free / 2000), busy = cores - idle, sockets = ceil(cores / 16),
    active = ceil(busy / 16)."""
    cores = -(-cpu_milli // CPU_MILLI_PER_CORE)
    busy = cores - cpu_free // CPU_MILLI_PER_CORE
    return busy, -(-cores // CORES_PER_SOCKET), -(-busy // CORES_PER_SOCKET)


def cpu_watts(cpu_free: jax.Array, cpu_milli: jax.Array) -> jax.Array:
    """(...) int32 W of a node's CPU sockets (`_sockets`): 120 W per active socket, 15 W per
    other one."""
    _, sockets, active = _sockets(cpu_free, cpu_milli)
    return (SOCKET_BUSY_W * active + SOCKET_IDLE_W * (sockets - active)).astype(jnp.int32)


def socket_slack(state: State, pod: Pod, spec: Spec) -> jax.Array:
    """(N,) int32 in [0, 15]: the idle cores left in each node's active sockets if `pod` were
    placed there, 16 x active - busy (`_sockets`). The fewer, the fuller the sockets already
    paid for, and the more room stays in whole idle sockets. Meaningless on infeasible nodes."""
    busy, _, active = _sockets(state.cpu_free - pod.cpu_milli, spec.cpu_milli)
    return (CORES_PER_SOCKET * active - busy).astype(jnp.int32)


def _node_gpu_w(spec: Spec, power: PowerModel) -> tuple[jax.Array, jax.Array]:
    """(N,) int32 idle and busy W of one GPU of each node's model (0 without GPUs)."""
    model = jnp.maximum(spec.model, 0)
    has = spec.model >= 0
    return (jnp.where(has, power.gpu_idle_w[model], 0), jnp.where(has, power.gpu_busy_w[model], 0))


def gpu_watts(gpu_free: jax.Array, gpu_exists: jax.Array, idle_w: jax.Array,
              busy_w: jax.Array) -> jax.Array:
    """(G, ...) int32 W of each GPU slot: busy when any milli is allocated, idle when all
    1000 are free, 0 on a missing slot; `idle_w`, `busy_w` (...) per node."""
    return jnp.where(gpu_exists, jnp.where(gpu_free < MILLI, busy_w, idle_w), 0).astype(jnp.int32)


def node_power(state: State, spec: Spec, power: PowerModel) -> tuple[jax.Array, jax.Array]:
    """((N,) int32, (N,) int32): each node's CPU and GPU watts in `state`."""
    idle_w, busy_w = _node_gpu_w(spec, power)
    gpu = jnp.sum(gpu_watts(state.gpu_free, spec.gpu_exists, idle_w, busy_w), axis=0)
    return cpu_watts(state.cpu_free, spec.cpu_milli), gpu


def datacenter_power(state: State, spec: Spec, power: PowerModel) -> tuple[jax.Array, jax.Array]:
    """(() int32, () int32): the cluster's CPU and GPU watts (every node, idle ones too)."""
    cpu, gpu = node_power(state, spec, power)
    return jnp.sum(cpu), jnp.sum(gpu)


def power_increase(state: State, pod: Pod, spec: Spec, power: PowerModel,
                   shared_gpu: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
    """((N,) int32 W, (N,) int32 GPU): what placing `pod` on each node would add to its power.

    A shared pod tries every GPU with room and keeps the least increase (lowest index on
    ties), returned second, or takes the given `shared_gpu` (N,) int32 (another rule's
    choice); other pods take their least sufficient GPUs (the idle ones of lowest index for
    whole GPUs), as `cluster.place` does. Meaningless on infeasible nodes."""
    idle_w, busy_w = _node_gpu_w(spec, power)
    exists, free = spec.gpu_exists, state.gpu_free
    before = gpu_watts(free, exists, idle_w, busy_w)                     # (G, N)
    cpu_add = cpu_watts(state.cpu_free - pod.cpu_milli, spec.cpu_milli) - cpu_watts(
        state.cpu_free, spec.cpu_milli)
    # Shared pod on GPU i: only GPU i changes.
    per_gpu = gpu_watts(free - pod.gpu_milli, exists, idle_w, busy_w) - before
    big = jnp.iinfo(jnp.int32).max
    per_gpu = jnp.where(fitting_gpus(free, pod.gpu_milli), per_gpu, big)
    if shared_gpu is None:
        shared_gpu = jnp.argmin(per_gpu, axis=0).astype(jnp.int32)
    shared_add = jnp.take_along_axis(per_gpu, shared_gpu[None], axis=0)[0]
    take = least_sufficient(free, pod.gpu_milli, pod.num_gpus) & (pod.num_gpus > 0)
    after = gpu_watts(free - jnp.where(take, pod.gpu_milli, 0), exists, idle_w, busy_w)
    other_add = jnp.sum(after - before, axis=0)
    gpu_add = jnp.where(is_shared(pod), jnp.where(shared_add == big, 0, shared_add), other_add)
    return (cpu_add + gpu_add).astype(jnp.int32), shared_gpu


def max_increase(pod: Pod, power: PowerModel) -> jax.Array:
    """() int32 W, at least what placing `pod` adds to any node that fits it (every entry of
    `power_increase`): each of its GPUs woken from idle to busy at the models' largest
    busy - idle gap, and one more busy socket (120 - 15 W) per 16 of the cores it takes
    (ceil(cpu_milli / 2000) at most, the cores whose floor(free / 2000) it can lower)."""
    cores = -(-pod.cpu_milli // CPU_MILLI_PER_CORE)
    sockets = -(-cores // CORES_PER_SOCKET)
    gpu_gap = jnp.max(power.gpu_busy_w - power.gpu_idle_w)
    return ((SOCKET_BUSY_W - SOCKET_IDLE_W) * sockets + pod.num_gpus * gpu_gap).astype(jnp.int32)


def pwr_score(state: State, pod: Pod, feasible: jax.Array, spec: Spec,
              power: PowerModel) -> tuple[jax.Array, jax.Array]:
    """PWR: ((N,) int32 in 0..100, (N,) int32 GPU). Raw = minus the watts the placement adds,
    min-max rescaled over the feasible nodes; all 100 when every feasible node adds the same."""
    increase, shared_gpu = power_increase(state, pod, spec, power)
    return min_max(-increase, feasible, 100), shared_gpu


def _weight(a) -> int:
    """The PWR weight a of a mix, checked: ValueError unless an integer in [0, 1000]."""
    if isinstance(a, bool) or not isinstance(a, (int, np.integer)) or not 0 <= a <= WEIGHT_TOTAL:
        raise ValueError(f"a={a!r}: the PWR weight must be an integer in [0, {WEIGHT_TOTAL}]")
    return int(a)


def _combine(a, pwr: jax.Array, pwr_gpu: jax.Array, other: jax.Array, other_gpu: jax.Array):
    """(a x PWR + (1000 - a) x other, the GPU of the larger weight, the other's on a tie):
    the one rule of every PWR mix (`mix_scores`, `pwr_with`)."""
    gpu = jnp.where(a > WEIGHT_TOTAL - a, pwr_gpu, other_gpu)
    return a * pwr + (WEIGHT_TOTAL - a) * other, gpu


def pwr_fgd(a: int, models: Sequence[str] = BUNDLED_MODELS) -> Policy:
    """The replay policy scoring a x PWR + (1000 - a) x FGD (`-PWR a -FGD 1000-a`), integers.

    a = 1000 is PWR alone, a = 0 FGD alone. A shared pod's GPU is that of the larger
    weight, FGD's on a tie (a <= 500). `models`: the node file's GPU models
    (`NodeTable.models`), which give each node its GPU watts. The same function (one
    compiled replay) for the same (a, models)."""
    return _mix(_weight(a), tuple(models))


def mix_scores(a: jax.Array, key, state: State, pod: Pod, feasible: jax.Array, spec: Spec,
               power: PowerModel) -> tuple[jax.Array, jax.Array]:
    """((N,) int32 scores, (N,) int32 GPU) of the mix a x PWR + (1000 - a) x FGD for an
    integer weight `a` that may be traced (e.g. `preference_weight` of an episode's
    preference); the GPU is PWR's when a > 500, else FGD's."""
    a = jnp.asarray(a, jnp.int32)
    pwr, pwr_gpu = pwr_score(state, pod, feasible, spec, power)
    frag, fgd_gpu = fgd(key, state, pod, feasible, spec)
    scores, gpu = _combine(a, pwr, pwr_gpu, frag, fgd_gpu)
    return scores.astype(jnp.int32), gpu


def _base_rescaled(scores: jax.Array, feasible: jax.Array) -> jax.Array:
    """(N,) float32: a base policy's scores min-max rescaled to [0, 100] over the feasible
    nodes (`min_max`, 100 when they score alike), 0 on the infeasible ones, where a
    network's masked logits would rescale to -inf."""
    return jnp.where(feasible, min_max(jnp.asarray(scores, jnp.float32), feasible, 100), 0.0)


def pwr_with(base: Policy, a: int, models: Sequence[str] = BUNDLED_MODELS) -> Policy:
    """The PWR+FGD combination with any base policy in FGD's place: a x PWR + (1000 - a) x S,
    S the base's scores min-max rescaled to [0, 100] over the feasible nodes in float32
    (100 everywhere when they score alike), as PWR's raw score is rescaled; the node of the
    best, ties to the smallest rank as every policy's. A shared pod takes the base's GPU,
    PWR's when a > 500. At a = 0 it keeps the base's order (rescaling is increasing), at
    a = 1000 it is PWR. E.g. `base` a trained network at preference 0
    (`network.as_policy`), whose logits have no fixed scale: its learned allocation traded
    against PWR's watts (OPENB.md section 11). Raises ValueError for a weight outside the
    integers 0..1000."""
    a, table = _weight(a), power_model(models)

    def policy(key, state: State, pod: Pod, feasible: jax.Array, spec: Spec):
        scores, base_gpu = base(key, state, pod, feasible, spec)
        rescaled = _base_rescaled(scores, feasible)
        pwr, pwr_gpu = pwr_score(state, pod, feasible, spec, table)
        return _combine(a, pwr, pwr_gpu, rescaled, base_gpu)

    return policy


def _margin(margin, name: str = "margin") -> float:
    """A margin of `pwr_within`, checked: ValueError unless a number >= 0 (inf allowed)."""
    if (isinstance(margin, bool) or not isinstance(margin, (int, float, np.integer, np.floating))
            or math.isnan(margin) or margin < 0):
        raise ValueError(f"{name}={margin!r} is invalid: allowed a number >= 0 in the base's "
                         "score units (inf: PWR with the base's order on its ties)")
    return float(margin)


def _switch_at(switch_at) -> float | None:
    """The arrived demand of `pwr_within`'s switch, checked: None, or a finite number > 0."""
    if switch_at is None:
        return None
    if (isinstance(switch_at, bool)
            or not isinstance(switch_at, (int, float, np.integer, np.floating))
            or not math.isfinite(switch_at) or switch_at <= 0):
        raise ValueError(f"switch_at={switch_at!r} is invalid: allowed None (no switch) or a "
                         "finite number > 0, the arrived GPU demand as a share of the "
                         "cluster's GPUs (e.g. 0.8)")
    return float(switch_at)


def parse_switch(text: str) -> tuple[float, float]:
    """(switch_at, late_margin) of the text "x/m" (e.g. "0.8/8"), checked by `pwr_within`'s
    own rules; ValueError otherwise (the callers name the flag or policy it came from)."""
    x, slash, late = text.partition("/")
    if not slash:
        raise ValueError(f"{text!r}: allowed x/m")
    return _switch_at(float(x)), _margin(float(late), "late_margin")


def pwr_within(base: Policy, margin: float, models: Sequence[str] = BUNDLED_MODELS, *,
               switch_at: float | None = None, late_margin: float = 0.0,
               fill_sockets: bool = False) -> Policy:
    """PWR among the base policy's near-best nodes: the candidates are the feasible nodes
    whose base score is at most `margin` below the best feasible one; the choice is the
    candidate of the best PWR score (`pwr_score`, min-max rescaled over the candidates),
    ties to the best base score, then the smallest rank. The base decides what is worth
    placing where, PWR picks the cheapest in watts of what the base finds about as good.

    scores: (N,) float32, PWR x 1000 + the base's scores min-max rescaled to [0, 100] over
    the feasible nodes on a candidate (the base's order on PWR's ties, to float32's
    resolution of about 0.01 of that range), -1 on every other node; shared_gpu: the
    base's. margin 0: the base's node (PWR only breaks its exact ties); inf: PWR, its ties
    to the base. `margin` is in the base's score units: nats of a network's logits
    (`network.as_policy`), points of a published 0..100 score.

    switch_at (share of the cluster's GPU milli, > 0; None: never): once the GPU demand
    arrived so far (`State.arrived`, failed pods included: what any scheduler has seen)
    reaches switch_at x the cluster's GPU milli, the margin is `late_margin` instead, so
    PWR saves watts while the cluster has room and the base packs as the cluster fills
    (e.g. switch_at 0.8, late_margin 8). OPENB.md section 11.

    fill_sockets: PWR's ties among the candidates go first to the node whose active sockets
    the pod leaves the fewest idle cores (`socket_slack`), then to the base: score
    (PWR x 16 + 15 - slack) x 128 + the base's rescaled score. Raises ValueError on a margin
    or late_margin that is negative or not a number, or a switch_at that is not None or a
    finite number > 0."""
    margin, table = _margin(margin), power_model(models)
    switch, late = _switch_at(switch_at), _margin(late_margin, "late_margin")

    def policy(key, state: State, pod: Pod, feasible: jax.Array, spec: Spec):
        scores, base_gpu = base(key, state, pod, feasible, spec)
        scores = jnp.asarray(scores, jnp.float32)
        m = jnp.float32(margin)
        if switch is not None:           # float32: exact up to 2^24 milli (16,777 GPUs)
            capacity = jnp.maximum(jnp.asarray(spec.total_gpu_milli, jnp.float32), 1.0)
            reached = state.arrived.astype(jnp.float32) >= jnp.float32(switch) * capacity
            m = jnp.where(reached, jnp.float32(late), m)
        best = jnp.max(jnp.where(feasible, scores, -jnp.inf))
        candidate = feasible & (scores >= best - m)
        pwr, _ = pwr_score(state, pod, candidate, spec, table)
        order = _base_rescaled(scores, feasible)
        if fill_sockets:       # float32: (100 x 16 + 15) x 128 + 100 < 2^18, steps of 1/64
            key = pwr * CORES_PER_SOCKET + (CORES_PER_SOCKET - 1) - socket_slack(state, pod, spec)
            return jnp.where(candidate, key.astype(jnp.float32) * 128.0 + order, -1.0), base_gpu
        return jnp.where(candidate, pwr.astype(jnp.float32) * 1000.0 + order, -1.0), base_gpu

    return policy


def preference_weight(w: jax.Array) -> jax.Array:
    """() int32: the PWR weight a = round(1001^w - 1) in [0, 1000] of a power preference w in
    [0, 1]: FGD at w = 0, PWR at w = 1, log-spaced between (w = 0.5: a = 31; w = 0.75:
    a = 177), so the preferences cover the FGD-heavy mixes the paper compares
    (a = 25..200) as densely as the power-heavy ones."""
    a = jnp.round(jnp.power(jnp.float32(WEIGHT_TOTAL + 1), jnp.clip(w, 0.0, 1.0)) - 1.0)
    return jnp.clip(a, 0, WEIGHT_TOTAL).astype(jnp.int32)


@functools.lru_cache(maxsize=None)
def _mix(a: int, models: tuple[str, ...]) -> Policy:
    table = power_model(models)

    def policy(key, state: State, pod: Pod, feasible: jax.Array, spec: Spec):
        if a == 0:
            return fgd(key, state, pod, feasible, spec)
        if a == WEIGHT_TOTAL:
            pwr, pwr_gpu = pwr_score(state, pod, feasible, spec, table)
            return a * pwr, pwr_gpu
        return mix_scores(a, key, state, pod, feasible, spec, table)

    policy.__name__ = policy.__qualname__ = "pwr" if a == WEIGHT_TOTAL else f"pwr_fgd_{a}"
    return policy


def policy_name(a: int) -> str:
    """The registered name of `pwr_fgd(a)`: "pwr" for 1000, else "pwr_fgd:<a>"."""
    return "pwr" if a == WEIGHT_TOTAL else f"pwr_fgd:{a}"


def parse_name(name: str) -> int | None:
    """The PWR weight a of a power policy's name ("pwr", "pwr_fgd:<a>" with an integer a in
    [0, 1000]); None for another name; ValueError for a "pwr_fgd:" with a bad weight."""
    if name == "pwr":
        return WEIGHT_TOTAL
    if not name.startswith("pwr_fgd:"):
        return None
    text = name.split(":", 1)[1]
    if not text.isdigit() or not 0 <= int(text) <= WEIGHT_TOTAL:
        raise ValueError(f"policy {name!r}: the weight after 'pwr_fgd:' must be an integer in "
                         f"[0, {WEIGHT_TOTAL}] (the PWR weight a of a x PWR + (1000 - a) x FGD)")
    return int(text)


# ---------------------------------------------------------------- measurement (NumPy)

def grid(top: float = 1.0, step: float = GRID_STEP) -> np.ndarray:
    """(X,) float64: x = 0, step, ..., top (arrived GPU demand, share of the cluster's GPUs)."""
    if not (step > 0 and top > 0):
        raise ValueError(f"step={step}, top={top}: both must be > 0")
    return np.round(np.arange(0.0, top + step / 2, step), 10)


def on_grid(arrived: np.ndarray, values: np.ndarray, valid: np.ndarray, capacity: int,
            xs: np.ndarray) -> np.ndarray:
    """(X,) float64: one run's per-pod `values` as a function of x = arrived / capacity,
    interpolated linearly onto `xs`; of events with the same x the first is kept, and x
    outside the events take the nearest event's value (the paper's protocol)."""
    x = np.asarray(arrived, np.float64)[valid] / capacity
    v = np.asarray(values, np.float64)[valid]
    if len(x) == 0:
        raise ValueError("on_grid: the run has no submitted pod")
    x, first = np.unique(x, return_index=True)           # sorted; arrived never decreases
    return np.interp(xs, x, v[first])


def curves_on_grid(log, capacity: int, top: float = 1.0, step: float = GRID_STEP) -> dict:
    """Per seed, (S, X) float64 on x = `grid(top, step)`: datacenter power `power`, its `cpu`
    and `gpu` parts (W), the allocated milli-GPU `used` and the pods failed so far `failed`
    (0 where every pod that arrived was placed); `x` (X,). `log` is a
    `simulator.Log` of a replay with `power=`."""
    if log.power_cpu is None:
        raise ValueError("the log has no power: replay with power=power_model(nodes.models)")
    xs = grid(top, step)
    seeds = range(log.valid.shape[0])

    def each(values):
        return np.stack([on_grid(log.arrived[s], values[s], log.valid[s], capacity, xs)
                         for s in seeds])
    cpu, gpu = each(log.power_cpu), each(log.power_gpu)
    failed = np.cumsum(log.valid & ~log.placed, axis=1)
    return {"x": xs, "power": cpu + gpu, "cpu": cpu, "gpu": gpu, "used": each(log.used),
            "failed": each(failed)}


def summary(curves: dict[str, dict], capacity: int, reference: str = "fgd",
            readings: dict[str, tuple[float, float]] = READINGS) -> dict:
    """The paper's figures per policy from `curves_on_grid` results (name -> curves): seed-mean
    power (W) on x, GRAR at the last x (mean allocated / mean arrived milli-GPU), power at
    the last x (MW, CPU part too) and, against `reference`, savings (P_ref - P) / P_ref x 100
    on x, their min, mean and max over each reading's x range (name -> (low, high); by
    default the plateau, x 0.2..0.8, `savings_plateau_pct`, and the whole reading,
    x 0.2..1.0, which also sees the cluster filling up, `savings_whole_pct`) and their value
    at the last x; and per seed, each reading's mean savings and the savings at the last x
    against the reference's replay of the same seed (`savings_<reading>_per_seed_pct`,
    `savings_at_end_per_seed_pct`: the seed-by-seed readings of the front)."""
    if reference not in curves:
        raise ValueError(f"reference={reference!r} is not among the policies {sorted(curves)}")
    ref_seeds = curves[reference]["power"]
    ref = ref_seeds.mean(axis=0)
    out = {}
    for name, c in curves.items():
        xs, mean = c["x"], c["power"].mean(axis=0)
        saving = (ref - mean) / ref * 100
        seed_saving = (ref_seeds - c["power"]) / ref_seeds * 100           # (S, X)
        out[name] = {
            "x": xs.tolist(), "power_w": np.round(mean, 1).tolist(),
            "savings_pct": np.round(saving, 3).tolist(),
            "grar": round(float(c["used"][:, -1].mean() / (xs[-1] * capacity)), 4),
            "grar_per_seed": np.round(c["used"][:, -1] / (xs[-1] * capacity), 4).tolist(),
            "power_mw_at_end": round(float(mean[-1]) / 1e6, 4),
            "cpu_mw_at_end": round(float(c["cpu"].mean(axis=0)[-1]) / 1e6, 4),
            "savings_at_end_pct": round(float(saving[-1]), 2),
            "savings_at_end_per_seed_pct": np.round(seed_saving[:, -1], 2).tolist(),
        }
        for reading, (low, high) in readings.items():
            within = (xs >= low - 1e-9) & (xs <= high + 1e-9)
            out[name][f"savings_{reading}_pct"] = {
                stat: round(float(f(saving[within])), 2)
                for stat, f in (("min", np.min), ("mean", np.mean), ("max", np.max))}
            out[name][f"savings_{reading}_per_seed_pct"] = \
                np.round(seed_saving[:, within].mean(axis=1), 2).tolist()
    return out


# The PWR paper's policies on the bundled node files: PWR alone and its PWR+FGD mixes.
PAPER_WEIGHTS = (1000, 500, 300, 200, 100, 50, 25)
POWER_POLICIES: dict[str, Policy] = {policy_name(a): pwr_fgd(a) for a in PAPER_WEIGHTS}


def policy_by_name(name: str, models: Sequence[str] | None = None) -> Policy:
    """A published policy of `policies.POLICIES`, or a power policy: "pwr" or "pwr_fgd:<a>"
    (`pwr_fgd(a)`, a integer in [0, 1000]), whose watts follow the node file's GPU `models`
    (`NodeTable.models`; default: the bundled files'). ValueError naming the name otherwise."""
    if name in POLICIES:
        return POLICIES[name]
    a = parse_name(name)
    if a is None:
        raise ValueError(f"unknown policy {name!r}; known: {list(POLICIES)}, 'pwr' and "
                         f"'pwr_fgd:<a>' with an integer a in [0, {WEIGHT_TOTAL}]")
    return pwr_fgd(a, BUNDLED_MODELS if models is None else models)
