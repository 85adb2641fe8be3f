"""Placing a request's tasks one after the other with any vte policy, inside one compiled call.

    placer = Placer(policy, params)              # a policy (key, obs, params) -> action, or OPTIMAL
    nodes, costs, outcome = placer(views, requests)  # a batch of converted requests

Task t sees the cluster as tasks 0..t-1 left it: each decision builds vte's observation
with the environment's own code (`vte.cluster.observation.get_obs` on a state whose twin is the
reported cluster and whose queue holds the tasks from t on, head first), the policy picks
an action, and a placement on a node the reported metrics allow (`vte.cluster.scoring`'s
feasibility, the observation's action mask) is booked on the twin (`book`). The
`OPTIMAL` chooser takes `vte.cluster.scoring`'s optimum instead: the feasible node of least cost
on the reported cluster.

Compiled ahead of time once per (batch, N, S, T) shape (`Placer.compile`, thread-safe, so
a server compiles on a thread of its own while compiled shapes keep serving): requests
are padded to node, site and task buckets (`vte.cluster.decice.convert`) and batches to
`BATCH_BUCKETS`; a batch may also run in any compiled shape with a larger batch or task
bucket, and, for a policy that ignores absent nodes (`Placer.pad_nodes`), larger node and
site buckets (`Placer.ready`). Deterministic: the key of task t of every request is
`fold_in(PRNGKey(seed), t)`, and padding rows, task slots, or (with `pad_nodes`) nodes
and sites changes no answer, so an answer does not depend on the shape it ran in (tests
compare them).
"""

from __future__ import annotations

import threading
import uuid
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from vte.cluster import catalogue as C
from vte.cluster import dynamics, scoring
from vte.cluster.fusion import lookup
from vte.cluster import twin as twin_lib
from vte.cluster.observation import get_obs, static_node_features
from vte.cluster.params import EnvParams
from vte.cluster.decice import schemas as S
from vte.cluster.decice.convert import (DEFERRED, MASKED, NO_NODE_FITS, PLACED, ClusterView, bucket,
                               cluster_view, pad_view, task_requests)
from vte.cluster.types import Cluster, Counters, EnvState, Nodes, Requests, Twin

OPTIMAL = "optimal"   # the chooser that takes vte's least-cost feasible node
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64)
COMPILER_NICENESS = 10   # scheduling priority of the compiler process, below the server's


def _idle_nodes(n: int, slots: int) -> Nodes:
    """Ground-truth node state the observation does not read (zeros of the right shapes)."""
    z = jnp.zeros((n,), jnp.float32)
    return Nodes(bg_load=z, bg_next=z, up=jnp.ones((n,), bool),
                 alloc=jnp.zeros((C.NUM_RESOURCES, n), jnp.float32), jobs=z,
                 job_active=jnp.zeros((slots, n), bool),
                 job_demand=jnp.zeros((C.NUM_RESOURCES, slots, n), jnp.uint16),
                 job_end=jnp.zeros((slots, n), jnp.float32))


def _zero_counters() -> Counters:
    z = jnp.zeros((), jnp.int32)
    f = jnp.zeros((), jnp.float32)
    return Counters(placed=z, deferred=z, invalid=z, dropped=z, jobs_lost=z, completed=z,
                    matched=z, regret=f, energy=f)


def observe(cluster: Cluster, twin: Twin, queue: Requests, weights: jax.Array,
            step: jax.Array, params: EnvParams):
    """(Observation, HeadScores) of the head of `queue` (K,) on the reported cluster.

    The scoring reads the twin (the reported metrics are all the server knows), so the
    action mask is the feasibility on what the nodes report. Pure; jit and vmap."""
    n = cluster.mask.shape[0]
    scores = scoring.score_request(cluster, twin_lib.as_metrics(twin), scoring.head(queue),
                                   weights, params)
    state = EnvState(cluster=cluster, nodes=_idle_nodes(n, params.slots_per_node), queue=queue,
                     incoming=queue, twin=twin, scores=scores, counters=_zero_counters(),
                     node_static=static_node_features(cluster), weights=weights,
                     time=jnp.zeros((), jnp.float32), steps=step)
    return get_obs(state, params), scores


