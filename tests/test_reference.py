"""The NumPy reference and `vte` agree step by step on the same scenario and random words."""

import jax
import numpy as np

import vte
from tests.conftest import SMALL
from vte.cluster import reference as ref

# Failures, noise and staleness switched up so every branch of the step is exercised.
PARAMS = SMALL.replace(failure_rate_scale=50.0, repair_hours=0.2, twin_noise=0.05,
                       twin_report_prob=0.7, arrival_rate=1.5, episode_len=1000)


def _compare_states(s_ref: ref.State, s_jax: vte.EnvState):
    r = ref.from_jax(s_jax)
    for name in ("alloc", "bg_load", "bg_next", "job_end"):
        np.testing.assert_allclose(getattr(s_ref, name), getattr(r, name), rtol=1e-5, atol=1e-3,
                                   err_msg=name)
    for name in ("up", "job_active"):
        np.testing.assert_array_equal(getattr(s_ref, name), getattr(r, name), err_msg=name)
    np.testing.assert_array_equal(s_ref.job_active.sum(0), s_jax.nodes.jobs)
    for name in ref.REQUEST_FIELDS:
        np.testing.assert_allclose(s_ref.incoming[name], r.incoming[name], rtol=1e-5,
                                   err_msg="incoming " + name)
    valid = r.queue["valid"]
    np.testing.assert_array_equal(s_ref.queue["valid"], valid)
    for name in ref.REQUEST_FIELDS:
        np.testing.assert_allclose(s_ref.queue[name][valid], r.queue[name][valid], rtol=1e-5,
                                   err_msg=name)
    for name in ("util", "mem_util", "power", "free", "age", "jobs"):
        np.testing.assert_allclose(s_ref.twin[name], r.twin[name], rtol=1e-4, atol=1e-3,
                                   err_msg=name)
    np.testing.assert_array_equal(s_ref.twin["up"], r.twin["up"])


def test_costs_agree():
    reset = jax.jit(vte.reset)
    for seed in range(5):
        state = reset(jax.random.PRNGKey(seed), PARAMS)[1]
        c_jax, f_jax = vte.node_costs(state, PARAMS)
        c_ref, f_ref = ref.costs(ref.from_jax(state), PARAMS)[:2]
        np.testing.assert_array_equal(f_jax, f_ref)
        np.testing.assert_allclose(c_jax, c_ref, rtol=1e-5, atol=1e-6)
        assert int(vte.optimal_action(state, PARAMS)) == ref.optimal_action(ref.from_jax(state),
                                                                           PARAMS)


def test_steps_agree_rewards_optimal_actions_and_next_state():
    step = jax.jit(vte.step_env)
    state = jax.jit(vte.reset)(jax.random.PRNGKey(0), PARAMS)[1]
    rng = np.random.default_rng(0)
    n = PARAMS.num_nodes
    kinds = {"placed": 0, "deferred": 0, "invalid": 0, "lost": 0, "completed": 0}
    for t in range(60):
        key = jax.random.PRNGKey(2000 + t)   # keys under which every kind of event occurs
        seed = np.asarray(vte.rng.seed_from_key(key))
        opt = int(vte.optimal_action(state, PARAMS))
        action = [opt, int(rng.integers(-1, n + 2)), n][t % 3]
        _, new_jax, reward, _, _, info = step(key, state, action, PARAMS)
        new_ref, reward_ref, _, info_ref = ref.step(ref.from_jax(state), action, seed, PARAMS)
        assert int(info["optimal_action"]) == info_ref["optimal_action"], t
        assert bool(info["invalid_action"]) == info_ref["invalid_action"], t
        np.testing.assert_allclose(float(reward), reward_ref, rtol=1e-4, atol=1e-5)
        assert int(info["dropped"]) == info_ref["dropped"]
        assert int(info["jobs_lost"]) == info_ref["jobs_lost"]
        assert int(new_jax.counters.completed - state.counters.completed) == info_ref["completed"]
        _compare_states(new_ref, new_jax)
        kinds["placed"] += info_ref["placed"]
        kinds["deferred"] += info_ref["deferred"]
        kinds["invalid"] += info_ref["invalid_action"]
        kinds["lost"] += info_ref["jobs_lost"]
        kinds["completed"] += info_ref["completed"]
        state = new_jax
    assert all(v > 0 for v in kinds.values()), kinds


def test_reference_runs_whole_episodes_with_auto_reset():
    params = SMALL
    rng = np.random.default_rng(1)
    state = ref.reset(rng, params)
    truncations = 0
    for _ in range(3 * params.episode_len):
        mask = ref.action_mask(state, params)
        state, reward, truncated, info = ref.step(state, int(rng.choice(np.flatnonzero(mask))),
                                                  rng, params)
        assert reward <= 0 and not info["invalid_action"]
        truncations += truncated
    assert truncations == 3 and state.steps == 0


def test_action_masks_agree_on_the_truth_and_on_the_twin():
    """The observation's mask is the reference's: feasibility on the ground truth, or on
    the (noisy, stale) twin with `mask_from_twin`; on this trajectory the two differ."""
    step = jax.jit(vte.step_env)
    n = PARAMS.num_nodes
    differ = 0
    for params in (PARAMS, PARAMS.replace(mask_from_twin=True)):
        obs, state = jax.jit(vte.reset)(jax.random.PRNGKey(4), params)
        rng = np.random.default_rng(4)
        for t in range(40):
            s_ref = ref.from_jax(state)
            np.testing.assert_array_equal(obs.action_mask, ref.action_mask(s_ref, params))
            differ += params.mask_from_twin and bool(
                np.any(ref.action_mask(s_ref, params) != ref.costs(s_ref, params)[1]))
            action = [int(vte.optimal_action(state, params)), int(rng.integers(0, n + 1))][t % 2]
            obs, state = step(jax.random.PRNGKey(500 + t), state, action, params)[:2]
    assert differ > 0, "the twin's mask never differed from the truth's: nothing was tested"


def test_the_oracle_uses_the_declared_stream_ids():
    from vte.cluster import reference as ref
    from vte import rng
    assert (ref._STREAM_NODES, ref._STREAM_ARRIVALS, ref._STREAM_REQUESTS, ref._STREAM_TWIN) == (
        rng.STEP_NODES, rng.STEP_ARRIVALS, rng.STEP_REQUESTS, rng.STEP_TWIN)
    ids = [v for k, v in vars(rng).items() if k.startswith(("RESET_", "STEP_"))]
    assert len(ids) == len(set(ids)) == 9                  # no two streams share an id
