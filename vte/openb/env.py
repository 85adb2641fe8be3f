"""The OpenB replay as a reinforcement-learning environment, with vte's API.

    params = make_params(nodes, pods, seeds=range(100))            # a bank of workloads
    obs, state = reset(key, params)
    obs, state, reward, terminated, truncated, info = step(key, state, action, params)

One decision per arriving pod. The action is a node index in [0, N) (masked by the
filter of OPENB.md section 3) or N, "cannot place", the only valid action when no node
fits. The GPU inside the chosen node follows a fixed rule (`GPU_RULE`): whole-GPU pods
take their least sufficient GPUs, a shared pod takes the fitting GPU that FGD would take
(the least fragmentation, lowest index on ties), so choosing FGD's node reproduces FGD.

The environment is `OpenBEnv` (`vte.make("OpenB-v0", pods="default", subset=64)`), on
the protocol of `vte.environment`, which owns the action checks and the auto-reset.

Reward: the GPUs the decision allocated (num_gpu x gpu_milli / 1000 when placed, else 0),
so an episode's return is the GPUs allocated at its end, the published metric; with a
power preference w in [0, 1] (0 by default; drawn per episode in [`power_weight`,
`power_weight` + `power_weight_spread`], shown in the observation), (1 - w) x GPUs - w x the
kW the placement added to the datacenter (the PWR paper's power model, `vte.openb.power`).
`info` reports each decision's added watts and the datacenter's watts. An invalid
action (a node the filter rejects, "cannot place" while some node fits, or an index
outside [0, N]) fails the pod, changes nothing else and is penalised by
`invalid_penalty` below the worst valid action's reward, capped at 0 (so -`invalid_penalty`
when w = 0; for a state whose w was set above 0 by hand under params that allow none, below
a lower bound of that worst: OPENB.md section 10). An episode ends (terminated) after its
workload's last pod; `step` then resets to a fresh workload (drawn with
`vte.environment.reset_key(key)`, only in steps where some environment is done) and
returns the last observation in
`info["final_observation"]` (gymnax 1.0 semantics).

Workloads come from a bank built once in NumPy (`make_params`, section 2 of OPENB.md,
one per seed); `reset` draws one uniformly. With `subset=n` each workload runs on n nodes
drawn at random from the trace's, its GPU demand tuned to that sub-cluster (the workload
is scaled in proportion), so training runs fast while the policy, equivariant over nodes,
still applies to the full cluster. All functions are pure, jit- and vmap-able.
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from vte.environment import (Column, Environment, FieldSpec, concrete_extreme, field_spec,
                             round_outward)
from vte.openb import cluster
from vte.openb.cluster import Pod, Spec, State
from vte.openb.policies import CPU_NORM, Policy, fgd_gain, fgd_score, min_max
from vte.openb.power import (BUNDLED_MODELS, PowerModel, cpu_watts, datacenter_power,
                             max_increase, power_increase, power_model)
from vte.openb.trace import MAX_GPUS_PER_NODE, MILLI, NodeTable, PodTable
from vte.openb.workload import build_workload, pod_arrays, typical_pods, typical_union

GPU_RULE = "fgd"          # a shared pod's GPU: FGD's (least fragmentation, lowest index on ties)
MEM_NORM = 1 << 20        # MiB: 1 TiB, the largest node of the trace
BASE_NODE_FEATURES = 16   # node features before the GPU-model ones (`Observation.nodes`)
AGNOSTIC, ONEHOT = "agnostic", "onehot"
ENCODINGS = (AGNOSTIC, ONEHOT)   # how a node's GPU model enters the observation (`observe`):
                          # agnostic (the default): 4 columns read off the per-model table
                          # (`power.GPU_MODELS`), whatever the models; onehot: one column per
                          # model of the node file and the pod's allowed models (M bits),
                          # the encoding of runs saved before the field existed
GPU_FEATURES = 4          # the agnostic encoding's node columns (`GPU_COLUMNS`)
GIB_NORM = 100.0          # GiB: a GPU's memory / 100 (an 80 GiB H100: 0.8)
WATT_NORM = 1000.0        # W: a GPU's idle and busy watts / 1000
KW = 1000.0               # W per kW, the power term's unit in the reward
FGD_GAIN, FGD_SCORE, RANK = range(BASE_NODE_FEATURES - 3, BASE_NODE_FEATURES)
                          # the last three base columns of `Observation.nodes` (`observe`)


@struct.dataclass
class OpenBParams:
    """The workload bank and the scoring of invalid actions."""

    nodes: Spec              # (W, N) per field: each workload's cluster (typical: (K,), shared;
                             # for several traces the union of their shapes, `typical_weight`)
    pods: Pod                # (W, T) per field: each workload's pods in submission order, padded
    ranks: jax.Array         # (W, N) int32, tie-break ranks (used by the published policies)
    length: jax.Array        # (W,) int32, pods in each workload
    empty_frag: jax.Array    # (W, N) float32, milli-GPU, each empty node's fragmentation (so
                             # that a reset, which `step` runs every step, costs gathers only)
    invalid_penalty: jax.Array = struct.field(default_factory=lambda: jnp.float32(1.0))  # GPUs
    power: PowerModel = struct.field(default_factory=lambda: power_model(BUNDLED_MODELS))
                             # (M,) W per idle and busy GPU of each model (`power_model`)
    power_weight: jax.Array = struct.field(default_factory=lambda: jnp.float32(0.0))
                             # () float32 in [0, 1], the reward's preference for power over
                             # GPUs (the lowest one when `power_weight_spread` > 0)
    power_weight_spread: jax.Array = struct.field(default_factory=lambda: jnp.float32(0.0))
                             # () float32 >= 0: each episode draws its preference uniformly
                             # in [power_weight, power_weight + spread] (0: power_weight)
    frag_shaping: jax.Array = struct.field(default_factory=lambda: jnp.float32(0.0))
                             # () float32 >= 0, GPUs of reward per GPU of fragmentation a
                             # placement removes (FGD's gain at the chosen node; 0: none)
    typical_weight: jax.Array | None = None
                             # (W, K) int32, a bank of several traces: each workload's own
                             # trace's typical-pod counts on the shared shapes of
                             # `nodes.typical` (`workload.typical_union`); None for one trace
    typical_prob: jax.Array | None = None
                             # (W, K) float32, those counts / their sum (None for one trace)
    num_models: int = struct.field(pytree_node=False, default=1)   # GPU models (one-hot width)
    encoding: str = struct.field(pytree_node=False, default=AGNOSTIC)
                             # how the observation encodes GPU models (`ENCODINGS`)

    @property
    def num_nodes(self) -> int:
        return int(self.nodes.cpu_milli.shape[-1])

    @property
    def num_workloads(self) -> int:
        return int(self.length.shape[0])

    @property
    def max_steps_in_episode(self) -> int:
        """Decisions in the longest workload of the bank (the padded length; an episode
        terminates after its own workload's last pod), the name gymnax-based code reads."""
        return int(self.pods.valid.shape[1])


@struct.dataclass
class EnvState:
    """One episode: a workload of the bank replayed on its cluster. Named as in every vte
    environment: `cluster` the static instance, `nodes` the dynamic state, `steps` the
    decisions taken."""

    cluster: Spec            # (N,) per field, this episode's nodes (static)
    nodes: State             # the GPU-sharing cluster's dynamic state (its `rank` is the
                             # workload's)
    workload: jax.Array      # () int32, index into the bank
    steps: jax.Array         # () int32, decisions taken = index of the pod to decide
    failed: jax.Array        # () int32, pods that failed so far
    invalid: jax.Array       # () int32, invalid actions so far
    power_weight: jax.Array = struct.field(default_factory=lambda: jnp.float32(0.0))
                             # () float32 in [0, 1], this episode's preference (`OpenBParams`)


@struct.dataclass
class Observation:
    """What a real scheduler sees: the nodes, the pod to place, the arrived share."""

    nodes: jax.Array         # (N, 16 + E) float32, per node: free CPU / 128 cores, free memory
                             # / 1 TiB, free milli of each of the 8 GPU slots / 1000 (0 on a
                             # missing slot), GPUs / 8, pods / 1001, allocated GPU share,
                             # FGD's fragmentation gain of placing the pod there / 1000
                             # (GPUs; `policies.fgd_gain`), FGD's published score / 100, the
                             # node's tie-break rank / (N - 1) (the scheduler's own random
                             # order, which the published policies break ties by), then
                             # the GPU model (`ENCODINGS`): agnostic, E = 4: the pod may use
                             # this node's GPUs (its model list allows the node's model or
                             # names none), one GPU's memory / 100 GiB, idle and busy watts
                             # / 1000 (the per-model table, `power.GPU_MODELS`; 0 without
                             # GPUs); onehot, E = M: a one-hot of the node file's M models
    pod: jax.Array           # (5,) float32 (agnostic) or (5 + M,) (onehot): CPU / 128 cores,
                             # memory / 1 TiB, GPUs / 8, milli per GPU / 1000, shared (1 GPU <
                             # 1000 milli); onehot adds the allowed models (M bits; all 1
                             # when any model)
    progress: jax.Array      # () float32, arrived GPU demand / the cluster's GPUs
    action_mask: jax.Array   # (N + 1,) bool, feasible nodes; the last ("cannot place") is
                             # True exactly when no node is feasible
    preference: jax.Array = struct.field(default_factory=lambda: jnp.float32(0.0))
                             # () float32, the episode's power weight w of the reward
    power: jax.Array | None = None
                             # (N, 2) float32, per node: the kW placing the pod there adds
                             # with the least-power GPU (PWR's raw score, negated; 0 where
                             # the pod does not fit) and PWR's min-max score / 100
                             # (`power.pwr_score`)


def make_params(nodes: NodeTable, pods: PodTable | Sequence[PodTable], seeds: Sequence[int],
                tune: float = 1.3, subset: int | None = None, invalid_penalty: float = 1.0,
                power_weight: float | tuple[float, float] = 0.0,
                frag_shaping: float = 0.0, encoding: str = AGNOSTIC) -> OpenBParams:
    """A bank of one workload per seed (OPENB.md section 2), on the full cluster or on a
    random `subset` of its nodes (demand tuned to that sub-cluster's GPUs). `pods`: one
    trace's pod table, or several (each read against `nodes`): then the bank holds one
    workload per (trace, seed), trace by trace (workload i x len(seeds) + j is trace i's
    seed j), and each workload's FGD measure, observation and planner futures use its own
    trace's typical pods (`typical_weight`; OPENB.md section 10). `power_weight`
    in [0, 1] weighs the kW a decision adds against its GPUs in the reward (a scalar of the
    params: `params.replace(power_weight=...)` and `jax.vmap` over it work too), or a range
    (low, high) with 0 <= low <= high <= 1 from which each episode draws its own.
    `frag_shaping` c >= 0 adds c x the fragmentation a placement removes (GPUs, FGD's gain
    at the chosen node; negative where it adds some) to its reward (OPENB.md section 10).
    `encoding`: how the observation encodes GPU models (`ENCODINGS`; every model of the node
    file needs a row of the per-model table, `power.GPU_MODELS`, checked first)."""
    check_encoding(encoding)
    watts = power_model(nodes.models)        # ValueError naming a model the table lacks
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ValueError("seeds is empty: give at least one seed")
    tables = [pods] if isinstance(pods, PodTable) else list(pods)
    if not tables or not all(isinstance(t, PodTable) for t in tables):
        raise ValueError(f"pods={pods!r} is invalid: allowed a PodTable or a non-empty "
                         "sequence of PodTables (vte.openb.load_pods)")
    if subset is not None and not 1 <= subset <= len(nodes):
        raise ValueError(f"subset={subset} is invalid: allowed 1..{len(nodes)} nodes")
    if not np.isfinite(invalid_penalty) or invalid_penalty < 0:
        raise ValueError(f"invalid_penalty={invalid_penalty} is invalid: allowed a finite number >= 0")
    if not np.isfinite(frag_shaping) or frag_shaping < 0:
        raise ValueError(f"frag_shaping={frag_shaping} is invalid: allowed a finite number >= 0")
    low, high = (power_weight, power_weight) if np.ndim(power_weight) == 0 else power_weight
    if not (np.isfinite(low) and np.isfinite(high) and 0.0 <= low <= high <= 1.0):
        raise ValueError(f"power_weight={power_weight} is invalid: allowed a number in [0, 1] "
                         "or a range (low, high) with 0 <= low <= high <= 1")
    if len(tables) == 1:
        typical, counts, probs = typical_pods(tables[0]), None, None
        own = [typical]
    else:
        typical, counts = typical_union(tables)       # (traces, K) counts
        probs = counts / counts.sum(axis=1, keepdims=True)
        own = [typical.replace(prob=jnp.asarray(p, jnp.float32), weight=jnp.asarray(c, jnp.int32))
               for c, p in zip(counts, probs)]
    specs, works = [], []
    for table_pods, typ in zip(tables, own):
        works.append([])
        for seed in seeds:
            table = nodes
            if subset is not None and subset < len(nodes):
                table = _gpu_subset(nodes, subset, seed)
            specs.append(cluster.make_spec(table, typ))
            works[-1].append(build_workload(table_pods, table, seed, tune))
    longest = max(len(w.order) for per in works for w in per)
    pod_bank = jax.tree_util.tree_map(lambda *x: jnp.concatenate(x), *[
        pod_arrays(t, per, longest) for t, per in zip(tables, works)])
    works = [w for per in works for w in per]
    stacked = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *[s.replace(typical=None) for s in specs])
    empty = jnp.stack([cluster.empty_state(s, np.zeros(len(s.cpu_milli), np.int32)).frag for s in specs])
    def per_workload(rows, dtype):                 # a trace's row for each of its seeds
        return None if rows is None else jnp.asarray(np.repeat(rows, len(seeds), axis=0), dtype)
    return OpenBParams(
        nodes=stacked.replace(typical=typical), pods=pod_bank,
        ranks=jnp.asarray(np.stack([w.rank for w in works])),
        length=jnp.asarray([len(w.order) for w in works], jnp.int32), empty_frag=empty,
        invalid_penalty=jnp.float32(invalid_penalty), power=watts,
        power_weight=jnp.float32(low), power_weight_spread=jnp.float32(high - low),
        frag_shaping=jnp.float32(frag_shaping),
        typical_weight=per_workload(counts, jnp.int32), typical_prob=per_workload(probs, jnp.float32),
        num_models=max(len(nodes.models), 1), encoding=encoding)


