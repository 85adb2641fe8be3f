"""Power on the OpenB cluster (vte.openb.power): the model on the bundled cluster, PWR and
the PWR+FGD mixes worked out by hand on a small cluster, the replay's power log and the
paper's interpolation."""

import json
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vte import openb
from vte.openb import cluster, power
from vte.openb.lab import simulator
from vte.openb.cluster import Pod, Typical

NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model\n"
# n0: 32 cores' worth of vCPUs (16 physical cores, 1 socket), 2 T4; n1: 2 sockets, 4 T4;
# n2: 1 socket, 1 P100; n3: 1 socket, no GPU.
ROWS = [("n0", 32000, 65536, 2, "T4"), ("n1", 64000, 131072, 4, "T4"),
        ("n2", 16000, 32768, 1, "P100"), ("n3", 8000, 16384, 0, "")]
ONE_SHAPE = Typical(cpu_milli=jnp.array([0], jnp.int32), gpu_milli=jnp.array([500], jnp.int32),
                    num_gpus=jnp.array([1], jnp.int32), model_mask=jnp.array([0], jnp.int32),
                    prob=jnp.array([1.0], jnp.float32))


def pod(cpu=1000, num_gpus=1, milli=1000):
    return Pod(cpu_milli=jnp.int32(cpu), memory_mib=jnp.int32(1024), num_gpus=jnp.int32(num_gpus),
               gpu_milli=jnp.int32(milli if num_gpus else 0), model_mask=jnp.int32(0),
               valid=jnp.bool_(True))


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    path = tmp_path_factory.mktemp("power") / "nodes.csv"
    path.write_text(NODE_HEADER + "".join(",".join(map(str, r)) + "\n" for r in ROWS))
    nodes = openb.load_nodes(str(path))
    spec = cluster.make_spec(nodes, ONE_SHAPE)
    state = cluster.empty_state(spec, np.arange(4, dtype=np.int32))
    return nodes, spec, state, power.power_model(nodes.models)


def with_node(state, node, frees, cpu_free=None):
    col = state.gpu_free[:, node].at[:len(frees)].set(jnp.asarray(frees, jnp.int32))
    state = state.replace(gpu_free=state.gpu_free.at[:, node].set(col))
    if cpu_free is not None:
        state = state.replace(cpu_free=state.cpu_free.at[node].set(cpu_free))
    return state


def twelve_pods(tmp_path):
    """A pod file of twelve pods (GPU shares, whole GPUs, two GPUs, a CPU-only one) for the
    small cluster."""
    rows = [(f"p{i}", 1000 * (1 + i % 3), 1024, n, m, "") for i, (n, m) in
            enumerate([(1, 500), (1, 1000), (0, 0), (2, 1000), (1, 300), (1, 700)] * 2)]
    pods = tmp_path / "pods.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
                    + "".join(",".join(map(str, r)) + "\n" for r in rows))
    return pods


def test_bundled_cluster_draws_the_published_watts():
    nodes = openb.load_nodes("gpu")
    assert nodes.models == power.BUNDLED_MODELS == openb.load_nodes("all").models
    spec = cluster.make_spec(nodes, ONE_SHAPE)
    state = cluster.empty_state(spec, np.arange(len(nodes), dtype=np.int32))
    table = power.power_model(nodes.models)
    cpu, gpu = jax.jit(power.datacenter_power)(state, spec, table)
    assert (int(cpu), int(gpu)) == (55_665, 174_435)          # 230.1 kW exactly, 3,711 sockets
    busy = state.replace(cpu_free=jnp.zeros_like(state.cpu_free),
                         gpu_free=jnp.where(spec.gpu_exists, 999, 0).astype(jnp.int32))
    assert sum(map(int, power.datacenter_power(busy, spec, table))) == 1_474_110
    with pytest.raises(ValueError, match=r"'A100' are not in the per-model table.*add_gpu_model"):
        power.power_model(("T4", "A100"))


def test_node_power_by_hand(small):
    nodes, spec, state, table = small
    cpu, gpu = power.node_power(state, spec, table)
    # idle sockets 1, 2, 1, 1 x 15 W; GPUs 2 x 10, 4 x 10, 1 x 25 W, none
    assert np.asarray(cpu).tolist() == [15, 30, 15, 15]
    assert np.asarray(gpu).tolist() == [20, 40, 25, 0]
    # 2 vCPUs busy on n1 (one core): one socket active; a GPU with 1 milli used draws its max.
    state = with_node(state, 1, [999, 1000, 1000, 1000], cpu_free=62000)
    cpu, gpu = power.node_power(state, spec, table)
    assert int(cpu[1]) == 120 + 15 and int(gpu[1]) == 70 + 3 * 10
    # 17 busy cores (34 vCPUs) need both sockets of n1.
    cpu, _ = power.node_power(with_node(state, 1, [], cpu_free=64000 - 34000), spec, table)
    assert int(cpu[1]) == 240 and int(power.cpu_watts(jnp.int32(64000 - 32000), jnp.int32(64000))) == 135


