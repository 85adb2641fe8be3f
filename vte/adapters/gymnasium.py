"""vte as Gymnasium environments: one cluster (`ClusterEnv`) and a batch stepped by one
compiled call (`ClusterVectorEnv`), NumPy in and out.

    import gymnasium as gym
    import vte.adapters.gymnasium                      # registers "vte/Cluster-v0"

    env = gym.make("vte/Cluster-v0", num_nodes=16)     # EnvParams fields as keywords
    obs, info = env.reset(seed=0)
    action = env.action_space.sample(mask=info["action_mask"])
    obs, reward, terminated, truncated, info = env.step(action)

    envs = gym.make_vec("vte/Cluster-v0", num_envs=64)  # a ClusterVectorEnv
    obs, info = envs.reset(seed=0)
    obs, rewards, terminations, truncations, info = envs.step(envs.action_space.sample())

Needs the optional extra: `pip install -e ".[gymnasium]"` (Gymnasium >= 1.0). Without the
import, `gym.make("vte.adapters.gymnasium:vte/Cluster-v0")` imports and registers it.

Any registered vte environment: `gym.make("vte/OpenB-v0", subset=64)` takes the keywords
of its `vte.make` (`env_id` picks it when the classes are used directly).

Observation: a dict of NumPy arrays, the environment's observation fields (for
  "Cluster-v0": `nodes` (N, F) float32, `request` (F',) float32, `queue` (K, F') float32,
  `queue_mask` (K,) bool, `weights` (3,) float32, `progress` (1,) float32, `action_mask`
  (N + 1,) bool); a 0-d field is given as shape (1,), which SB3 and torch can flatten. Its
  space is a `spaces.Dict` of `spaces.Box`es with the environment's bounds. With
  `observation="flat"`, one (D,) float32 vector of the fields in order (booleans as 0/1).
Masks: `env.unwrapped.action_masks()` ((N + 1,) bool; (num_envs, N + 1) on the vector env),
  the method sb3-contrib's MaskablePPO calls; also `info["action_mask"]` as int8.
Episodes: `spec.max_episode_steps` is the environment's own limit (`episode_len`); a step
  after `terminated` or `truncated` raises until `reset` (the single environment).
Vector env: pass the autoreset mode to `gym.make_vec` directly, `autoreset_mode="SameStep"`
  (Gymnasium refuses it inside `vector_kwargs` for a custom vector entry point).
Action: `Discrete(N + 1)`; `a < N` places the head request on node a, `a == N` defers
  it. An integer outside the space is an invalid action (`vte.step`: penalised, nothing
  changes); a non-integer raises.
Reward: `-regret`; terminated: never; truncated after `episode_len` decisions.
Info: the step's `vte.step` info as NumPy (`counters` a dict), plus `action_mask`: the
  allowed actions of the new observation as an (N + 1,) int8 array, the form
  `Discrete.sample(mask=...)` takes (batched (num_envs, N + 1) in the vector env).

Seeding: `reset(seed=s)` reseeds `np_random` and draws the JAX key of the scenario and
of the following steps from it, so a seed fixes the whole episode; `reset()` without a
seed continues from `np_random`. Environment i of `ClusterVectorEnv.reset(seed=s)` has
the scenario and the first episode of `ClusterEnv.reset(seed=s + i)` (Gymnasium's own
rule for vector seeds; a list of num_envs seeds is taken as is).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import batch_space
from gymnasium.vector.vector_env import AutoresetMode

import vte
from vte.environment import reset_key
from vte.environment import bounds_of, flatten_fields

ENV_ID = "vte/Cluster-v0"
NAMESPACE = "vte/"       # Gymnasium ids: "vte/" + every registered vte id
RENDER_MODES = ("rgb_array",)
AUTORESET_MODES = (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP)
_MAX_SEED = 2**31 - 1   # each of the two draws a key is folded from


# --------------------------------------------------------------------------
# Shared pieces: parameters, spaces, keys, conversion to NumPy
# --------------------------------------------------------------------------

def make_params(params: Any | None = None, **fields) -> Any:
    """The `EnvParams` of a synthetic cluster: `params`, or `EnvParams(**fields)` (what
    `gym.make("vte/Cluster-v0", num_nodes=16)` passes), not both."""
    return vte.registration("Cluster-v0").make(params=params, **fields)[1]


def _make(env_id: str, params, fields):
    """(registration, env, params) of a registered vte environment (id with or without
    the "vte/" namespace); `params` or the keywords of its `make`, not both."""
    reg = vte.registration(env_id[len(NAMESPACE):] if env_id.startswith(NAMESPACE) else env_id)
    if params is not None:
        env, params = reg.make(params=params, **fields)
    else:
        env, params = reg.make(**fields)
    return reg, env, params


OBSERVATION_MODES = ("dict", "flat")


def _specs(env, params) -> dict:
    """The environment's observation specs with every 0-d field as shape (1,): no 0-d
    entries, which SB3's and torch's flattening cannot take."""
    out = {}
    for name, s in env.observation_specs(params).items():
        if s.shape == ():
            s = s._replace(shape=(1,), low=s.low.reshape(1), high=s.high.reshape(1))
        out[name] = s
    return out


def observation_space(params, env=None, observation: str = "dict") -> spaces.Space:
    """The observation space of one environment (shapes, dtypes, bounds: its
    `observation_specs`, 0-d fields as (1,)); `env` defaults to the synthetic cluster.
    With `observation="flat"` one (D,) float32 Box of every field raveled in order
    (booleans as 0 and 1), for MLP policies and `NormalizeObservation`."""
    env = vte.registration("Cluster-v0").make(params=params)[0] if env is None else env
    specs = _specs(env, params)
    if observation == "flat":
        low, high = bounds_of(specs)
        return spaces.Box(low, high, low.shape, np.float32)
    return spaces.Dict({name: spaces.Box(s.low, s.high, s.shape, s.dtype)
                        for name, s in specs.items()})


def _key_from(rng: np.random.Generator) -> jax.Array:
    """A JAX key drawn from a NumPy generator (two 31-bit draws folded together)."""
    a, b = rng.integers(0, _MAX_SEED, size=2)
    return jax.random.fold_in(jax.random.PRNGKey(int(a)), int(b))


def _numpy_obs(obs, batch: int = 0) -> dict[str, np.ndarray]:
    """The observation as NumPy arrays (writable copies), 0-d fields as (1,) (`batch`
    leading axes kept)."""
    out = {}
    for name in obs.__dataclass_fields__:
        x = np.array(getattr(obs, name))
        out[name] = x.reshape(x.shape + (1,)) if x.ndim == batch else x
    return out


def _encode(obs: dict[str, np.ndarray], observation: str, batch: int = 0):
    """`obs` as the adapter gives it: the dict, or one float32 vector per environment."""
    return flatten_fields(obs, batch) if observation == "flat" else obs


def _numpy_info(info: dict) -> dict[str, Any]:
    out = {}
    for name, value in info.items():
        if name == "final_observation":
            continue
        if hasattr(value, "__dataclass_fields__"):      # e.g. the synthetic `counters`
            value = {f: np.array(getattr(value, f)) for f in value.__dataclass_fields__}
        else:
            value = np.array(value)
        out[name] = value
    return out


def _check_render_mode(render_mode):
    if render_mode is not None and render_mode not in RENDER_MODES:
        raise ValueError(f"render_mode={render_mode!r} is invalid: allowed None or one of "
                         f"{RENDER_MODES}")


def _frame(reg, state, params, last: dict | None) -> np.ndarray:
    """(H, W, 3) uint8 picture of one environment's state (its registration's `render`),
    with the reference policy's action (the optimum where known) and the last decision."""
    from vte.render import to_rgb
    if reg.render is None:
        raise RuntimeError(f"{reg.id} has no picture (its registration's render)")
    caption = None
    if last is not None:
        caption = f"last decision: action {int(last['action'])}, reward {last['reward']:.3f}"
    ref = reg.policies()[reg.optimum or reg.default_teacher]
    reference = int(ref(jax.random.PRNGKey(0), state, params))
    return to_rgb(reg.render(state, params, reference=reference, caption=caption))


