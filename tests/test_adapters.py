"""The gymnax and Gymnasium adapters: spaces, equality with vte under jit and vmap,
gymnax's wrappers, Gymnasium's checker, seeding and the vector env's autoreset modes."""

import re
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
from vte.cluster import spaces as specs
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
    """The bounds come from the catalogue's ranges (and the params), not typed-in numbers."""
    from vte.cluster import catalogue as C
    from vte.cluster.observation import ROUNDING_MARGIN as M

    def widened(x):                           # a float32 draw's extreme, widened by M
        return pytest.approx(x * (1 + M), rel=1e-6)

    assert specs.NODE_LOW.shape == (vte.NODE_FEATURES,)
    assert specs.REQUEST_HIGH.shape == (vte.REQUEST_FEATURES,)
    assert specs.feature_bound("tier_edge") == (0.0, 1.0)
    assert specs.feature_bound("cpu_util") == (0.0, 1.0)
    assert specs.feature_bound("jobs/slots") == (0.0, 1.0)
    # Capacities and demands: whole draws, exact.
    assert specs.feature_bound("cpu_cores/64") == (0.0, C.KIND_CORES.max() / 64)
    assert specs.feature_bound("memory_gib/256") == (0.0, C.KIND_MEM_GIB.max() / 256)
    assert specs.feature_bound("gpus/8") == (0.0, C.KIND_GPUS.max() / 8)
    assert specs.feature_bound("disk_gib/1000") == (0.0, np.float32(C.KIND_DISK_GIB.max() / 1000))
    lo, hi = specs.REQUEST_LOW, specs.REQUEST_HIGH
    request = dict(zip(vte.REQUEST_FEATURE_NAMES, zip(lo.tolist(), hi.tolist())))
    assert request["cpu_cores/64"] == (0.0, C.ARCH_CORES.max() / 64)
    assert request["memory_gib/256"] == (0.0, C.ARCH_MEM_GIB.max() / 256)
    assert request["gpus/8"] == (0.0, C.ARCH_GPUS.max() / 8)
    # The disk demand is the data size rounded up, which float32 may push one GB past.
    assert request["disk_gib/1000"][1] == pytest.approx((C.ARCH_DATA_GB.max() + 1) / 1000)
    assert request["work_hours"][1] == widened(C.ARCH_SECONDS.max() / 3600)
    assert request["latency_bound_ms/100"][1] == widened(C.ARCH_LATENCY_MS.max() / 100)
    assert request["data_gb/100"][1] == widened(C.ARCH_DATA_GB.max() / 100)
    # Continuous draws: the catalogue's extreme, widened for float32 rounding.
    assert specs.feature_bound("speed")[1] == widened(C.KIND_SPEED.max())
    assert specs.feature_bound("bandwidth_gbps/10")[1] == widened(C.KIND_BANDWIDTH_MBPS.max() / 1e4)
    assert specs.feature_bound("power_idle_w/100")[1] == widened(C.KIND_IDLE_W.max() / 100)
    assert specs.feature_bound("power_peak_w/1000")[1] == widened(C.KIND_PEAK_W.max() / 1000)
    # Power: the hungriest host at peak with 8 H100s (the hpc_gpu kind).
    hpc_gpu = C.NODE_KINDS.index("hpc_gpu")
    power = C.KIND_PEAK_W[hpc_gpu, 1] + C.KIND_GPUS[hpc_gpu, 1] * C.GPU_WATTS.max()
    assert specs.feature_bound("power_w/1000")[1] == widened(power / 1000)
    assert specs.feature_bound("delay_from_origin_ms/100")[1] == widened(
        (C.LINK_BASE_DELAY_MS + C.LINK_DELAY_MS_PER_UNIT * np.sqrt(2)) / 100)
    # Free resources: GPUs and disk exact in [0, capacity]; cores and memory may go below 0
    # by the background load (BG_MAX x share x capacity) on an overcommitted node.
    assert specs.feature_bound("free_gpus/8") == (0.0, C.KIND_GPUS.max() / 8)
    assert specs.feature_bound("free_disk_gib/1000") == (
        0.0, np.float32(C.KIND_DISK_GIB.max() / 1000))
    low, high = specs.feature_bound("free_cores/64")
    assert low == pytest.approx(-C.BG_MAX * C.KIND_CORES.max() / 64, rel=2 * M)
    assert high == widened(C.KIND_CORES.max() / 64)
    low, _ = specs.feature_bound("free_memory_gib/256")
    assert low == pytest.approx(-C.BG_MAX * C.MEM_BG_RATIO * C.KIND_MEM_GIB.max() / 256, rel=2 * M)
    # Bounds that depend on the params.
    assert specs.feature_bound("failures_per_hour*100")[1] == widened(
        C.KIND_FAILURE_RATE.max() * 100)
    scaled = vte.EnvParams(failure_rate_scale=3.0)
    assert specs.feature_bound("failures_per_hour*100", scaled)[1] == widened(
        3 * C.KIND_FAILURE_RATE.max() * 100)
    assert specs.feature_bound("report_age_steps/10") == (
        0.0, np.float32(vte.EnvParams().episode_len / 10))
    assert specs.feature_bound("report_age_steps/10", SMALL)[1] == np.float32(
        SMALL.episode_len / 10)
    one_site = vte.EnvParams(num_sites=1)
    assert specs.feature_bound("delay_from_origin_ms/100", one_site)[1] == widened(
        C.INTRA_SITE_DELAY_MS / 100)
    noisy = vte.EnvParams(twin_noise=0.2, twin_report_prob=0.5)
    k = np.sqrt(3) * 0.2
    assert specs.feature_bound("power_w/1000", noisy)[1] == widened(power * (1 + k) / 1000)
    # A stale report that erred, and the jobs that left since, widen the free cores.
    low, high = specs.feature_bound("free_cores/64", noisy)
    # (plus the float32 drift of a long silent spell: under the margin)
    assert C.KIND_CORES.max() * (1 + k) / 64 < high == pytest.approx(
        C.KIND_CORES.max() * (1 + k) / 64, rel=2 * M)
    assert low < specs.feature_bound("free_cores/64")[0]
    # Noise without staleness keeps the free resources' range; batched params take the extremes.
    assert specs.feature_bound("free_cores/64", vte.EnvParams(twin_noise=0.2)) == \
        specs.feature_bound("free_cores/64")
    batched = vte.EnvParams(failure_rate_scale=np.array([1.0, 3.0], np.float32))
    assert specs.feature_bound("failures_per_hour*100", batched) == \
        specs.feature_bound("failures_per_hour*100", scaled)
    with pytest.raises(ValueError, match="'brand_new'"):
        specs.feature_bound("brand_new")


