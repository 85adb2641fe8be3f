"""The OpenB replay: trace input, filter, GPU assignment, the six policies worked by hand,
workload construction, binning, determinism and vmap over seeds."""

import json
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vte import openb
from vte.openb import cluster, policies, workload
from vte.openb.lab import simulator
from vte.openb.__main__ import main as openb_main
from vte.openb.cluster import Pod, Typical
from vte.openb.trace import TraceError

NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model\n"
POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"


def write(tmp_path, name, header, rows):
    path = tmp_path / name
    path.write_text(header + "".join(",".join(map(str, r)) + "\n" for r in rows))
    return str(path)


def small_nodes(tmp_path, rows=None):
    rows = rows or [("n0", 32000, 65536, 2, "T4"), ("n1", 64000, 131072, 4, "T4"),
                    ("n2", 16000, 32768, 1, "P100"), ("n3", 8000, 16384, 0, "")]
    return openb.load_nodes(write(tmp_path, "nodes.csv", NODE_HEADER, rows))


def pod(cpu=1000, mem=1024, num_gpus=1, milli=1000, mask=0, valid=True):
    return Pod(cpu_milli=jnp.int32(cpu), memory_mib=jnp.int32(mem), num_gpus=jnp.int32(num_gpus),
               gpu_milli=jnp.int32(milli if num_gpus else 0), model_mask=jnp.int32(mask),
               valid=jnp.bool_(valid))


ONE_SHAPE = Typical(cpu_milli=jnp.array([0], jnp.int32), gpu_milli=jnp.array([500], jnp.int32),
                    num_gpus=jnp.array([1], jnp.int32), model_mask=jnp.array([0], jnp.int32),
                    prob=jnp.array([1.0], jnp.float32))


def setup(nodes, typical=ONE_SHAPE, rank=None):
    spec = cluster.make_spec(nodes, typical)
    rank = np.arange(len(nodes), dtype=np.int32) if rank is None else np.asarray(rank, np.int32)
    return spec, cluster.empty_state(spec, rank)


def with_gpus(state, node, frees):
    """The state with node `node`'s GPUs set to `frees` (milli), the rest of it unchanged."""
    col = state.gpu_free[:, node].at[:len(frees)].set(jnp.asarray(frees, jnp.int32))
    return state.replace(gpu_free=state.gpu_free.at[:, node].set(col))


# ---------------------------------------------------------------- trace input

def test_bundled_trace_loads_as_published():
    nodes = openb.load_nodes("gpu")
    assert len(nodes) == 1213 and int(nodes.num_gpus.sum()) == 6212
    assert len(openb.load_nodes("all")) == 1523
    pods = openb.load_pods("default", nodes)
    assert len(pods) == 8152 and int(pods.gpu_demand.sum()) == 6_086_800
    assert int(openb.typical_pods(pods).prob.shape[0]) == 35          # OPENB.md section 5
    spec10 = openb.load_pods("gpuspec10", nodes)
    assert int((spec10.model_mask > 0).sum()) == 732
    assert len(openb.load_pods("multigpu20", nodes)) == 8324


def test_a_node_table_takes_a_sub_cluster_and_refuses_node_numbers_out_of_range():
    nodes = openb.load_nodes("gpu")
    part = nodes.take([5, 0, 1212])
    assert part.names == (nodes.names[5], nodes.names[0], nodes.names[1212])
    for field in ("cpu_milli", "memory_mib", "num_gpus", "model"):
        np.testing.assert_array_equal(getattr(part, field), getattr(nodes, field)[[5, 0, 1212]])
    assert part.models == nodes.models and part.path == nodes.path
    for bad in ([1213], [-1], [[0, 1]]):
        with pytest.raises(ValueError, match=r"node numbers in \[0, 1213\)"):
            nodes.take(bad)


@pytest.mark.parametrize("row, where", [
    (("p1", "12x", 1024, 1, 500, ""), "line 3, column 'cpu_milli': '12x' is not an integer"),
    (("p1", 1000, -5, 1, 500, ""), "line 3, column 'memory_mib': -5 is outside"),
    (("p1", 1000, 1024, 1, 0, ""), "line 3, column 'gpu_milli': 0 for a pod with num_gpu=1"),
    (("p1", 1000, 1024, 1, 1001, ""), "line 3, column 'gpu_milli': 1001"),
    (("p1", 1000, 1024, 9, 1000, ""), "line 3, column 'num_gpu': 9 is outside [0, 8]"),
    (("p1", 1000, 1024, 1, 500, "T4|A100"), "line 3, column 'gpu_spec': model 'A100' is on no node"),
    (("p0", 1000, 1024, 1, 500, ""), "line 3, column 'name': 'p0' already on line 2"),
])
def test_malformed_pod_file_names_file_line_column(tmp_path, row, where):
    nodes = small_nodes(tmp_path)
    path = write(tmp_path, "pods.csv", POD_HEADER, [("p0", 1000, 1024, 1, 500, ""), row])
    with pytest.raises(TraceError) as err:
        openb.load_pods(path, nodes)
    assert str(err.value).startswith(path) and where in str(err.value)


