"""The lookahead planner (`vte.openb.lab.lookahead`): worked by hand on two-node clusters, the
base policy itself with one candidate or before `start`, deterministic, under jit and vmap,
and from the command line."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vte.openb import cluster, policies, workload
from vte.openb.lab import lookahead, simulator
from vte.openb.__main__ import main as openb_main
from vte.openb.cluster import Typical
from tests.test_openb import pod, setup, small_nodes, small_trace, with_gpus


def most_free(key, state, pod, feasible, spec):
    """A base policy that spreads: the node with the most free milli-GPU."""
    del key, feasible
    return jnp.sum(state.gpu_free, axis=0), cluster.best_fit_gpu(state.gpu_free, pod.gpu_milli)


def current_frag(state, spec):
    """`state` with every node's fragmentation recomputed (`with_gpus` leaves it stale)."""
    return state.replace(frag=cluster.fragmentation(state.gpu_free, state.cpu_free,
                                                    spec.model, spec.typical))


def one_shape(milli):
    return cluster.with_counts(Typical(
        cpu_milli=jnp.array([0], jnp.int32), gpu_milli=jnp.array([milli], jnp.int32),
        num_gpus=jnp.array([1], jnp.int32), model_mask=jnp.array([0], jnp.int32),
        prob=jnp.array([1.0], jnp.float32)))


@pytest.mark.parametrize("future_milli, why, regret", [
    # on n0 the next whole-GPU pod fails: 1000 vs 2000 milli allocated, and n0's 700 and
    # n1's 300 free milli are fragments at the end: V(n0) = 1.0 - 1.0, V(n1) = 2.0 - 0
    (1000, "allocation", [2.0, 0.0]),
    # both allocate 1500; on n1 the end leaves 0 fragment, on n0 200 + 300:
    # V(n0) = 1.5 - 0.5, V(n1) = 1.5 - 0
    (500, "fragmentation", [0.5, 0.0]),
])
def test_planner_worked_by_hand_on_two_nodes(tmp_path, future_milli, why, regret):
    # n0: one idle GPU; n1: one GPU with 300 milli free. The pod asks 300 milli: spreading
    # (the base) puts it on n0, the planner on n1.
    nodes = small_nodes(tmp_path, [("n0", 32000, 65536, 1, "T4"), ("n1", 32000, 65536, 1, "T4")])
    spec, state = setup(nodes, one_shape(future_milli))
    state = current_frag(with_gpus(state, 1, [300]), spec)
    the_pod = pod(milli=300)
    feasible = cluster.feasible(state, the_pod, spec)
    key = jax.random.PRNGKey(0)
    base_scores, _ = most_free(key, state, the_pod, feasible, spec)
    assert int(cluster.select(base_scores, feasible, state.rank)) == 0
    plan = lookahead.planner(most_free, candidates=2, futures=1, horizon=1)
    scores, gpu = jax.jit(plan)(key, state, the_pod, feasible, spec)
    # The planner's choice scores candidates + 1, the base's order candidates - i elsewhere.
    assert scores.tolist() == [2, 3], why
    assert gpu.tolist() == [0, 0]
    assert int(cluster.select(scores, feasible, state.rank)) == 1
    # The same choice with its regrets, in GPUs (OPENB.md section 12).
    with_regret = lookahead.planner_regrets(most_free, candidates=2, futures=1, horizon=1)
    scores_r, gpu_r, got = jax.jit(with_regret)(key, state, the_pod, feasible, spec)
    assert scores_r.tolist() == scores.tolist() and gpu_r.tolist() == gpu.tolist()
    np.testing.assert_allclose(np.asarray(got), regret, atol=1e-6)