def check_encoding(encoding: str) -> str:
    """`encoding` if it is one of `ENCODINGS`; ValueError otherwise."""
    if encoding not in ENCODINGS:
        raise ValueError(f"encoding={encoding!r} is invalid: allowed {' or '.join(ENCODINGS)}")
    return encoding


MAX_DRAWS = 100   # sub-cluster draws per seed before a GPU-less node file is given up on


def _gpu_subset(nodes: NodeTable, subset: int, seed: int) -> NodeTable:
    """`subset` nodes drawn at random for `seed`, drawn again (draw 1, 2, ...) while they
    hold no GPU (a node file with CPU-only nodes, `--nodes all`); ValueError after
    `MAX_DRAWS` draws."""
    if int(np.sum(nodes.num_gpus)) == 0:
        raise ValueError(f"{nodes.path}: no node has a GPU; the replay measures GPU allocation")
    for draw in range(MAX_DRAWS):
        rng = np.random.default_rng([seed, 0x5B5E7] + ([draw] if draw else []))
        table = nodes.take(np.sort(rng.choice(len(nodes), subset, replace=False)))
        if table.total_gpu_milli > 0:
            return table
    raise ValueError(f"seed {seed}: {MAX_DRAWS} draws of {subset} nodes held no GPU; use a "
                     "larger subset")