def test_power_increase_by_hand(small):
    nodes, spec, state, table = small
    # n0: GPU 0 already shared (600 free), one core busy: a 200-milli pod with 1 vCPU adds
    # nothing on GPU 0 (busy already, the socket active already), 60 W on idle GPU 1.
    state = with_node(state, 0, [600, 1000], cpu_free=30000)
    add, gpu = power.power_increase(state, pod(cpu=1000, milli=200), spec, table)
    # n1: one socket wakes (+105), a T4 wakes (+60); n2: +105 and a P100 (+225)
    assert np.asarray(add).tolist()[:3] == [0, 165, 330] and int(gpu[0]) == 0
    # Whole GPUs take idle ones: 2 x (70 - 10) on n1; CPU-only pods only wake sockets.
    add, _ = power.power_increase(state, pod(cpu=1000, num_gpus=2), spec, table)
    assert int(add[1]) == 105 + 120
    add, _ = power.power_increase(state, pod(cpu=1000, num_gpus=0), spec, table)
    assert np.asarray(add).tolist() == [0, 105, 105, 105]
    # Pure: vmap over two states equals each alone.
    both = jax.tree_util.tree_map(lambda a, b: jnp.stack([a, b]), state, small[2])
    many, _ = jax.vmap(lambda s: power.power_increase(s, pod(milli=200), spec, table))(both)
    one, _ = power.power_increase(small[2], pod(milli=200), spec, table)
    np.testing.assert_array_equal(np.asarray(many[1]), np.asarray(one))


def test_pwr_and_the_mixes_by_hand(small):
    nodes, spec, state, table = small
    state = with_node(state, 0, [600, 1000], cpu_free=30000)
    p = pod(cpu=1000, milli=200)
    feasible = cluster.feasible(state, p, spec)
    assert np.asarray(feasible).tolist() == [True, True, True, False]
    key = jax.random.PRNGKey(0)

    def run(a):
        s, g = power.pwr_fgd(a, nodes.models)(key, state, p, feasible, spec)
        return np.asarray(s).tolist()[:3], int(g[0])
    # PWR raw -0, -165, -330 -> (raw + 330) 100 // 330 = 100, 50, 0; its GPU on n0 is GPU 0.
    # FGD (one typical shape, 500 milli): GPU 1 keeps n0 unfragmented (50), GPU 0 would
    # leave 400 stranded (trunc(100 sigmoid(-0.4)) = 40): FGD takes GPU 1; n1, n2: 50.
    assert run(1000) == ([100_000, 50_000, 0], 0)
    assert run(0) == ([50, 50, 50], 1)
    assert run(200) == ([200 * 100 + 800 * 50, 200 * 50 + 800 * 50, 800 * 50], 1)
    assert run(500)[1] == 1 and run(501)[1] == 0               # the larger weight's GPU; ties FGD
    # Every feasible node adding the same watts: PWR scores all 100.
    cpu_only = pod(cpu=1000, num_gpus=0)
    s, _ = power.pwr_score(small[2], cpu_only, cluster.feasible(small[2], cpu_only, spec), spec, table)
    assert np.asarray(s).tolist() == [100, 100, 100, 100]
    for bad in (-1, 1001, 2.5, True):
        with pytest.raises(ValueError, match="the PWR weight must be an integer in"):
            power.pwr_fgd(bad)


def test_pwr_with_any_base_by_hand(small):
    """`pwr_with(base, a)`: a x PWR + (1000 - a) x the base's scores rescaled to [0, 100]
    over the feasible nodes; the base's node and GPU at a = 0, PWR's at 1000."""
    nodes, spec, state, table = small
    state = with_node(state, 0, [600, 1000], cpu_free=30000)
    p = pod(cpu=1000, milli=200)
    feasible = cluster.feasible(state, p, spec)
    key = jax.random.PRNGKey(0)

    def base(scores):
        return lambda *_: (jnp.asarray(scores, jnp.float32), jnp.array([1, 0, 0, 0], jnp.int32))

    def run(a, scores=(1.234, -0.5, 3.0, 99.0)):        # n3 (99) is infeasible: not rescaled
        s, g = power.pwr_with(base(scores), a, nodes.models)(key, state, p, feasible, spec)
        return np.asarray(s)[:3], int(g[0])
    # The base rescaled: (s + 0.5) / 3.5 x 100 = 49.54, 0, 100; PWR 100, 50, 0 (GPU 0 on n0).
    s, g = run(0)
    np.testing.assert_allclose(s, [1000 * 173.4 / 3.5, 0, 100_000], rtol=1e-6)
    assert g == 1 and int(np.argmax(s)) == 2                   # the base's node and GPU
    s, g = run(1000)
    assert s.tolist() == [100_000, 50_000, 0] and g == 0        # PWR exactly, its GPU
    s, g = run(300)
    np.testing.assert_allclose(s, [30_000 + 700 * 173.4 / 3.5, 15_000, 70_000], rtol=1e-6)
    assert run(500)[1] == 1 and run(501)[1] == 0                 # the larger weight's GPU
    masked = float(np.finfo(np.float32).min)                     # a network's masked logit
    for a in (0, 1000):
        s, _ = power.pwr_with(base((1.0, 2.0, 3.0, masked)), a, nodes.models)(key, state, p, feasible, spec)
        assert np.isfinite(np.asarray(s)).all()
    s, _ = run(200, scores=(7.0, 7.0, 7.0, -3.0))                # alike: the base gives 100
    assert s.tolist() == [200 * 100 + 800 * 100, 200 * 50 + 800 * 100, 800 * 100]
    for bad in (-1, 1001, 2.5, True):
        with pytest.raises(ValueError, match="the PWR weight must be an integer in"):
            power.pwr_with(base((0, 0, 0, 0)), bad)