def book(twin: Twin, cluster: Cluster, demand: jax.Array, node: jax.Array,
         place: jax.Array) -> Twin:
    """The twin after placing `demand` (R,) on `node` when `place` (() bool).

    The node holds `dynamics.held_demand(demand)` (whole units) more: its free resources
    fall by it, its job count rises by one, and its utilisation and power follow
    `dynamics.measure`'s formulas (util = clip(used / cap, 0, 1) with used = cap - free;
    power rises by (P_peak - P_idle) times the utilisation's rise plus the GPUs' watts)."""
    n = cluster.mask.shape[0]
    on = place & (jnp.arange(n) == node)                                     # (N,)
    held = dynamics.held_demand(demand).astype(jnp.float32)
    free = twin.free - jnp.where(on, held[:, None], 0.0)
    cap = cluster.capacity
    util = jnp.where(on, jnp.clip((cap[C.CPU] - free[C.CPU]) / jnp.maximum(cap[C.CPU], 1.0),
                                  0.0, 1.0), twin.util)
    mem_util = jnp.where(on, jnp.clip((cap[C.MEM] - free[C.MEM]) / jnp.maximum(cap[C.MEM], 1.0),
                                      0.0, 1.0), twin.mem_util)
    rise = ((cluster.power_peak - cluster.power_idle) * (util - twin.util)
            + lookup(C.GPU_WATTS, cluster.gpu_model) * held[C.GPU])
    return twin.replace(free=free, util=util, mem_util=mem_util,
                        power=jnp.where(on, twin.power + rise, twin.power),
                        jobs=twin.jobs + on.astype(jnp.float32))


def place_tasks(choose: Callable, cluster: Cluster, twin: Twin, tasks: Requests,
                weights: jax.Array, key: jax.Array, params: EnvParams):
    """Place tasks (T,) one after the other on one cluster.

    Args:
      choose: `(key, obs, scores) -> action` () int32, in [0, N] (N = none).
      cluster: the converted cluster (N nodes).
      twin: its digital twin (N nodes).
      tasks: `Requests` with leading axis T (invalid slots are padding).
    Returns:
      node (T,) int32, the node of each task or -1 when it is not placed;
      cost (T,) float32, vte's cost of that placement (0 when not placed);
      outcome (T,) int32: PLACED; NO_NODE_FITS, no node could host the task on the
        reported metrics when its turn came; DEFERRED, the policy chose "no node" although
        some node could host it; MASKED, the policy chose a node that cannot host it
        (its action mask says so) although some other node could.
    """
    n, k = cluster.mask.shape[0], params.queue_len
    pad = jax.tree_util.tree_map(
        lambda x: jnp.concatenate([x, jnp.zeros((k,) + x.shape[1:], x.dtype)]), tasks)
    pad = pad.replace(valid=pad.valid.at[tasks.valid.shape[0]:].set(False))

    def body(tw, t):
        queue = jax.tree_util.tree_map(lambda x: jax.lax.dynamic_slice_in_dim(x, t, k), pad)
        obs, scores = observe(cluster, tw, queue, weights, t % params.episode_len, params)
        a = jnp.clip(jnp.asarray(choose(jax.random.fold_in(key, t), obs, scores), jnp.int32),
                     0, n)
        ok = (a < n) & scores.feasible[a]
        tw = book(tw, cluster, queue.demand[0], a, ok)
        fits = jnp.any(scores.feasible[:n])          # the nodes only, not the defer entry
        outcome = jnp.where(ok, PLACED, jnp.where(~fits, NO_NODE_FITS,
                                                  jnp.where(a == n, DEFERRED, MASKED)))
        return tw, (jnp.where(ok, a, -1), jnp.where(ok, scores.cost[a], 0.0),
                    outcome.astype(jnp.int32))

    _, (nodes, costs, outcome) = jax.lax.scan(body, twin, jnp.arange(tasks.valid.shape[0]))
    return nodes, costs, outcome