@pytest.mark.parametrize("params", [vte.EnvParams(), SMALL,
                                    vte.EnvParams(twin_noise=1.0, twin_report_prob=0.01,
                                                  failure_rate_scale=0.0, num_sites=1,
                                                  sample_weights=True)],
                         ids=["default", "small", "extreme"])
def test_every_bound_is_finite_and_no_column_is_degenerate(params):
    low, high = specs.flat_bounds(params)
    assert low.dtype == high.dtype == np.float32 and low.shape == (specs.flat_size(params),)
    assert np.all(np.isfinite(low)) and np.all(np.isfinite(high))
    assert np.all(low < high)                 # Gymnasium warns on equal bounds
    spec_low, spec_high = specs.bounds_of(specs.observation_specs(params))
    np.testing.assert_array_equal(spec_low, low)
    np.testing.assert_array_equal(spec_high, high)
    np.testing.assert_array_equal(specs.observation_specs(vte.EnvParams())["nodes"].high[0],
                                  specs.NODE_HIGH)


def test_bounds_need_concrete_params():
    def traced(noise):
        return specs.flat_bounds(vte.EnvParams(twin_noise=noise))[1]
    with pytest.raises(ValueError, match="EnvParams.twin_noise is traced"):
        jax.jit(traced)(0.1)


# Params of the bounds rollout: the same static fields, so one compilation runs both.
_BOUNDS_SMALL = dict(num_nodes=8, queue_len=4, num_sites=3, slots_per_node=4, episode_len=6)
BOUNDS_PARAMS = {
    "default": vte.EnvParams(**_BOUNDS_SMALL),
    # Stale and noisy reports, frequent failures, a wild background load, full queues.
    "noisy": vte.EnvParams(**_BOUNDS_SMALL, twin_noise=0.5, twin_report_prob=0.3,
                           failure_rate_scale=20.0, bg_volatility=0.5, bg_reversion=0.0,
                           arrival_rate=4.0, weights=(0.5, 2.0, 1.0)),
}


