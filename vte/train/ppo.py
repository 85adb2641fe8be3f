"""PPO for the VTE scheduler, compiled end to end.

    python train/ppo.py --num-envs 4096 --out runs/ppo
    python train/ppo.py --seeds 4                     # four models in one program
    python train/ppo.py --resume runs/ppo             # continue an interrupted run
    python train/ppo.py --init-from runs/imitate      # warm start from imitation
    python train/ppo.py --devices 4                   # data parallel over 4 devices
    python train/ppo.py --env openb --gamma 0.99      # on the OpenB trace replay

One update collects `num_steps` decisions in each of `num_envs` environments, computes
GAE advantages and runs `update_epochs` passes of `num_minibatches` clipped-surrogate
steps; each phase is a `lax.scan` inside one jitted function, and `--seeds K` vmaps the
whole update over K independent models. `make_train(config)` returns the whole training
as one jitted `train(rng)` for research code; the script runs the same update in chunks
of `--log-every` to show progress, log metrics and checkpoint (`vte/train/run.py`).

On synthetic clusters the reward is -regret against the known optimum of the state the
decision was taken in. Zero regret is reachable in every state, whatever happened before,
so the policy that is optimal decision by decision is optimal for the episode: the
default `--gamma 0` gives each decision its own credit (advantage = reward - value)
without the variance of future rewards. With `--gamma > 0` truncated episodes bootstrap
from the value of the final observation.

`--samples-per-state K` (with `--gamma 0`) samples K actions in every visited state from
the same logits, scores each with the environment's reward function (`vte.reward`, the
reward `step` would give, without stepping), and steps with the first. The clipped
surrogate then takes all K, each with the advantage of its reward over the mean of the
other K - 1 (a leave-one-out baseline), so every forward pass of the network learns from
K rewards instead of one.

`--all-actions` goes to the limit, and is the default wherever it applies (synthetic
clusters, `--gamma 0`, one sample per state): every action of each visited state is scored
with the environment's reward function, and the clipped surrogate is the expectation over
the behaviour policy of what a sampled action gives (`expected_surrogate`), each action
against the state's expected reward. The policy gradient then has no sampling noise, and
the critic learns the expected reward. `--no-all-actions` learns from the sampled action's
reward alone, as PPO does where the reward of an action not taken is unknown.

`--critic-warmup U` (for a run that starts from another, `--init-from`): in the first U
updates only the critic's own layers (`value_hidden`, `value`) learn, every other
parameter held by `stop_gradient`, so the policy it starts from collects the rollouts
while the critic learns their returns (GAE targets, Monte-Carlo returns at `--gae-lambda
1`); the policy then moves with advantages from a critic of itself instead of a fresh one.
Adam's moments of the held layers stay 0 meanwhile, so their first steps after it are
small and grow over some ten steps.
"""

from __future__ import annotations

if __name__ == "__main__":  # python -m vte.train.ppo: JAX distributed before JAX starts
    from vte.train.multihost import launch
    launch("vte.train.ppo")
    raise SystemExit(0)

import jax  # noqa: E402
import jax.numpy as jnp

from vte.train import core, run
from vte.train.config import PPOConfig
from vte.train.core import Runner, Transition
from vte.train.envs import make_env


