"""The upper bound on GPU allocation: worked out by hand on small clusters, never below a
brute-force offline optimum, and its protocol points on a real trace."""

import itertools

import numpy as np
import pytest

pytest.importorskip("scipy")      # the dev extra installs it (the bound's LP solver)
from vte.openb.lab import bound  # noqa: E402
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
    # Three 810- and three 300-milli shares on three GPUs: no GPU holds 810 + 300, so two
    # 810s and three 300s at best (the milli and per-GPU counts alone would allow 3000).
    ([(1, 1, 1, 810, 0)] * 3 + [(1, 1, 1, 300, 0)] * 3, [(8, 8, 3, 0)], 2 * 810 + 3 * 300),
    # Memory binds likewise; CPU-only pods ask for no GPU.
    ([(1, 9, 1, 1000, 0), (1, 1, 0, 0, 0)], [(8, 8, 1, 0)], 0),
])
def test_the_bound_worked_out_by_hand(pod_rows, node_rows, expected):
    assert lp(pods_table(pod_rows), nodes_table(node_rows)) == pytest.approx(expected)


def placements(pods: PodTable, nodes: NodeTable, every_pod: bool):
    """Every placement, as (vCPU milli free per node, GPU milli free per node's GPUs,
    milli-GPU allocated): each pod on any node and GPUs that fit it, or (unless
    `every_pod`) nowhere. The lists are live: read them before the next one."""
    cpu, mem = [int(x) for x in nodes.cpu_milli], [int(x) for x in nodes.memory_mib]
    gpus = [[1000] * int(g) for g in nodes.num_gpus]

    def go(k, used):
        if k == len(pods):
            yield cpu, gpus, used
            return
        if not every_pod:
            yield from go(k + 1, used)                        # not placed
        c, m, n, milli, mask = (int(x[k]) for x in (pods.cpu_milli, pods.memory_mib,
                                                    pods.num_gpus, pods.gpu_milli,
                                                    pods.model_mask))
        for i in range(len(nodes)):
            if cpu[i] < c or mem[i] < m:
                continue
            if n > 0 and (nodes.model[i] < 0 or (mask and not (mask >> nodes.model[i]) & 1)):
                continue
            for chosen in (itertools.combinations(range(len(gpus[i])), n) if n else [()]):
                if all(gpus[i][g] >= milli for g in chosen):
                    for g in chosen:
                        gpus[i][g] -= milli
                    cpu[i] -= c
                    mem[i] -= m
                    yield from go(k + 1, used + n * milli)
                    cpu[i] += c
                    mem[i] += m
                    for g in chosen:
                        gpus[i][g] += milli

    yield from go(0, 0)


def brute_force(pods: PodTable, nodes: NodeTable) -> int:
    """The offline optimum: every pod on any node and GPUs that fit it, or nowhere."""
    return max(used for _, _, used in placements(pods, nodes, every_pod=False))


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


def test_the_power_experiment_reports_the_least_power_below_every_replay(tmp_path, capsys):
    from tests.test_openb import small_trace
    from vte.openb.__main__ import main as openb_main
    nodes, pods = small_trace(tmp_path)
    result = openb_main(["--nodes", nodes.path, "--pods", pods.path, "--power", "--bound",
                         "--policies", "fgd,pwr,best_fit", "--seeds", "2", "--no-progress"])
    b = result["power_bound"]
    xs = np.asarray(b["x"])
    assert b["step"] == 0.025 and xs[0] == 0.0 and b["defined"][0]
    assert b["power_w"][0] == result["empty_cluster_w"]           # nothing arrived: idle
    for s, seed in enumerate((42, 43)):
        watts, ok = bound.power_bound_curve(pods, nodes, bound_order(pods, nodes, seed), xs)
        assert b["per_seed_w"][s] == [round(float(w), 1) if d else None for w, d in zip(watts, ok)]
    fine = np.asarray(result["policies"]["fgd"]["x"])
    for name, row in result["policies"].items():
        through = b["placed_all_through"][name]
        assert 0 < through <= 1.0
        for x, w in zip(xs, b["power_w"]):
            if w is not None and x <= through:       # the bound holds where every pod was placed
                assert row["power_w"][int(np.argmin(abs(fine - x)))] >= w - 0.1
        closed = b["gap_closed"][name]["plateau"]
        assert closed is None or closed <= 1.0 + 1e-9
    assert b["gap_closed"]["fgd"]["plateau"] in (0.0, None)
    for name, row in result["policies"].items():        # its own placed pods: below it everywhere
        own = b["own"][name]
        assert all(row["power_w"][int(np.argmin(abs(fine - x)))] >= w - 0.1
                   for x, w in zip(xs, own["power_w"]))
        assert own["excess_plateau_pct"] >= 0 and min(own["excess_whole_per_seed_pct"]) >= 0
    assert b["own"]["fgd"]["excess_plateau_pct"] > b["own"]["pwr"]["excess_plateau_pct"]
    assert "least power (LP bound" in capsys.readouterr().out
    from vte.openb.lab import power_experiment
    for bad in (0.003, 0.0, -0.025, True, float("nan"), "0.025"):
        with pytest.raises(ValueError, match=f"bound_step={bad!r}: allowed a positive multiple"):
            power_experiment.measure(nodes, pods, {"fgd": None}, [42], bound=True, bound_step=bad)