def test_malformed_headers_and_node_rows(tmp_path):
    nodes = small_nodes(tmp_path)
    path = write(tmp_path, "pods.csv", "name,cpu_milli,num_gpu,gpu_milli\n", [("p0", 1, 0, 0)])
    with pytest.raises(TraceError, match=r"pods.csv, line 1 \(header\): missing column\(s\) \['memory_mib'\]"):
        openb.load_pods(path, nodes)
    bad = write(tmp_path, "n.csv", NODE_HEADER, [("a", 1000, 10, 2, "")])
    with pytest.raises(TraceError, match=r"n.csv, line 2, column 'model': a node with 2 GPUs needs"):
        openb.load_nodes(bad)
    with pytest.raises(TraceError, match="does not exist"):
        openb.load_nodes(str(tmp_path / "missing.csv"))
    short = write(tmp_path, "s.csv", NODE_HEADER, [("a", 1000, 10)])
    with pytest.raises(TraceError, match=r"s.csv, line 2: the row has 3 fields"):
        openb.load_nodes(short)


def test_optional_pod_columns_and_cpu_only_pods(tmp_path):
    nodes = small_nodes(tmp_path)
    path = write(tmp_path, "p.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n",
                 [("b", 4000, 10, 0, 0), ("a", 1000, 20, 2, 1000)])
    pods = openb.load_pods(path, nodes)
    assert pods.gpu_spec == ("", "") and pods.num_gpus.tolist() == [0, 2]
    assert pods.gpu_demand.tolist() == [0, 2000]


# ---------------------------------------------------------------- filter and assignment

def test_filter_edges(tmp_path):
    nodes = small_nodes(tmp_path)
    spec, state = setup(nodes)
    feas = lambda p, s=state: np.asarray(cluster.feasible(s, p, spec)).tolist()   # noqa: E731
    # Exact fit of CPU and memory is allowed, one milli or MiB more is not.
    assert feas(pod(cpu=32000, mem=65536, num_gpus=0)) == [True, True, False, False]
    assert feas(pod(cpu=32001, num_gpus=0))[0] is False
    assert feas(pod(mem=65537, num_gpus=0))[0] is False
    # GPU model constraint (bit of P100 in the sorted vocabulary) and nodes without GPUs.
    p100 = 1 << nodes.models.index("P100")
    assert feas(pod(milli=300, mask=p100)) == [False, False, True, False]
    # A multi-GPU pod needs that many GPUs with its milli free: idle GPUs for whole ones.
    shared = with_gpus(state, 1, [1000, 1000, 1000, 400])
    assert feas(pod(num_gpus=4), shared)[1] is False
    assert feas(pod(num_gpus=3), shared)[1] is True
    assert feas(pod(num_gpus=1, milli=400), shared) == [True, True, True, False]
    assert feas(pod(num_gpus=1, milli=401), with_gpus(state, 2, [400]))[2] is False
    # The pod limit: fewer than 1001 pods.
    full = state.replace(pods=state.pods.at[0].set(1001))
    assert feas(pod(num_gpus=0), full)[0] is False
    assert feas(pod(num_gpus=0), state.replace(pods=state.pods.at[0].set(1000)))[0] is True
    # Padding never fits.
    assert not any(feas(pod(num_gpus=0, valid=False)))


def test_whole_gpu_pods_take_lowest_indexed_idle_gpus(tmp_path):
    spec, state = setup(small_nodes(tmp_path))
    state = with_gpus(state, 1, [1000, 300, 1000, 1000])
    out = cluster.place(state, spec, pod(num_gpus=2), jnp.int32(1), jnp.int32(0), jnp.bool_(True))
    assert out.gpu_free[:4, 1].tolist() == [0, 300, 0, 1000]
    assert int(out.cpu_free[1]) == 63000 and int(out.pods[1]) == 1
    assert int(out.classes[1]) == 1 << 2                                   # the "2-GPU" class
    same = cluster.place(state, spec, pod(num_gpus=2), jnp.int32(1), jnp.int32(0), jnp.bool_(False))
    assert jax.tree_util.tree_all(jax.tree_util.tree_map(jnp.array_equal, same, state))


def test_shared_gpu_best_fit_least_free_that_fits(tmp_path):
    free = jnp.array([[1000], [500], [350], [500]], jnp.int32)
    assert int(cluster.best_fit_gpu(free, jnp.int32(400))[0]) == 1        # 500 at index 1 before 3
    assert int(cluster.best_fit_gpu(free, jnp.int32(300))[0]) == 2
    # The argmin is the least sufficient GPU of a 1-GPU pod, on any free milli (ties, full
    # GPUs, missing slots, columns where none fits: GPU 0).
    rng = np.random.default_rng(0)
    free = jnp.asarray(rng.choice([0, 100, 350, 500, 650, 1000], size=(8, 500)), jnp.int32)
    for milli in (0, 1, 350, 400, 1000):          # 0: a CPU-only pod, no GPU fits
        want = jnp.argmax(cluster.least_sufficient(free, jnp.int32(milli), 1), axis=0)
        np.testing.assert_array_equal(cluster.best_fit_gpu(free, jnp.int32(milli)), want)


# ---------------------------------------------------------------- the six policies, by hand

