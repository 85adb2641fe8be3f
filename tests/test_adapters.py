"""The gymnax and Gymnasium adapters: spaces, equality with vte under jit and vmap,
gymnax's wrappers, Gymnasium's checker, seeding and the vector env's autoreset modes."""

import subprocess
import sys

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.vector.vector_env import AutoresetMode
from gymnax.environments import spaces as gx_spaces
from gymnax.wrappers.purerl import FlattenObservationWrapper, LogWrapper

import vte
from tests.conftest import SMALL
from vte.adapters import specs
from vte.adapters import gymnasium as vg
from vte.adapters.gymnax import ClusterEnv as GymnaxEnv
from vte.render import FRAME_SHAPE

B = 3                       # environments in the gymnax tests
NUM_ENVS = 64               # environments in the vector env tests (one compilation)
T = SMALL.episode_len + 2   # steps: crosses one auto-reset
SMALL_FIELDS = dict(num_nodes=SMALL.num_nodes, queue_len=SMALL.queue_len,
                    num_sites=SMALL.num_sites, slots_per_node=SMALL.slots_per_node,
                    episode_len=SMALL.episode_len)


def _tree_equal(a, b) -> bool:
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    return len(la) == len(lb) and all(np.array_equal(np.asarray(x), np.asarray(y))
                                      for x, y in zip(la, lb))


def _tree_close(a, b) -> bool:
    """Integers and booleans equal, floats equal up to the rounding of another XLA
    compilation (a wrapper around the same step fuses differently)."""
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    if len(la) != len(lb):
        return False
    for x, y in zip(la, lb):
        x, y = np.asarray(x), np.asarray(y)
        if x.dtype != y.dtype or x.shape != y.shape:
            return False
        if np.issubdtype(x.dtype, np.floating):
            if not np.allclose(x, y, rtol=1e-5, atol=1e-6):
                return False
        elif not np.array_equal(x, y):
            return False
    return True