def num_actions(params: OpenBParams) -> int:
    return params.num_nodes + 1


def _episode_nodes(params: OpenBParams, w: jax.Array) -> Spec:
    """Workload `w`'s cluster, with its trace's typical pods (a bank of several traces)."""
    per = params.nodes.replace(typical=None)
    typical = params.nodes.typical
    if params.typical_weight is not None:
        typical = typical.replace(prob=params.typical_prob[w], weight=params.typical_weight[w])
    return jax.tree_util.tree_map(lambda x: x[w], per).replace(typical=typical)


def current_pod(state: EnvState, params: OpenBParams) -> Pod:
    """The pod to decide (an invalid padding pod once the workload is over)."""
    t = jnp.minimum(state.steps, params.pods.valid.shape[1] - 1)
    return jax.tree_util.tree_map(lambda x: x[state.workload, t], params.pods)


def reset_state(key: jax.Array, params: OpenBParams) -> EnvState:
    """A workload of the bank drawn uniformly, on an empty cluster, and the episode's power
    preference drawn uniformly in [power_weight, power_weight + power_weight_spread] (from
    a key of its own: the workload's draw is the same with any spread)."""
    w = jax.random.randint(key, (), 0, params.num_workloads)
    spec = _episode_nodes(params, w)
    zero = jnp.zeros((), jnp.int32)
    u = jax.random.uniform(jax.random.fold_in(key, 1))
    pref = jnp.minimum(params.power_weight + params.power_weight_spread * u, 1.0)
    return EnvState(cluster=spec, nodes=cluster.empty_state(spec, params.ranks[w],
                                                            params.empty_frag[w]),
                    workload=w, steps=zero, failed=zero, invalid=zero,
                    power_weight=pref.astype(jnp.float32))