def scores_of(name, state, p, spec, key=jax.random.PRNGKey(0)):
    feasible = cluster.feasible(state, p, spec)
    s, g = policies.POLICIES[name](key, state, p, feasible, spec)
    return np.asarray(s).tolist(), np.asarray(g).tolist(), int(cluster.select(s, feasible, state.rank))


def test_dot_product_and_best_fit_by_hand(tmp_path):
    spec, state = setup(small_nodes(tmp_path))
    p = pod(cpu=8000, milli=500)
    # dot = cpu/128000 * 8000/128000 + L/8000 * 500/8000; score = trunc(100 (1 - dot/2))
    s, _, node = scores_of("dot_product", state, p, spec)
    assert s[:3] == [98, 96, 99] and node == 2
    # raw = trunc(100 (1 - (cpu_left/256000 + gpu_left/16000))): 81, 56, 93 -> min-max
    s, _, node = scores_of("best_fit", state, p, spec)
    assert s[:3] == [(81 - 56) * 100 // 37, 0, 100] and node == 2


def test_gpu_clustering_by_hand(tmp_path):
    spec, state = setup(small_nodes(tmp_path))
    put = lambda st, n, p, g=0: cluster.place(st, spec, p, jnp.int32(n), jnp.int32(g), jnp.bool_(True))  # noqa: E731
    state = put(state, 0, pod(milli=500))                       # node 0: share only, L = 1500
    state = put(put(state, 1, pod(milli=500)), 1, pod(num_gpus=2))  # node 1: share + 2-GPU, L = 1500
    s, _, node = scores_of("gpu_clustering", state, pod(milli=300), spec)
    assert s[:3] == [75 + 25 * 6500 // 8000, 50 + 25 * 6500 // 8000, 25 + 25 * 7000 // 8000]
    assert node == 0
    s, _, node = scores_of("gpu_clustering", state, pod(num_gpus=1), spec)   # "1-GPU": no node holds it
    assert s[:3] == [0 + 25 * 6500 // 8000, 0 + 25 * 6500 // 8000, 25 + 25 * 7000 // 8000] and node == 2
    assert scores_of("gpu_clustering", state, pod(num_gpus=0), spec)[0] == [0, 0, 0, 0]


def test_gpu_packing_by_hand(tmp_path):
    spec, state = setup(small_nodes(tmp_path))
    s, _, _ = scores_of("gpu_packing", state, pod(milli=300), spec)
    assert s[:3] == [31, 29, 32]                                    # idle nodes: max(33 - n, n)
    state = with_gpus(state, 1, [1000, 400, 1000, 1000])
    s, g, _ = scores_of("gpu_packing", state, pod(milli=300), spec)
    assert s[1] == 100 - 40 // 10 and g[1] == 1                      # a shared GPU: 96
    s, _, node = scores_of("gpu_packing", state, pod(milli=500), spec)
    assert s[1] == 49 and node == 1                                  # one idle GPU of a used node
    s, _, _ = scores_of("gpu_packing", state, pod(num_gpus=3), spec)
    assert s[1] == 47
    assert scores_of("gpu_packing", state, pod(num_gpus=0), spec)[0] == [0, 0, 0, 0]


def test_fgd_by_hand(tmp_path):
    # One typical shape (1 GPU x 500 milli): a GPU with less than 500 free is a fragment.
    spec, state = setup(small_nodes(tmp_path))
    state = with_gpus(with_gpus(state, 0, [1000, 200]), 1, [1000, 600, 1000, 1000])
    assert np.asarray(cluster.fragmentation(state.gpu_free, state.cpu_free, spec.model,
                                            spec.typical))[:3].tolist() == [200, 0, 0]
    s, g, node = scores_of("fgd", state, pod(milli=200), spec)
    # node 0: on GPU 1 the 200-milli fragment is filled: trunc(100 sigmoid(0.2)) = 54
    # node 1: GPU 0 -> [800, 600, ...] changes nothing (50); GPU 1 -> 400 left, a fragment (45)
    assert s[0] == 54 and g[0] == 1
    assert s[1] == 50 and g[1] == 0
    assert s[2] == 50 and node == 0                             # node 2: 1000 -> 800, still no fragment
    cpu_only = Typical(*(jnp.concatenate([a, b]) for a, b in zip(
        (ONE_SHAPE.cpu_milli, ONE_SHAPE.gpu_milli, ONE_SHAPE.num_gpus, ONE_SHAPE.model_mask,
         ONE_SHAPE.prob * 0.5),
        (jnp.array([1000]), jnp.array([0]), jnp.array([0]), jnp.array([0]), jnp.array([0.5])))))
    spec2, state2 = setup(small_nodes(tmp_path), typical=cpu_only)
    s, _, _ = scores_of("fgd", state2, pod(num_gpus=1), spec2)
    # a whole GPU taken on an idle node: the CPU-only half loses 1000 fragment milli
    assert s[0] == int(100 / (1 + np.exp(-0.5)))


def test_fgd_matches_a_brute_force_oracle():
    """FGD's incremental per-GPU scores against a loop that rebuilds every hypothetical node."""
    rng = np.random.default_rng(0)
    n, g = 40, 8
    num_gpus = rng.choice([1, 2, 4, 8], n)
    frees = np.where(np.arange(g)[:, None] < num_gpus, rng.choice([0, 100, 250, 500, 700, 1000], (g, n)), 0)
    cpu = rng.integers(0, 64000, n)
    model = rng.integers(0, 3, n)
    typ = Typical(cpu_milli=jnp.array([0, 4000, 8000, 2000, 500], jnp.int32),
                  gpu_milli=jnp.array([0, 500, 1000, 250, 1000], jnp.int32),
                  num_gpus=jnp.array([0, 1, 2, 1, 1], jnp.int32),
                  model_mask=jnp.array([0, 0, 0, 0b10, 0], jnp.int32),
                  prob=jnp.array([0.2, 0.3, 0.1, 0.25, 0.15], jnp.float32))
    spec = cluster.Spec(cpu_milli=jnp.full(n, 64000, jnp.int32), memory_mib=jnp.full(n, 10**6, jnp.int32),
                        num_gpus=jnp.asarray(num_gpus, jnp.int32), model=jnp.asarray(model, jnp.int32),
                        gpu_exists=jnp.asarray(np.arange(g)[:, None] < num_gpus),
                        typical=cluster.with_counts(typ))
    state = cluster.empty_state(spec, np.arange(n, dtype=np.int32)).replace(
        gpu_free=jnp.asarray(frees, jnp.int32), cpu_free=jnp.asarray(cpu, jnp.int32))

    def frag(free, c, mdl):
        total = 0.0
        for t in range(5):
            m, k, tc, mask, p = (int(typ.gpu_milli[t]), int(typ.num_gpus[t]), int(typ.cpu_milli[t]),
                                 int(typ.model_mask[t]), float(typ.prob[t]))
            ok = k > 0 and (mask == 0 or (mask >> mdl) & 1) and c >= tc and sum(f >= m for f in free) >= k
            f_t = sum(f for f in free if f < m) if ok else sum(free)
            total += p * f_t
        return total

    for p in (pod(cpu=1000, milli=250), pod(cpu=3000, milli=500), pod(cpu=0, num_gpus=0),
              pod(cpu=2000, num_gpus=2)):
        s, gsel, _ = scores_of("fgd", state, p, spec)
        for j in range(n):
            free = [int(x) for x in frees[:, j]]
            before = frag(free, cpu[j], model[j])
            opts = []
            if int(p.num_gpus) == 1 and int(p.gpu_milli) < 1000:
                for i in range(g):
                    if free[i] >= int(p.gpu_milli):
                        after = list(free)
                        after[i] -= int(p.gpu_milli)
                        opts.append(int(100 / (1 + np.exp(-(before - frag(after, cpu[j] - int(p.cpu_milli), model[j])) / 1000))))
                    else:
                        opts.append(-1)
                want = max(opts)
                if want < 0:
                    continue                                    # nothing fits: the score is unused
                assert gsel[j] == opts.index(want)
            else:
                idle = [i for i in range(g) if free[i] >= 1000][:int(p.num_gpus)]
                if len(idle) < int(p.num_gpus):
                    continue
                after = [0 if i in idle else f for i, f in enumerate(free)]
                want = int(100 / (1 + np.exp(-(before - frag(after, cpu[j] - int(p.cpu_milli), model[j])) / 1000)))
            assert s[j] == want, (j, s[j], want)


def test_ties_go_to_the_smallest_rank(tmp_path):
    rows = [(f"n{i}", 32000, 65536, 2, "T4") for i in range(5)]
    nodes = small_nodes(tmp_path, rows)
    rank = [3, 1, 4, 0, 2]
    spec, state = setup(nodes, rank=rank)
    for name in ("dot_product", "gpu_clustering", "gpu_packing", "best_fit", "fgd"):
        for p in (pod(milli=300), pod(num_gpus=2), pod(num_gpus=0)):
            assert scores_of(name, state, p, spec)[2] == 3, name        # rank 0 is node 3
    # Random picks among the feasible nodes only, and a different node for other keys.
    picks = {scores_of("random", state, pod(milli=300), spec, jax.random.PRNGKey(k))[2] for k in range(40)}
    assert picks == set(range(5))
    blocked = state.replace(cpu_free=state.cpu_free.at[jnp.array([0, 1, 2])].set(0))
    picks = {scores_of("random", blocked, pod(milli=300), spec, jax.random.PRNGKey(k))[2] for k in range(20)}
    assert picks == {3, 4}
    # Its GPU is uniform over the node's fitting GPUs (GPU 1 has 200 free, GPUs 4.. none).
    one = state.replace(gpu_free=state.gpu_free.at[:, 0].set(
        jnp.array([1000, 200, 500, 1000, 0, 0, 0, 0], jnp.int32)))
    feasible = cluster.feasible(one, pod(milli=300), spec)
    gpus = jax.vmap(lambda k: policies.random(k, one, pod(milli=300), feasible, spec)[1][0])(
        jax.random.split(jax.random.PRNGKey(0), 3000))
    counts = np.bincount(np.asarray(gpus), minlength=8)
    assert counts[[1, 4, 5, 6, 7]].sum() == 0 and counts.sum() == 3000
    assert np.all(np.abs(counts[[0, 2, 3]] - 1000) < 100), counts       # 1/3 each, +- 4 sigma
    # One fitting GPU: always it; none fits: GPU 0 (the pod is not bound there).
    for column, want in (([0, 0, 0, 0, 0, 900, 0, 0], 5), ([100, 0, 0, 0, 0, 0, 0, 0], 0)):
        edited = state.replace(gpu_free=state.gpu_free.at[:, 0].set(jnp.array(column, jnp.int32)))
        got = jax.vmap(lambda k: policies.random(k, edited, pod(milli=300), feasible, spec)[1][0])(
            jax.random.split(jax.random.PRNGKey(1), 50))
        assert set(np.asarray(got).tolist()) == {want}, column


def test_select_float_scores_and_masks():
    rank = jnp.array([2, 0, 1], jnp.int32)
    assert int(cluster.select(jnp.array([0.5, 0.5, 0.9]), jnp.array([True, True, False]), rank)) == 1
    assert int(cluster.select(jnp.array([7, 9, 9]), jnp.array([True, True, True]), rank)) == 1
    assert int(cluster.select(jnp.array([jnp.nan, 0.1, 0.2]), jnp.array([True, True, False]), rank)) == 1


# ---------------------------------------------------------------- workload and measurement

def test_workload_reaches_tune_and_is_deterministic():
    nodes = openb.load_nodes("gpu")
    pods = openb.load_pods("default", nodes)
    w = workload.build_workload(pods, nodes, 42, 1.3)
    demand = pods.gpu_demand[w.order]
    target = 1.3 * nodes.total_gpu_milli
    assert demand.sum() <= target
    assert sorted(w.order[:len(pods)].tolist()) == list(range(len(pods)))    # every original once, first
    assert 10_500 < len(w.order) < 11_200
    assert sorted(w.rank.tolist()) == list(range(len(nodes)))
    again = workload.build_workload(pods, nodes, 42, 1.3)
    assert np.array_equal(w.order, again.order) and np.array_equal(w.rank, again.rank)
    other = workload.build_workload(pods, nodes, 43, 1.3)
    assert not np.array_equal(w.order, other.order)
    fewer = workload.build_workload(pods, nodes, 42, 0.5)                  # removal branch
    assert pods.gpu_demand[fewer.order].sum() <= 0.5 * nodes.total_gpu_milli
    assert len(set(fewer.order.tolist())) == len(fewer.order)
    with pytest.raises(ValueError, match="tune=0"):
        workload.build_workload(pods, nodes, 42, 0)


def test_binning_by_hand():
    total_gpus = 10                                                         # 10,000 milli
    arrived = np.array([[0, 40, 60, 200, 260]])                            # 0, 0.4, 0.6, 2.0, 2.6 %
    log = simulator.Log(valid=np.array([[True] * 4 + [False]]), placed=np.ones((1, 5), bool),
                        arrived=arrived, used=np.zeros((1, 5), np.int64), frag=np.zeros((1, 5)),
                        idle=np.zeros((1, 5), np.int64))
    values = np.array([[1.0, 2.0, 4.0, 8.0, 99.0]])
    out = simulator.binned(log, values, total_gpus, 4)
    # pct = round(arrived / 10 / 10): 0, 0, 1, 2 (the padded event is ignored)
    assert out[0, 0] == 1.5 and out[0, 1] == 4.0 and out[0, 2] == 8.0
    assert out[0, 3] == 8.0                                                # empty: events in [2, 4]
    assert np.isnan(out[0, 4])                                             # nothing in [3, 5]


def small_trace(tmp_path, pods=60, seed=0):
    rng = np.random.default_rng(seed)
    rows = [(f"n{i:02d}", int(rng.choice([16000, 32000, 64000])), 262144, int(rng.choice([1, 2, 4, 8])),
             str(rng.choice(["T4", "G2"]))) for i in range(12)]
    nodes = small_nodes(tmp_path, rows)
    prow = []
    for i in range(pods):
        kind = rng.integers(4)
        n, m = [(0, 0), (1, int(rng.choice([250, 500, 700]))), (1, 1000), (int(rng.choice([2, 4])), 1000)][kind]
        prow.append((f"p{i:03d}", int(rng.choice([1000, 4000, 8000])), 1024, n, m,
                     "T4" if rng.random() < 0.1 and n else ""))
    pod_table = openb.load_pods(write(tmp_path, "pods.csv", POD_HEADER, prow), nodes)
    return nodes, pod_table


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=() if name in ("best_fit", "fgd") else pytest.mark.slow)
    for name in policies.POLICIES])
