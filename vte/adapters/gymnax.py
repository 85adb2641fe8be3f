"""vte as a gymnax 1.0 environment, for PureJaxRL-style code built on gymnax.

    from gymnax.wrappers.purerl import FlattenObservationWrapper, LogWrapper
    from vte.adapters.gymnax import ClusterEnv

    env = ClusterEnv()                                  # vte.EnvParams() by default
    params = env.default_params                         # a vte.EnvParams
    obs, state = env.reset(key, params)
    obs, state, reward, terminated, truncated, info = env.step(key, state, action, params)

    env = LogWrapper(FlattenObservationWrapper(ClusterEnv(observation="flat")))

Needs the optional extra: `pip install -e ".[gymnax]"` (gymnax >= 1.0).

Observation: with `observation="dict"` (default) a `vte.Observation`, whose space is a
  `spaces.Dict` of `spaces.Box`es with the shapes, dtypes and bounds of
  `vte.cluster.spaces.observation_specs`; with `observation="flat"` the same fields as
  one (D,) float32 vector (`vte.cluster.spaces.flatten_fields`, booleans as 0/1), a
  `spaces.Box`, which gymnax's `FlattenObservationWrapper` requires.
Action: `spaces.Discrete(N + 1)`, int32; `a < N` places the head request on node a,
  `a == N` defers it (`vte.step`).
Reward: `-regret` (float32); terminated: never; truncated after `episode_len` decisions.

`step` is `vte.step` itself: its auto-reset (a fresh scenario only in steps where some
environment is done, also under `jax.vmap`) and its `info` (with `final_observation`),
plus gymnax's `info["terminated"]` and `info["truncated"]`. So a rollout through this
adapter equals one through `vte.step` with the same keys; gymnax's base `step` would
split the key and pay for a reset in every step. `step_env`, `reset_env`, `get_obs`,
`is_terminated` and `is_truncated` follow gymnax's contract for code that calls them
directly. Everything is pure and works under `jax.jit` and `jax.vmap`.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
from gymnax.environments import environment, spaces

import vte
from vte.environment import bounds_of, flatten_fields

OBSERVATION_MODES = ("dict", "flat")
STEP_APIS = ("gymnax", "legacy")   # 6 values (gymnax 1.0), or (obs, state, reward, done, info)


class ClusterEnv(environment.Environment):
    """One environment of `vte` as a gymnax `Environment` (see the module docstring).

    Args:
      params: the params `default_params` returns (default: the environment's, e.g.
        `EnvParams()`); every call also takes params explicitly, gymnax style.
      observation: "dict" (the environment's observation) or "flat" (a (D,) float32 vector).
      env_id: a registered vte environment ("Cluster-v0", "OpenB-v0").
      step_api: "gymnax" (`step` returns gymnax 1.0's six values) or "legacy" (the five
        values (obs, state, reward, done, info) with done = terminated | truncated, which
        PureJaxRL's wrappers, rejax and `gymnax.experimental.RolloutWrapper` unpack).
      **fields: the keywords of its `vte.make` (e.g. `subset=64` for "OpenB-v0").
    The params carry `max_steps_in_episode` (gymnax's name for the episode's step limit).
    The environment deep-copies (`copy.deepcopy`, as rejax does).
    """

    def __init__(self, params=None, observation: str = "dict", env_id: str = "Cluster-v0",
                 step_api: str = "gymnax", **fields):
        if observation not in OBSERVATION_MODES:
            raise ValueError(f"observation={observation!r} is invalid: allowed one of "
                             f"{OBSERVATION_MODES}")
        if step_api not in STEP_APIS:
            raise ValueError(f"step_api={step_api!r} is invalid: allowed one of {STEP_APIS}")
        self.step_api = step_api
        reg = vte.registration(env_id)
        if params is not None:
            self.env, params = reg.make(params=params, **fields)
        else:
            self.env, params = reg.make(**fields)
        self._params = params
        self.registration = reg
        self.observation = observation

    @property
    def default_params(self):
        return self._params

    def _encode(self, obs):
        if self.observation != "flat":
            return obs
        return flatten_fields({f: getattr(obs, f) for f in
                               self.env.observation_specs(self._params)})

    @partial(jax.jit, static_argnames=("self",))
    def step(self, key: jax.Array, state: Any, action: int | jax.Array,
             params: Any | None = None
             ) -> tuple[Any, Any, jax.Array, jax.Array, jax.Array, dict[str, Any]]:
        """`vte.step` with gymnax's info keys: (obs, state, reward () float32, terminated ()
        bool, truncated () bool, info); `info["final_observation"]` is the observation
        before the auto-reset (in the adapter's observation form)."""
        params = self._params if params is None else params
        obs, state, reward, terminated, truncated, info = self.env.step(key, state, action,
                                                                        params)
        info = {**info, "final_observation": self._encode(info["final_observation"]),
                "terminated": terminated, "truncated": truncated}
        if self.step_api == "legacy":
            return self._encode(obs), state, reward, terminated | truncated, info
        return self._encode(obs), state, reward, terminated, truncated, info

    def step_env(self, key: jax.Array, state: Any, action: int | jax.Array,
                 params: Any) -> tuple[Any, Any, jax.Array, jax.Array, dict]:
        """One decision without the auto-reset: (obs, state, reward, terminated, info)."""
        obs, state, reward, terminated, truncated, info = self.env.step_env(key, state, action,
                                                                            params)
        return self._encode(obs), state, reward, terminated, info

    def reset_env(self, key: jax.Array, params: Any) -> tuple[Any, Any]:
        """A fresh scenario: `vte.reset`."""
        obs, state = self.env.reset_env(key, params)
        return self._encode(obs), state

    def get_obs(self, state: Any, params: Any | None = None, key=None) -> Any:
        """The observation of `state` (`vte.get_obs`; no randomness, `key` is unused)."""
        return self._encode(self.env.get_obs(state, self._params if params is None else params))

    def is_terminated(self, state, params) -> jax.Array:
        """() bool, the episode reached a terminal state (`Environment.is_terminated`)."""
        return self.env.is_terminated(state, params)

    def is_truncated(self, state, params) -> jax.Array:
        """() bool, the episode was cut (`Environment.is_truncated`)."""
        return self.env.is_truncated(state, params)

    @property
    def name(self) -> str:
        return "vte/" + self.env.name

    @property
    def num_actions(self) -> int:
        """N + 1 for the default params: one per node, then defer (or cannot place)."""
        return self.env.num_actions(self._params)

    def action_space(self, params=None) -> spaces.Discrete:
        """`Discrete(N + 1)`, int32."""
        return spaces.Discrete(self.env.num_actions(self._params if params is None else params))

    def observation_space(self, params: Any | None = None) -> spaces.Space:
        """A `Dict` of one `Box` per `vte.Observation` field, or with `observation="flat"`
        one (D,) float32 `Box` (bounds in `vte.cluster.spaces`)."""
        params = self._params if params is None else params
        specs = self.env.observation_specs(params)
        if self.observation == "flat":
            low, high = bounds_of(specs)
            return spaces.Box(low, high, low.shape, jnp.float32)
        return spaces.Dict({name: spaces.Box(s.low, s.high, s.shape, s.dtype)
                            for name, s in specs.items()})


__all__ = ["ClusterEnv", "OBSERVATION_MODES"]