def bound_order(pods, nodes, seed):
    from vte.openb.workload import build_workload
    return build_workload(pods, nodes, seed, 1.3).order


# ------------------------------------------------------------ the least power (PWR's model)

POWER_MODELS = ("T4", "V100M16")          # model 0: 10 / 70 W, model 1: 30 / 300 W


def power_nodes(rows) -> NodeTable:
    """rows: (vCPUs, GiB, GPUs, model index or -1) on the T4 / V100M16 vocabulary."""
    import dataclasses
    return dataclasses.replace(nodes_table(rows), models=POWER_MODELS)


def least_power(pods: PodTable, nodes: NodeTable) -> float | None:
    return bound.power_bound(pods.cpu_milli, pods.memory_mib, pods.num_gpus, pods.gpu_milli,
                             pods.model_mask, nodes)


def test_the_empty_bundled_cluster_draws_exactly_its_idle_watts():
    from vte.openb.trace import load_nodes
    empty = np.zeros(0, np.int64)
    assert bound.power_bound(empty, empty, empty, empty, empty, load_nodes("gpu")) == 230_100


@pytest.mark.parametrize("pod_rows, node_rows, expected", [
    # Idle: one T4 (10 W), one V100 (30 W), two sockets of 16 cores (15 W each): 70 W.
    ([], [(32, 8, 1, 0), (32, 8, 1, 1)], 70),
    # One whole-GPU pod: the T4 wakes (+60 W) and its node's socket (+105 W).
    ([(2, 1, 1, 1000, 0)], [(32, 8, 1, 0), (32, 8, 1, 1)], 70 + 60 + 105),
    # ... unless its model list asks for the V100: +270 W.
    ([(2, 1, 1, 1000, 0b10)], [(32, 8, 1, 0), (32, 8, 1, 1)], 70 + 270 + 105),
    # Three 810-milli and three 300-milli shares on four T4: no GPU holds 810 + 300, so four
    # busy GPUs (the milli alone would allow 3.33, the per-GPU counts 3): the patterns.
    ([(2, 1, 1, 810, 0)] * 3 + [(2, 1, 1, 300, 0)] * 3, [(64, 8, 4, 0)],
     4 * 10 + 2 * 15 + 4 * 60 + 105),
    # 17 busy cores (34 vCPUs of CPU-only pods) on a 2-socket node: the replay counts both
    # sockets active, the relaxation 17 / 16 of one (it spreads sockets' watts over cores).
    ([(17, 1, 0, 0, 0), (17, 1, 0, 0, 0)], [(64, 8, 0, -1)], 2 * 15 + 105 * 17 / 16),
    # A node of 33 vCPUs has 17 cores, 16 of them idle when empty: one socket is active
    # even then (what the replay's power model counts).
    ([], [(33, 8, 0, -1)], 120 + 15),
])
def test_the_least_power_worked_out_by_hand(pod_rows, node_rows, expected):
    pods = pods_table(pod_rows) if pod_rows else pods_table(np.zeros((0, 5), np.int64))
    assert least_power(pods, power_nodes(node_rows)) == pytest.approx(expected)


def test_the_least_power_is_undefined_when_not_every_pod_fits():
    nodes = power_nodes([(32, 8, 1, 0)])
    assert least_power(pods_table([(2, 1, 1, 1000, 0)] * 2), nodes) is None   # one GPU, two pods
    assert least_power(pods_table([(2, 1, 1, 1000, 0b10)]), nodes) is None    # no V100 at all