def reset(key: jax.Array, params: OpenBParams) -> tuple[Observation, EnvState]:
    """(obs, state) of a workload of the bank drawn uniformly, on an empty cluster."""
    return ENV.reset_env(key, params)


def get_obs(state: EnvState, params: OpenBParams) -> Observation:
    return observe(state.nodes, current_pod(state, params), state.cluster, params.num_models,
                   state.power_weight, params.power, params.encoding)


def observe(st: State, pod: Pod, spec: Spec, num_models: int,
            preference: jax.Array = 0.0, power: PowerModel | None = None,
            encoding: str = AGNOSTIC) -> Observation:
    """The observation of a cluster state and the pod to place (the environment's, and what
    a learned policy computes inside the replay, `vte.openb.network.as_policy`)."""
    return observe_with_gpu(st, pod, spec, num_models, preference, power, encoding)[0]


def observe_with_gpu(st: State, pod: Pod, spec: Spec, num_models: int,
                     preference: jax.Array = 0.0, power: PowerModel | None = None,
                     encoding: str = AGNOSTIC) -> tuple[Observation, jax.Array]:
    """`observe`, and the GPU a shared pod takes on each node ((N,) int32, `GPU_RULE`),
    which comes out of the same FGD computation. `preference`: the reward's power weight;
    `power`: the node file's per-model table (`power.power_model(nodes.models)`; default:
    the bundled node files', `power_model(BUNDLED_MODELS)`); `encoding`: how GPU models
    enter (`ENCODINGS`; `num_models` is the one-hot's width, unused by the agnostic one)."""
    check_encoding(encoding)
    if power is None:
        power = power_model(BUNDLED_MODELS)
    feasible = cluster.feasible(st, pod, spec)
    m = jnp.arange(num_models)
    gpus = spec.num_gpus.astype(jnp.float32)
    used = jnp.where(spec.num_gpus > 0, 1.0 - jnp.sum(st.gpu_free, 0) / jnp.maximum(gpus * MILLI, 1), 0.0)
    gain, shared_gpu = fgd_gain(st, pod, spec)
    nodes = jnp.concatenate([
        jnp.stack([st.cpu_free / CPU_NORM, st.mem_free / MEM_NORM], -1),
        st.gpu_free.T / MILLI,
        jnp.stack([gpus / MAX_GPUS_PER_NODE, st.pods / cluster.MAX_PODS_PER_NODE, used,
                   gain / MILLI, fgd_score(gain) / 100.0,
                   st.rank / jnp.maximum(st.rank.shape[0] - 1, 1)], -1),
        (spec.model[:, None] == m[None, :]).astype(jnp.float32) if encoding == ONEHOT
        else gpu_features(pod, spec, power),
    ], axis=-1).astype(jnp.float32)
    pod_features = jnp.stack([pod.cpu_milli / CPU_NORM, pod.memory_mib / MEM_NORM,
                              pod.num_gpus / MAX_GPUS_PER_NODE, pod.gpu_milli / MILLI,
                              cluster.is_shared(pod).astype(jnp.float32)])
    if encoding == ONEHOT:
        allowed = jnp.where(pod.model_mask == 0, 1.0,
                            (jnp.right_shift(pod.model_mask, m) & 1).astype(jnp.float32))
        pod_features = jnp.concatenate([pod_features, allowed])
    pod_features = pod_features.astype(jnp.float32)
    progress = st.arrived / jnp.maximum(spec.total_gpu_milli, 1)
    mask = jnp.concatenate([feasible, ~jnp.any(feasible)[None]])
    increase, _ = power_increase(st, pod, spec, power)                          # (N,) W
    watts = jnp.stack([jnp.where(feasible, increase, 0).astype(jnp.float32) / KW,
                       jnp.where(feasible, min_max(-increase, feasible, 100), 0)
                       .astype(jnp.float32) / 100.0], -1)
    return Observation(nodes=nodes, pod=pod_features, progress=progress.astype(jnp.float32),
                       action_mask=mask, preference=jnp.asarray(preference, jnp.float32),
                       power=watts), shared_gpu