# Compiled once per environment and parameter shapes, shared by every gym environment.
_reset = jax.jit(lambda env, key, params: env.reset(key, params), static_argnums=0)
_step_env = jax.jit(lambda env, *args: env.step_env(*args), static_argnums=0)


def _split(key):
    return tuple(jax.random.split(key))


_split_keys = jax.jit(jax.vmap(_split))


# --------------------------------------------------------------------------
# One cluster
# --------------------------------------------------------------------------

class ClusterEnv(gym.Env):
    """One cluster as a `gymnasium.Env` (see the module docstring).

    Args:
      params: the environment's params (a `vte.EnvParams` for "Cluster-v0"); or the
        keywords of its `vte.make` (`num_nodes=16`, ...; `subset=64` for "OpenB-v0").
      render_mode: None or "rgb_array" (`render()` returns an (H, W, 3) uint8 picture of
        the cluster, `vte.render.FRAME_SHAPE`).
      env_id: the registered vte environment ("Cluster-v0", "OpenB-v0").
      observation: "dict" (one array per field, 0-d fields as (1,)) or "flat" (one (D,)
        float32 vector, for MLP policies and `NormalizeObservation`).
    The episode ends with `terminated` or `truncated` (after `max_episode_steps` decisions,
    also in `spec.max_episode_steps`); stepping on after that without `reset` raises.
    `action_masks()` gives the valid actions (sb3-contrib's MaskablePPO reads it).
    """

    metadata = {"render_modes": list(RENDER_MODES), "render_fps": 4}

    def __init__(self, params=None, render_mode: str | None = None, env_id: str = ENV_ID,
                 observation: str = "dict", **fields):
        if observation not in OBSERVATION_MODES:
            raise ValueError(f"observation={observation!r} is invalid: allowed one of "
                             f"{OBSERVATION_MODES}")
        self.registration, self.env, self.params = _make(env_id, params, fields)
        _check_render_mode(render_mode)
        self.render_mode = render_mode
        self.observation = observation
        self.observation_space = observation_space(self.params, self.env, observation)
        self.action_space = spaces.Discrete(self.env.num_actions(self.params))
        self.max_episode_steps = int(self.params.max_steps_in_episode)
        self._state = None
        self._key: jax.Array | None = None
        self._last: dict | None = None
        self._mask: np.ndarray | None = None
        self._done = False

    @property
    def spec(self):
        return self._spec

    @spec.setter
    def spec(self, value):
        # gym.make sets the registered spec; it carries this environment's own step limit
        # (which depends on its params) rather than None.
        if value is not None and value.max_episode_steps is None:
            import dataclasses
            value = dataclasses.replace(value, max_episode_steps=self.max_episode_steps)
        self._spec = value

    _spec = None

    def action_masks(self) -> np.ndarray:
        """(num_actions,) bool, the valid actions of the current state (a copy)."""
        if self._mask is None:
            raise RuntimeError("call reset() before action_masks()")
        return self._mask.copy()

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """A fresh scenario: (obs, info with `action_mask`). `options` is not used."""
        super().reset(seed=seed)
        self._key, k_reset = jax.random.split(_key_from(self.np_random))
        obs, self._state = _reset(self.env, k_reset, self.params)
        self._last, self._done = None, False
        obs = _numpy_obs(obs)
        self._mask = obs["action_mask"].astype(bool)
        return _encode(obs, self.observation), {"action_mask": self._mask.astype(np.int8)}

    def step(self, action):
        """One decision: (obs, reward float, terminated bool, truncated bool, info)."""
        if self._state is None:
            raise RuntimeError("call reset() before step()")
        if self._done:
            raise RuntimeError("the episode has ended (terminated or truncated): call "
                               "reset() before step()")
        self._key, k_step = jax.random.split(self._key)
        obs, self._state, reward, terminated, truncated, info = _step_env(
            self.env, k_step, self._state, _action(action), self.params)
        obs, info = _numpy_obs(obs), _numpy_info(info)
        self._mask = obs["action_mask"].astype(bool)
        info["action_mask"] = self._mask.astype(np.int8)
        self._last = {"action": action, "reward": float(reward), **info}
        self._done = bool(terminated) or bool(truncated)
        return (_encode(obs, self.observation), float(reward), bool(terminated),
                bool(truncated), info)

    def render(self):
        """The cluster now, (H, W, 3) uint8, with the optimal action for its head request
        and the last decision; None unless `render_mode="rgb_array"`."""
        if self.render_mode is None:
            gym.logger.warn("render() needs render_mode='rgb_array' at construction, e.g. "
                            f"gym.make({ENV_ID!r}, render_mode='rgb_array')")
            return None
        if self._state is None:
            raise RuntimeError("call reset() before render()")
        return _frame(self.registration, self._state, self.params, self._last)

    @property
    def state(self):
        """The current state (JAX arrays), for inspection and `vte.render`."""
        return self._state