def _chooser(policy, params: EnvParams) -> Callable:
    if isinstance(policy, str):
        if policy != OPTIMAL:
            raise ValueError(f"policy={policy!r} is invalid: allowed a callable "
                             f"(key, obs, params) -> action or {OPTIMAL!r}")
        return lambda key, obs, scores: scores.optimum
    return lambda key, obs, scores: policy(key, obs, params)


def _stack(trees: Sequence, size: int):
    """Stack pytrees of NumPy arrays along a new leading axis, padded to `size` by repeating
    the first."""
    trees = list(trees) + [trees[0]] * (size - len(trees))
    return jax.tree_util.tree_map(lambda *xs: np.stack(xs), *trees)


def pad_tasks(requests: Requests, t: int) -> Requests:
    """Requests (T0,) padded with invalid slots to (t,), t >= T0."""
    extra = t - requests.valid.shape[0]
    if extra == 0:
        return requests
    return jax.tree_util.tree_map(
        lambda x: np.concatenate([x, np.zeros((extra,) + x.shape[1:], x.dtype)]), requests)


Shape = tuple[int, int, int, int]     # (batch, N nodes, S sites, T tasks)


class Placer:
    """A policy compiled for batches of converted requests.

    Args:
      policy: `(key, obs, params) -> action` (a heuristic of `vte.cluster.heuristics.ALL`, a
        loaded `vte.load_policy`), or OPTIMAL.
      params: environment parameters (queue length, slots per node, weights, ...);
        `num_nodes` and `num_sites` are replaced by each request's buckets.
      seed: the key of every decision derives from it (deterministic answers).
      pad_nodes: whether the policy's answer is the same on a cluster padded with absent
        nodes and unused sites (`convert.pad_view`), so that a request may run in a
        compiled shape of larger node and site buckets (`ready`). True for `OPTIMAL`,
        every heuristic but `random` and `round_robin` (which draw among, or count, the
        padded nodes too) and trained networks (which pool over present nodes only; the
        sums' rounding order can differ, which can matter only between two nodes whose
        logits tie to float precision); `make_placer` sets it. None (the default): True
        for `OPTIMAL`, False for a callable given here (only the batch and task buckets
        may then be larger).
    """

    def __init__(self, policy, params: EnvParams, seed: int = 0,
                 pad_nodes: bool | None = None):
        self.params = params
        self._key = jax.random.PRNGKey(seed)
        self._policy = policy
        self.pad_nodes = (policy == OPTIMAL) if pad_nodes is None else pad_nodes
        self._compiled: dict[Shape, Callable] = {}
        self._lock = threading.Lock()

    def _fn(self, n: int, s: int) -> Callable:
        params = self.params.replace(num_nodes=n, num_sites=s)
        choose = _chooser(self._policy, params)

        def one(cluster, twin, tasks, weights):
            return place_tasks(choose, cluster, twin, tasks, weights, self._key, params)

        return jax.jit(jax.vmap(one))

    def weights(self) -> np.ndarray:
        return np.broadcast_to(np.asarray(self.params.weights, np.float32), (3,))

    def _args(self, views: Sequence[ClusterView], requests: Sequence[Requests], shape: Shape):
        size, n, s, t = shape
        views = [pad_view(v, n, s) for v in views]
        return (_stack([v.cluster for v in views], size), _stack([v.twin for v in views], size),
                _stack([pad_tasks(r, t) for r in requests], size),
                np.broadcast_to(self.weights(), (size, 3)))

    @staticmethod
    def shape_of(views: Sequence[ClusterView], requests: Sequence[Requests]) -> Shape:
        """The least compiled shape a batch needs (its batch size bucketed)."""
        return (bucket(len(views), BATCH_BUCKETS, "batch"), views[0].num_nodes,
                views[0].num_sites, int(requests[0].valid.shape[0]))

    @property
    def shapes(self) -> list[Shape]:
        """The shapes compiled so far."""
        with self._lock:
            return sorted(self._compiled)

    def ready(self, shape: Shape) -> Shape | None:
        """The cheapest compiled shape that can run a batch of `shape`: a batch and a task
        bucket at least as large, and, when `pad_nodes`, node and site buckets at least as
        large too (the views are padded to it, `run`), else the same; None when there is
        none yet. Cheapest: the least batch x nodes x tasks, then sites."""
        b, n, s, t = shape
        with self._lock:
            keys = list(self._compiled)
        if self.pad_nodes:
            holds = [k for k in keys if k[0] >= b and k[1] >= n and k[2] >= s and k[3] >= t]
        else:
            holds = [k for k in keys if k[0] >= b and k[1] == n and k[2] == s and k[3] >= t]
        return min(holds, key=lambda k: (k[0] * k[1] * k[3], k[2], k)) if holds else None

    def compile(self, shape: Shape, compiler: Callable | None = None) -> None:
        """Compile `shape` ahead of time (a no-op when it is compiled). Thread-safe; it does
        not block `run` of compiled shapes. With a `compiler` (`CompilerProcess`), the
        program is traced and compiled there, in another process, and only loaded here."""
        if shape in self._compiled:
            return
        if compiler is not None:
            from jax.experimental import serialize_executable
            compiled = serialize_executable.deserialize_and_load(*compiler(shape))
            with self._lock:
                self._compiled.setdefault(shape, compiled)
            return
        b, n, s, t = shape
        cs = S.ClusterState(vertexpools=[S.VertexPool(id="warmup", nodes=[S.Node(
            id="warmup", metrics=S.NodeMetrics(cpu_cores=1, mem_total=1))])])
        view = cluster_view(cs, self.params, num_nodes=n, num_sites=s)
        task = S.Task(id=uuid.UUID(int=0), requirements=S.HardwareRequirements(
            required_cpu=1, required_memory=1))
        req, _ = task_requests([task], view, num_tasks=t)
        compiled = self._fn(n, s).lower(*self._args([view], [req], shape)).compile()
        with self._lock:
            self._compiled.setdefault(shape, compiled)

    def run(self, shape: Shape, views: Sequence[ClusterView], requests: Sequence[Requests]
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Run a batch in the compiled `shape` (from `ready`; its node and site buckets may
        be larger than the views': they are padded with absent nodes and unused sites).
        Returns nodes (B, T) int32 (-1: not placed), costs (B, T) float32 and outcome
        (B, T) int32 (`place_tasks`), T the requests' own."""
        b, t = len(views), int(requests[0].valid.shape[0])
        out = self._compiled[shape](*self._args(views, requests, shape))
        return tuple(np.asarray(x)[:b, :t] for x in out)

    def __call__(self, views: Sequence[ClusterView], requests: Sequence[Requests]
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Place every request's tasks on its own cluster, compiling the shape if needed;
        all views share (N, S) and all requests T. See `run` for the outputs."""
        shape = self.shape_of(views, requests)
        if self.ready(shape) is None:
            self.compile(shape)
        return self.run(self.ready(shape), views, requests)

    def warmup(self, nodes: Sequence[int], sites: Sequence[int] = (4,),
               tasks: Sequence[int] = (1,), batches: Sequence[int] = BATCH_BUCKETS) -> int:
        """Compile every (batch, N, S, T) combination given; returns how many."""
        shapes = [(b, n, s, t) for n in nodes for s in sites for t in tasks for b in batches]
        for shape in shapes:
            self.compile(shape)
        return len(shapes)


def _compile_worker(conn, policy: str, weights, seed: int) -> None:
    """The child of `CompilerProcess`: compiles each shape it receives and sends back the
    serialized executable, or the error."""
    import os

    import jax
    from jax.experimental import serialize_executable
    os.nice(COMPILER_NICENESS)        # the server's requests come first on a shared CPU
    # An executable read back from the persistent compilation cache (JAX_COMPILATION_CACHE_DIR)
    # serializes without all of its functions on the CPU backend (jax 0.10: the server then
    # fails with "Function ... not found" when it runs it), so the child always compiles.
    jax.config.update("jax_enable_compilation_cache", False)
    placer, _ = make_placer(policy, weights, seed)
    while True:
        shape = conn.recv()
        if shape is None:
            return
        try:
            placer.compile(shape)
            conn.send((True, serialize_executable.serialize(placer._compiled[shape])))
        except Exception as err:   # the server compiles in process instead
            conn.send((False, f"{type(err).__name__}: {err}"))


class CompilerProcess:
    """Compiles a placer's shapes in a child process, so that tracing and compiling a new
    shape never holds the server's GIL (warmed requests keep their latency).

    The child builds the same placer (`make_placer(policy, weights, seed)`), compiles a
    shape on request and sends the serialized executable; `Placer.compile(shape, self)`
    loads it. Call `close()` when done.
    """

    def __init__(self, policy: str, weights: Sequence[float] | None = None, seed: int = 0):
        import multiprocessing
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_compile_worker, args=(child, policy, weights, seed),
                                 daemon=True, name="vte-compiler")
        self._proc.start()
        child.close()
        self._lock = threading.Lock()

    def __call__(self, shape: Shape):
        """(payload, in_tree, out_tree) of `shape`'s executable; RuntimeError on failure."""
        with self._lock:
            try:
                self._conn.send(shape)
                ok, result = self._conn.recv()
            except (EOFError, OSError) as err:
                raise RuntimeError(f"the compiler process is gone ({err!r})") from None
        if not ok:
            raise RuntimeError(f"the compiler process failed on {shape}: {result}")
        return result

    def close(self) -> None:
        with self._lock:
            try:
                self._conn.send(None)
            except (EOFError, OSError):
                pass
            self._proc.join(timeout=10)
            if self._proc.is_alive():
                self._proc.terminate()
            self._conn.close()


def make_placer(policy: str, weights: Sequence[float] | None = None, seed: int = 0
                ) -> tuple[Placer, str]:
    """A placer from a policy argument: OPTIMAL, a heuristic name of
    `vte.cluster.heuristics.ALL`, or a training run directory (`vte.load_policy`). Returns the
    placer and the policy's name (the run directory's last component for a run).

    The environment parameters are the defaults of `vte.EnvParams`, with a run's
    `queue_len`, `episode_len` and `weights` from its configuration; `weights`
    (performance, energy, reliability) overrides the weights."""
    import os

    from vte import checkpoint, registry
    from vte.cluster import heuristics
    allowed = (f"{OPTIMAL!r}, one of {sorted(heuristics.ALL)}, a training run directory or "
               "a scheduler of the zoo (zoo:NAME)")
    kwargs = {}
    pad_nodes = True                          # see Placer: every policy here but two
    if policy == OPTIMAL:
        fn, name = OPTIMAL, OPTIMAL
    elif policy in heuristics.ALL:
        fn, name = heuristics.ALL[policy], policy
        pad_nodes = policy not in ("random", "round_robin")
    elif checkpoint.is_run_path(policy):      # a run directory, DIR@STEP or zoo:NAME
        config = checkpoint.load_config(policy)
        reg = registry.of_run(config)
        if "decice" not in reg.protocols:
            raise ValueError(f"--policy {policy!r} trained on {reg.id} (--env {reg.flag}), which "
                             "has no mapping to DECICE's API; it serves schedulers of "
                             + ", ".join(f"{r.id} (--env {r.flag})" for r in
                                         map(registry.registration, registry.registered())
                                         if "decice" in r.protocols)
                             + "; serve it to Kubernetes with --protocol kube-extender")
        env = config.get("env", {})
        kwargs = {k: env[k] for k in ("queue_len", "episode_len") if k in env}
        if "weights" in env:
            kwargs["weights"] = tuple(env["weights"])
        fn = checkpoint.load_policy(policy)
        name = (policy.split(":", 1)[1] if policy.startswith("zoo:") else
                os.path.basename(os.path.normpath(checkpoint.split_step(policy)[0])))
    else:
        raise ValueError(f"--policy {policy!r} is invalid: allowed {allowed}")
    if weights is not None:
        kwargs["weights"] = tuple(float(w) for w in weights)
    return Placer(fn, EnvParams(**kwargs), seed, pad_nodes=pad_nodes), name


__all__ = ["OPTIMAL", "BATCH_BUCKETS", "Placer", "CompilerProcess", "make_placer", "place_tasks",
           "observe", "book", "pad_tasks"]