def test_pwr_within_the_bases_margin_by_hand(small):
    """`pwr_within(base, margin)`: PWR's best among the feasible nodes whose base score is
    within `margin` of the best; the base's node at 0, PWR (its ties to the base) at inf;
    always the base's GPU."""
    nodes, spec, state, table = small
    state = with_node(state, 0, [600, 1000], cpu_free=30000)
    p = pod(cpu=1000, milli=200)
    feasible = cluster.feasible(state, p, spec)
    key = jax.random.PRNGKey(0)
    masked = float(np.finfo(np.float32).min)                     # n3 is infeasible

    def run(margin, scores=(1.234, -0.5, 3.0, masked)):
        base = lambda *_: (jnp.asarray(scores, jnp.float32), jnp.array([1, 0, 0, 0], jnp.int32))  # noqa: E731
        s, g = power.pwr_within(base, margin, nodes.models)(key, state, p, feasible, spec)
        s = np.asarray(s)
        assert np.isfinite(s).all() and int(g[0]) == 1           # the base's GPU, always
        return s[:3], int(np.argmax(np.where(np.asarray(feasible), s, -np.inf)))
    # Watts added: n0 0 (a busy GPU), n1 165, n2 330; the base rescaled: 49.54, 0, 100.
    s, node = run(0.0)                    # only n2 (the base's best): PWR over {n2} is 100
    np.testing.assert_allclose(s, [-1, -1, 100_100], rtol=1e-6)
    assert node == 2
    s, node = run(2.0)                    # n0 (1.234 >= 3 - 2) joins: PWR over {n0, n2} 100, 0
    np.testing.assert_allclose(s, [100_000 + 173.4 / 3.5, -1, 100], rtol=1e-6)
    assert node == 0
    s, node = run(float("inf"))           # all: PWR 100, 50, 0, n0
    np.testing.assert_allclose(s, [100_000 + 173.4 / 3.5, 50_000, 100], rtol=1e-6)
    assert node == 0
    s, node = run(10.0, scores=(-20.0, 2.0, 1.0, masked))    # n0 out: n1 (PWR 100) wins
    np.testing.assert_allclose(s, [-1, 100_000 + 100, 0 + 100 * 21 / 22], rtol=1e-6)
    assert node == 1
    # PWR's tie (a pod without GPUs adds the same watts everywhere): the base's order decides.
    cpu_only = pod(cpu=1000, num_gpus=0)
    fits = cluster.feasible(state, cpu_only, spec)
    base = lambda *_: (jnp.array([-20.0, 1.0, 2.0, 1.5]), jnp.zeros(4, jnp.int32))  # noqa: E731
    s, _ = power.pwr_within(base, 10.0, nodes.models)(key, state, cpu_only, fits, spec)
    assert int(np.argmax(np.where(np.asarray(fits), np.asarray(s), -np.inf))) == 2
    for bad in (-1, -0.5, float("nan"), True, "8"):
        with pytest.raises(ValueError, match="margin=.* is invalid: allowed a number >= 0"):
            power.pwr_within(lambda *_: None, bad)


def test_pwr_within_can_fill_the_active_sockets_first(small):
    """`pwr_within(..., fill_sockets=True)`: among PWR's ties, the node whose active sockets
    the pod leaves the fewest idle cores (`socket_slack`), then the base's order."""
    nodes, spec, state, table = small
    # n0 (16 cores, 1 socket): 2 busy cores; n1 (32 cores, 2 sockets): 14 busy; n2, n3 idle.
    state = state.replace(cpu_free=state.cpu_free.at[0].set(28000).at[1].set(36000))
    p = pod(cpu=2000, num_gpus=0)                       # one core, no GPU
    assert np.asarray(power.socket_slack(state, p, spec)).tolist() == [13, 1, 15, 15]
    feasible = cluster.feasible(state, p, spec)
    key = jax.random.PRNGKey(0)
    base = lambda *_: (jnp.array([3.0, 1.0, 2.0, 0.0]), jnp.zeros(4, jnp.int32))  # noqa: E731

    def choice(**kw):
        s, _ = power.pwr_within(base, float("inf"), nodes.models, **kw)(key, state, p, feasible,
                                                                         spec)
        assert np.isfinite(np.asarray(s)).all()
        return int(np.argmax(np.where(np.asarray(feasible), np.asarray(s), -np.inf))), s
    # n0 and n1 add no watts (an active socket has an idle core), n2 and n3 wake one (+105 W).
    assert choice()[0] == 0                             # PWR's tie: the base's best, n0
    node, s = choice(fill_sockets=True)
    assert node == 1                                    # the fuller socket: 1 idle core left
    np.testing.assert_allclose(np.asarray(s)[:2], [(1600 + 2) * 128 + 100, (1600 + 14) * 128 + 100 / 3])


