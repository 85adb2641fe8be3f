"""The OpenB replay as an RL environment: API, masks, invalid actions, auto-reset, and an
episode under a published policy equal to the replay's."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vte.openb import env as oenv
from vte.openb import policies, workload
from vte.openb.lab import simulator
from tests.test_openb import small_trace


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    return small_trace(tmp_path_factory.mktemp("trace"), pods=40, seed=3)


@pytest.fixture(scope="module")
def params(trace):
    nodes, pods = trace
    return oenv.make_params(nodes, pods, seeds=[5, 6, 7])


STEP = jax.jit(oenv.step)
STEP_ENV = jax.jit(oenv.step_env)
RESET = jax.jit(oenv.reset)


@pytest.mark.slow   # ~25 s of compilation (the observation computes FGD's gain)
def test_reset_and_step_shapes_masks_and_vmap(params):
    n = params.num_nodes
    obs, state = RESET(jax.random.PRNGKey(0), params)
    assert params.encoding == "agnostic"                         # the default: 4 GPU columns
    assert obs.nodes.shape == (n, 16 + 4) and obs.nodes.dtype == jnp.float32
    assert obs.pod.shape == (5,) and obs.action_mask.shape == (n + 1,)
    mask = np.asarray(obs.action_mask)
    assert mask[:-1].any() and not mask[-1]                     # a node fits: no "cannot place"
    keys = jax.random.split(jax.random.PRNGKey(1), 6)
    # Compiled here (eager equals jitted for both environments: tests/test_contract.py).
    obs_b, states = jax.jit(jax.vmap(oenv.reset, (0, None)))(keys, params)
    actions = jnp.argmax(obs_b.action_mask, axis=-1).astype(jnp.int32)
    out = jax.jit(jax.vmap(oenv.step, (0, 0, 0, None)))(keys, states, actions, params)
    for s in range(6):
        one = STEP(keys[s], jax.tree_util.tree_map(lambda x: x[s], states), actions[s], params)
        np.testing.assert_array_equal(np.asarray(one[2]), np.asarray(out[2][s]))
        np.testing.assert_array_equal(np.asarray(one[0].nodes), np.asarray(out[0].nodes[s]))
    assert np.isfinite(np.asarray(out[0].nodes)).all()
    from vte.openb import cluster
    fresh = cluster.fragmentation(state.nodes.gpu_free, state.nodes.cpu_free, state.cluster.model,
                                  state.cluster.typical)
    np.testing.assert_allclose(np.asarray(state.nodes.frag), np.asarray(fresh), rtol=1e-6)
    again = RESET(jax.random.PRNGKey(0), params)[1]
    assert int(again.workload) == int(state.workload)           # deterministic per key


def test_invalid_actions_fail_the_pod_change_nothing_and_are_penalised(params):
    obs, state = RESET(jax.random.PRNGKey(2), params)
    n = params.num_nodes
    mask = np.asarray(obs.action_mask)
    bad_node = int(np.argmin(mask[:-1])) if not mask[:-1].all() else None
    candidates = [n, n + 1, -1] + ([bad_node] if bad_node is not None else [])
    for action in candidates:
        _, after, reward, _, _, info = STEP_ENV(jax.random.PRNGKey(0), state, jnp.int32(action), params)
        assert bool(info["invalid_action"]) and bool(info["failed"]), action
        assert float(reward) == -1.0
        np.testing.assert_array_equal(np.asarray(after.nodes.gpu_free), np.asarray(state.nodes.gpu_free))
        assert int(after.steps) == int(state.steps) + 1 and int(after.invalid) == 1
    good = int(np.argmax(mask[:-1]))
    _, after, reward, _, _, info = STEP_ENV(jax.random.PRNGKey(0), state, jnp.int32(good), params)
    assert bool(info["placed"]) and not bool(info["invalid_action"])
    pod = oenv.current_pod(state, params)
    assert float(reward) == pytest.approx(int(pod.num_gpus) * int(pod.gpu_milli) / 1000)
    # One error rule for every environment (vte.environment.action_index).
    with pytest.raises(TypeError, match="action must be an integer"):
        oenv.step_env(jax.random.PRNGKey(0), state, jnp.float32(1.0), params)
    with pytest.raises(ValueError, match="action must be one integer"):
        oenv.step_env(jax.random.PRNGKey(0), state, jnp.zeros(2, jnp.int32), params)


def test_fragmentation_shaping_adds_the_fragmentation_removed_and_keeps_invalid_actions_worst(
        trace, params):
    """With frag_shaping c a placement's reward gains c x the fragmentation it removes
    (GPUs; the cluster's summed node fragmentation before minus after, negative where it
    adds some), and an invalid action still lies at least the penalty below every valid one."""
    c = 0.5
    shaped = params.replace(frag_shaping=jnp.float32(c))
    obs, state = RESET(jax.random.PRNGKey(3), params)
    for _ in range(4):   # some load first: the first feasible node, four times
        action = jnp.int32(np.argmax(np.asarray(obs.action_mask)))
        obs, state = STEP_ENV(jax.random.PRNGKey(0), state, action, params)[:2]
    mask = np.asarray(obs.action_mask)[:-1]
    rewards, shapings = [], []
    for node in np.flatnonzero(mask):
        _, after, plain, _, _, _ = STEP_ENV(jax.random.PRNGKey(0), state, jnp.int32(node), params)
        _, after_s, reward, _, _, _ = STEP_ENV(jax.random.PRNGKey(0), state, jnp.int32(node), shaped)
        np.testing.assert_array_equal(np.asarray(after_s.nodes.gpu_free), np.asarray(after.nodes.gpu_free))
        removed = float(jnp.sum(state.nodes.frag) - jnp.sum(after.nodes.frag)) / 1000
        assert float(reward) - float(plain) == pytest.approx(c * removed, abs=1e-4)
        rewards.append(float(reward))
        shapings.append(removed)
    assert len(rewards) >= 2 and len(set(np.round(shapings, 6))) >= 2   # the nodes differ
    invalid = float(STEP_ENV(jax.random.PRNGKey(0), state, jnp.int32(params.num_nodes + 1), shaped)[2])
    assert invalid == pytest.approx(-1.0 - c * int(np.max(state.cluster.num_gpus)))
    assert invalid <= min(rewards) - 1.0
    nodes, pods = trace
    with pytest.raises(ValueError, match=r"frag_shaping=-0.1 is invalid: allowed a finite number >= 0"):
        oenv.make_params(nodes, pods, seeds=[5], frag_shaping=-0.1)


@pytest.mark.parametrize("name", ["best_fit", "fgd"])
def test_an_episode_under_a_published_policy_equals_the_replay(trace, params, name):
    """Driving the environment with `policy_action(fgd)` gives the replay's log (the
    environment's GPU rule is FGD's own), and FGD read off each observation (a trainer's
    teacher) is the same action; any policy's return is the GPUs it allocated."""
    nodes, pods = trace
    act = jax.jit(oenv.policy_action(policies.POLICIES[name]))
    observed = jax.jit(oenv.fgd_from_observation)
    obs, state = RESET(jax.random.PRNGKey(4), params)
    w = int(state.workload)
    used, total_reward = [], 0.0
    for t in range(int(params.length[w])):
        a = act(jax.random.PRNGKey(t), state, params)
        if name == "fgd":
            assert int(observed(obs)) == int(a), t
        obs, state, reward, terminated, _, info = STEP_ENV(jax.random.PRNGKey(t), state, a, params)
        used.append(int(info["used_milli"]))
        total_reward += float(reward)
        assert bool(terminated) == (t == int(params.length[w]) - 1)
    works = workload.build_workload(pods, nodes, [5, 6, 7][w], 1.3)
    log = simulator.replay(policies.POLICIES[name], params.nodes.replace(
        cpu_milli=params.nodes.cpu_milli[w], memory_mib=params.nodes.memory_mib[w],
        num_gpus=params.nodes.num_gpus[w], model=params.nodes.model[w],
        gpu_exists=params.nodes.gpu_exists[w]), workload.pod_arrays(pods, [works]),
        works.rank[None], jax.random.PRNGKey(0)[None], chunk=64)
    if name == "fgd":                         # same GPU rule: the very same run
        np.testing.assert_array_equal(np.asarray(used), log.used[0])
        assert int(state.failed) > 0           # "cannot place" was read off the mask too
        assert int(state.failed) == int((log.valid & ~log.placed).sum())
    assert total_reward == pytest.approx(used[-1] / 1000, abs=1e-3)      # return = GPUs allocated