def gpu_features(pod: Pod, spec: Spec, power: PowerModel) -> jax.Array:
    """(N, 4) float32, the agnostic encoding's node columns (`GPU_COLUMNS`): whether the
    pod's model list allows the node's GPU model (1 when it names none; 0 on a node without
    GPUs when it names some), then one GPU's memory / `GIB_NORM` and idle and busy watts /
    `WATT_NORM` from the per-model table (0 on a node without GPUs)."""
    if power.gpu_memory_gib is None:
        raise ValueError("power has no gpu_memory_gib: build it with "
                         "vte.openb.power.power_model(nodes.models)")
    has = spec.model >= 0
    model = jnp.maximum(spec.model, 0)
    bit = (jnp.right_shift(pod.model_mask, model) & 1) > 0
    allowed = (pod.model_mask == 0) | (has & bit)
    def per_model(table, norm):
        return jnp.where(has, table[model].astype(jnp.float32) / norm, 0.0)
    return jnp.stack([allowed.astype(jnp.float32), per_model(power.gpu_memory_gib, GIB_NORM),
                      per_model(power.gpu_idle_w, WATT_NORM),
                      per_model(power.gpu_busy_w, WATT_NORM)], -1)


def _transition(state: EnvState, action: jax.Array, in_range: jax.Array, params: OpenBParams):
    """One decision: (state, reward, terminated, truncated, info). `action` is an integer
    array, `in_range` whether it lies in [0, N] (checked by `Environment.step`)."""
    n = params.num_nodes
    spec, st = state.cluster, state.nodes
    pod = current_pod(state, params)
    feasible = cluster.feasible(st, pod, spec)
    none_fits = ~jnp.any(feasible)
    node = jnp.clip(action, 0, n - 1).astype(jnp.int32)
    chose_node = in_range & (action < n)
    valid = jnp.where(chose_node, feasible[node], in_range & none_fits) | ~pod.valid
    placed = chose_node & feasible[node]
    demand = pod.num_gpus * pod.gpu_milli
    w = state.power_weight

    def reward_of(added):
        """The reward of placing the pod where it adds `added` W (any shape)."""
        return ((1.0 - w) * demand.astype(jnp.float32) / MILLI
                - w * added.astype(jnp.float32) / KW)

    # The GPU rule and the watts at the chosen node only: both read that node's column alone
    # (`cluster.column`), so this is column `node` of the whole cluster's FGD and power.
    one, one_spec = cluster.column(st, spec, node)
    gain, gpu = fgd_gain(one, pod, one_spec)                                   # (1,) each
    added, _ = power_increase(one, pod, one_spec, params.power, gpu)           # (1,) W
    new = cluster.submit(cluster.place(st, spec, pod, node, gpu[0], placed), pod)
    gpus = jnp.where(placed, demand, 0).astype(jnp.float32) / MILLI

    def lowest(watts):
        """The lowest reward over the feasible nodes if each added `watts` (N,); 0 when
        none fits."""
        return jnp.where(none_fits, 0.0, jnp.min(jnp.where(feasible, reward_of(watts), jnp.inf)))

    def worst_valid():
        """The lowest reward of a valid placement: every node's watts under the GPU rule."""
        _, every_gpu = fgd_gain(st, pod, spec)
        return lowest(power_increase(st, pod, spec, params.power, every_gpu)[0])

    def below_worst_valid():
        """A lower bound of it in O(1), no node scored: the reward of the most watts any
        placement of this pod can add (`max_increase`); 0 at w = 0 or when none fits."""
        bound = reward_of(max_increase(pod, params.power))
        return jnp.where((w > 0) & ~none_fits, bound, 0.0)

    # An invalid action is penalised below the worst valid one. When the params allow no
    # power preference (every episode's w = 0: a placement's reward is its GPUs, >= 0) that
    # worst, capped at 0, is 0, and the whole cluster's FGD and watts are skipped (a real
    # `cond` while the params are shared by the batch). A state whose w was set > 0 by hand
    # there gets the bound instead: still at least the penalty below every valid action.
    with_power = params.power_weight + params.power_weight_spread > 0
    worst = jax.lax.cond(with_power, worst_valid, below_worst_valid)
    # Fragmentation shaping: c x the fragmentation the placement removes, in GPUs. A
    # placement adds at most the node's free GPUs of it (F <= the free milli), so every
    # valid action's shaping is >= -c x the most GPUs a node has: the invalid one is scored
    # that much lower again, with no node scored.
    c = params.frag_shaping
    shaping = c * gain[0] / MILLI
    worst = worst - c * jnp.max(spec.num_gpus).astype(jnp.float32)
    added_w = jnp.where(placed, added[0], 0)
    reward = jnp.where(valid, jnp.where(placed, reward_of(added[0]) + shaping, 0.0),
                       jnp.minimum(worst, 0.0) - params.invalid_penalty)
    state = state.replace(
        nodes=new, steps=state.steps + pod.valid.astype(jnp.int32),
        failed=state.failed + (pod.valid & ~placed).astype(jnp.int32),
        invalid=state.invalid + (~valid).astype(jnp.int32))
    terminated = state.steps >= params.length[state.workload]
    total = spec.total_gpu_milli
    info = {
        "placed": placed, "failed": pod.valid & ~placed, "invalid_action": ~valid,
        "gpus_allocated": gpus, "no_node_fits": none_fits,
        "used_milli": cluster.used_milli(new, spec), "arrived_milli": new.arrived,
        "alloc_percent": cluster.used_milli(new, spec) / jnp.maximum(total, 1) * 100.0,
        "frag_percent": jnp.sum(new.frag) / jnp.maximum(total, 1) * 100.0,
        "failed_pods": state.failed,
        "power_added_w": added_w.astype(jnp.int32),
        "power_w": sum(datacenter_power(new, spec, params.power)),
    }
    return state, reward, terminated, jnp.bool_(False), info