def test_pwr_within_switches_to_the_late_margin_once_the_demand_arrived(small):
    """`pwr_within(..., switch_at=x, late_margin=m)`: the margin while the arrived GPU demand
    is below x of the cluster's GPU milli, m from x on (the same scores as `pwr_within` at
    m); under jit and vmap over states; a bad switch or late margin refused, named."""
    nodes, spec, state, table = small
    state = with_node(state, 0, [600, 1000], cpu_free=30000)
    p = pod(cpu=1000, milli=200)
    feasible = cluster.feasible(state, p, spec)
    key = jax.random.PRNGKey(0)
    masked = float(np.finfo(np.float32).min)
    base = lambda *_: (jnp.array([1.234, -0.5, 3.0, masked]), jnp.array([1, 0, 0, 0], jnp.int32))  # noqa: E731
    capacity = int(spec.total_gpu_milli)                         # 7 GPUs: 7000 milli
    assert capacity == 7000
    switched = power.pwr_within(base, float("inf"), nodes.models, switch_at=0.5, late_margin=0.0)
    early = power.pwr_within(base, float("inf"), nodes.models)
    late = power.pwr_within(base, 0.0, nodes.models)

    def scores(policy, arrived):
        return np.asarray(policy(key, state.replace(arrived=jnp.int32(arrived)), p, feasible,
                                 spec)[0])
    for arrived, same_as in ((0, early), (3499, early), (3500, late), (9100, late)):
        np.testing.assert_array_equal(scores(switched, arrived), scores(same_as, arrived))
    assert np.argmax(scores(switched, 3499)[:3]) == 0            # PWR: n0 adds no watts
    assert np.argmax(scores(switched, 3500)[:3]) == 2            # the base's best
    states = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs),
                                    *[state.replace(arrived=jnp.int32(a)) for a in (0, 5000)])
    batched = jax.jit(jax.vmap(lambda s: switched(key, s, p, feasible, spec)[0]))(states)
    np.testing.assert_array_equal(np.asarray(batched), [scores(early, 0), scores(late, 5000)])
    for bad in (0, -0.5, float("inf"), float("nan"), True, "0.8"):
        with pytest.raises(ValueError, match="switch_at=.* is invalid: allowed None"):
            power.pwr_within(base, 8.0, switch_at=bad)
    with pytest.raises(ValueError, match="late_margin=-1 is invalid: allowed a number >= 0"):
        power.pwr_within(base, 8.0, switch_at=0.8, late_margin=-1)


def test_names_resolve_and_published_names_stay():
    from vte.openb import policies
    assert list(policies.POLICIES) == ["random", "dot_product", "gpu_clustering", "gpu_packing",
                                       "best_fit", "fgd"]
    assert power.policy_by_name("pwr") is power.pwr_fgd(1000)
    assert power.policy_by_name("pwr_fgd:200") is power.pwr_fgd(200)
    assert power.policy_by_name("fgd") is policies.fgd
    assert set(power.POWER_POLICIES) == {"pwr", "pwr_fgd:500", "pwr_fgd:300", "pwr_fgd:200",
                                            "pwr_fgd:100", "pwr_fgd:50", "pwr_fgd:25"}
    for bad in ("pwr_fgd:x", "pwr_fgd:1001", "pwr_fgd:"):
        with pytest.raises(ValueError, match="must be an integer in"):
            power.policy_by_name(bad)
    with pytest.raises(ValueError, match="unknown policy 'nope'"):
        power.policy_by_name("nope")


def test_the_replay_logs_power_and_the_grid_interpolates(small):
    nodes, spec, state, table = small
    # Six pods on the small cluster, one seed, the last one fails (no room left for 4 GPUs).
    shapes = [(4000, 1, 500), (1000, 2, 1000), (2000, 0, 0), (1000, 1, 300), (1000, 1, 1000),
              (1000, 4, 1000)]
    pods = Pod(*(jnp.asarray([[v] for v in col], jnp.int32).T for col in (
        [s[0] for s in shapes], [1024] * 6, [s[1] for s in shapes], [s[2] for s in shapes],
        [0] * 6)), valid=jnp.ones((1, 6), bool))
    log = simulator.replay(power.pwr_fgd(1000, nodes.models), spec, pods,
                           np.arange(4, dtype=np.int32)[None], jax.random.PRNGKey(0)[None], chunk=4,
                           power=table)
    total = log.power_cpu + log.power_gpu
    assert log.placed[0].tolist() == [True] * 5 + [False]
    assert total[0, -1] == total[0, -2] and (np.diff(total[0]) >= 0).all()
    assert total[0, 0] == 160 + 105 + 60            # the first pod wakes one socket, one T4
    # The paper's interpolation: duplicate x keep the first event, ends are held.
    xs = np.array([0.0, 0.5, 1.0])
    got = power.on_grid(np.array([0, 100, 100, 300]), np.array([5.0, 7.0, 9.0, 11.0]),
                        np.ones(4, bool), 400, xs)
    assert got.tolist() == [5.0, 9.0, 11.0]
    assert power.grid().shape == (201,) and power.grid()[-1] == 1.0
    curves = power.curves_on_grid(log, int(spec.total_gpu_milli), top=1.0, step=0.25)
    out = power.summary({"fgd": curves, "pwr": curves}, int(spec.total_gpu_milli))
    assert out["pwr"]["savings_at_end_pct"] == 0.0
    assert out["pwr"]["savings_plateau_per_seed_pct"] == [0.0]     # one seed, the same replay
    assert out["pwr"]["savings_whole_per_seed_pct"] == [0.0]
    assert out["pwr"]["savings_at_end_per_seed_pct"] == [0.0]
    # x = 1.0 (7000 milli arrived) lies between the 5th pod (3800) and the failed 6th (7800):
    # 3800 milli allocated either side.
    assert out["fgd"]["grar"] == pytest.approx(3800 / 7000, abs=1e-4)
    # Failed pods on the grid: none up to the 5th pod (3800 milli), then interpolated towards
    # the failed 6th (7800): at x = 0.75 (5250 milli) and 1.0 (7000).
    assert curves["failed"][0, :3].tolist() == [0.0] * 3
    assert curves["failed"][0, 3:] == pytest.approx([(5250 - 3800) / 4000, (7000 - 3800) / 4000])