def test_pods_first_prefers_the_candidate_whose_futures_fail_fewer_pods(tmp_path):
    # n0: 32 cores, n1: 8 cores, one idle GPU each. The pod in hand asks 8 cores and no GPU;
    # the future pod 30 cores and no GPU. On n0 the future pod fits nowhere (24 and 8 cores
    # left); on n1 it fits n0. No GPU is allocated either way, and every GPU is a fragment
    # at the end either way (the 30-core shape fits no node then): a tie the base's order
    # breaks (n0), unless the pods bound decide (n1).
    nodes = small_nodes(tmp_path, [("n0", 32000, 65536, 1, "T4"), ("n1", 8000, 65536, 1, "T4")])
    shape = cluster.with_counts(Typical(
        cpu_milli=jnp.array([30000], jnp.int32), gpu_milli=jnp.array([0], jnp.int32),
        num_gpus=jnp.array([0], jnp.int32), model_mask=jnp.array([0], jnp.int32),
        prob=jnp.array([1.0], jnp.float32)))
    spec, state = setup(nodes, shape)
    the_pod = pod(cpu=8000, num_gpus=0)
    feasible = cluster.feasible(state, the_pod, spec)
    key = jax.random.PRNGKey(0)
    for pods_first, node in ((False, 0), (True, 1)):
        plan = lookahead.planner(most_free, candidates=2, futures=1, horizon=1,
                                 pods_first=pods_first)
        scores, _ = jax.jit(plan)(key, state, the_pod, feasible, spec)
        assert int(cluster.select(scores, feasible, state.rank)) == node, pods_first
    with pytest.raises(ValueError, match="pods_first=1 is invalid: allowed True or False"):
        lookahead.planner(most_free, pods_first=1)
    # The choice by evidence sees the failed pod only through a pod value: the futures are
    # equal in GPUs and fragmentation, so n0 (the base's best) stays; at 1000 milli-GPU a pod,
    # n1 gains 1000 on both futures (sd 0) and wins, and n0's regret is one GPU.
    for pod_value, node, regret in ((0.0, 0, [0.0, 0.0]), (1000.0, 1, [1.0, 0.0])):
        plan = lookahead.planner_regrets(most_free, candidates=2, futures=2, horizon=1,
                                         confidence=1.0, pod_value=pod_value)
        scores, _, got = jax.jit(plan)(key, state, the_pod, feasible, spec)
        assert int(cluster.select(scores, feasible, state.rank)) == node, pod_value
        np.testing.assert_allclose(np.asarray(got), regret, atol=1e-6)


def test_regrets_are_infinite_off_the_candidates_and_zero_on_an_unplanned_choice(tmp_path):
    # Three nodes, two candidates: the third node is never compared. Then one candidate
    # (no planning): regret 0 on the base's choice, +inf elsewhere; no node feasible:
    # +inf everywhere. Never NaN.
    nodes = small_nodes(tmp_path, [(f"n{i}", 32000, 65536, 1, "T4") for i in range(3)])
    spec, state = setup(nodes, one_shape(1000))
    state = current_frag(with_gpus(state, 1, [300]), spec)
    key = jax.random.PRNGKey(0)
    the_pod = pod(milli=300)
    feasible = cluster.feasible(state, the_pod, spec)
    two = jax.jit(lookahead.planner_regrets(most_free, candidates=2, futures=2, horizon=2))
    _, _, regret = two(key, state, the_pod, feasible, spec)
    assert int(np.sum(np.isfinite(regret))) == 2 and float(np.nanmin(regret)) == 0.0
    assert not np.any(np.isnan(regret))
    one = jax.jit(lookahead.planner_regrets(most_free, candidates=1))
    scores, _, regret = one(key, state, the_pod, feasible, spec)
    choice = int(cluster.select(scores, feasible, state.rank))
    assert regret[choice] == 0.0 and int(np.sum(np.isfinite(regret))) == 1
    none = jnp.zeros_like(feasible)
    for plan in (one, two):
        _, _, regret = plan(key, state, the_pod, none, spec)
        assert np.all(np.isinf(regret)) and np.all(np.asarray(regret) > 0)