def test_vmap_over_seeds_equals_a_loop_and_is_deterministic(tmp_path, name):
    nodes, pods = small_trace(tmp_path)
    spec = cluster.make_spec(nodes, workload.typical_pods(pods))
    works = [workload.build_workload(pods, nodes, s, 1.3) for s in (1, 2, 3)]
    batch = workload.pod_arrays(pods, works)
    ranks = np.stack([w.rank for w in works])
    keys = jax.vmap(jax.random.PRNGKey)(np.array([1, 2, 3], np.uint32))
    policy = policies.POLICIES[name]
    together = simulator.replay(policy, spec, batch, ranks, keys, chunk=16)
    assert together.placed.any() and (together.valid & ~together.placed).any()   # some fail at 130 %
    for s in range(3):
        one = workload.pod_arrays(pods, [works[s]], length=batch.valid.shape[1])
        alone = simulator.replay(policy, spec, one, ranks[s:s + 1], keys[s:s + 1], chunk=64)
        for field in ("placed", "used", "arrived", "frag"):
            np.testing.assert_array_equal(getattr(alone, field)[0], getattr(together, field)[s])
    again = simulator.replay(policy, spec, batch, ranks, keys, chunk=16)
    np.testing.assert_array_equal(again.used, together.used)
    # used never exceeds the cluster, never decreases (no departures), frag finite and >= 0
    assert (np.diff(together.used, axis=1) >= 0).all() and together.used.max() <= nodes.total_gpu_milli
    assert np.isfinite(together.frag).all() and (together.frag >= -1e-3).all()