class OpenBEnv(Environment[EnvState, OpenBParams]):
    """The OpenB trace replay (`vte.make("OpenB-v0")`); see the module docstring for
    observation, action, reward and termination. Its params are a bank of workloads
    (`make_params`); `default_params` is the bank the registry built it with."""

    name = "OpenB-v0"
    action_meaning = "num_nodes = cannot place"

    def __init__(self, params: OpenBParams | None = None,
                 model_names: Sequence[str] | None = None):
        self._params = params
        self.model_names = model_names   # the node file's GPU models, in one-hot order

    @property
    def default_params(self) -> OpenBParams:
        if self._params is None:
            raise ValueError("this OpenBEnv has no default params: build one with "
                             "vte.make('OpenB-v0', pods=..., subset=...) or pass "
                             "vte.openb.env.make_params(...) to every call")
        return self._params

    def reset_state(self, key: jax.Array, params: OpenBParams) -> EnvState:
        return reset_state(key, params)

    def transition(self, key, state, action, valid_index, params):
        del key                               # the dynamics are deterministic given the action
        return _transition(state, action, valid_index, params)

    def get_obs(self, state: EnvState, params: OpenBParams) -> Observation:
        return get_obs(state, params)

    def num_actions(self, params: OpenBParams) -> int:
        return num_actions(params)

    def observation_specs(self, params: OpenBParams):
        return observation_specs(params)

    def observation_columns(self, params: OpenBParams):
        return observation_columns(params, self.model_names if params.encoding == ONEHOT
                                   else None)

    def is_terminated(self, state: EnvState, params: OpenBParams) -> jax.Array:
        """() bool, the workload's last pod has been decided."""
        return state.steps >= params.length[state.workload]

    def check(self, state, params) -> None:
        if not isinstance(params, OpenBParams):
            raise ValueError(f"params={type(params).__name__} is invalid: allowed "
                             "vte.openb.env.OpenBParams (make_params)")
        if state is not None and not isinstance(state, EnvState):
            raise ValueError(f"state={type(state).__name__} is invalid: allowed "
                             "vte.openb.env.EnvState")


