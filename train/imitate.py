"""Imitation of the known optimum: supervised training of the scheduler network.

    python train/imitate.py --out runs/imitate
    python train/ppo.py --init-from runs/imitate      # then fine-tune with PPO
    python train/imitate.py --devices 4               # data parallel over 4 devices

The environment knows the optimal action of every state it generates, so the policy
learns it as a label. Rollouts follow the learner's own (sampled) policy and every visited
state is labelled with the optimum (DAgger): the learner is trained on the states its own
mistakes lead to. One update collects `num_steps` decisions in `num_envs` environments,
then runs `update_epochs` passes of `num_minibatches` steps on the cross-entropy between
the masked logits and the optimal action; each phase is a `lax.scan` in one jitted
function, vmapped over `--seeds`. The value head regresses the reward of the behaviour
policy (the critic PPO uses at its default `--gamma 0`), so a PPO warm start gets a
trained critic too. Same outputs as `train/ppo.py` (`train/common.py`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp

if __package__ in (None, ""):  # run as a script: python train/imitate.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
if __name__ == "__main__":  # several hosts: before importing vte, which starts JAX
    from train import multihost  # noqa: E402
    multihost.initialize_from_command_line()
from train import common  # noqa: E402

DEFAULTS = dict(
    num_envs=1024, num_steps=4, total_timesteps=2_000_000, update_epochs=2,
    num_minibatches=8, lr=3e-3, vf_coef=0.5, out="runs/imitate",
)


class Sample(NamedTuple):
    obs: object          # vte.Observation, (num_envs, ...) per step
    label: jax.Array     # (num_envs,) int32, the optimal action
    reward: jax.Array    # (num_envs,) float32, -regret of the behaviour action


def make_update(config: dict):
    """(init, update): `init(rng, params=None) -> Runner` and one imitation update
    `update(runner) -> (runner, metrics)`, metrics a dict of scalars."""
    net = common.make_network(config)
    tx = common.make_optimizer(config)
    vf_coef = config["vf_coef"]

    def init(rng, params=None):
        return common.init_runner(rng, config, net, tx, params)

    def update(runner: common.Runner):
        # COLLECT LABELLED STATES (the learner acts, the optimum labels)
        def record(obs, logits, value, action, reward, done, info):
            return Sample(obs, info["optimal_action"], reward)

        (env_state, obs, rng), (data, stats) = common.rollout(net, runner, config, record)

        # UPDATE NETWORK (cross-entropy to the optimum, value to the reward)
        def loss_fn(p, mb: Sample):
            logits, value = net.apply(p, mb.obs)
            log_probs = jax.nn.log_softmax(logits)
            ce = -jnp.take_along_axis(log_probs, mb.label[:, None], -1).mean()
            value_loss = 0.5 * jnp.square(value - mb.reward).mean()
            loss = ce + vf_coef * value_loss
            return loss, {"loss": loss, "cross_entropy": ce, "value_loss": value_loss,
                          "accuracy": (jnp.argmax(logits, -1) == mb.label).mean()}

        return common.learn(runner, (env_state, obs, rng), data, loss_fn, tx, config,
                            stats)

    return init, update


def make_train(config: dict):
    """The whole training as one jitted `train(rng) -> (runner, metrics per update)`."""
    return common.compile_train(make_update, config)


def _add_flags(g, d):
    g.add_argument("--vf-coef", type=float, default=d["vf_coef"], help="value loss weight")


RANGES = {"vf_coef": (0.0, 1e3)}


def main(argv=None) -> dict:
    return common.main(argv, __doc__.splitlines()[0], "imitate", DEFAULTS, _add_flags,
                       tuple(RANGES), RANGES, make_update)


if __name__ == "__main__":
    main()