def test_cached_fragmentation_and_capacities_stay_consistent(tmp_path):
    nodes, pods = small_trace(tmp_path, pods=80, seed=1)
    spec = cluster.make_spec(nodes, workload.typical_pods(pods))
    w = workload.build_workload(pods, nodes, 7, 1.3)
    batch = workload.pod_arrays(pods, [w])
    step = jax.jit(lambda st, p, k: simulator.pod_step(policies.fgd, spec, st, p, k))
    state = cluster.empty_state(spec, w.rank)
    for t in range(batch.valid.shape[1]):
        state, _ = step(state, jax.tree_util.tree_map(lambda x: x[0, t], batch), jax.random.PRNGKey(t))
    fresh = cluster.fragmentation(state.gpu_free, state.cpu_free, spec.model, spec.typical)
    np.testing.assert_allclose(np.asarray(state.frag), np.asarray(fresh), rtol=1e-6)
    assert (np.asarray(state.cpu_free) >= 0).all() and (np.asarray(state.mem_free) >= 0).all()
    assert (np.asarray(state.gpu_free) >= 0).all()


# ---------------------------------------------------------------- the command

def test_command_writes_results_and_refuses_bad_input_first(tmp_path, capsys):
    nodes, pods = small_trace(tmp_path)
    out, png = tmp_path / "r.json", tmp_path / "r.png"
    result = openb_main(["--nodes", nodes.path, "--pods", pods.path, "--policies", "best_fit,fgd",
                         "--seeds", "2", "--json", str(out), "--png", str(png), "--no-progress",
                         "--cache", "none"])
    saved = json.loads(out.read_text())
    assert saved["seeds"] == [42, 43] and set(saved["policies"]) == {"best_fit", "fgd"}
    assert saved["policies"]["fgd"]["published"] is None              # not a published trace
    assert len(saved["policies"]["fgd"]["curves"]["alloc"]) == 131
    assert png.stat().st_size > 1000 and result["trace"]["num_nodes"] == 12
    assert "FGD" in capsys.readouterr().out
    for argv, message in ((["--policies", "fgd,tetris"], "unknown \\['tetris'\\]"),
                          (["--seeds", "0"], "--seeds 0"),
                          (["--tune", "-1"], "--tune -1.0"),
                          (["--first-seed", str(2**32 - 5)], "must lie in \\[0, 2\\*\\*32\\)"),
                          (["--first-seed", "-1"], "--first-seed -1"),
                          (["--json", str(tmp_path / "no" / "x.json")], "does not exist"),
                          (["--png", str(tmp_path)], "is a directory")):
        with pytest.raises(ValueError, match=message):
            openb_main(argv + ["--no-progress"])
    with pytest.raises(TraceError, match="does not exist"):
        openb_main(["--pods", str(tmp_path / "nope.csv"), "--no-progress"])


