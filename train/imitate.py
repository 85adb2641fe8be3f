"""Imitation: supervised training of the scheduler network on a teacher's decisions.

    python train/imitate.py --out runs/imitate
    python train/ppo.py --init-from runs/imitate      # then fine-tune with PPO
    python train/imitate.py --devices 4               # data parallel over 4 devices
    python train/imitate.py --env openb --teacher fgd # a published policy on the OpenB trace

On synthetic clusters the environment knows the optimal action of every state it
generates, so the policy learns it as a label; on the OpenB trace the label is the action
of the `--teacher` policy. Rollouts follow the learner's own (sampled) policy and every
visited state is labelled (DAgger): the learner is trained on the states its own mistakes
lead to. One update collects `num_steps` decisions in `num_envs` environments, then runs
`update_epochs` passes of `num_minibatches` steps on the cross-entropy between the masked
logits and the label, plus (on synthetic clusters, `--distill-temp`) the cross-entropy
to softmax(-cost / T) over the feasible actions, a ranking of every node by its cost
rather than the optimum alone; each phase is a `lax.scan` in one jitted function,
vmapped over `--seeds`. The value head regresses the reward of the behaviour policy (the
critic PPO uses at its default `--gamma 0`), so a PPO warm start gets a trained critic
too. Same outputs as `train/ppo.py` (`train/run.py`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

if __name__ == "__main__":  # several hosts: before importing vte, which starts JAX
    from train import multihost
    multihost.initialize_from_command_line()
from train import core, run  # noqa: E402
from train.config import ImitateConfig  # noqa: E402
from train.core import Runner, Transition  # noqa: E402
from train.envs import make_env  # noqa: E402


def make_update(config: ImitateConfig, network=None):
    """(init, update): `init(rng, params=None) -> Runner` and one imitation update
    `update(runner) -> (runner, metrics)`, metrics a dict of scalars. `network`: a flax
    module to train instead of the environment's (`env.network`), with its outputs
    (masked logits (..., A), value (...)); runs save the config only, so
    `vte.load_policy` rebuilds the environment's network."""
    env = make_env(config)
    net = env.network if network is None else network
    tx = core.make_optimizer(config)

    def init(rng, params=None):
        return core.init_runner(rng, config, env, net, tx, params)

    def update(runner: Runner):
        # COLLECT LABELLED STATES (the learner acts, the teacher labels)
        rollout_end, (traj, stats) = core.collect(env, net, runner, config)

        # LOSS (cross-entropy to the label, to the distilled cost ranking, value to the
        # reward)
        distill = config.distill_temp > 0 and traj.label_cost is not None

        def loss_fn(p, t: Transition):
            logits, value = net.apply(p, t.obs)
            log_probs = jax.nn.log_softmax(logits)
            ce = -jnp.take_along_axis(log_probs, t.label[:, None], -1).mean()
            value_loss = 0.5 * jnp.square(value - t.reward).mean()
            loss = ce + config.vf_coef * value_loss
            aux = {}
            if distill:
                dce = distill_cross_entropy(log_probs, t.label_cost, t.obs.action_mask,
                                            config.distill_temp)
                loss = loss + config.distill_coef * dce
                aux["distill_cross_entropy"] = dce
            return loss, {"loss": loss, "cross_entropy": ce, "value_loss": value_loss,
                          "accuracy": (jnp.argmax(logits, -1) == t.label).mean(), **aux}

        # UPDATE NETWORK (only what the loss reads goes through the shuffle)
        data = Transition(obs=traj.obs, action=None, log_prob=None, value=None,
                          reward=traj.reward, terminated=None, truncated=None,
                          final_value=None, label=traj.label,
                          label_cost=traj.label_cost if distill else None)
        return core.minibatch_sgd(runner, rollout_end, data, loss_fn, tx, config, stats)

    return init, update


def distill_cross_entropy(log_probs: jax.Array, cost: jax.Array, mask: jax.Array,
                          temp: float) -> jax.Array:
    """Mean cross-entropy from the teacher's softmax(-cost / temp) to the policy.

    Args:
      log_probs: (B, A) the policy's log-probabilities (masked logits, log-softmaxed).
      cost: (B, A) the cost of every action, +inf where infeasible.
      mask: (B, A) bool, the actions the policy may take; the teacher's distribution is
        restricted to these too (defer is in both, so it is never empty).
      temp: > 0, in cost units: actions within about `temp` of the optimum share its mass.
    """
    allowed = mask & jnp.isfinite(cost)
    best = jnp.min(jnp.where(allowed, cost, jnp.inf), axis=-1, keepdims=True)
    gap = jnp.where(allowed, cost - best, 0.0)            # >= 0, 0 at the least cost
    teacher = jax.nn.softmax(jnp.where(allowed, -gap / temp, -jnp.inf), axis=-1)
    return -jnp.sum(jnp.where(allowed, teacher * log_probs, 0.0), axis=-1).mean()


def make_train(config: ImitateConfig):
    """The whole training as one jitted `train(rng) -> (runner, metrics per update)`."""
    return core.compile_train(make_update, config)


def main(argv=None) -> dict:
    return run.main(argv, ImitateConfig, make_update, __doc__.splitlines()[0])


if __name__ == "__main__":
    main()