def test_planner_with_one_candidate_or_before_start_is_its_base(tmp_path):
    nodes, pods = small_trace(tmp_path)
    spec = cluster.make_spec(nodes, workload.typical_pods(pods))
    works = [workload.build_workload(pods, nodes, s, 1.3) for s in (1, 2)]
    batch = workload.pod_arrays(pods, works)
    ranks = np.stack([w.rank for w in works])
    keys = jax.vmap(jax.random.PRNGKey)(np.array([1, 2], np.uint32))
    base = simulator.replay(policies.fgd, spec, batch, ranks, keys, chunk=32)
    for plan in (lookahead.planner(policies.fgd, candidates=1),
                 lookahead.planner(policies.fgd, candidates=3, futures=2, horizon=2, start=10.0)):
        log = simulator.replay(plan, spec, batch, ranks, keys, chunk=32)
        for field in ("placed", "used", "frag"):
            np.testing.assert_array_equal(getattr(log, field), getattr(base, field))


def _opaque(base):
    """`base` as a policy the planner cannot see is node-local (its generic path)."""
    return lambda *args: base(*args)


@pytest.mark.parametrize("name, block", [("fgd", lookahead.ROLL_BLOCK), ("fgd", 2),
                                         pytest.param("gpu_packing", lookahead.ROLL_BLOCK,
                                                      marks=pytest.mark.slow)])
def test_node_local_rollouts_choose_exactly_as_full_rescoring(tmp_path, monkeypatch, name, block):
    # block 2: a horizon of 5 rolled out in three scans (2, 2 and 1 pods), each recomputing
    # the columns of the pods still to come only.
    monkeypatch.setattr(lookahead, "ROLL_BLOCK", block)
    nodes, pods = small_trace(tmp_path, pods=50)
    spec = cluster.make_spec(nodes, workload.typical_pods(pods))
    works = [workload.build_workload(pods, nodes, 5, 1.3)]
    batch, ranks = workload.pod_arrays(pods, works), np.stack([w.rank for w in works])
    keys = jax.vmap(jax.random.PRNGKey)(np.array([5], np.uint32))
    base = policies.POLICIES[name]
    assert base in policies.NODE_LOCAL
    fast, full = (simulator.replay(lookahead.planner(b, candidates=3, futures=3, horizon=5),
                                   spec, batch, ranks, keys, chunk=64) for b in (base, _opaque(base)))
    for field in ("placed", "used", "frag"):
        np.testing.assert_array_equal(getattr(fast, field), getattr(full, field))
    # An opaque base whose futures are played by the node-local policy: its candidates and
    # the node-local rollouts, the same choices again.
    split = simulator.replay(lookahead.planner(_opaque(base), candidates=3, futures=3, horizon=5,
                                               rollouts=base), spec, batch, ranks, keys, chunk=64)
    for field in ("placed", "used", "frag"):
        np.testing.assert_array_equal(getattr(split, field), getattr(fast, field))


def test_the_rollout_policy_is_the_one_that_places_the_futures(tmp_path):
    # A spreading base (most_free) whose futures FGD plays: other choices than with its own
    # rollouts, and the same with FGD's node-local rollouts as with FGD rescoring every node.
    nodes, pods = small_trace(tmp_path, pods=50)
    spec = cluster.make_spec(nodes, workload.typical_pods(pods))
    works = [workload.build_workload(pods, nodes, 5, 1.3)]
    batch, ranks = workload.pod_arrays(pods, works), np.stack([w.rank for w in works])
    keys = jax.vmap(jax.random.PRNGKey)(np.array([5], np.uint32))
    own, fast, full = (
        simulator.replay(lookahead.planner(most_free, candidates=3, futures=3, horizon=5,
                                           rollouts=r), spec, batch, ranks, keys, chunk=64)
        for r in (None, policies.fgd, _opaque(policies.fgd)))
    assert not np.array_equal(own.placed, fast.placed)
    for field in ("placed", "used", "frag"):
        np.testing.assert_array_equal(getattr(fast, field), getattr(full, field))