def test_published_figures_are_attached_to_the_bundled_traces():
    nodes = openb.load_nodes("gpu")
    pods = openb.load_pods("default", nodes)
    from vte.openb.lab.experiment import published_for
    fgd = published_for(pods, 1.3, nodes)["fgd"]
    assert fgd["alloc"]["end"] == (95.39, 0.08)            # OPENB.md of the artifact's figures
    assert fgd["alloc"]["100"] == (95.23, 0.11) and fgd["alloc"]["seeds"] == list(range(42, 52))
    assert set(fgd) == {"alloc", "frag", "frag_ratio"} and len(fgd["frag"]["curve"]) == 131
    assert published_for(pods, 1.2, nodes) is None
    assert published_for(pods, 1.3, openb.load_nodes("all")) is None


def test_all_seventeen_traces_load_with_their_published_results():
    from vte.openb.lab import published
    from vte.openb.trace import TRACES
    nodes = openb.load_nodes("gpu")
    rows = {"default": 8152, "gpushare40": 8152, "gpuspec33": 8152, "multigpu20": 8324,
            "multigpu30": 8508, "multigpu40": 8746, "multigpu50": 9061, "cpu050": 7439,
            "cpu100": 7853, "cpu200": 8832, "cpu250": 9420}      # the data README's table
    for name in TRACES:
        pods = openb.load_pods(name, nodes)
        assert len(pods) == rows.get(name, 8152), name
    figures = published.bundled()
    assert sorted(figures) == sorted(TRACES)
    for name in TRACES:
        assert sorted(figures[name]) == sorted(policies.POLICIES), name
        for metric in ("alloc", "frag", "frag_ratio"):
            assert figures[name]["fgd"][metric]["seeds"] == list(range(42, 52))