def entry(savings, grar):
    """A judged policy's record: plateau savings (%) and GRAR at x = 1.0, per seed."""
    return {"savings_plateau_pct": {"mean": float(np.mean(savings))},
            "savings_plateau_per_seed_pct": savings, "grar_per_seed": grar,
            "grar": float(np.mean(grar))}


def test_the_front_is_judged_on_the_mean_and_seed_by_seed():
    """`dominance`: a learned policy beats a mix on the mean when it saves at least as much
    and allocates more; seed by seed, some learned policy must do both on each seed."""
    from vte.openb.lab.power_experiment import dominance

    result = {"seeds": [42, 43], "policies": {
        "fgd": entry([0.0, 0.0], [0.96, 0.96]),
        "pwr_fgd:200": entry([10.0, 12.0], [0.90, 0.92]),
        "pwr_fgd:100": entry([11.5, 11.5], [0.80, 0.80]),
        "a": entry([11.0, 11.0], [0.95, 0.91]),      # beats :200 on the mean, on seed 42 only
        "b": entry([9.0, 13.0], [0.89, 0.93])}}      # beats :200 on seed 43 only
    got = dominance(result, ["a", "b"])["per_mix"]
    assert got["pwr_fgd:200"]["best"] == "a" and got["pwr_fgd:200"]["seeds_higher"] == 1
    assert got["pwr_fgd:200"]["front_per_seed"] == [["a"], ["b"]]
    assert got["pwr_fgd:200"]["seeds_front"] == 2
    assert got["pwr_fgd:200"]["single"] == "a" and got["pwr_fgd:200"]["seeds_single"] == 1
    # :100 saves 11.5 on each seed: neither saves that much on the mean; b does on seed 43.
    assert got["pwr_fgd:100"]["best"] is None
    assert got["pwr_fgd:100"]["front_per_seed"] == [[], ["b"]]
    assert got["pwr_fgd:100"]["seeds_front"] == 1
    assert got["pwr_fgd:100"]["single"] == "b" and got["pwr_fgd:100"]["seeds_single"] == 1
    # A policy that does it on both seeds is the single one.
    result["policies"]["c"] = entry([12.0, 12.5], [0.91, 0.93])
    both = dominance(result, ["a", "b", "c"])["per_mix"]["pwr_fgd:200"]
    assert both["single"] == "c" and both["seeds_single"] == 2 and both["seeds_front"] == 2
    del result["policies"]["c"]
    # A result written before per-seed savings were recorded: no seed-by-seed reading.
    for entry_ in result["policies"].values():
        del entry_["savings_plateau_per_seed_pct"]
    old = dominance(result, ["a", "b"])["per_mix"]["pwr_fgd:200"]
    assert old["seeds_front"] is None and old["single"] is None and old["seeds_single"] is None
    assert old["seeds_higher"] == 1
    # Such a result has no whole reading either: refused, naming it; so is an unknown one.
    with pytest.raises(ValueError, match="'whole'.*savings_whole_pct"):
        dominance(result, ["a", "b"], "whole")
    with pytest.raises(ValueError, match="'tail'"):
        dominance(result, ["a", "b"], "tail")


def test_the_seed_table_counts_each_traces_front_per_mix():
    """`seed_table`: per mix and trace, the seeds on which the trace's front dominates the
    mix and the one policy's count, bold on every seed; "-" for a mix a trace lacks; the
    last row says whether a trace's front takes every mix on every seed."""
    from vte.openb.lab.power_experiment import seed_table

    fgd = entry([0.0, 0.0], [0.96, 0.96])
    one = {"seeds": [42, 43], "learned": ["a", "b"], "policies": {
        "fgd": fgd, "pwr": entry([12.0, 12.0], [0.90, 0.90]),
        "pwr_fgd:200": entry([10.0, 12.0], [0.90, 0.92]),
        "a": entry([11.0, 11.0], [0.95, 0.91]),                  # :200 on seed 42 only
        "b": entry([9.0, 13.0], [0.89, 0.93])}}                  # :200 on seed 43 only
    two = {"seeds": [42, 43], "learned": ["c", "d"], "policies": {
        "fgd": fgd, "pwr": entry([12.0, 12.0], [0.90, 0.90]),
        "c": entry([12.0, 12.5], [0.91, 0.93]),                  # PWR on both seeds
        "d": entry([1.0, 0.0], [0.97, 0.96])}}         # FGD's GRAR on both, saves on 42
    lines = seed_table({"t1": one, "t2": two}).splitlines()
    assert lines[0] == "| mix (plateau) | `t1` | `t2` |"
    assert lines[2] == "| PWR | 1 (1) | **2** (**2**) |"     # PWR alone first; b on seed 43
    assert lines[3] == "| PWR 200 | **2** (1) | - |"                   # the front, not one
    assert lines[4] == "| every mix, every seed | no (2) | **yes** (1) |"
    assert lines[5] == "| at FGD's GRAR, more savings than the mixes there | 0 (0) | 1 (1) |"
    # A result written before per-seed savings were recorded: nothing to count, said so.
    del one["policies"]["a"]["savings_plateau_per_seed_pct"]
    lines = seed_table({"t1": one, "t2": two}).splitlines()
    assert lines[2] == "| PWR | n/a | **2** (**2**) |"
    assert lines[4] == "| every mix, every seed | n/a | **yes** (1) |"
    assert lines[5] == "| at FGD's GRAR, more savings than the mixes there | n/a | 1 (1) |"
    # A trace without mixes claims no mix; at FGD's GRAR it is judged against FGD alone.
    bare = {"seeds": [42], "learned": ["c"], "policies": {"fgd": entry([0.0], [0.96]),
                                                          "c": entry([1.0], [0.96])}}
    assert seed_table({"t3": bare}).splitlines()[2:] == [
        "| every mix, every seed | - |",
        "| at FGD's GRAR, more savings than the mixes there | **1** (**1**) |"]