def test_the_choice_by_evidence_worked_by_hand():
    # Candidate 0 is the base's best. Gains over it (milli-GPU allocated less fragmented,
    # per future): candidate 1 +1000, +1000, -1000, +1000 (mean 500, sample sd 1000, standard
    # error 500); candidate 2 +300 on every future (sd 0); candidate 3 invalid.
    used = jnp.array([[5000] * 4, [6000, 6000, 4000, 6000], [5300] * 4, [9000] * 4], jnp.int32)
    frag = jnp.zeros((4, 4), jnp.float32)
    valid = jnp.array([True, True, True, False])
    bound = jnp.full((4, 4), 10, jnp.int32)
    evidence = jax.jit(lookahead._by_evidence, static_argnums=(4, 5))

    def choose(used, frag, valid, z, bound=bound, pod_value=0.0):
        return evidence(used, frag, bound, valid, z, pod_value)
    assert int(choose(used, frag, valid, 0.9)) == 1      # 500 > 0.9 x 500: the larger mean
    assert int(choose(used, frag, valid, 1.1)) == 2      # 500 < 550: candidate 1 fails
    # Fragmentation counts as allocation lost: 400 more milli fragmented on candidate 2.
    assert int(choose(used, frag.at[2].set(400.0), valid, 1.1)) == 0   # nothing passes
    # Gains of 0 never move the choice (no evidence), whatever z.
    assert int(choose(jnp.full((4, 4), 5000, jnp.int32), frag, valid, 1e-6)) == 0
    # Every candidate on the base's best alone: no NaN, candidate 0.
    assert int(choose(used, frag, jnp.array([True, False, False, False]), 2.0)) == 0
    # Pods bound: candidate 2's futures bind one pod fewer each. At 200 milli-GPU a pod its
    # gain is 300 - 200 = 100 on every future, still above any z; at 300 it is 0 (none
    # passes at z = 1.1); without a pod value the pods do not count.
    fewer = bound.at[2].add(-1)
    assert int(choose(used, frag, valid, 1.1, fewer, 200.0)) == 2
    assert int(choose(used, frag, valid, 1.1, fewer, 300.0)) == 0
    assert int(choose(used, frag, valid, 1.1, fewer)) == 2
    # Equal GPUs, one more pod bound on candidate 1 in three futures of four (mean 750 at
    # 1000 a pod, sd 500, standard error 250): it passes at z = 2.9, not at z = 3.1.
    more = bound.at[1].add(jnp.array([1, 1, 0, 1]))
    same = jnp.full((4, 4), 5000, jnp.int32)
    assert int(choose(same, frag, valid, 2.9, more, 1000.0)) == 1
    assert int(choose(same, frag, valid, 3.1, more, 1000.0)) == 0