@pytest.mark.slow   # one compilation of a 300-step vmapped rollout: ~10-20 s
def test_observations_stay_within_the_bounds_over_random_valid_rollouts():
    """Random valid actions for 300 steps (50 episodes) in 8 vmapped environments, under
    the default params and under a stale, noisy twin with frequent failures: every field
    of every observation (and every final observation) lies within its spec's bounds, the
    flat observation within `flat_bounds`."""
    steps, batch = 300, 8

    @jax.jit
    def rollout(key, params):
        def random_valid(key, obs):
            return jax.random.categorical(
                key, jnp.where(obs.action_mask, 0.0, -jnp.inf)).astype(jnp.int32)

        def body(carry, key):
            obs, state = carry
            ka, ks = jax.random.split(key)
            action = jax.vmap(random_valid)(jax.random.split(ka, batch), obs)
            obs, state, _, _, _, info = jax.vmap(vte.step, (0, 0, 0, None))(
                jax.random.split(ks, batch), state, action, params)
            return (obs, state), (obs, info["final_observation"], info["invalid_action"])

        k0, k1 = jax.random.split(key)
        first = jax.vmap(vte.reset, (0, None))(jax.random.split(k0, batch), params)
        _, (obs, final, invalid) = jax.lax.scan(body, first, jax.random.split(k1, steps))
        return first[0], obs, final, invalid

    age = vte.NODE_FEATURE_NAMES.index("report_age_steps/10")
    free_cores = vte.NODE_FEATURE_NAMES.index("free_cores/64")
    for name, params in BOUNDS_PARAMS.items():
        first, obs, final, invalid = rollout(jax.random.PRNGKey(3), params)
        assert not np.any(np.asarray(invalid)), name
        field_specs = specs.observation_specs(params)
        low, high = specs.flat_bounds(params)
        for o in (first, obs, final):
            for field, spec in field_specs.items():
                x = np.asarray(getattr(o, field))
                assert np.all(x >= spec.low) and np.all(x <= spec.high), (name, field)
            lead = o.progress.ndim             # (batch,) or (steps, batch)
            rows = jax.tree_util.tree_map(lambda x: x.reshape((-1,) + x.shape[lead:]), o)
            flat = np.asarray(jax.vmap(specs.flatten)(rows))
            assert flat.shape[-1] == low.shape[0]
            bad = np.argwhere((flat < low) | (flat > high))
            assert bad.size == 0, (name, bad[:5], flat[tuple(bad[0])] if bad.size else None)
        nodes = np.asarray(obs.nodes)
        if name == "noisy":   # the run reached what widens the bounds
            assert nodes[..., age].max() > 0 and nodes[..., free_cores].min() < 0, name
        else:
            assert nodes[..., age].max() == 0, name


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
    return vte.cluster.heuristics.first_fit(None, obs, SMALL)


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


def test_gymnasium_checker_draws_no_bounds_warning_on_the_flat_observation():
    """Every bound is finite and no column has equal bounds, so Gymnasium's checker (and
    SB3's, which warns on infinite bounds) has nothing to say about the space."""
    import warnings

    env = gym.make(vg.ENV_ID, num_nodes=8, observation="flat")
    space = env.unwrapped.observation_space
    assert isinstance(space, gym.spaces.Box)
    assert np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))
    assert np.all(space.low < space.high) and space.is_bounded("both")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env.unwrapped)
    messages = [str(w.message) for w in caught]
    about_bounds = re.compile(r"bound|\binf(inite|inity)?\b|equal", re.IGNORECASE)
    assert not [m for m in messages if about_bounds.search(m)], messages
    obs, _ = env.reset(seed=0)
    assert space.contains(obs)


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
            assert _tree_close({k: v[i] for k, v in obs.items()}, single[i])
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
        assert _tree_close(info["final_obs"][i], {k: v[i] for k, v in last.items()})
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


@pytest.mark.parametrize("env_id", vte.registered())
@pytest.mark.parametrize("observation", ["dict", "flat"])
def test_sb3_check_env_passes_on_every_registered_id(env_id, observation):
    """Stable-Baselines3's checker on every registered environment through Gymnasium, both
    observation forms (CI installs torch's CPU build and SB3 before the project; a plain
    `pip install -e ".[dev]"` does not, and then this skips)."""
    pytest.importorskip("stable_baselines3")
    import gymnasium as gym
    import warnings

    from stable_baselines3.common.env_checker import check_env
    env = gym.make(f"vte/{env_id}", observation=observation, **vte.registration(env_id).small)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env.unwrapped)
    if observation == "flat":                  # the flat form draws no warning at all
        assert [str(w.message) for w in caught] == []