def test_grid_below_100_percent_and_empty_bins_give_null_not_nan(tmp_path):
    nodes, pods = small_trace(tmp_path, pods=30, seed=5)
    from vte.openb.lab.experiment import format_table, run_grid
    result = run_grid(nodes, pods, ["best_fit"], seeds=[1, 2], tune=0.6)
    r = result["policies"]["best_fit"]
    assert result["end_percent"] == 60 and r["alloc_at_100"] is None
    assert r["alloc_at_end"] is None or 0 <= r["alloc_at_end"]["mean"] <= 100
    json.dumps(result, allow_nan=False)                        # valid JSON: no NaN anywhere
    assert format_table(result).splitlines()[2].strip().startswith("BestFit")


def test_policies_replayed_in_threads_give_what_one_at_a_time_gives(tmp_path):
    from vte.openb.lab.experiment import run_grid
    nodes, pods = small_trace(tmp_path, pods=30, seed=5)
    chosen = ["fgd", "random", "best_fit"]
    one, two = (run_grid(nodes, pods, chosen, seeds=[1, 2], workers=w) for w in (1, 2))
    assert list(one["policies"]) == list(two["policies"]) == chosen    # the caller's order
    for name in chosen:
        a, b = one["policies"][name], two["policies"][name]
        assert a.pop("seconds") >= 0 and b.pop("seconds") >= 0
        assert a == b, name


def test_the_comparison_reads_a_published_file(tmp_path):
    """A synthetic published file of two seeds: its means and stds, and the table's diffs."""
    from vte.openb.lab import published
    from vte.openb.lab.experiment import format_table, run_grid
    nodes, pods = small_trace(tmp_path, pods=30, seed=5)
    head = "workload,sc_policy,tune,seed," + ",".join(map(str, range(131))) + "\n"
    body = "".join(f"openb_pod_list_tiny,05-BestFit,{tune},{seed}," + ",".join(
        [str(v)] * 131) + "\n" for tune, seed, v in ((1.3, 42, 10.0), (1.3, 43, 12.0), (1.2, 42, 99)))
    (tmp_path / "analysis_frag_discrete.csv").write_text(head + body)
    figures = published.load(tmp_path)                       # the other two metrics' files absent
    entry = figures["tiny"]["best_fit"]["frag"]
    assert entry["100"] == entry["end"] == (11.0, round(np.std([10, 12], ddof=1), 2))
    assert entry["seeds"] == [42, 43] and entry["curve"][0] == 11.0   # tune 1.2 left out
    result = run_grid(nodes, pods, ["best_fit"], seeds=[1, 2], reference=figures["tiny"])
    r = result["policies"]["best_fit"]
    assert r["published"]["frag"]["end"] == (11.0, 1.41)
    row = [line for line in format_table(result).splitlines() if "BestFit" in line][1]
    assert f"{r['frag_at_end']['mean'] - 11.0:+.2f}" in row and "11.00 ± 1.41" in row
    for metric in ("alloc", "frag", "frag_ratio"):
        for point in ("100", "end"):
            assert r[f"{metric}_at_{point}"] is None or np.isfinite(r[f"{metric}_at_{point}"]["mean"])
    (tmp_path / "analysis_frag_discrete.csv").write_text(head + "x,01-Random,1.3,42,a\n")
    with pytest.raises(ValueError, match="line 2: tune, seed and 0..130 must be numbers"):
        published.load(tmp_path)


def _fake_grid(seeds, published=True):
    """A grid result of the shape run_grid returns, without replaying anything."""
    stat = {"mean": 95.0, "std": 0.1}
    pub = {"alloc": {"100": (95.23, 0.11), "end": (95.39, 0.08)}} if published else None
    policies = {name: {"published": pub, "alloc_at_100": stat, "alloc_at_end": stat,
                       "failed_pods": {"mean": 1.0},
                       "curves": {"alloc": [0.0, 50.0, 90.0], "frag": [0.0, 1.0, 2.0]}}
                for name in ("gpu_clustering", "gpu_packing", "fgd", "runs/mine")}
    return {"trace": {"pods": "default", "nodes": "gpu", "num_nodes": 1213, "num_gpus": 6212},
            "tune": 1.3, "seeds": list(seeds), "end_percent": 130, "policies": policies,
            "seconds": 1.0, "seconds_per_experiment": 0.1, "platform": "cpu", "device": "cpu",
            "jax_version": jax.__version__}


def test_the_table_warns_when_fewer_seeds_than_published_are_compared():
    from vte.openb.lab.experiment import PUBLISHED_SEEDS, format_table
    two = format_table(_fake_grid([42, 43]))
    assert "this grid ran 2 (42, 43)" in two and "--seeds 10" in two
    assert "warning" not in format_table(_fake_grid(PUBLISHED_SEEDS))
    assert "warning" not in format_table(_fake_grid([42, 43], published=False))