def _action(action) -> np.ndarray:
    """One action as an int32 array; non-integers raise (see `vte.step`)."""
    a = np.asarray(action)
    if a.dtype == np.bool_ or a.dtype.kind not in "iu":
        raise TypeError(f"action={action!r} is invalid: allowed an integer in "
                        f"[0, num_nodes] (num_nodes = defer)")
    if a.shape != ():
        raise ValueError(f"action={action!r} is invalid: allowed one integer, got shape "
                         f"{a.shape}")
    return a


# --------------------------------------------------------------------------
# A batch of clusters
# --------------------------------------------------------------------------

def _step_same(env, keys, state, actions, params):
    """SAME_STEP: `env.step` on every environment (its auto-reset and final observation)."""
    return jax.vmap(env.step, (0, 0, 0, None))(keys, state, actions, params)


def _step_next(env, keys, state, actions, pending, params):
    """NEXT_STEP: environments done in the previous step (`pending`) reset now and ignore
    their action (reward 0, not done); the others take one decision without auto-reset.
    The reset runs only when some environment is pending; its key is the one `vte.step`
    would use (`vte.environment.reset_key`)."""
    obs, new, reward, terminated, truncated, info = jax.vmap(
        env.step_env, (0, 0, 0, None))(keys, state, actions, params)
    n = pending.shape[0]

    def where(a, b):
        return jnp.where(pending.reshape((n,) + (1,) * (a.ndim - 1)), a, b)

    def reset_pending():
        fresh_obs, fresh = jax.vmap(lambda k: env.reset(reset_key(k), params))(keys)
        return jax.tree_util.tree_map(where, (fresh_obs, fresh), (obs, new))

    obs, new = jax.lax.cond(jnp.any(pending), reset_pending, lambda: (obs, new))
    zero = jax.tree_util.tree_map(jnp.zeros_like, info)
    info = jax.tree_util.tree_map(where, zero, info)
    return (obs, new, jnp.where(pending, 0.0, reward), terminated & ~pending,
            truncated & ~pending, info)