def make_update(config: PPOConfig, network=None):
    """(init, update): `init(rng, params=None) -> Runner` and one PPO update
    `update(runner) -> (runner, metrics)`, metrics a dict of scalars. `network`: a flax
    module to train instead of the environment's (`env.network`), with its outputs
    (masked logits (..., A), value (...)); runs save the config only, so
    `vte.load_policy` rebuilds the environment's network."""
    env = make_env(config)
    net = env.network if network is None else network
    tx = core.make_optimizer(config)
    gamma, lam, clip_eps = config.gamma, config.gae_lambda, config.clip_eps
    k = config.samples_per_state
    every = config.all_actions

    def init(rng, params=None):
        return core.init_runner(rng, config, env, net, tx, params)

    def gae(traj: Transition, last_value: jax.Array) -> jax.Array:
        """GAE advantages (num_steps, num_envs), backwards in time from `last_value`, the
        critic's value of the observation after the rollout."""
        def gae_step(carry, t: Transition):
            gae, next_value = carry
            live = 1.0 - (t.terminated | t.truncated).astype(jnp.float32)
            delta = t.reward + gamma * next_value * live - t.value
            gae = delta + gamma * lam * live * gae
            return (gae, t.value), gae

        _, advantages = jax.lax.scan(gae_step, (jnp.zeros_like(last_value), last_value),
                                     traj, reverse=True)
        return advantages

    def update(runner: Runner):
        # COLLECT TRAJECTORIES
        rollout_end, (traj, stats) = core.collect(env, net, runner, config,
                                                  bootstrap=gamma > 0, samples_per_state=k,
                                                  all_actions=every)
        # A cut episode's return goes on: bootstrap from the value of its last observation.
        cut = traj.truncated & ~traj.terminated
        traj = traj._replace(reward=traj.reward + gamma * jnp.where(cut, traj.final_value, 0.0))

        # CALCULATE ADVANTAGE (GAE, backwards in time). Scored actions carry their own
        # rewards, so the loss takes their advantages from those and the critic learns the
        # policy's expected reward (all actions) or its K samples' mean reward.
        if every:
            advantages = None
            targets = jnp.sum(jnp.exp(traj.group_log_prob) * traj.group_reward, -1)
        elif k > 1:
            advantages, targets = None, traj.group_reward.mean(-1)
        else:
            advantages = gae(traj, net.apply(runner.params, rollout_end[1])[1])
            targets = advantages + traj.value

        # LOSS (clipped surrogate, clipped value loss, entropy bonus); during the critic's
        # warm-up only the critic's own layers receive a gradient.
        warm = runner.update < config.critic_warmup

        def loss_fn(p, mb):
            t, adv, target = mb
            if config.critic_warmup:
                p = critic_only(p, warm)
            logits, value = net.apply(p, t.obs)
            log_probs = jax.nn.log_softmax(logits)
            if every:   # every action, weighted by its behaviour probability
                adv = t.group_reward - target[:, None]
                policy_loss, approx_kl, clip_frac = expected_surrogate(
                    log_probs, t.group_log_prob, adv, t.obs.action_mask, clip_eps)
                return _finish(t, value, target, log_probs, policy_loss, approx_kl, clip_frac)
            if k > 1:   # K actions per state, each against the mean of the other K - 1
                log_prob = jnp.take_along_axis(log_probs, t.group_action, -1)
                log_ratio = log_prob - t.group_log_prob
                r = t.group_reward
                adv = (r - r.mean(-1, keepdims=True)) * (k / (k - 1))
            else:
                log_prob = jnp.take_along_axis(log_probs, t.action[:, None], -1)[:, 0]
                log_ratio = log_prob - t.log_prob
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            surrogate, approx_kl, clipped = clipped_surrogate(log_ratio, adv, clip_eps)
            return _finish(t, value, target, log_probs, -surrogate.mean(), approx_kl.mean(),
                           clipped.mean())

        def _finish(t, value, target, log_probs, policy_loss, approx_kl, clip_frac):
            value_clipped = t.value + jnp.clip(value - t.value, -clip_eps, clip_eps)
            value_loss = 0.5 * jnp.maximum(jnp.square(value - target),
                                           jnp.square(value_clipped - target)).mean()
            probs = jnp.exp(log_probs)
            entropy = -jnp.sum(jnp.where(t.obs.action_mask, probs * log_probs, 0.0), -1).mean()
            loss = policy_loss + config.vf_coef * value_loss - config.ent_coef * entropy
            return loss, {"loss": loss, "policy_loss": policy_loss, "value_loss": value_loss,
                          "entropy": entropy, "approx_kl": approx_kl, "clip_frac": clip_frac}

        # UPDATE NETWORK
        # (the costs imitation distils are not read here: kept out of the shuffle)
        data = (traj._replace(label_cost=None), advantages, targets)
        return core.minibatch_sgd(runner, rollout_end, data, loss_fn, tx, config, stats)

    return init, update