def test_import_vte_imports_neither_library():
    code = ("import sys, vte; bad = [m for m in ('gymnax', 'gymnasium') if m in sys.modules];"
            " assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


# --------------------------------------------------------------------------
# Spaces (shared by both adapters)
# --------------------------------------------------------------------------

def test_feature_bounds_cover_every_column_and_reject_unknown_ones():
    assert specs.NODE_LOW.shape == (vte.NODE_FEATURES,)
    assert specs.REQUEST_HIGH.shape == (vte.REQUEST_FEATURES,)
    assert specs.feature_bound("tier_edge") == (0.0, 1.0)
    assert specs.feature_bound("free_cores/64") == (-np.inf, np.inf)
    assert specs.feature_bound("speed") == (0.0, np.inf)
    with pytest.raises(ValueError, match="'brand_new'"):
        specs.feature_bound("brand_new")


def test_gymnax_spaces_have_the_observation_shapes_and_dtypes(jit_reset):
    env = GymnaxEnv(SMALL)
    space = env.observation_space(SMALL)
    assert isinstance(space, gx_spaces.Dict) and tuple(space.spaces) == specs.FIELDS
    action_space = env.action_space(SMALL)
    assert isinstance(action_space, gx_spaces.Discrete)
    assert action_space.n == SMALL.num_nodes + 1 == env.num_actions
    assert action_space.dtype == jnp.int32
    obs, _ = jit_reset(jax.random.PRNGKey(0), SMALL)
    for name, box in space.spaces.items():
        x = getattr(obs, name)
        assert x.shape == box.shape and x.dtype == box.dtype, name
    assert bool(space.contains(obs))        # over whole episodes: the rollout test


# --------------------------------------------------------------------------
# gymnax
# --------------------------------------------------------------------------

def _first_fit(obs):
    return vte.heuristics.first_fit(None, obs, SMALL)


def _first_fit_flat(flat):
    """first_fit read off the flat observation, whose last N + 1 entries are the mask."""
    allowed = flat[-(SMALL.num_nodes + 1):-1] > 0.5
    return jnp.where(jnp.any(allowed), jnp.argmax(allowed), SMALL.num_nodes).astype(jnp.int32)


def _rollout(env_reset, env_step, policy, keys, extra=lambda info: ()):
    """B environments for T steps under jit and vmap: per-step (obs, reward, terminated,
    truncated, final_observation, *extra(info))."""
    def run(key):
        k_reset, k_steps = jax.random.split(key)
        obs, state = env_reset(k_reset, SMALL)

        def body(carry, k):
            obs, state = carry
            obs, state, r, term, trunc, info = env_step(k, state, policy(obs), SMALL)
            return (obs, state), (obs, r, term, trunc, info["final_observation"],
                                  *extra(info))
        return jax.lax.scan(body, (obs, state), jax.random.split(k_steps, T))[1]
    return jax.jit(jax.vmap(run))(keys)


KEYS = jax.random.split(jax.random.PRNGKey(7), B)
_VTE = []


def _vte_rollout():
    """The reference: `vte.reset` and `vte.step` under first_fit (computed once)."""
    if not _VTE:
        _VTE.append(_rollout(vte.reset, vte.step, _first_fit, KEYS))
    return _VTE[0]


@pytest.mark.slow   # op-by-op or whole rollouts: 10-20 s
def test_gymnax_rollout_equals_vte_under_jit_and_vmap():
    env = LogWrapper(GymnaxEnv(SMALL))
    got = _rollout(env.reset, env.step, _first_fit, KEYS,
                   lambda info: (info["returned_episode"], info["returned_episode_returns"]))
    assert _tree_close(got[:5], _vte_rollout())
    obs, reward, _, trunc, _, returned, returns = got
    assert bool(jnp.all(trunc[:, SMALL.episode_len - 1])) and int(trunc.sum()) == B
    # LogWrapper's episode return is the sum of the episode's rewards.
    ep = SMALL.episode_len
    np.testing.assert_allclose(returns[:, ep - 1], reward[:, :ep].sum(axis=1), rtol=1e-5)
    assert bool(jnp.all(returned == trunc))
    space = GymnaxEnv(SMALL).observation_space(SMALL)
    assert all(bool(space.contains(jax.tree_util.tree_map(lambda x: x[i, t], obs)))
               for i in range(B) for t in range(T))


@pytest.mark.slow   # op-by-op or whole rollouts: 10-20 s
def test_gymnax_flatten_wrapper_under_jit_and_vmap():
    env = LogWrapper(FlattenObservationWrapper(GymnaxEnv(SMALL, observation="flat")))
    space = env.observation_space(SMALL)
    d = specs.flat_size(SMALL)
    assert isinstance(space, gx_spaces.Box) and tuple(space.shape) == (d,)
    obs, reward, term, trunc, final = _rollout(env.reset, env.step, _first_fit_flat, KEYS)
    assert obs.shape == (B, T, d) and obs.dtype == jnp.float32
    want = _vte_rollout()
    flat = jax.jit(jax.vmap(jax.vmap(specs.flatten)))
    assert _tree_close((obs, reward, term, trunc, final),
                       (flat(want[0]), *want[1:4], flat(want[4])))
    assert bool(jnp.all((obs >= space.low) & (obs <= space.high)))


def test_gymnax_step_env_contract():
    env = GymnaxEnv(SMALL)
    key = jax.random.PRNGKey(1)
    obs, state = env.reset(key, SMALL)
    assert _tree_close(env.get_obs(state, SMALL), obs)
    step_env = jax.jit(env.step_env)
    for t in range(SMALL.episode_len):
        assert not bool(env.is_truncated(state, SMALL))
        out = step_env(jax.random.PRNGKey(t), state, jnp.int32(0), SMALL)
        assert len(out) == 5
        obs, state, reward, terminated, info = out
        assert not bool(terminated) and not bool(env.is_terminated(state, SMALL))
    assert bool(env.is_truncated(state, SMALL))     # no reset inside step_env
    assert int(state.steps) == SMALL.episode_len
    assert env.default_params is SMALL and env.name == "vte/Cluster-v0"


def test_gymnax_bad_arguments_are_named():
    with pytest.raises(ValueError, match="observation='image'.*'dict', 'flat'"):
        GymnaxEnv(SMALL, observation="image")
    with pytest.raises(ValueError, match="params=3 is invalid"):
        GymnaxEnv(3)


# --------------------------------------------------------------------------
# Gymnasium: one cluster
# --------------------------------------------------------------------------

def test_gymnasium_checker_passes_and_renders():
    env = gym.make(vg.ENV_ID, render_mode="rgb_array", **SMALL_FIELDS)
    assert isinstance(env.unwrapped, vg.ClusterEnv) and env.unwrapped.params == SMALL
    check_env(env.unwrapped, skip_render_check=False)
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    np.testing.assert_array_equal(info["action_mask"], obs["action_mask"])
    assert info["action_mask"].dtype == np.int8
    action = env.action_space.sample(mask=info["action_mask"])
    obs, reward, terminated, truncated, info = env.step(action)
    assert isinstance(reward, float) and not info["invalid_action"]
    frame = env.render()
    assert frame.shape == FRAME_SHAPE + (3,) and frame.dtype == np.uint8


def test_gymnasium_reset_seed_is_deterministic():
    def episode(seed):
        env = vg.ClusterEnv(SMALL)
        out = [env.reset(seed=seed)[0]]
        for t in range(SMALL.episode_len):
            obs, reward, terminated, truncated, info = env.step(t % (SMALL.num_nodes + 1))
            out.append((obs, reward, truncated))
        out.append(env.reset()[0])         # continues from the seeded np_random
        return out

    a, b, c = episode(11), episode(11), episode(12)
    assert _tree_equal(a, b)
    assert not _tree_equal(a[0], c[0])
    assert a[-2][2] is True                # truncated after episode_len decisions


def test_gymnasium_bad_arguments_are_named():
    with pytest.raises(ValueError, match=r"\['nodes'\] are not EnvParams fields"):
        vg.ClusterEnv(nodes=4)
    with pytest.raises(ValueError, match="render_mode='human' is invalid"):
        vg.ClusterEnv(SMALL, render_mode="human")
    env = vg.ClusterEnv(SMALL)
    env.reset(seed=0)
    with pytest.raises(TypeError, match="action=1.5 is invalid"):
        env.step(1.5)


# --------------------------------------------------------------------------
# Gymnasium: a batch of clusters
# --------------------------------------------------------------------------

def test_make_vec_gives_one_compiled_vector_env():
    envs = gym.make_vec(vg.ENV_ID, num_envs=NUM_ENVS, **SMALL_FIELDS)
    assert isinstance(envs, vg.ClusterVectorEnv) and envs.num_envs == NUM_ENVS == 64
    assert envs.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
    obs, info = envs.reset(seed=0)
    assert envs.observation_space.contains(obs)
    assert info["action_mask"].shape == (NUM_ENVS, SMALL.num_nodes + 1)
    obs, reward, terminated, truncated, info = envs.step(envs.action_space.sample())
    assert reward.shape == terminated.shape == truncated.shape == (NUM_ENVS,)
    assert reward.dtype == np.float32 and envs.observation_space.contains(obs)


def test_vector_env_equals_single_envs_over_the_first_episode():
    seed = 5
    envs = vg.ClusterVectorEnv(NUM_ENVS, SMALL)
    singles = [vg.ClusterEnv(SMALL) for _ in range(B)]       # the first B of them
    obs, _ = envs.reset(seed=seed)
    single = [e.reset(seed=seed + i)[0] for i, e in enumerate(singles)]
    rng = np.random.default_rng(0)
    for t in range(SMALL.episode_len):
        for i in range(B):
            assert _tree_equal({k: v[i] for k, v in obs.items()}, single[i])
        actions = rng.integers(0, SMALL.num_nodes + 1, NUM_ENVS)
        obs, reward, _, truncated, _ = envs.step(actions)
        outs = [e.step(int(a)) for e, a in zip(singles, actions)]
        single = [o[0] for o in outs]
        # Equal up to the last bit: the batched program may round an invalid action's
        # regret (worst valid regret + penalty) one ulp apart from the single one.
        np.testing.assert_allclose(reward[:B], np.float32([o[1] for o in outs]), rtol=1e-6)
        np.testing.assert_array_equal(truncated[:B], [o[3] for o in outs])


def _run_until_truncation(envs, seed):
    obs, _ = envs.reset(seed=seed)
    actions = np.full(NUM_ENVS, SMALL.num_nodes)
    for _ in range(SMALL.episode_len):
        obs, reward, terminated, truncated, info = envs.step(actions)
    assert truncated.all() and not terminated.any()
    return obs, reward, info


def test_vector_autoreset_next_step():
    envs = vg.ClusterVectorEnv(NUM_ENVS, SMALL, autoreset_mode="NextStep")
    assert envs.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
    obs, _, _ = _run_until_truncation(envs, seed=2)
    np.testing.assert_array_equal(obs["progress"], 1.0)       # the episode's last obs
    # The next step resets: actions ignored (an invalid one would be penalised).
    obs, reward, terminated, truncated, info = envs.step(np.full(NUM_ENVS, -1))
    np.testing.assert_array_equal(reward, 0.0)
    assert not terminated.any() and not truncated.any()
    np.testing.assert_array_equal(obs["progress"], 0.0)
    assert envs.observation_space.contains(obs)
    obs, reward, terminated, truncated, info = envs.step(np.full(NUM_ENVS, SMALL.num_nodes))
    np.testing.assert_array_equal(obs["progress"], np.float32(1.0 / SMALL.episode_len))


def test_vector_autoreset_same_step():
    same = vg.ClusterVectorEnv(NUM_ENVS, SMALL, autoreset_mode=AutoresetMode.SAME_STEP)
    assert same.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    nxt = vg.ClusterVectorEnv(NUM_ENVS, SMALL)
    obs, _, info = _run_until_truncation(same, seed=4)
    last, _, _ = _run_until_truncation(nxt, seed=4)
    np.testing.assert_array_equal(obs["progress"], 0.0)       # already the next episode
    assert info["_final_obs"].all() and info["_final_info"].all()
    for i in range(NUM_ENVS):
        assert _tree_equal(info["final_obs"][i], {k: v[i] for k, v in last.items()})
    assert set(info["final_info"]) >= {"regret", "optimal_action", "counters"}


def test_vector_bad_arguments_are_named():
    with pytest.raises(ValueError, match="autoreset_mode='Disabled' is invalid"):
        vg.ClusterVectorEnv(NUM_ENVS, SMALL, autoreset_mode="Disabled")
    with pytest.raises(ValueError, match="num_envs=0 is invalid"):
        vg.ClusterVectorEnv(0, SMALL)
    envs = vg.ClusterVectorEnv(NUM_ENVS, SMALL)
    with pytest.raises(ValueError, match="seed='x' is invalid"):
        envs.reset(seed="x")
    envs.reset(seed=0)
    with pytest.raises(ValueError, match=r"allowed integers of shape \(num_envs,\) = \(64,\)"):
        envs.step(np.zeros(NUM_ENVS + 1, int))


def test_gymnax_clients_run_unchanged_rollout_wrapper_legacy_step_and_deepcopy():
    """gymnax's RolloutWrapper (gymnax 1.0 step, `max_steps_in_episode` of the params), the
    legacy five-value step PureJaxRL's wrappers and rejax unpack, and a deep copy."""
    import copy

    from gymnax.experimental import RolloutWrapper

    env = GymnaxEnv(SMALL, observation="flat")
    assert env.default_params.max_steps_in_episode == SMALL.episode_len

    def forward(policy_params, obs, key):
        return jnp.argmax(obs[-(SMALL.num_nodes + 1):]).astype(jnp.int32)   # a valid action

    rollout = RolloutWrapper(forward, env=env, env_params=env.default_params)
    obs, action, reward, next_obs, done, ret = rollout.single_rollout(jax.random.PRNGKey(0), None)
    assert reward.shape == (SMALL.episode_len,) and bool(done[-1])
    assert np.all(np.isfinite(np.asarray(ret)))

    legacy = copy.deepcopy(GymnaxEnv(SMALL, observation="flat", step_api="legacy"))
    obs, state = legacy.reset(jax.random.PRNGKey(1), legacy.default_params)
    out = legacy.step(jax.random.PRNGKey(2), state, 0, legacy.default_params)
    assert len(out) == 5 and out[3].dtype == jnp.bool_
    with pytest.raises(ValueError, match="step_api='five' is invalid"):
        GymnaxEnv(SMALL, step_api="five")


def test_sb3_check_env_passes_and_the_flat_observation_draws_no_warning():
    """Stable-Baselines3's checker (where it is installed: not in the dev extra, it needs
    torch) on both observation forms; the flat one draws no warning at all."""
    import warnings
    pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.env_checker import check_env
    check_env(vg.ClusterEnv(SMALL))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(vg.ClusterEnv(SMALL, observation="flat"))
    assert [str(w.message) for w in caught] == []
