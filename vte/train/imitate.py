"""Imitation: supervised training of the scheduler network on a teacher's decisions.

    python train/imitate.py --out runs/imitate
    python train/ppo.py --init-from runs/imitate      # then fine-tune with PPO
    python train/imitate.py --devices 4               # data parallel over 4 devices
    python train/imitate.py --env openb --teacher fgd # a published policy on the OpenB trace

On synthetic clusters the environment knows the optimal action of every state it
generates, so the policy learns it as a label; on the OpenB trace the label is the action
of the `--teacher` policy. Rollouts follow the learner's own (sampled) policy and every
visited state is labelled (DAgger): the learner is trained on the states its own mistakes
lead to. By default (`--online`, below) it learns while collecting; with `--no-online` one
update collects `num_steps` decisions in `num_envs` environments, then runs
`update_epochs` passes of `num_minibatches` steps on the cross-entropy between the masked
logits and the label, plus (on synthetic clusters, and on OpenB with a planning teacher's
`--plan-costs`, its regrets: `--distill-temp`) the cross-entropy to softmax(-cost / T) over
the feasible actions, a ranking of every node by its cost rather than the optimum alone;
each phase is a `lax.scan` in one jitted function, vmapped over `--seeds`. The value
head regresses the reward of the behaviour policy (the critic PPO uses at its default
`--gamma 0`), so a PPO warm start gets a trained critic too. Same outputs as
`train/ppo.py` (`vte/train/run.py`).

`--online` (the default, one epoch) learns while collecting: in each step the
environments are taken in blocks of a minibatch (or whole steps whose gradients are
accumulated, when a minibatch holds more decisions than there are environments); the
forward pass that samples a block's actions is the one differentiated, and the next block
acts with the network the gradient moved. A decision then costs one forward and one
backward pass, where the offline update spends a forward pass to act and another, with
the backward, to learn, and nothing is shuffled: 1.3-1.7x the decisions per second
(docs/history.md). With one minibatch per rollout it is the offline update to float
rounding (a test).
"""

from __future__ import annotations

if __name__ == "__main__":  # python -m vte.train.imitate: JAX distributed before JAX starts
    from vte.train.multihost import launch
    launch("vte.train.imitate")
    raise SystemExit(0)

import jax  # noqa: E402
import jax.numpy as jnp
import optax

from vte.train import core, run
from vte.train.config import ImitateConfig
from vte.train.core import Runner, Transition
from vte.train.envs import make_env