def test_every_policy_keeps_its_colour_and_style_whatever_the_order(tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    from vte.openb.lab.experiment import plot, style_of
    styles = {n: (style_of(n)["color"], style_of(n)["ls"], style_of(n)["marker"])
              for n in ("random", "dot_product", "gpu_clustering", "gpu_packing", "best_fit",
                        "fgd")}
    assert len(set(styles.values())) == len(styles)          # no two published ones alike
    assert style_of("runs/mine") == style_of("runs/mine")
    grid = _fake_grid([42])
    seen = []
    real_close = plt.close
    for order in (list(grid["policies"]), list(reversed(grid["policies"]))):
        grid["policies"] = {n: grid["policies"][n] for n in order}
        captured = {}

        def close(fig, captured=captured):
            for line in fig.axes[0].lines:
                captured[line.get_label()] = (line.get_color(), line.get_linestyle())
            real_close(fig)
        plt.close = close
        try:
            plot(grid, str(tmp_path / "g.png"))
        finally:
            plt.close = real_close
        seen.append(captured)
    assert seen[0] == seen[1]
    assert seen[0]["GpuClustering"] != seen[0]["GpuPacking"]


def _timeless(result):
    """A grid's JSON without what depends on when and how fast it ran."""
    drop = {"seconds", "seconds_per_experiment", "runs_computed", "runs_cached"}
    if isinstance(result, dict):
        return {k: _timeless(v) for k, v in result.items() if k not in drop}
    return result


def test_an_interrupted_grid_continues_to_the_same_json(tmp_path, monkeypatch):
    nodes, _ = small_trace(tmp_path, pods=24, seed=3)
    files = []
    for name, seed in (("tiny_a", 3), ("tiny_b", 4)):
        sub = tmp_path / name
        sub.mkdir()
        files.append(str(sub / f"{name}.csv"))
        (sub / f"{name}.csv").write_text(open(small_trace(sub, pods=24, seed=seed)[1].path).read())
    argv = ["--nodes", nodes.path, "--pods", ",".join(files), "--policies", "random,best_fit",
            "--seeds", "2", "--no-progress"]
    whole = openb_main(argv + ["--json", str(tmp_path / "whole"), "--cache", str(tmp_path / "c1")])
    calls, real = [], simulator.replay

    class Stop(Exception):
        """The run killed half-way (an interrupt, a lost machine)."""

    def replay(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise Stop                                         # stopped in the second trace
        return real(*args, **kwargs)
    monkeypatch.setattr(simulator, "replay", replay)
    out = ["--json", str(tmp_path / "part"), "--cache", str(tmp_path / "c2")]
    with pytest.raises(Stop):
        openb_main(argv + out)
    # The other policy of that trace may still be replaying in its thread (a stopped grid
    # cancels what has not started, not what runs): let it end before counting again.
    for thread in threading.enumerate():
        if thread.name.startswith("vte-replay"):
            thread.join()
    assert (tmp_path / "part" / "openb_tiny_a.json").exists()          # the first trace is written
    monkeypatch.setattr(simulator, "replay", lambda *a, **k: calls.append(1) or real(*a, **k))
    calls.clear()
    resumed = openb_main(argv + out)
    # Only the unfinished batches of the second trace: two, or one when the other policy's
    # replay had started before the stop and finished (and was cached) while joined above.
    assert 1 <= len(calls) <= 2
    assert _timeless(resumed) == _timeless(whole)
    for name in ("openb_tiny_a.json", "openb_tiny_b.json", "summary.json"):
        assert (_timeless(json.loads((tmp_path / "part" / name).read_text()))
                == _timeless(json.loads((tmp_path / "whole" / name).read_text())))
    calls.clear()
    again = openb_main(argv + out)
    assert calls == [] and again["tiny_b"]["runs_cached"] == 4     # a repeated grid replays nothing
    openb_main(argv + out + ["--force"])
    assert len(calls) == 4


def test_the_published_ordering_is_checked_only_where_the_paper_separates_policies():
    from vte.openb.lab.experiment import format_summary, ordering
    grid = _fake_grid(range(42, 52))
    pubs = {"gpu_clustering": (91.65, 0.61), "gpu_packing": (91.78, 0.53), "fgd": (95.23, 0.11),
            "runs/mine": None}
    mine = {"gpu_clustering": 91.9, "gpu_packing": 91.7, "fgd": 91.0, "runs/mine": 99.0}
    for name, r in grid["policies"].items():
        r["published"] = {"alloc": {"end": pubs[name], "100": pubs[name]}} if pubs[name] else None
        r["alloc_at_end"] = {"mean": mine[name], "std": 0.1}
    # GpuClustering vs GpuPacking overlap (0.13 apart, stds 1.14): not a pair; FGD vs each is.
    assert ordering(grid) == {"pairs": 2, "reversed": [("fgd", "gpu_clustering"),
                                                       ("fgd", "gpu_packing")]}
    text = format_summary({"default": grid})
    assert "reversed: FGD > GpuClustering, FGD > GpuPacking" in text
    assert "-4.23" in text                                   # FGD's diff at the end: 91.0 - 95.23