def brute_force_power(pods: PodTable, nodes: NodeTable) -> float | None:
    """The least power of any placement of every pod (`placements`), with the replay's own
    power formulas; None if no placement holds them all."""
    import jax.numpy as jnp
    from vte.openb import power
    table = power.power_model(nodes.models)
    idle = np.where(nodes.model >= 0, np.asarray(table.gpu_idle_w)[np.maximum(nodes.model, 0)], 0)
    busy = np.where(nodes.model >= 0, np.asarray(table.gpu_busy_w)[np.maximum(nodes.model, 0)], 0)

    def watts(cpu, gpus):
        cpu_w = power.cpu_watts(jnp.asarray(cpu), jnp.asarray(nodes.cpu_milli))
        return int(jnp.sum(cpu_w)) + sum(int(busy[i]) if f < 1000 else int(idle[i])
                                         for i, node in enumerate(gpus) for f in node)

    return min((watts(cpu, gpus) for cpu, gpus, _ in placements(pods, nodes, every_pod=True)),
               default=None)


@pytest.mark.parametrize("seed", range(10))
def test_the_least_power_is_never_above_a_brute_force_optimum(seed):
    rng = np.random.default_rng(seed)
    node_rows = [(int(rng.choice([8, 32, 34, 64])), 8, int(rng.integers(0, 3)),
                  int(rng.integers(0, 2))) for _ in range(3)]
    node_rows = [(c, m, g, model if g else -1) for c, m, g, model in node_rows]
    pod_rows = []
    for _ in range(int(rng.integers(1, 5))):
        gpus = int(rng.choice([0, 1, 1, 2]))
        milli = 0 if gpus == 0 else (1000 if gpus == 2 else int(rng.choice([300, 600, 810, 1000])))
        pod_rows.append((int(rng.integers(1, 20)), 1, gpus, milli, int(rng.choice([0, 0, 1, 2]))))
    pods, nodes = pods_table(pod_rows), power_nodes(node_rows)
    exact, lower = brute_force_power(pods, nodes), least_power(pods, nodes)
    if exact is None:
        return                       # no placement of them all: nothing to bound
    empty = least_power(pods_table(np.zeros((0, 5), np.int64)), nodes)
    assert lower is not None and empty - 1e-6 <= lower <= exact + 1e-6


def test_shared_patterns_are_the_maximal_ways_one_gpu_holds_shares():
    got = {tuple(r) for r in bound.shared_patterns([600, 300])}
    assert got == {(1, 1), (0, 3)}                 # 600 + 300 and 3 x 300; 600 alone is not maximal
    assert bound.shared_patterns([810]).tolist() == [[1]]
    with pytest.raises(ValueError, match=r"sizes \[1000\]"):
        bound.shared_patterns([1000])


def test_the_power_bound_takes_the_pods_the_replays_power_is_held_at():
    # Running arrived GPU demand of five pods on a 1000-milli cluster: a CPU-only pod first,
    # then 500, a CPU-only pod, 1000, 1500. At x = 0.5 the replay's curve holds the power
    # of the first pod that brought 500 milli: two pods.
    arrived = np.array([0, 500, 500, 1000, 1500])
    assert [bound.prefix_at(arrived, x, 1000) for x in (0.0, 0.4, 0.5, 0.99, 1.0, 2.0)] == \
        [1, 1, 2, 2, 4, 5]
    assert bound.prefix_at(np.array([300]), 0.2, 1000) == 0


def test_the_power_bound_of_a_replays_own_placed_pods():
    nodes = power_nodes([(32, 8, 1, 0), (32, 8, 1, 1)])
    # Two whole-GPU pods of 1000 milli each on a 2000-milli cluster; the replay failed the first.
    pods = pods_table([(2, 1, 1, 1000, 0b10), (2, 1, 1, 1000, 0)])
    order, xs = np.array([0, 1]), np.array([0.5, 1.0])
    every, ok = bound.power_bound_curve(pods, nodes, order, xs)
    assert ok.all() and every.tolist() == [70 + 270 + 105, 70 + 270 + 60 + 2 * 105]
    own, ok = bound.power_bound_curve(pods, nodes, order, xs, placed=np.array([False, True]))
    assert ok.all() and own.tolist() == [70, 70 + 60 + 105]
    with pytest.raises(ValueError, match=r"placed has shape \(3,\)"):
        bound.power_bound_curve(pods, nodes, order, xs, placed=np.ones(3, bool))