@pytest.mark.parametrize("kwargs, message", [
    ({"confidence": -1.0}, "confidence=-1.0 is invalid: allowed a number in [0, 10]"),
    ({"confidence": 11}, "confidence=11 is invalid: allowed a number in [0, 10]"),
    ({"confidence": 2.0, "futures": 1}, "confidence=2.0 needs futures >= 2"),
    ({"confidence": 2.0, "pods_first": True}, "confidence=2.0 and pods_first are two different"),
    ({"confidence": 2.0, "pod_value": -1}, "pod_value=-1 is invalid: allowed a number in [0, 100000]"),
    ({"confidence": 2.0, "pod_value": 2e5}, "pod_value=200000.0 is invalid: allowed a number in"),
    ({"pod_value": 500}, "pod_value=500.0 counts in the choice by evidence only"),
])
def test_the_evidence_settings_are_checked(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        lookahead.planner(policies.fgd, **kwargs)


@pytest.mark.slow
def test_node_local_policies_score_a_node_from_its_column_alone(tmp_path):
    nodes, pods = small_trace(tmp_path)
    spec = cluster.make_spec(nodes, workload.typical_pods(pods))
    work = workload.build_workload(pods, nodes, 7, 1.3)
    batch = workload.pod_arrays(pods, [work])
    state = cluster.empty_state(spec, jnp.asarray(work.rank))
    step = jax.jit(simulator.pod_step, static_argnums=0)
    for t in range(30):                                   # a cluster partly filled by Random
        the_pod = jax.tree_util.tree_map(lambda x: x[0, t], batch)
        state, _ = step(policies.random, spec, state, the_pod, jax.random.PRNGKey(t))
    assert 0 < int(cluster.used_milli(state, spec)) < int(spec.total_gpu_milli)
    key = jax.random.PRNGKey(0)
    tables, column = (jax.jit(f, static_argnums=0) for f in (lookahead.shape_tables,
                                                             lookahead.node_column))
    for base in policies.NODE_LOCAL:
        whole = tables(base, key, state, spec)
        for node in range(len(nodes)):
            for w, c in zip(whole, column(base, key, state, spec, node)):
                np.testing.assert_array_equal(np.asarray(w)[:, node], np.asarray(c))


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    """A planner's replay of two seeds of a 12-node trace, twice; and the base's."""
    nodes, pods = small_trace(tmp_path_factory.mktemp("plan"), pods=80)
    spec = cluster.make_spec(nodes, workload.typical_pods(pods))
    works = [workload.build_workload(pods, nodes, s, 1.3) for s in (3, 4)]
    batch = workload.pod_arrays(pods, works)
    ranks = np.stack([w.rank for w in works])
    keys = jax.vmap(jax.random.PRNGKey)(np.array([3, 4], np.uint32))
    plan = lookahead.planner(policies.fgd, candidates=3, futures=4, horizon=4)
    runs = [simulator.replay(plan, spec, batch, ranks, keys, chunk=32) for _ in range(2)]
    return plan, spec, batch, ranks, keys, runs, simulator.replay(policies.fgd, spec, batch, ranks, keys, chunk=32)


def test_planner_replay_is_deterministic_and_differs_from_its_base(planned):
    plan, spec, batch, ranks, keys, (a, b), base = planned
    for field in ("placed", "used", "frag"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert not np.array_equal(a.used, base.used)            # it decided otherwise somewhere
    assert (np.diff(a.used, axis=1) >= 0).all() and a.used.max() <= int(spec.total_gpu_milli)
    assert np.isfinite(a.frag).all()


@pytest.mark.slow
def test_planner_under_vmap_equals_single_calls(planned):
    plan, spec, batch, ranks, keys, _, _ = planned
    states = jax.vmap(lambda r: cluster.empty_state(spec, r))(jnp.asarray(ranks))
    the_pod = jax.tree_util.tree_map(lambda x: x[:, 0], batch)
    feasible = jax.vmap(cluster.feasible, (0, 0, None))(states, the_pod, spec)
    together = jax.jit(jax.vmap(plan, (0, 0, 0, 0, None)))(keys, states, the_pod, feasible, spec)
    single = jax.jit(plan)
    for s in range(2):
        one = single(keys[s], *jax.tree_util.tree_map(lambda x: x[s], (states, the_pod, feasible)), spec)
        for x, y in zip(one, together):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y)[s])