# The columns `observe` concatenates, in its order (one source: the contract test checks the
# counts against `observation_specs`; the documentation's OpenB-v0 page prints them).
NODE_COLUMNS = (
    Column("cpu_free/128_cores", "cores", "free CPU"),
    Column("memory_free/1TiB", "MiB", "free memory"),
    *(Column(f"gpu{g}_free_milli/1000", "milli-GPU", f"free share of GPU slot {g} (0 when the "
             "node has no such GPU)") for g in range(MAX_GPUS_PER_NODE)),
    Column("gpus/8", "GPUs", "the node's GPUs"),
    Column("pods/1001", "pods", "pods bound to the node (Kubernetes' limit: 1001)"),
    Column("gpu_allocated_share", "fraction", "share of the node's GPU milli allocated"),
    Column("fgd_gain/1000", "GPUs", "FGD's fragmentation gain of placing the pod here"),
    Column("fgd_score/100", "fraction", "FGD's published score of this node"),
    Column("rank/(N-1)", "fraction", "the node's tie-break rank (the published policies' order)"),
)
POD_COLUMNS = (
    Column("cpu/128_cores", "cores", "the pod's CPU request"),
    Column("memory/1TiB", "MiB", "the pod's memory request"),
    Column("gpus/8", "GPUs", "GPUs asked for"),
    Column("gpu_milli/1000", "milli-GPU", "share of each GPU asked for"),
    Column("shared", "flag", "1 when the pod asks for less than one whole GPU"),
)
GPU_COLUMNS = (           # the agnostic encoding's node columns (`gpu_features`)
    Column("gpu_allowed", "flag", "the pod may use this node's GPUs (its model list allows "
           "the node's model, or names none)"),
    Column("gpu_memory/100GiB", "GiB", "memory of one of the node's GPUs (per-model table)"),
    Column("gpu_idle_w/1000", "W", "watts of one of the node's GPUs idle (per-model table)"),
    Column("gpu_max_w/1000", "W", "watts of one of the node's GPUs busy (per-model table)"),
)
POWER_COLUMNS = (
    Column("added_kw", "kW", "power the placement adds to the datacenter (0 where infeasible)"),
    Column("pwr_score/100", "fraction", "the PWR paper's score of the node (0 where infeasible)"),
)


def observation_columns(params: OpenBParams, model_names: Sequence[str] | None = None
                        ) -> dict[str, tuple[Column, ...]]:
    """The named columns of `Observation.nodes`, `.pod` and `.power`: agnostic encoding
    (`params.encoding`): `NODE_COLUMNS` then `GPU_COLUMNS`, `POD_COLUMNS`; onehot:
    `NODE_COLUMNS` then one flag per GPU model, `POD_COLUMNS` then one allowed-model flag per
    model. `model_names`: the node file's models in their one-hot order (default: model_0
    ...; the agnostic encoding names no model and ignores them)."""
    if params.encoding == AGNOSTIC:
        return {"nodes": NODE_COLUMNS + GPU_COLUMNS, "pod": POD_COLUMNS, "power": POWER_COLUMNS}
    names = tuple(model_names) if model_names is not None else tuple(
        f"model_{k}" for k in range(params.num_models))
    if len(names) != params.num_models:
        raise ValueError(f"model_names={names!r} is invalid: allowed {params.num_models} "
                         "names, one per GPU model of the params")
    return {
        "nodes": NODE_COLUMNS + tuple(Column(f"model_{m}", "flag", f"the node's GPUs are {m}")
                                      for m in names),
        "pod": POD_COLUMNS + tuple(Column(f"allows_{m}", "flag", f"the pod may run on {m} "
                                          "(all 1 when it names no model)") for m in names),
        "power": POWER_COLUMNS,
    }


def observation_specs(params: OpenBParams) -> dict[str, FieldSpec]:
    """Every `Observation` field's shape, dtype and bounds: nodes (N, 16 + E) float32, pod
    (5,) float32 (agnostic; onehot: E = M and pod (5 + M,)), progress () float32, action_mask (N + 1,) bool, preference () float32
    in [0, 1], power (N, 2) float32 (kW in [0, the most a node can draw], PWR's score in
    [0, 1]).

    Every bound is finite and read from the workload bank of `params` (concrete arrays):
    free CPU and memory in [0, the largest node's capacity / CPU_NORM or MEM_NORM]; the pod's
    CPU and memory in [0, the largest pod's]; FGD's gain in [-g, g] GPUs, g the most GPUs of
    a node (the expected fragmentation a placement removes or adds lies within the node's
    GPUs), its score in [0, 1]; progress in [0, the largest GPU demand a workload brings /
    its cluster's GPUs] (the tune, 1.3 in the paper); the agnostic GPU memory and watts in
    [0, the per-model table's largest / its norm]; every other column in [0, 1]."""
    n = params.num_nodes
    onehot = params.encoding == ONEHOT
    m = params.num_models if onehot else GPU_FEATURES
    pod_width = 5 + params.num_models if onehot else 5
    nodes, pods = params.nodes, params.pods

    def largest(x, what, norm=1.0):          # > 0: no column with equal bounds
        return max(concrete_extreme(x, what) / norm, 1e-3)
    node_low = np.zeros(BASE_NODE_FEATURES + m)
    node_high = np.ones(BASE_NODE_FEATURES + m)
    node_high[0] = largest(nodes.cpu_milli, "nodes.cpu_milli", CPU_NORM)
    node_high[1] = largest(nodes.memory_mib, "nodes.memory_mib", MEM_NORM)
    gpus = max(concrete_extreme(nodes.num_gpus, "nodes.num_gpus"), 1.0)
    node_low[FGD_GAIN], node_high[FGD_GAIN] = -gpus, gpus         # FGD gain / MILLI
    if not onehot:                                                 # memory, idle, busy
        table = params.power
        for col, (x, norm) in enumerate(((table.gpu_memory_gib, GIB_NORM),
                                         (table.gpu_idle_w, WATT_NORM),
                                         (table.gpu_busy_w, WATT_NORM)), BASE_NODE_FEATURES + 1):
            node_high[col] = largest(x, "power", norm)
    pod_high = np.ones(pod_width)
    pod_high[0] = largest(pods.cpu_milli, "pods.cpu_milli", CPU_NORM)
    pod_high[1] = largest(pods.memory_mib, "pods.memory_mib", MEM_NORM)
    demand = np.where(np.asarray(pods.valid),
                      np.asarray(pods.num_gpus, np.int64) * np.asarray(pods.gpu_milli), 0)
    total = np.maximum(np.sum(np.asarray(nodes.num_gpus, np.int64), axis=-1) * MILLI, 1)
    progress = largest(demand.sum(axis=-1) / total, "pods")
    return {
        "nodes": field_spec((n, BASE_NODE_FEATURES + m), np.float32,
                            round_outward(node_low, up=False), round_outward(node_high, up=True)),
        "pod": field_spec((pod_width,), np.float32, 0.0, round_outward(pod_high, up=True)),
        "progress": field_spec((), np.float32, 0.0, round_outward(progress, up=True)),
        "action_mask": field_spec((n + 1,), np.bool_, False, True),
        "preference": field_spec((), np.float32, 0.0, 1.0),
        "power": field_spec((n, 2), np.float32, 0.0, round_outward(
            np.array([largest_node_kw(params), 1.0]), up=True)),
    }


