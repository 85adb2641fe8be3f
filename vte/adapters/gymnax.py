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
  `vte.adapters.specs.observation_specs`; with `observation="flat"` the same fields as
  one (D,) float32 vector (`vte.adapters.specs.flatten`, booleans as 0/1), a
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

from vte.adapters.specs import flat_bounds, flat_size, flatten, observation_specs
from vte.env import reset as vte_reset
from vte.env import step as vte_step
from vte.env import step_env as vte_step_env
from vte.observation import get_obs as vte_get_obs
from vte.params import EnvParams, num_actions
from vte.types import EnvState, Observation

OBSERVATION_MODES = ("dict", "flat")


class ClusterEnv(environment.Environment[EnvState, EnvParams]):
    """One cluster of `vte` as a gymnax `Environment` (see the module docstring).

    Args:
      params: the `vte.EnvParams` returned by `default_params` (default `EnvParams()`);
        every call also takes params explicitly, gymnax style.
      observation: "dict" (a `vte.Observation`) or "flat" (a (D,) float32 vector).
    """

    def __init__(self, params: EnvParams | None = None, observation: str = "dict"):
        if params is None:
            params = EnvParams()
        if not isinstance(params, EnvParams):
            raise ValueError(f"params={params!r} is invalid: allowed a vte.EnvParams or None")
        if observation not in OBSERVATION_MODES:
            raise ValueError(f"observation={observation!r} is invalid: allowed one of "
                             f"{OBSERVATION_MODES}")
        self._params = params
        self.observation = observation

    @property
    def default_params(self) -> EnvParams:
        return self._params

    def _encode(self, obs: Observation):
        return flatten(obs) if self.observation == "flat" else obs

    @partial(jax.jit, static_argnames=("self",))
    def step(self, key: jax.Array, state: EnvState, action: int | jax.Array,
             params: EnvParams | None = None
             ) -> tuple[Any, EnvState, jax.Array, jax.Array, jax.Array, dict[str, Any]]:
        """`vte.step` with gymnax's info keys: (obs, state, reward () float32, terminated ()
        bool, truncated () bool, info); `info["final_observation"]` is the observation
        before the auto-reset (in the adapter's observation form)."""
        params = self._params if params is None else params
        obs, state, reward, terminated, truncated, info = vte_step(key, state, action, params)
        info = {**info, "final_observation": self._encode(info["final_observation"]),
                "terminated": terminated, "truncated": truncated}
        return self._encode(obs), state, reward, terminated, truncated, info

    def step_env(self, key: jax.Array, state: EnvState, action: int | jax.Array,
                 params: EnvParams) -> tuple[Any, EnvState, jax.Array, jax.Array, dict]:
        """One decision without the auto-reset: (obs, state, reward, terminated, info)."""
        obs, state, reward, terminated, truncated, info = vte_step_env(key, state, action,
                                                                       params)
        return self._encode(obs), state, reward, terminated, info

    def reset_env(self, key: jax.Array, params: EnvParams) -> tuple[Any, EnvState]:
        """A fresh scenario: `vte.reset`."""
        obs, state = vte_reset(key, params)
        return self._encode(obs), state

    def get_obs(self, state: EnvState, params: EnvParams | None = None, key=None) -> Any:
        """The observation of `state` (`vte.get_obs`; no randomness, `key` is unused)."""
        return self._encode(vte_get_obs(state, self._params if params is None else params))

    def is_terminated(self, state: EnvState, params: EnvParams) -> jax.Array:
        """() bool, always False: a cluster has no terminal state."""
        return jnp.zeros((), bool)

    def is_truncated(self, state: EnvState, params: EnvParams) -> jax.Array:
        """() bool, the episode has taken `episode_len` decisions."""
        return state.steps >= params.episode_len

    @property
    def name(self) -> str:
        return "vte/Cluster-v0"

    @property
    def num_actions(self) -> int:
        """N + 1 for the default params: one per node, then defer."""
        return num_actions(self._params)

    def action_space(self, params: EnvParams | None = None) -> spaces.Discrete:
        """`Discrete(N + 1)`, int32."""
        return spaces.Discrete(num_actions(self._params if params is None else params))

    def observation_space(self, params: EnvParams | None = None) -> spaces.Space:
        """A `Dict` of one `Box` per `vte.Observation` field, or with `observation="flat"`
        one (D,) float32 `Box` (bounds in `vte.adapters.specs`)."""
        params = self._params if params is None else params
        if self.observation == "flat":
            low, high = flat_bounds(params)
            return spaces.Box(low, high, (flat_size(params),), jnp.float32)
        return spaces.Dict({name: spaces.Box(s.low, s.high, s.shape, s.dtype)
                            for name, s in observation_specs(params).items()})


__all__ = ["ClusterEnv", "OBSERVATION_MODES"]
