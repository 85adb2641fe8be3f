"""A registered environment as the trainers see it (`TrainEnv`), built from the registry.

    env = make_env(config)                       # --env names a `vte.registry` registration
    obs, state = env.reset(key)                  # one environment; the trainer vmaps
    label = env.teacher(key, state, obs)         # the teacher's action, or env.teacher None
    label, cost = env.labels(keys, states, obs)  # batched, with every action's cost or None
    obs, state, reward, terminated, truncated, info = env.step(key, state, action)
    scalars = env.stats(logits, action, label, info, done)     # batched over environments

Nothing here knows an environment by name: the registration gives the environment and its
training params (`run_params`, the trace of an OpenB run loaded once), the network, the
reward trainers optimise (`train_reward`, e.g. OpenB's % of the GPUs), the reference
policies a teacher is chosen from, the per-step metrics (reduced to scalars inside the
rollout's scan) and the evaluation of a finished run.

The teacher is explicit, `(key, state, obs) -> action` (`obs` the observation of `state`),
owned by the trainer: imitation's `--teacher` (the environment's default teacher without
one); for PPO the environment's known optimum when it has one (`Registration.optimum`, only
monitored as `greedy_match`). A teacher the registration can read off the observation
(`Registration.observed_policies`, e.g. OpenB's FGD) is read there, not computed again.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp

from vte.registry import Registration, registration


@dataclasses.dataclass(frozen=True)
class TrainEnv:
    """One registered environment with a run's params, for the trainers (one environment
    per call; the trainers vmap)."""

    registration: Registration
    env: Any                   # a `vte.environment.Environment`
    params: Any                # its training params
    network: Any               # flax module: obs -> (masked logits (..., A), value (...))
    teacher: Callable | None   # (key, state, obs) -> () int32 action, the label; None: no label
                               # (with teacher_costs, -> (action, (A,) cost of every action))
    curves: tuple              # (metric, title, short name) of the learning curve, any number
    teacher_costs: bool = False   # the teacher gives every action's cost with its label

    def reset(self, key):
        return self.env.reset(key, self.params)

    def step(self, key, state, action):
        """`env.step`, with the reward the trainer optimises (`train_reward`)."""
        obs, new, reward, terminated, truncated, info = self.env.step(key, state, action,
                                                                       self.params)
        if self.registration.train_reward is not None:
            reward = self.registration.train_reward(state, reward, self.params)
        return obs, new, reward, terminated, truncated, info

    @property
    def reward(self) -> Callable | None:
        """(state, action) -> the reward `step` would give, without stepping; None when the
        environment cannot score an action without a step."""
        fn = self.registration.reward_fn
        return None if fn is None else (lambda state, action: fn(state, action, self.params))

    @property
    def action_costs(self) -> Callable | None:
        """(state) -> (A,) cost of every action (+inf where invalid), or None."""
        fn = self.registration.action_costs
        return None if fn is None else (lambda state: fn(state, self.params))

    @property
    def has_costs(self) -> bool:
        """Whether `labels` gives every action's cost (for a distillation loss)."""
        return self.teacher_costs or self.action_costs is not None

    def labels(self, keys, states, obs):
        """(label, cost) of a batch of states: label (B,) int32 the teacher's action or None
        without a teacher; cost (B, A) float32 every action's cost, from the teacher when it
        gives them (`teacher_costs`), else the environment's (`action_costs`), or None."""
        if self.teacher is not None and self.teacher_costs:
            return jax.vmap(self.teacher)(keys, states, obs)
        label = jax.vmap(self.teacher)(keys, states, obs) if self.teacher is not None else None
        costs = (jax.vmap(self.action_costs)(states) if self.action_costs is not None
                 else None)
        return label, costs

    def stats(self, logits, action, label, info: dict, done) -> dict:
        """The scalars each rollout step logs (batched over environments): the
        environment's metrics, and with a teacher how often the behaviour and the greedy
        action take its action."""
        out = dict(self.registration.metrics(info, done))
        if label is not None:
            out["match_rate"] = (action == label).mean()
            out["greedy_match"] = (jnp.argmax(logits, -1) == label).mean()
        return out

    def evaluate(self, config, params, out: str) -> dict:
        """The registration's evaluation of the trained seeds; writes out/eval.json."""
        return self.registration.evaluate(config, params, out)


TEACHER_CURVE = ("greedy_match", "greedy action = the teacher's", "match")
LOSS_CURVE = ("loss", "loss", "loss")


def make_env(config) -> TrainEnv:
    """The training environment `config.env` names, with the run's teacher."""
    reg = registration(config.env)
    env, params = reg.run_params(config, True)
    name = getattr(config, "teacher", None) or reg.optimum
    teacher, costs = None, False
    observed = reg.observed_policies() if reg.observed_policies is not None else {}
    if name in observed:
        read = observed[name]
        teacher = lambda key, state, obs: read(key, obs, params)   # noqa: E731
    elif name is not None:
        built = reg.teacher_action(name, config) if reg.teacher_action is not None else None
        act = built if built is not None else reg.policies()[name]
        teacher = lambda key, state, obs: act(key, state, params)   # noqa: E731
        costs = getattr(act, "gives_costs", False)
    curves = ((TEACHER_CURVE,) if teacher is not None else ()) + tuple(reg.curves) + (LOSS_CURVE,)
    return TrainEnv(registration=reg, env=env, params=params,
                    network=reg.network(config.hidden), teacher=teacher, curves=curves,
                    teacher_costs=costs)