def make_update(config: ImitateConfig, network=None):
    """(init, update): `init(rng, params=None) -> Runner` and one imitation update
    `update(runner) -> (runner, metrics)`, metrics a dict of scalars. `network`: a flax
    module to train instead of the environment's (`env.network`), with its outputs
    (masked logits (..., A), value (...)); runs save the config only, so
    `vte.load_policy` rebuilds the environment's network."""
    env = make_env(config)
    net = env.network if network is None else network
    tx = core.make_optimizer(config)
    distill = config.distill_temp > 0 and env.has_costs
    if config.online:
        # A minibatch larger than the environments spans whole steps: their gradients are
        # accumulated and applied once (optax.MultiSteps), as one minibatch would be.
        steps = max(1, config.minibatch_size // config.num_envs)
        tx = optax.MultiSteps(tx, every_k_schedule=steps) if steps > 1 else tx

    def init(rng, params=None):
        return core.init_runner(rng, config, env, net, tx, params)

    # LOSS (cross-entropy to the label, to the distilled cost ranking, value to the reward),
    # of the network's outputs in the states of `t`
    def loss_of(logits, value, t: Transition):
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

    def update(runner: Runner):
        if config.online:
            return online_update(env, net, runner, config, tx, loss_of, distill)
        # COLLECT LABELLED STATES (the learner acts, the teacher labels)
        rollout_end, (traj, stats) = core.collect(env, net, runner, config)

        def loss_fn(p, t: Transition):
            return loss_of(*net.apply(p, t.obs), t)

        # UPDATE NETWORK (only what the loss reads goes through the shuffle)
        data = Transition(obs=traj.obs, action=None, log_prob=None, value=None,
                          reward=traj.reward, terminated=None, truncated=None,
                          final_value=None, label=traj.label,
                          label_cost=traj.label_cost if distill else None)
        return core.minibatch_sgd(runner, rollout_end, data, loss_fn, tx, config, stats)

    return init, update


def online_update(env, net, runner: Runner, config: ImitateConfig, tx, loss_of, distill):
    """One imitation update learned while collecting (`--online`): `num_steps` steps of
    every environment. In each step the teacher labels every state (and, when `distill`,
    every action's cost is taken) at once; then the environments are taken in blocks of
    min(minibatch size, num_envs), strided (`in_blocks`): the network's forward pass on a
    block samples its actions and is differentiated (`jax.vjp`) for `loss_of(logits, value, Transition)`,
    whose gradient `tx` applies before the next block acts (accumulated over whole steps
    by `tx` when a minibatch spans several). The value target is the reward of the action:
    from `env.reward` where the environment scores an action without stepping (then every
    environment steps once, after the blocks), else from stepping the block. Returns
    (runner, metrics) as the offline update does: the environments' per-step scalars and
    the blocks' losses, averaged."""
    block = min(config.minibatch_size, config.num_envs)
    blocks = config.num_envs // block
    scored = env.reward is not None

    # Block b holds environments b, b + blocks, b + 2 blocks, ...: strided, so that where
    # the environments are split over devices (contiguous shares) every block is too.
    def in_blocks(tree):        # (num_envs, ...) -> (blocks, block, ...)
        return jax.tree_util.tree_map(
            lambda x: jnp.swapaxes(x.reshape((block, blocks) + x.shape[1:]), 0, 1), tree)

    def whole(tree):            # (blocks, block, ...) -> (num_envs, ...)
        return jax.tree_util.tree_map(
            lambda x: jnp.swapaxes(x, 0, 1).reshape((config.num_envs,) + x.shape[2:]), tree)

    def act_keys(k_act):        # one per block; with one block, the offline rollout's key
        return jax.random.split(k_act, blocks) if blocks > 1 else k_act[None]

    def block_step(carry, xs):
        params, opt_state = carry
        env_state, obs, keys, k_act, label, costs = xs
        (logits, value), pullback = jax.vjp(lambda p: net.apply(p, obs), params)
        action = jax.random.categorical(k_act, logits).astype(jnp.int32)
        if scored:
            reward, stepped = jax.vmap(env.reward)(env_state, action), None
        else:
            stepped = jax.vmap(env.step)(keys, env_state, action)
            reward = stepped[2]
        t = Transition(obs=obs, action=None, log_prob=None, value=None, reward=reward,
                       terminated=None, truncated=None, final_value=None, label=label,
                       label_cost=costs)
        grad_out, aux = jax.grad(lambda out: loss_of(*out, t), has_aux=True)((logits, value))
        grads, = pullback(grad_out)
        updates, opt_state = tx.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), (logits, action, stepped,
                                                                   aux)

    def env_step(carry, _):
        params, opt_state, env_state, obs, rng = carry
        rng, k_act, k_env = jax.random.split(rng, 3)
        keys = jax.random.split(k_env, config.num_envs)
        # THE TEACHER'S LABEL and every action's cost, in the state the action is taken in
        label, costs = env.labels(keys, env_state, obs)
        costs = costs if distill else None
        (params, opt_state), (logits, action, stepped, aux) = jax.lax.scan(
            block_step, (params, opt_state),
            (in_blocks(env_state), in_blocks(obs), in_blocks(keys), act_keys(k_act),
             in_blocks(label), in_blocks(costs)))
        logits, action = whole(logits), whole(action)
        if scored:
            stepped = jax.vmap(env.step)(keys, env_state, action)
        next_obs, env_state, reward, term, trunc, info = whole(stepped) if not scored else stepped
        stats = {**env.stats(logits, action, label, info, term | trunc),
                 "reward": reward.mean()}
        return (params, opt_state, env_state, next_obs, rng), (stats, aux)

    (params, opt_state, env_state, obs, rng), (stats, losses) = jax.lax.scan(
        env_step, (runner.params, runner.opt_state, runner.env_state, runner.obs, runner.rng),
        None, config.num_steps)
    runner = Runner(params=params, opt_state=opt_state, env_state=env_state, obs=obs,
                    rng=rng, update=runner.update + 1)
    return runner, core.update_metrics(stats, losses)


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

