"""What every example shares: the held-out evaluation and its baselines.

    from common import held_out, report
    scores = held_out({"mine": my_policy}, params)     # mean episode return, held-out seeds
    report("PureJaxRL-style PPO", scores)

A policy here is `policy(obs) -> actions`: NumPy in and out, batched, `obs` the dict
observation of `gym.make_vec("vte/Cluster-v0", ...)` (every field with a leading
(num_envs,) axis). Every policy plays the same held-out scenarios (seeds HELD_OUT_SEED +
i, never used in training), one whole episode each, so the returns compare directly:
random valid actions, `first_fit` and the best heuristic (`most_reliable`) beside yours.
"""

from __future__ import annotations

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np

import vte
import vte.adapters.gymnasium  # noqa: F401  (registers "vte/Cluster-v0")
from vte.cluster.spaces import flatten_fields

HELD_OUT_SEED = 1_000_000      # training runs use small seeds; these scenarios are held out
EPISODES = 32
BASELINES = ("random_valid", "first_fit", "most_reliable")


def flat(obs: dict) -> np.ndarray:
    """(num_envs, D) float32: the dict observation as the adapters' flat vector (fields in
    order, booleans as 0/1), for policies trained on `observation="flat"`."""
    return flatten_fields(obs, batch=1)


def _heuristic(name: str, params: vte.EnvParams):
    """A heuristic of `vte.cluster.heuristics` as a batched NumPy policy of the dict observation."""
    fn = vte.cluster.heuristics.ALL["random" if name == "random_valid" else name]

    @jax.jit
    def act(key, obs):
        obs = vte.Observation(**{k: (v[..., 0] if k == "progress" else v) for k, v in obs.items()})
        keys = jax.random.split(key, obs.nodes.shape[0])
        return jax.vmap(fn, (0, 0, None))(keys, obs, params)

    state = {"key": jax.random.PRNGKey(HELD_OUT_SEED)}

    def policy(obs):
        state["key"], k = jax.random.split(state["key"])
        return np.asarray(act(k, {k_: jnp.asarray(v) for k_, v in obs.items()}))
    return policy


def held_out(policies: dict, params: vte.EnvParams, episodes: int = EPISODES,
             baselines: bool = True) -> dict[str, float]:
    """Mean held-out episode return of each policy (and of the baselines), on the same
    `episodes` scenarios."""
    named = dict(policies)
    if baselines:
        named.update({name: _heuristic(name, params) for name in BASELINES})
    out = {}
    for name, policy in named.items():
        envs = gym.make_vec("vte/Cluster-v0", num_envs=episodes, params=params,
                            autoreset_mode="SameStep")
        obs, _ = envs.reset(seed=HELD_OUT_SEED)
        total = np.zeros(episodes)
        for _ in range(params.episode_len):
            obs, reward, *_ = envs.step(np.asarray(policy(obs), np.int64))
            total += reward
        envs.close()
        out[name] = float(total.mean())
    return out


def report(title: str, scores: dict[str, float]) -> None:
    """What was measured, then one line per policy, best first."""
    print(f"{title}: mean held-out episode return ({EPISODES} scenarios never trained on, "
          f"seeds {HELD_OUT_SEED:,}.., one whole episode each; the return is minus the "
          "episode's summed regret against the optimum, so 0 is optimal and higher is better)")
    for name, value in sorted(scores.items(), key=lambda kv: -kv[1]):
        print(f"  {name:>16}  {value:9.2f}")