_step_same_jit = jax.jit(_step_same, static_argnums=0)
_step_next_jit = jax.jit(_step_next, static_argnums=0)
_reset_batch = jax.jit(lambda env, keys, params: jax.vmap(env.reset, (0, None))(keys, params),
                       static_argnums=0)


class ClusterVectorEnv(gym.vector.VectorEnv):
    """`num_envs` clusters as a `gymnasium.vector.VectorEnv`, stepped by one compiled call.

    Args:
      num_envs: clusters, >= 1.
      params: a `vte.EnvParams` shared by all; or its fields as keywords.
      autoreset_mode: `AutoresetMode.NEXT_STEP` (Gymnasium's default: the step after an
        episode ends resets that environment, ignores its action and returns reward 0 and
        terminated = truncated = False) or `AutoresetMode.SAME_STEP` (vte's own: the step
        that ends an episode returns the first observation of the next one;
        `info["final_obs"]` holds the last observation of the ended episode (an object
        array, an observation dict where `info["_final_obs"]` is set, else None) and
        `info["final_info"]` that step's info). Set in `metadata["autoreset_mode"]`.
        Strings ("NextStep", "SameStep") are accepted.
      render_mode: None or "rgb_array" (`render()` returns one frame per environment).
    Observations and info arrays carry a leading (num_envs,) axis; actions are an
    integer array of shape (num_envs,).
    """

    metadata = {"render_modes": list(RENDER_MODES), "render_fps": 4,
                "autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, num_envs: int = 1, params=None,
                 autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
                 render_mode: str | None = None, env_id: str = ENV_ID,
                 observation: str = "dict", **fields):
        if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) \
                or num_envs < 1:
            raise ValueError(f"num_envs={num_envs!r} is invalid: allowed an integer >= 1")
        try:
            mode = AutoresetMode(autoreset_mode)
        except ValueError:
            mode = None
        if mode not in AUTORESET_MODES:
            raise ValueError(f"autoreset_mode={autoreset_mode!r} is invalid: allowed one of "
                             f"{[m.value for m in AUTORESET_MODES]}")
        _check_render_mode(render_mode)
        self.registration, self.env, self.params = _make(env_id, params, fields)
        self.num_envs = int(num_envs)
        self.render_mode = render_mode
        self.metadata = {**type(self).metadata, "autoreset_mode": mode}
        if observation not in OBSERVATION_MODES:
            raise ValueError(f"observation={observation!r} is invalid: allowed one of "
                             f"{OBSERVATION_MODES}")
        self.observation = observation
        self.single_observation_space = observation_space(self.params, self.env, observation)
        self.single_action_space = spaces.Discrete(self.env.num_actions(self.params))
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._state = None
        self._keys: jax.Array | None = None
        self._pending = np.zeros(self.num_envs, bool)

    @property
    def autoreset_mode(self) -> AutoresetMode:
        return self.metadata["autoreset_mode"]

    def _seeds(self, seed) -> list[int | None]:
        if seed is None:
            return [None] * self.num_envs
        if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
            return [int(seed) + i for i in range(self.num_envs)]
        if isinstance(seed, (list, tuple)) and len(seed) == self.num_envs and all(
                isinstance(s, (int, np.integer)) and not isinstance(s, bool) for s in seed):
            return [int(s) for s in seed]
        raise ValueError(f"seed={seed!r} is invalid: allowed None, an integer, or a list of "
                         f"num_envs={self.num_envs} integers")

    def reset(self, *, seed: int | list[int] | None = None, options: dict | None = None):
        """Fresh scenarios for every environment: (obs, info with `action_mask`).
        `options` is not used."""
        seeds = self._seeds(seed)
        if seed is not None:
            self._np_random, self._np_random_seed = gym.utils.seeding.np_random(seeds[0])
        keys = []
        for s in seeds:   # as `ClusterEnv.reset(seed=s)` draws its keys
            rng = self.np_random if s is None else gym.utils.seeding.np_random(s)[0]
            keys.append(jax.random.split(_key_from(rng)))
        keys = jnp.stack(keys)                                  # (num_envs, 2) keys
        self._keys = keys[:, 0]
        obs, self._state = _reset_batch(self.env, keys[:, 1], self.params)
        self._pending = np.zeros(self.num_envs, bool)
        obs = _numpy_obs(obs, batch=1)
        self._mask = obs["action_mask"].astype(bool)
        return (_encode(obs, self.observation, batch=1),
                {"action_mask": self._mask.astype(np.int8)})

    def action_masks(self) -> np.ndarray:
        """(num_envs, num_actions) bool, the valid actions of every environment (a copy)."""
        if self._state is None:
            raise RuntimeError("call reset() before action_masks()")
        return self._mask.copy()

    def step(self, actions):
        """One decision in every environment: (obs, rewards (num_envs,) float32,
        terminations (num_envs,) bool, truncations (num_envs,) bool, info)."""
        if self._state is None:
            raise RuntimeError("call reset() before step()")
        a = np.asarray(actions)
        if a.dtype == np.bool_ or a.dtype.kind not in "iu" or a.shape != (self.num_envs,):
            raise ValueError(f"actions of dtype {a.dtype} and shape {a.shape} are invalid: "
                             f"allowed integers of shape (num_envs,) = ({self.num_envs},)")
        self._keys, k_step = _split_keys(self._keys)
        a = jnp.asarray(a.astype(np.int32))
        if self.autoreset_mode == AutoresetMode.SAME_STEP:
            obs, self._state, reward, terminated, truncated, info = _step_same_jit(
                self.env, k_step, self._state, a, self.params)
        else:
            obs, self._state, reward, terminated, truncated, info = _step_next_jit(
                self.env, k_step, self._state, a, jnp.asarray(self._pending), self.params)
        final_obs = info.get("final_observation")
        obs, info = _numpy_obs(obs, batch=1), _numpy_info(info)
        terminated, truncated = np.asarray(terminated), np.asarray(truncated)
        done = terminated | truncated
        if self.autoreset_mode == AutoresetMode.SAME_STEP:
            final = _encode(_numpy_obs(final_obs, batch=1), self.observation, batch=1)
            info = self._same_step_info(info, final, done)
        else:
            self._pending = done
        self._mask = obs["action_mask"].astype(bool)
        info["action_mask"] = self._mask.astype(np.int8)
        return (_encode(obs, self.observation, batch=1), np.asarray(reward, np.float32),
                terminated, truncated, info)

    def _same_step_info(self, info: dict, final: dict, done: np.ndarray) -> dict:
        """Gymnasium's SAME_STEP keys: `final_obs` (object array), `final_info`, masks."""
        final_obs = np.full(self.num_envs, None, dtype=object)
        for i in np.flatnonzero(done):
            final_obs[i] = (final[i] if isinstance(final, np.ndarray)
                            else {name: value[i] for name, value in final.items()})
        final_info = {**info, "_final_info": done.copy()} if done.any() else {}
        return {**info, "final_obs": final_obs, "_final_obs": done.copy(),
                "final_info": final_info, "_final_info": done.copy()}

    def render(self) -> tuple[np.ndarray, ...] | None:
        """One (H, W, 3) uint8 frame per environment (`vte.render`), or None unless
        `render_mode="rgb_array"`. Draws num_envs figures: meant for few environments."""
        if self.render_mode is None:
            gym.logger.warn("render() needs render_mode='rgb_array' at construction")
            return None
        if self._state is None:
            raise RuntimeError("call reset() before render()")
        states = jax.device_get(self._state)
        return tuple(_frame(self.registration, jax.tree_util.tree_map(lambda x: x[i], states),
                            self.params, None) for i in range(self.num_envs))

    @property
    def state(self):
        """The current batched state (leading (num_envs,) axis)."""
        return self._state


def register_envs() -> None:
    """Register "vte/" + every registered vte environment with Gymnasium ("vte/Cluster-v0",
    "vte/OpenB-v0"; idempotent; done when this module is imported). Gymnasium 1.x has no
    plugin or entry-point discovery, so `gym.make` finds them after this import, or with
    the module in the id: `gym.make("vte.adapters.gymnasium:vte/OpenB-v0")`."""
    for vte_id in vte.registered():
        gym_id = NAMESPACE + vte_id
        if gym_id not in gym.registry:
            gym.register(id=gym_id, entry_point=f"{__name__}:ClusterEnv",
                         vector_entry_point=f"{__name__}:ClusterVectorEnv",
                         kwargs={"env_id": vte_id})


register_envs()

__all__ = ["ClusterEnv", "ClusterVectorEnv", "ENV_ID", "AUTORESET_MODES", "RENDER_MODES",
           "make_params", "observation_space", "register_envs"]