CRITIC_LAYERS = ("value_hidden", "value")   # the critic's own layers in every vte network


def critic_only(params, warm: jax.Array):
    """`params` unchanged in value; while `warm` (a () bool) a gradient through them reaches
    only the critic's own layers (`CRITIC_LAYERS`, by name at any depth), every other leaf
    behind `stop_gradient`. ValueError (at trace time) when no layer has such a name."""
    def is_critic(path) -> bool:
        return any(getattr(k, "key", None) in CRITIC_LAYERS for k in path)

    if not any(is_critic(path) for path, _ in jax.tree_util.tree_flatten_with_path(params)[0]):
        raise ValueError(f"--critic-warmup: the network has no layer named {' or '.join(CRITIC_LAYERS)}"
                         " (the critic's own layers), so nothing could learn while the policy waits")
    return jax.tree_util.tree_map_with_path(
        lambda path, x: x if is_critic(path) else jnp.where(warm, jax.lax.stop_gradient(x), x),
        params)


def clipped_surrogate(log_ratio: jax.Array, adv: jax.Array, clip_eps: float):
    """PPO's clipped surrogate of sampled actions, elementwise: (surrogate, the KL
    estimate (r - 1) - log r, whether the ratio r is outside 1 +- clip_eps)."""
    ratio = jnp.exp(log_ratio)
    surrogate = jnp.minimum(ratio * adv,
                            jnp.clip(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * adv)
    return surrogate, (ratio - 1.0) - log_ratio, jnp.abs(ratio - 1.0) > clip_eps


def expected_surrogate(log_probs: jax.Array, behaviour_log_probs: jax.Array,
                       adv: jax.Array, mask: jax.Array, clip_eps: float):
    """`--all-actions`: the clipped surrogate of every action, weighted by its behaviour
    probability, i.e. the expectation over the behaviour policy of what one sampled action
    gives (no sampling noise).

    log_probs, behaviour_log_probs: (B, A) current and behaviour log-probabilities; adv:
    (B, A) each action's advantage (its reward minus the state's expected reward); mask:
    (B, A) bool, the actions the policy can take (the others weigh 0). The advantages are
    scaled by their root-mean-square under the behaviour policy over the batch, the
    expected form of the sampled loss's normalisation. Returns (policy loss, approximate
    KL, clip fraction), () each, all three expectations over the behaviour policy."""
    # In probabilities: behaviour * ratio is the current probability, so an action the
    # behaviour policy gave ~0 and the current one does not weighs ~0, where the ratio
    # itself would overflow (and 0 * inf is NaN).
    behaviour = jnp.where(mask, jnp.exp(behaviour_log_probs), 0.0)
    current = jnp.where(mask, jnp.exp(log_probs), 0.0)
    scale = jnp.sqrt(jnp.sum(behaviour * jnp.square(adv), -1).mean()) + 1e-8
    adv = jnp.where(mask, adv / scale, 0.0)
    bounded = jnp.clip(current, (1.0 - clip_eps) * behaviour, (1.0 + clip_eps) * behaviour)
    surrogate = jnp.minimum(current * adv, bounded * adv)
    # KL(behaviour || current) term by term: (r - 1) - log r, weighted by the behaviour.
    kl = (current - behaviour) - jnp.where(behaviour > 0,
                                           behaviour * (log_probs - behaviour_log_probs), 0.0)
    clipped = jnp.where(jnp.abs(current - behaviour) > clip_eps * behaviour, behaviour, 0.0)

    def total(x):
        return jnp.sum(jnp.where(mask, x, 0.0), -1).mean()

    return -total(surrogate), total(kl), total(clipped)


def make_train(config: PPOConfig):
    """The whole training as one jitted `train(rng) -> (runner, metrics per update)`."""
    return core.compile_train(make_update, config)


def main(argv=None) -> dict:
    return run.main(argv, PPOConfig, make_update, __doc__.splitlines()[0])