def test_auto_reset_at_the_last_pod_keeps_the_final_observation(params):
    obs, state = RESET(jax.random.PRNGKey(8), params)
    w = int(state.workload)
    state = state.replace(steps=params.length[w] - 1)
    action = jnp.int32(params.num_nodes)
    pod_mask = oenv.get_obs(state, params).action_mask
    if not bool(pod_mask[-1]):
        action = jnp.argmax(pod_mask).astype(jnp.int32)
    obs, after, _, terminated, truncated, info = STEP(jax.random.PRNGKey(9), state, action, params)
    assert bool(terminated) and not bool(truncated)
    assert int(after.steps) == 0 and int(after.nodes.arrived) == 0 and int(after.failed) == 0
    assert float(info["final_observation"].progress) > 0.0 and float(obs.progress) == 0.0


def test_sub_clusters_scale_the_workload(trace):
    nodes, pods = trace
    sub = oenv.make_params(nodes, pods, seeds=[1, 2], subset=5)
    assert sub.num_nodes == 5
    for w in range(2):
        demand = int(np.sum(np.asarray(sub.pods.num_gpus[w]) * np.asarray(sub.pods.gpu_milli[w])))
        cluster_milli = int(np.sum(np.asarray(sub.nodes.num_gpus[w]))) * 1000
        assert demand <= 1.3 * cluster_milli
    _, state = RESET(jax.random.PRNGKey(0), sub)
    assert state.nodes.gpu_free.shape == (8, 5)
    with pytest.raises(ValueError, match="subset=0 is invalid"):
        oenv.make_params(nodes, pods, seeds=[1], subset=0)
    with pytest.raises(ValueError, match="seeds is empty"):
        oenv.make_params(nodes, pods, seeds=[])


