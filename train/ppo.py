"""PPO for the VTE scheduler, compiled end to end.

    python train/ppo.py --num-envs 4096 --out runs/ppo
    python train/ppo.py --seeds 4                     # four models in one program
    python train/ppo.py --resume runs/ppo             # continue an interrupted run
    python train/ppo.py --init-from runs/imitate      # warm start from imitation
    python train/ppo.py --devices 4                   # data parallel over 4 devices

One update collects `num_steps` decisions in each of `num_envs` environments, computes
GAE advantages and runs `update_epochs` passes of `num_minibatches` clipped-surrogate
steps; each phase is a `lax.scan` inside one jitted function, and `--seeds K` vmaps the
whole update over K independent models. `make_train(config)` returns the whole training
as one jitted `train(rng)` for research code; the script runs the same update in chunks
of `--log-every` to show progress, log metrics and checkpoint (`train/common.py`).

Reward is -regret against the known optimum of the state the decision was taken in.
Zero regret is reachable in every state, whatever happened before, so the policy that is
optimal decision by decision is optimal for the episode: the default `--gamma 0` gives
each decision its own credit (advantage = reward - value) without the variance of future
rewards. With `--gamma > 0` truncated episodes bootstrap from the value of the final
observation.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp

if __package__ in (None, ""):  # run as a script: python train/ppo.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
if __name__ == "__main__":  # several hosts: before importing vte, which starts JAX
    from train import multihost  # noqa: E402
    multihost.initialize_from_command_line()
from train import common  # noqa: E402

DEFAULTS = dict(
    num_envs=1024, num_steps=4, total_timesteps=1_500_000, update_epochs=2,
    num_minibatches=8, lr=1e-3, gamma=0.0, gae_lambda=0.95, clip_eps=0.2, ent_coef=0.003,
    vf_coef=0.5, out="runs/ppo",
)


class Transition(NamedTuple):
    obs: object              # vte.Observation, (num_envs, ...) per step
    action: jax.Array        # (num_envs,) int32
    log_prob: jax.Array      # (num_envs,) float32, of the action under the behaviour policy
    value: jax.Array         # (num_envs,) float32
    reward: jax.Array        # (num_envs,) float32, -regret (+ bootstrap on truncation)
    done: jax.Array          # (num_envs,) bool, episode ended after this step


def make_update(config: dict):
    """(init, update): `init(rng, params=None) -> Runner` and one PPO update
    `update(runner) -> (runner, metrics)`, metrics a dict of scalars."""
    net = common.make_network(config)
    tx = common.make_optimizer(config)
    gamma, lam = config["gamma"], config["gae_lambda"]
    clip_eps, ent_coef, vf_coef = config["clip_eps"], config["ent_coef"], config["vf_coef"]

    def init(rng, params=None):
        return common.init_runner(rng, config, net, tx, params)

    def update(runner: common.Runner):
        # COLLECT TRAJECTORIES
        def record(obs, logits, value, action, reward, done, info):
            log_prob = jnp.take_along_axis(jax.nn.log_softmax(logits), action[:, None], -1)
            if gamma > 0:
                # Episodes end only by truncation (the environment never terminates), so
                # the return goes on: bootstrap from the value of the episode's last obs.
                final_value = net.apply(runner.params, info["final_observation"])[1]
                reward = reward + gamma * jnp.where(done, final_value, 0.0)
            return Transition(obs, action, log_prob[:, 0], value, reward, done)

        (env_state, obs, rng), (traj, stats) = common.rollout(net, runner, config, record)

        # CALCULATE ADVANTAGE (GAE, backwards in time)
        _, last_value = net.apply(runner.params, obs)

        def gae_step(carry, t: Transition):
            gae, next_value = carry
            live = 1.0 - t.done.astype(jnp.float32)
            delta = t.reward + gamma * next_value * live - t.value
            gae = delta + gamma * lam * live * gae
            return (gae, t.value), gae

        _, advantages = jax.lax.scan(gae_step, (jnp.zeros_like(last_value), last_value),
                                     traj, reverse=True)
        targets = advantages + traj.value

        # UPDATE NETWORK (clipped surrogate, clipped value loss, entropy bonus)
        def loss_fn(p, mb):
            t, adv, target = mb
            logits, value = net.apply(p, t.obs)
            log_probs = jax.nn.log_softmax(logits)
            log_prob = jnp.take_along_axis(log_probs, t.action[:, None], -1)[:, 0]
            log_ratio = log_prob - t.log_prob
            ratio = jnp.exp(log_ratio)
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            policy_loss = -jnp.minimum(
                ratio * adv, jnp.clip(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * adv).mean()
            value_clipped = t.value + jnp.clip(value - t.value, -clip_eps, clip_eps)
            value_loss = 0.5 * jnp.maximum(jnp.square(value - target),
                                           jnp.square(value_clipped - target)).mean()
            probs = jnp.exp(log_probs)
            entropy = -jnp.sum(jnp.where(t.obs.action_mask, probs * log_probs, 0.0), -1).mean()
            loss = policy_loss + vf_coef * value_loss - ent_coef * entropy
            return loss, {"loss": loss, "policy_loss": policy_loss, "value_loss": value_loss,
                          "entropy": entropy, "approx_kl": ((ratio - 1.0) - log_ratio).mean(),
                          "clip_frac": (jnp.abs(ratio - 1.0) > clip_eps).mean()}

        return common.learn(runner, (env_state, obs, rng), (traj, advantages, targets),
                            loss_fn, tx, config, stats)

    return init, update


def make_train(config: dict):
    """The whole training as one jitted `train(rng) -> (runner, metrics per update)`."""
    return common.compile_train(make_update, config)


def _add_flags(g, d):
    g.add_argument("--gamma", type=float, default=d["gamma"],
                   help="discount; 0 credits each decision with its own regret")
    g.add_argument("--gae-lambda", type=float, default=d["gae_lambda"], help="GAE lambda")
    g.add_argument("--clip-eps", type=float, default=d["clip_eps"],
                   help="PPO clip range of the probability ratio (and of the value)")
    g.add_argument("--ent-coef", type=float, default=d["ent_coef"], help="entropy bonus")
    g.add_argument("--vf-coef", type=float, default=d["vf_coef"], help="value loss weight")


RANGES = {"gamma": (0.0, 1.0), "gae_lambda": (0.0, 1.0), "clip_eps": (1e-6, 10.0),
          "ent_coef": (0.0, 1e3), "vf_coef": (0.0, 1e3)}


def main(argv=None) -> dict:
    return common.main(argv, __doc__.splitlines()[0], "ppo", DEFAULTS, _add_flags,
                       tuple(RANGES), RANGES, make_update)


if __name__ == "__main__":
    main()
