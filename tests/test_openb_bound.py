"""The upper bound on GPU allocation: worked out by hand on small clusters, never below a
brute-force offline optimum, and its protocol points on a real trace."""

import itertools

import numpy as np
import pytest

pytest.importorskip("scipy")      # the dev extra installs it (the bound's LP solver)
from vte.openb import bound  # noqa: E402
from vte.openb.trace import NodeTable, PodTable  # noqa: E402


def nodes_table(rows) -> NodeTable:
    """rows: (cores, GiB, GPUs, model index or -1)."""
    rows = np.asarray(rows, np.int64)
    return NodeTable(path="test", names=tuple(f"n{i}" for i in range(len(rows))),
                     cpu_milli=(rows[:, 0] * 1000).astype(np.int32),
                     memory_mib=(rows[:, 1] * 1024).astype(np.int32),
                     num_gpus=rows[:, 2].astype(np.int32), model=rows[:, 3].astype(np.int32),
                     models=("A", "B"))


def pods_table(rows) -> PodTable:
    """rows: (cores, GiB, GPUs, per-GPU milli, model mask)."""
    rows = np.asarray(rows, np.int64)
    return PodTable(path="test", names=tuple(f"p{i}" for i in range(len(rows))),
                    cpu_milli=(rows[:, 0] * 1000).astype(np.int32),
                    memory_mib=(rows[:, 1] * 1024).astype(np.int32),
                    num_gpus=rows[:, 2].astype(np.int32), gpu_milli=rows[:, 3].astype(np.int32),
                    model_mask=rows[:, 4].astype(np.int32), gpu_spec=("",) * len(rows))


def lp(pods: PodTable, nodes: NodeTable) -> float:
    return bound.lp_bound(pods.cpu_milli, pods.memory_mib, pods.num_gpus, pods.gpu_milli,
                          pods.model_mask, nodes)


@pytest.mark.parametrize("pod_rows, node_rows, expected", [
    # Two 600-milli pods cannot share one GPU: 600, not 1000 (the per-GPU count, j = 1).
    ([(1, 1, 1, 600, 0), (1, 1, 1, 600, 0)], [(8, 8, 1, 0)], 600),
    # Three 400-milli pods on one GPU: two fit (j = 2): 800.
    ([(1, 1, 1, 400, 0)] * 3, [(8, 8, 1, 0)], 800),
    # CPU binds: 4 cores for a 4-core 1-GPU pod or a 4-core half-GPU pod: 1000.
    ([(4, 1, 1, 1000, 0), (4, 1, 1, 500, 0)], [(4, 8, 2, 0)], 1000),
    # The model list: the B-only pod cannot use the A node.
    ([(1, 1, 1, 1000, 0b10), (1, 1, 1, 1000, 0)], [(8, 8, 1, 0)], 1000),
    # A 2-GPU pod needs a node with 2 GPUs; two 1-GPU nodes do not hold it.
    ([(1, 1, 2, 1000, 0)], [(8, 8, 1, 0), (8, 8, 1, 0)], 0),
    # Memory binds likewise; CPU-only pods ask for no GPU.
    ([(1, 9, 1, 1000, 0), (1, 1, 0, 0, 0)], [(8, 8, 1, 0)], 0),
])
def test_the_bound_worked_out_by_hand(pod_rows, node_rows, expected):
    assert lp(pods_table(pod_rows), nodes_table(node_rows)) == pytest.approx(expected)


def brute_force(pods: PodTable, nodes: NodeTable) -> int:
    """The offline optimum: every pod on any node and GPUs that fit it, or nowhere."""
    best = 0

    def go(k, cpu, mem, gpus, used):
        nonlocal best
        best = max(best, used)
        if k == len(pods):
            return
        go(k + 1, cpu, mem, gpus, used)                       # not placed
        c, m, n, milli, mask = (int(x[k]) for x in (pods.cpu_milli, pods.memory_mib,
                                                    pods.num_gpus, pods.gpu_milli,
                                                    pods.model_mask))
        for i in range(len(nodes)):
            if cpu[i] < c or mem[i] < m:
                continue
            if n == 0:
                cpu[i] -= c
                mem[i] -= m
                go(k + 1, cpu, mem, gpus, used)
                cpu[i] += c
                mem[i] += m
                continue
            if nodes.model[i] < 0 or (mask and not (mask >> nodes.model[i]) & 1):
                continue
            for chosen in itertools.combinations(range(len(gpus[i])), n):
                if all(gpus[i][g] >= milli for g in chosen):
                    for g in chosen:
                        gpus[i][g] -= milli
                    cpu[i] -= c
                    mem[i] -= m
                    go(k + 1, cpu, mem, gpus, used + n * milli)
                    cpu[i] += c
                    mem[i] += m
                    for g in chosen:
                        gpus[i][g] += milli

    go(0, [int(x) for x in nodes.cpu_milli], [int(x) for x in nodes.memory_mib],
       [[1000] * int(g) for g in nodes.num_gpus], 0)
    return best