def largest_node_kw(params: OpenBParams) -> float:
    """kW of the most powerful node of the bank with every GPU and CPU socket busy: an upper
    bound of what one placement adds."""
    cpu = np.asarray(params.nodes.cpu_milli)
    gpus = np.asarray(params.nodes.num_gpus, np.int64)
    busy = int(np.max(np.asarray(params.power.gpu_busy_w)))
    cpu_w = np.asarray(cpu_watts(np.zeros_like(cpu), cpu), np.int64)    # every core busy
    return max(float(np.max(gpus * busy + cpu_w)) / KW, 1e-3)


ENV = OpenBEnv()


def step_env(key: jax.Array, state: EnvState, action: jax.Array, params: OpenBParams):
    """One decision without auto-reset: (obs, state, reward, terminated, truncated, info)."""
    return ENV.step_env(key, state, action, params)


def step(key: jax.Array, state: EnvState, action: jax.Array, params: OpenBParams):
    """`step_env`, then a fresh workload when the episode ended (`info["final_observation"]`)."""
    return ENV._auto_step(key, state, action, params)


def fgd_from_observation(obs: Observation) -> jax.Array:
    """() int32, FGD's action read off the observation: its score and the tie-break rank
    are columns of `obs.nodes` (integers / 100 and / (N - 1) in float32, recovered exactly
    by rounding), the feasible nodes its mask. Equals `policy_action(fgd)` on the state
    observed (tested), without computing FGD again: a trainer's FGD teacher."""
    n = obs.nodes.shape[-2]
    score = jnp.round(obs.nodes[:, FGD_SCORE] * 100.0).astype(jnp.int32)
    rank = jnp.round(obs.nodes[:, RANK] * max(n - 1, 1)).astype(jnp.int32)
    return _action(score, obs.action_mask[:n], rank)


def _action(scores: jax.Array, feasible: jax.Array, rank: jax.Array) -> jax.Array:
    """() int32, the best feasible node by `scores` (ties to the smallest rank,
    `cluster.select`), or N ("cannot place") when none is feasible."""
    node = cluster.select(scores, feasible, rank)
    return jnp.where(jnp.any(feasible), node, feasible.shape[-1]).astype(jnp.int32)


def policy_action(policy: Policy):
    """A published policy (`vte.openb.policies`) as an action chooser of this environment:
    `(key, state, params) -> action`, the node it would pick (ties to the smallest rank), or
    "cannot place" when none fits. The GPU rule is the environment's (`GPU_RULE`)."""
    def act(key, state: EnvState, params: OpenBParams) -> jax.Array:
        (scores, _), feasible = _run_policy(policy, key, state, params)
        return _action(scores, feasible, state.nodes.rank)
    return act


def _run_policy(policy, key, state: EnvState, params: OpenBParams):
    """A replay policy's outputs on the pod in hand, and the (N,) feasible nodes."""
    pod = current_pod(state, params)
    feasible = cluster.feasible(state.nodes, pod, state.cluster)
    return policy(key, state.nodes, pod, feasible, state.cluster), feasible


def regret_action(plan):
    """A planner with its regrets (`lookahead.planner_regrets`) as a labelling teacher of
    this environment: `(key, state, params) -> (action, cost)`, the action `policy_action`
    gives for the same planner and key, and cost (N + 1,) float32 >= 0 in GPUs, each node's
    regret (+inf off the candidates) then "cannot place": 0 when no node is feasible (the
    only action then), else +inf. So a softmax(-cost / T) over the actions allowed is
    never empty (`train/imitate.py`'s distillation)."""
    def act(key, state: EnvState, params: OpenBParams):
        (scores, _, regret), feasible = _run_policy(plan, key, state, params)
        none = jnp.where(jnp.any(feasible), jnp.inf, 0.0)
        return (_action(scores, feasible, state.nodes.rank),
                jnp.concatenate([regret, none[None]]).astype(jnp.float32))
    act.gives_costs = True
    return act