@pytest.mark.parametrize("kwargs, message", [
    ({"candidates": 0}, "candidates=0 is invalid: allowed an integer in [1, 64]"),
    ({"futures": 257}, "futures=257 is invalid: allowed an integer in [1, 256]"),
    ({"horizon": 2.5}, "horizon=2.5 is invalid"),
    ({"candidates": True}, "candidates=True is invalid"),
    ({"start": -0.1}, "start=-0.1 is invalid: allowed a number in [0, 10]"),
])
def test_planner_settings_are_checked(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        lookahead.planner(policies.fgd, **kwargs)


def test_futures_are_drawn_from_the_typical_pods():
    typ = cluster.with_counts(Typical(
        cpu_milli=jnp.array([1000, 0], jnp.int32), gpu_milli=jnp.array([250, 1000], jnp.int32),
        num_gpus=jnp.array([1, 2], jnp.int32), model_mask=jnp.array([0, 3], jnp.int32),
        prob=jnp.array([0.75, 0.25], jnp.float32)))
    spec = cluster.Spec(cpu_milli=jnp.zeros(1, jnp.int32), memory_mib=jnp.zeros(1, jnp.int32),
                        num_gpus=jnp.zeros(1, jnp.int32), model=jnp.zeros(1, jnp.int32),
                        gpu_exists=jnp.zeros((8, 1), bool), typical=typ)
    pods = lookahead.sample_futures(jax.random.PRNGKey(1), spec, 64, 64)
    assert pods.gpu_milli.shape == (64, 64) and bool(pods.valid.all())
    first = np.asarray(pods.gpu_milli) == 250
    assert abs(first.mean() - 0.75) < 0.02
    np.testing.assert_array_equal(np.asarray(pods.num_gpus), np.where(first, 1, 2))
    np.testing.assert_array_equal(np.asarray(pods.model_mask), np.where(first, 0, 3))
    np.testing.assert_array_equal(np.asarray(pods.cpu_milli), np.where(first, 1000, 0))
    assert not np.asarray(pods.memory_mib).any()


def test_command_replays_a_planner_beside_its_base_and_checks_its_settings_first(tmp_path):
    nodes, pods = small_trace(tmp_path)
    argv = ["--nodes", nodes.path, "--pods", pods.path, "--seeds", "1", "--no-progress",
            "--cache", "none"]
    # --plan-pods-first reaches the planner (its choices: the hand-worked test above).
    seen = []
    real = lookahead.planner

    def spy(*args, **kwargs):
        seen.append((kwargs.get("pods_first"), kwargs.get("rollouts"), kwargs.get("confidence"),
                     kwargs.get("pod_value")))
        return real(*args, **kwargs)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(lookahead, "planner", spy)
        result = openb_main(argv + ["--policies", "fgd,plan:fgd", "--plan-candidates", "2",
                                    "--plan-futures", "2", "--plan-horizon", "3",
                                    "--plan-pods-first"])
        assert seen == [(True, None, 0.0, 0.0)]
        split = openb_main(argv + ["--policies", "plan:best_fit", "--plan-candidates", "2",
                                   "--plan-futures", "2", "--plan-horizon", "3",
                                   "--plan-rollouts", "fgd", "--plan-confidence", "1.5",
                                   "--plan-pod-value", "250"])
        assert seen[1] == (False, policies.fgd, 1.5, 250.0)
    # The planner's settings are recorded beside its rows; a grid without a planner has none.
    assert result["plan"] == {"candidates": 2, "futures": 2, "horizon": 3, "start": 0.0,
                              "pods_first": True, "rollouts": None, "confidence": 0.0,
                              "pod_value": 0.0}
    assert (split["plan"]["rollouts"], split["plan"]["confidence"],
            split["plan"]["pod_value"]) == ("fgd", 1.5, 250.0)
    assert "plan" not in openb_main(argv + ["--policies", "fgd"])
    rows = result["policies"]
    assert list(rows) == ["fgd", "plan:fgd"]
    assert rows["plan:fgd"]["alloc_at_end"]["mean"] > 0 and rows["plan:fgd"]["runs_computed"] == 1
    for bad, message in ((["--policies", "fgd,plan:tetris"], "unknown \\['plan:tetris'\\]"),
                         (["--policies", "plan:fgd", "--plan-futures", "0"], "futures=0 is invalid"),
                         (["--policies", "plan:fgd", "--plan-start", "11"], "start=11.0 is invalid"),
                         (["--policies", "plan:fgd", "--plan-confidence", "1", "--plan-futures", "1"],
                          "--plan-confidence=1.0 is invalid: allowed 0 with --plan-pods-first or "
                          "--plan-futures 1"),
                         (["--policies", "plan:fgd", "--plan-pod-value", "100"],
                          "--plan-pod-value=100.0 is invalid: allowed 0 unless the planner chooses"),
                         (["--policies", "plan:fgd", "--plan-rollouts", "plan:fgd"],
                          "--plan-rollouts 'plan:fgd': allowed a published policy"),
                         (["--policies", "plan:fgd", "--plan-rollouts", "tetris"],
                          "--plan-rollouts 'tetris': allowed a published policy")):
        with pytest.raises(ValueError, match=message):
            openb_main(argv + bad)