@pytest.mark.parametrize("seed", range(12))
def test_the_bound_is_never_below_the_offline_optimum(seed):
    rng = np.random.default_rng(seed)
    node_rows = [(int(rng.integers(2, 9)), int(rng.integers(2, 9)), int(rng.integers(0, 3)),
                  int(rng.integers(0, 2))) for _ in range(2)]
    node_rows = [(c, m, g, model if g else -1) for c, m, g, model in node_rows]
    pod_rows = []
    for _ in range(int(rng.integers(2, 6))):
        gpus = int(rng.choice([0, 1, 1, 2]))
        milli = 0 if gpus == 0 else (1000 if gpus == 2 else int(rng.choice([250, 400, 600, 1000])))
        pod_rows.append((int(rng.integers(1, 5)), int(rng.integers(1, 5)), gpus, milli,
                         int(rng.choice([0, 0, 1, 2]))))
    pods, nodes = pods_table(pod_rows), nodes_table(node_rows)
    assert lp(pods, nodes) >= brute_force(pods, nodes) - 1e-6


def test_the_protocol_points_on_a_bundled_trace():
    from vte.openb.trace import load_nodes, load_pods
    from vte.openb.workload import build_workload
    nodes = load_nodes("gpu")
    pods = load_pods("default", nodes)
    order = build_workload(pods, nodes, 42).order
    k = bound.arrived_prefix_100(pods, order, nodes.total_gpu_milli)
    arrived = np.cumsum(pods.gpu_demand[order]) / nodes.total_gpu_milli * 100
    assert round(arrived[k - 1]) == 100 and round(arrived[k]) > 100
    b = bound.allocation_bound(pods, nodes, order)
    # Nothing allocates more than arrived, nor more than the cluster; FGD's published
    # 95.2 / 95.4 % are below it.
    assert 95.4 <= b["100"] <= min(100.0, arrived[k - 1] + 1e-9)
    assert b["100"] <= b["end"] <= 100.0


def test_the_replay_command_reports_the_bound_and_each_policys_share_of_the_gap(tmp_path, capsys):
    from tests.test_openb import small_trace
    from vte.openb.__main__ import main as openb_main
    nodes, pods = small_trace(tmp_path)
    result = openb_main(["--nodes", nodes.path, "--pods", pods.path, "--policies",
                         "random,fgd", "--seeds", "2", "--no-progress", "--cache", "none",
                         "--bound"])
    by_seed = [bound.allocation_bound(pods, nodes, bound_order(pods, nodes, s)) for s in (42, 43)]
    for p in ("100", "end"):
        assert result["bound"][p]["per_seed"] == [round(b[p], 3) for b in by_seed]
        b = float(np.mean([x[p] for x in by_seed]))
        rows = result["policies"]
        r, f = rows["random"][f"alloc_at_{p}"]["mean"], rows["fgd"][f"alloc_at_{p}"]["mean"]
        assert b >= f - 1e-9 and b >= r - 1e-9
        assert rows["fgd"]["gap_share"]["random"][p] == pytest.approx((f - r) / (b - r), abs=1e-4)
        assert rows["random"]["gap_share"]["random"][p] == 0.0
        assert rows["fgd"]["gap_share"]["fgd"][p] == 0.0
    out = capsys.readouterr().out
    assert "upper bound (LP" in out and "share of the gap" in out
    with pytest.raises(ValueError, match="give one of them"):
        openb_main(["--nodes", nodes.path, "--pods", pods.path, "--bound", "--power",
                    "--policies", "fgd", "--no-progress"])


def bound_order(pods, nodes, seed):
    from vte.openb.workload import build_workload
    return build_workload(pods, nodes, seed, 1.3).order