def test_at_fgds_grar_the_front_must_save_more_than_every_mix_that_gets_there():
    """`dominance`'s `fgd_grar`: on each seed, a learned policy counts when it allocates at
    least FGD's GRAR there and saves more than FGD and than every mix that also reaches
    FGD's GRAR on that seed; the strict reading (more than any mix saves anywhere) apart."""
    from vte.openb.lab.power_experiment import dominance

    result = {"seeds": [42, 43], "policies": {
        "fgd": entry([0.0, 0.0], [0.96, 0.96]),
        "pwr": entry([14.0, 14.0], [0.90, 0.90]),          # never at FGD's GRAR
        "pwr_fgd:25": entry([3.0, 5.0], [0.97, 0.95]),     # at FGD's GRAR on seed 42 only
        "a": entry([2.0, 1.0], [0.965, 0.97]),             # under :25's 3 % on 42; 43 yes
        "b": entry([4.0, 0.5], [0.98, 0.96]),              # both (equal GRAR counts on 43)
        "c": entry([0.0, 9.0], [0.99, 0.959])}}            # no saving on 42, under on 43
    got = dominance(result, ["a", "b", "c"])
    at = got["fgd_grar"]
    assert at["front_per_seed"] == [["b"], ["a", "b"]]
    assert at["seeds_front"] == 2 and at["single"] == "b" and at["seeds_single"] == 2
    assert at["mix_savings_per_seed"] == [3.0, 0.0]
    # The strict reading: FGD's GRAR on the mean with more than PWR alone's 14 %: no.
    assert got["most_mix_savings"] == 14.0 and not got["beats_every_mix_at_fgd_grar"]
    # Without b nothing passes seed 42; without per-seed savings nothing is judged.
    assert dominance(result, ["a", "c"])["fgd_grar"]["front_per_seed"] == [[], ["a"]]
    for entry_ in result["policies"].values():
        del entry_["savings_plateau_per_seed_pct"]
    assert dominance(result, ["a", "b", "c"])["fgd_grar"] is None


def test_the_whole_reading_sees_what_the_plateau_does_not(tmp_path):
    """`summary` records the savings over x 0.2..1.0 beside the plateau's, per seed, and
    `dominance(..., "whole")` judges the front on them: a policy that saves on the plateau
    and gives it all back at the end beats the mix on the plateau reading only."""
    from vte.openb.lab.power_experiment import dominance
    xs = power.grid(top=1.0, step=0.1)                       # 0, 0.1, ..., 1.0
    late = xs > 0.8 + 1e-9                                   # 0.9 and 1.0

    def curves(watts, used):
        p = np.asarray(watts, np.float64)[None]              # one seed
        return {"x": xs, "power": p, "cpu": p * 0, "gpu": p,
                "used": np.full((1, len(xs)), used, np.float64)}
    fgd = np.full(len(xs), 100.0)
    mix = np.full(len(xs), 90.0)                             # 10 % less everywhere
    switched = np.where(late, 100.0, 88.0)                   # 12 % less until 0.8, then 0
    out = power.summary({"fgd": curves(fgd, 950), "pwr_fgd:200": curves(mix, 900),
                         "a": curves(switched, 920)}, capacity=1000)
    a, m = out["a"], out["pwr_fgd:200"]
    assert a["savings_plateau_per_seed_pct"] == [12.0] and m["savings_plateau_per_seed_pct"] == [10.0]
    # x 0.2..1.0: seven points at 12 %, two at 0 %; the mix 10 % at all nine.
    assert a["savings_whole_per_seed_pct"] == [round(7 * 12 / 9, 2)]
    assert a["savings_whole_pct"]["mean"] == round(7 * 12 / 9, 2)
    assert m["savings_whole_per_seed_pct"] == [10.0]
    assert a["savings_at_end_per_seed_pct"] == [0.0] and m["savings_at_end_per_seed_pct"] == [10.0]
    result = {"seeds": [42], "policies": out}
    plateau = dominance(result, ["a"])["per_mix"]["pwr_fgd:200"]
    whole = dominance(result, ["a"], "whole")["per_mix"]["pwr_fgd:200"]
    assert plateau["seeds_front"] == 1 and plateau["best"] == "a"
    assert whole["seeds_front"] == 0 and whole["best"] is None
    assert whole["savings"] == 10.0
    # The front drawn on either reading; a result without the reading is refused first.
    from vte.openb.lab.power_experiment import plot_front
    named = {"seeds": [42], "policies": {"fgd": out["fgd"], "pwr_fgd:200": m,
                                         "learned+pwr_within@12": a}}
    for reading in ("plateau", "whole"):
        png = tmp_path / f"{reading}.png"
        plot_front({"t": named}, ["learned+pwr_within@12"], str(png), reading)
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    del out["fgd"]["savings_whole_pct"]
    with pytest.raises(ValueError, match="t's \\['fgd'\\] have no savings_whole_pct"):
        plot_front({"t": named}, ["learned+pwr_within@12"], str(tmp_path / "old.png"), "whole")
    assert not (tmp_path / "old.png").exists()