def shared_pods(tmp_path, nodes, count=40, seed=9):
    """A second pod file for the small trace's nodes, of GPU-sharing pods mostly (as
    gpushare100 differs from `default`): other typical pods, some shapes in common."""
    from tests.test_openb import POD_HEADER, write
    from vte import openb
    rng = np.random.default_rng(seed)
    rows = [(f"s{i:03d}", int(rng.choice([1000, 4000])), 1024, 1,
             int(rng.choice([250, 500, 500, 1000])), "") for i in range(count)]
    return openb.load_pods(write(tmp_path, "shared.csv", POD_HEADER, rows), nodes)


def test_a_bank_of_several_traces_gives_each_workload_its_own_typical_pods(trace, tmp_path):
    """Workloads of two traces in one bank: each runs as in a bank of its trace alone (FGD's
    gain, the observation, the FGD episode and the replay on that trace's typical pods,
    bit for bit), and the planner's futures never draw the other trace's shapes."""
    from vte.openb import cluster
    from vte.openb.lab import lookahead
    nodes, pods = trace
    other = shared_pods(tmp_path, nodes)
    seeds = [5, 6]
    mixed = oenv.make_params(nodes, [pods, other], seeds=seeds)
    own = workload.typical_pods(pods), workload.typical_pods(other)
    union, counts = workload.typical_union([pods, other])
    k = int(union.prob.shape[0])
    assert mixed.num_workloads == 4 and mixed.typical_weight.shape == (4, k)
    assert k < int(own[0].prob.shape[0]) + int(own[1].prob.shape[0])       # shared shapes
    np.testing.assert_array_equal(np.asarray(mixed.typical_weight), np.repeat(counts, 2, axis=0))
    assert (counts > 0).sum(axis=1).tolist() == [int(t.prob.shape[0]) for t in own]
    act = jax.jit(oenv.policy_action(policies.POLICIES["fgd"]))
    for w in range(4):
        table, typical, seed = (pods, other)[w // 2], own[w // 2], seeds[w % 2]
        spec = cluster.make_spec(nodes, typical)
        np.testing.assert_allclose(np.asarray(mixed.empty_frag[w]), np.asarray(
            cluster.empty_state(spec, np.zeros(len(nodes), np.int32)).frag), rtol=1e-6)
        state = oenv.reset_state(jax.random.PRNGKey(0), mixed)
        state = state.replace(workload=jnp.int32(w), cluster=oenv._episode_nodes(mixed, w),
                              nodes=cluster.empty_state(oenv._episode_nodes(mixed, w),
                                                        mixed.ranks[w], mixed.empty_frag[w]))
        used = []
        for t in range(int(mixed.length[w])):
            pod = oenv.current_pod(state, mixed)
            np.testing.assert_array_equal(                       # FGD's gain on its own shapes
                np.asarray(policies.fgd_gain(state.nodes, pod, state.cluster)[0]),
                np.asarray(policies.fgd_gain(state.nodes, pod, spec)[0]))
            a = act(jax.random.PRNGKey(t), state, mixed)
            _, state, _, _, _, info = STEP_ENV(jax.random.PRNGKey(t), state, a, mixed)
            used.append(int(info["used_milli"]))
        works = workload.build_workload(table, nodes, seed, 1.3)
        log = simulator.replay(policies.POLICIES["fgd"], spec, workload.pod_arrays(table, [works]),
                               works.rank[None], jax.random.PRNGKey(0)[None], chunk=64)
        np.testing.assert_array_equal(np.asarray(used), log.used[0])
        drawn = np.asarray(lookahead.sample_shapes(jax.random.PRNGKey(w), state.cluster, 64, 8))
        assert set(np.unique(drawn)) <= set(np.flatnonzero(counts[w // 2]))
    with pytest.raises(ValueError, match=r"pods=\[\] is invalid: allowed a PodTable"):
        oenv.make_params(nodes, [], seeds=[1])


@pytest.mark.slow   # a benchmark, end to end
def test_the_environment_benchmark_runs_and_writes_its_figures(tmp_path):
    import json
    from benchmarks import openb_env as bench
    out = tmp_path / "r.json"
    rows = bench.main(["--nodes", "8", "--num-envs", "2", "--steps", "4", "--repeats", "1",
                       "--workloads", "2", "--json", str(out)])
    assert [(r["nodes"], r["num_envs"]) for r in rows] == [(8, 2)]
    assert rows[0]["decisions_per_s"] > 0 and json.loads(out.read_text())["rows"] == rows