def test_openb_power_measures_prints_and_refuses_bad_input(small, tmp_path, capsys):
    """`python -m vte.openb --power`, through the benchmark that wraps it."""
    from benchmarks import openb_power
    nodes = small[0]
    pods = twelve_pods(tmp_path)
    out, png = tmp_path / "p.json", tmp_path / "p.png"
    result = openb_power.main(["--nodes", nodes.path, "--pods", str(pods), "--seeds", "2",
                               "--policies", "fgd,pwr", "--json", str(out), "--png", str(png),
                               "--no-progress", "--chunk", "8"])
    saved = json.loads(out.read_text())
    assert saved == json.loads(json.dumps(result)) and png.stat().st_size > 0
    assert saved["empty_cluster_w"] == 160 and saved["seeds"] == [42, 43]
    fgd, pwr = saved["policies"]["fgd"], saved["policies"]["pwr"]
    assert len(fgd["x"]) == 201 and fgd["savings_at_end_pct"] == 0.0 and fgd["published"] is None
    assert 0 < pwr["grar"] <= 1 and len(pwr["grar_per_seed"]) == 2
    assert "pwr" in capsys.readouterr().out
    with pytest.raises(ValueError, match="'fgd' must be among them"):
        openb_power.main(["--policies", "pwr,best_fit"])
    with pytest.raises(ValueError, match=r"unknown \['pwr_fgd'\]"):
        openb_power.main(["--nodes", nodes.path, "--pods", str(pods), "--policies", "fgd,pwr_fgd"])


def test_the_command_replays_pwr_within_a_bases_margin_by_name(small, tmp_path):
    """`python -m vte.openb --policies pwr_within:<M>:<base>` replays `power.pwr_within`
    over the named base (the learned front's points by name); a bad margin or base is
    refused, naming it, before any file is read."""
    from vte.openb.lab import power_experiment
    from vte.openb.__main__ import main as openb_main
    from vte.openb.policies import POLICIES
    nodes = small[0]
    pods = twelve_pods(tmp_path)
    names = ["fgd", "pwr_within:8:fgd", "pwr_within:inf:fgd", "pwr_within:0.5:best_fit",
             "pwr_within:inf@0.3/0:fgd", "pwr_within:inf@0.3/0+sockets:fgd"]
    result = openb_main(["--nodes", nodes.path, "--pods", str(pods), "--seeds", "2", "--power",
                         "--policies", ",".join(names), "--no-progress", "--chunk", "8"])
    fgd, best_fit = POLICIES["fgd"], POLICIES["best_fit"]
    direct = power_experiment.measure(
        nodes, openb.load_pods(str(pods), nodes),
        {"fgd": fgd, "pwr_within:8:fgd": power.pwr_within(fgd, 8, nodes.models),
         "pwr_within:inf:fgd": power.pwr_within(fgd, float("inf"), nodes.models),
         "pwr_within:0.5:best_fit": power.pwr_within(best_fit, 0.5, nodes.models),
         "pwr_within:inf@0.3/0:fgd": power.pwr_within(fgd, float("inf"), nodes.models,
                                                      switch_at=0.3, late_margin=0.0),
         "pwr_within:inf@0.3/0+sockets:fgd": power.pwr_within(
             fgd, float("inf"), nodes.models, switch_at=0.3, late_margin=0.0,
             fill_sockets=True)},
        [42, 43], 1.3, chunk=8)
    assert list(result["policies"]) == names
    for name in names:
        ours, theirs = result["policies"][name], direct["policies"][name]
        for key in ("power_w", "grar_per_seed", "savings_plateau_per_seed_pct"):
            assert ours[key] == theirs[key], (name, key)
    savings = [result["policies"][n]["savings_plateau_pct"]["mean"] for n in names[:3]]
    assert savings[0] == 0 < savings[1] < savings[2]      # the margin reaches the replay
    curve = {n: np.asarray(result["policies"][n]["power_w"]) for n in names}
    x = np.asarray(result["policies"]["fgd"]["x"])
    switched = curve["pwr_within:inf@0.3/0:fgd"]    # PWR's watts until x = 0.3, FGD's after
    assert (switched[x < 0.3] == curve["pwr_within:inf:fgd"][x < 0.3]).all()
    assert not (switched == curve["pwr_within:inf:fgd"]).all()
    missing = ["--pods", str(tmp_path / "nope.csv"), "--no-progress"]    # the name is refused first
    for bad in ("pwr_within:x:fgd", "pwr_within:-1:fgd", "pwr_within:nan:fgd", "pwr_within:8",
                "pwr_within:8:", "pwr_within:8@0.8:fgd", "pwr_within:8@0/4:fgd",
                "pwr_within:8@0.8/-1:fgd", "pwr_within:8@x/4:fgd", "pwr_within:+sockets:fgd",
                "pwr_within:8+socket:fgd"):
        with pytest.raises(ValueError, match=re.escape(
                f"{bad!r} is invalid: allowed 'pwr_within:<M>:<base>' or")):
            openb_main(["--policies", f"fgd,{bad}"] + missing)
    for bad in ("pwr_within:8:nope", "pwr_within:8:plan:fgd", "pwr_within:8:pwr_within:8:fgd"):
        with pytest.raises(ValueError, match=r"unknown \[" + f"{bad!r}"):
            openb_main(["--policies", f"fgd,{bad}"] + missing)


def test_the_environment_reports_power_and_weighs_it_by_the_preference(tmp_path):
    """info's watts follow the datacenter's; the reward is (1 - w) GPUs - w kW added, w from
    the params (vmap-able) and in the observation; an invalid action stays below every valid
    one at any w."""
    from tests.test_openb import small_trace
    from vte.openb import env as oenv
    nodes, pods = small_trace(tmp_path, pods=12, seed=3)
    params = oenv.make_params(nodes, pods, seeds=[5])
    with pytest.raises(ValueError, match=r"power_weight=1.5 is invalid: allowed a number in \[0, 1\]"):
        oenv.make_params(nodes, pods, seeds=[5], power_weight=1.5)
    weights = jnp.array([0.0, 0.5, 1.0], jnp.float32)

    def episode_step(w, action_of):
        p = params.replace(power_weight=w)
        obs, state = oenv.reset(jax.random.PRNGKey(0), p)
        mask = obs.action_mask
        a = action_of(mask)
        obs2, state2, reward, *_, info = oenv.step_env(jax.random.PRNGKey(1), state, a, p)
        before = sum(power.datacenter_power(state.nodes, state.cluster, p.power))
        return obs.preference, reward, info, before, mask

    run = jax.jit(jax.vmap(episode_step, in_axes=(0, None)), static_argnums=1)
    first = lambda mask: jnp.argmax(mask).astype(jnp.int32)                  # noqa: E731
    invalid = lambda mask: jnp.argmin(mask).astype(jnp.int32)                # noqa: E731
    pref, reward, info, before, mask = run(weights, first)
    np.testing.assert_array_equal(np.asarray(pref), np.asarray(weights))
    added = np.asarray(info["power_added_w"])
    np.testing.assert_array_equal(np.asarray(info["power_w"]) - np.asarray(before), added)
    assert (added > 0).all() and bool(info["placed"][0])
    gpus = float(info["gpus_allocated"][0])
    np.testing.assert_allclose(np.asarray(reward), (1 - weights) * gpus - weights * added / 1000,
                               rtol=1e-6)
    assert not bool(mask[0].all())
    bad_reward = np.asarray(run(weights, invalid)[1])
    # Every valid node's reward at each w: the invalid one is exactly the penalty (1) below
    # the worst of them, capped at 0, whether w is batched (the step's `cond` on the
    # params a `select`) or one shared w (a real `cond`, skipped at w = 0).
    def every_action(w, by_hand=None):
        """Every action's reward from the first state at params' preference w (or, with
        `by_hand`, at that preference set on the state after the reset)."""
        p = params.replace(power_weight=w)
        obs, state = oenv.reset(jax.random.PRNGKey(0), p)
        if by_hand is not None:
            state = state.replace(power_weight=jnp.float32(by_hand))
        actions = jnp.arange(obs.action_mask.shape[0], dtype=jnp.int32)
        rewards = jax.vmap(lambda a: oenv.step_env(jax.random.PRNGKey(1), state, a, p)[2])(actions)
        return rewards, obs.action_mask
    rewards, masks = jax.jit(jax.vmap(every_action))(weights)
    worst = np.min(np.where(np.asarray(masks), np.asarray(rewards), np.inf), axis=1)
    np.testing.assert_allclose(bad_reward, np.minimum(worst, 0) - 1.0, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(rewards)[~np.asarray(masks)],
                               np.repeat(np.minimum(worst, 0) - 1.0,
                                         (~np.asarray(masks)).sum(axis=1)), rtol=1e-6)
    for i, w in enumerate(weights):
        alone, alone_mask = jax.jit(every_action)(w)
        np.testing.assert_array_equal(np.asarray(alone_mask), np.asarray(masks[i]))
        np.testing.assert_allclose(np.asarray(alone), np.asarray(rewards[i]), rtol=1e-6)
    assert worst[2] < 0 and bad_reward[0] == -1.0   # at w = 1 the worst valid one is below 0

    # Params without a preference, a state's w set to 1 by hand: valid actions are scored at
    # w = 1 and every invalid one still lies at least the penalty below all of them.
    by_hand, hand_mask = jax.jit(lambda: every_action(jnp.float32(0.0), by_hand=1.0))()
    by_hand, hand_mask = np.asarray(by_hand), np.asarray(hand_mask)
    np.testing.assert_allclose(by_hand[hand_mask], np.asarray(rewards)[2][hand_mask], rtol=1e-6)
    assert (by_hand[~hand_mask] <= by_hand[hand_mask].min() - 1.0 + 1e-6).all()
