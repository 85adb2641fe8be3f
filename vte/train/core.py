"""The pieces both algorithms are built from: the training state, the rollout, minibatch SGD.

    runner = init_runner(rng, config, env, net, tx)
    (env_state, obs, rng), (traj, stats) = collect(env, net, runner, config)   # Transition
    runner, metrics = minibatch_sgd(runner, (env_state, obs, rng), data, loss_fn, tx,
                                    config, stats)

`collect` returns a plain `Transition` pytree stacked over the rollout's steps; the
algorithm (`train/ppo.py`, `train/imitate.py`) turns it into its own batch and loss. Every
function here is pure and runs inside one `jax.jit`.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct
from jax.sharding import PartitionSpec as P

from vte.train.config import TrainConfig
from vte.train.envs import TrainEnv
from vte import distributed as dist
from vte.environment import where_batch


@struct.dataclass
class Runner:
    """Everything a run needs to continue: saved whole, so a resumed run is exact."""

    params: Any              # network parameters
    opt_state: Any           # optimiser state (holds the learning-rate schedule's count)
    env_state: Any           # (num_envs, ...) environment states
    obs: Any                 # (num_envs, ...) current observations
    rng: jax.Array           # (2,) uint32 key
    update: jax.Array        # () int32, updates done


class Transition(NamedTuple):
    """One rollout step of every environment; `collect` stacks them to (num_steps, num_envs)."""

    obs: Any                 # the observation the action was taken in
    action: jax.Array        # (num_envs,) int32, sampled from the policy
    log_prob: jax.Array      # (num_envs,) float32, of the action under the behaviour policy
    value: jax.Array         # (num_envs,) float32, the critic's estimate of obs
    reward: jax.Array        # (num_envs,) float32
    terminated: jax.Array    # (num_envs,) bool, the episode ended after this step
    truncated: jax.Array     # (num_envs,) bool, the episode was cut after this step
    final_value: jax.Array   # (num_envs,) float32, critic of the episode's last observation
                             # (`info["final_observation"]`; 0 unless `bootstrap`)
    label: jax.Array         # (num_envs,) int32, the teacher's action in obs (`env.teacher`);
                             # -1 when the run has no teacher
    label_cost: Any = None   # (num_envs, A) float32, the cost of every action in obs
                             # (`env.action_costs`), or None where the environment has none
    group_action: Any = None     # (num_envs, K) int32: `action` and K - 1 more actions
                                 # sampled in obs (`samples_per_state`), or None
    group_log_prob: Any = None   # (num_envs, K) float32, their behaviour log-probabilities
    group_reward: Any = None     # (num_envs, K) float32, their rewards (`env.reward`)
                                 # With `all_actions`, group_action is None and the two
                                 # others hold every action's (num_envs, A) values.


def make_optimizer(config: TrainConfig) -> optax.GradientTransformation:
    """Adam with global-norm clipping; the learning rate falls linearly to 0 when annealed."""
    grad_steps = config.num_updates * config.update_epochs * config.num_minibatches
    lr = (optax.linear_schedule(config.lr, 0.0, grad_steps) if config.anneal_lr
          else config.lr)
    return optax.chain(optax.clip_by_global_norm(config.max_grad_norm),
                       optax.adam(lr, eps=1e-5))


def init_runner(rng: jax.Array, config: TrainConfig, env: TrainEnv, net,
                tx: optax.GradientTransformation, params=None) -> Runner:
    """A fresh runner: `num_envs` new environments and fresh (or given) parameters."""
    k_env, k_net, k_run = jax.random.split(rng, 3)
    obs, env_state = jax.vmap(env.reset)(jax.random.split(k_env, config.num_envs))
    if params is None:
        params = net.init(k_net, jax.tree_util.tree_map(lambda x: x[0], obs))
    if config.spread_starts:   # a key of its own: the run's stream is the same without it
        env_state, obs = spread_starts(jax.random.fold_in(k_env, 1), env, net, params,
                                       env_state, obs)
    return Runner(params=params, opt_state=tx.init(params), env_state=env_state, obs=obs,
                  rng=k_run, update=jnp.zeros((), jnp.int32))


def spread_starts(rng: jax.Array, env: TrainEnv, net, params, env_state, obs):
    """Each environment played on for its own number of steps, drawn uniformly in
    0..L - 1 (L = the params' `max_steps_in_episode`), by the network `params` (actions
    sampled from its masked logits, as `collect` does); an episode that ends on the way
    starts a new one (the environment's auto-reset). Returns (env_state, obs), batched as
    given: environments that were all at the start of an episode now sit at every phase
    of one, so the first rollouts see late decisions as often as early ones.

    One `lax.scan` of L steps over every environment (a step an environment skips is
    computed and discarded): the cost of L rollout steps without a teacher."""
    length = int(env.params.max_steps_in_episode)
    num_envs = jax.tree_util.tree_leaves(obs)[0].shape[0]
    k_skip, rng = jax.random.split(rng)
    skip = jax.random.randint(k_skip, (num_envs,), 0, length)

    def one_step(carry, t):
        env_state, obs, rng = carry
        rng, k_act, k_env = jax.random.split(rng, 3)
        logits, _ = net.apply(params, obs)
        action = jax.random.categorical(k_act, logits).astype(jnp.int32)
        next_obs, next_state, *_ = jax.vmap(env.step)(
            jax.random.split(k_env, num_envs), env_state, action)
        moved = t < skip
        return (*where_batch(moved, (next_state, next_obs), (env_state, obs)), rng), None

    (env_state, obs, _), _ = jax.lax.scan(one_step, (env_state, obs, rng),
                                          jnp.arange(length))
    return env_state, obs


def collect(env: TrainEnv, net, runner: Runner, config: TrainConfig,
            bootstrap: bool = False, samples_per_state: int = 1, all_actions: bool = False):
    """The rollout: `num_steps` decisions of the policy (sampled from the network's masked
    logits) in every environment, as a `lax.scan`.

    Returns ((env_state, obs, rng) after the rollout, (Transition, stats)), both stacked
    over the steps; `stats` holds the environment's per-step scalars (`env.stats`) and the
    mean reward. `bootstrap` fills `final_value` (one more forward pass per step). With
    `samples_per_state` K > 1, K - 1 more actions are sampled in each state, from the
    same logits, and scored with `env.reward` (the environment steps with the first):
    `group_action`, `group_log_prob` and `group_reward` hold all K. With `all_actions`
    every action of each state is scored: `group_log_prob` and `group_reward` are
    (num_envs, A), the behaviour log-probabilities and rewards of all actions."""

    def env_step(carry, _):
        env_state, obs, rng = carry
        rng, k_act, k_env = jax.random.split(rng, 3)
        logits, value = net.apply(runner.params, obs)
        log_probs = jax.nn.log_softmax(logits)
        if samples_per_state > 1:   # (one key more; K = 1 keeps the stream it always had)
            k_act, k_more = jax.random.split(k_act)
        action = jax.random.categorical(k_act, logits).astype(jnp.int32)
        log_prob = jnp.take_along_axis(log_probs, action[:, None], -1)[:, 0]
        group = {}
        if samples_per_state > 1:
            more = jax.random.categorical(k_more, logits[:, None, :],
                                          shape=(config.num_envs, samples_per_state - 1))
            actions = jnp.concatenate([action[:, None], more.astype(jnp.int32)], axis=1)
            group = {"group_action": actions,
                     "group_log_prob": jnp.take_along_axis(log_probs, actions, -1),
                     "group_reward": jax.vmap(jax.vmap(env.reward, (None, 0)))(
                         env_state, actions)}
        elif all_actions:
            every = jnp.arange(logits.shape[-1], dtype=jnp.int32)
            group = {"group_log_prob": log_probs,
                     "group_reward": jax.vmap(jax.vmap(env.reward, (None, 0)), (0, None))(
                         env_state, every)}
        keys = jax.random.split(k_env, config.num_envs)
        # THE TEACHER'S LABEL and every action's cost, in the state the action is taken in
        label, costs = env.labels(keys, env_state, obs)
        next_obs, env_state, reward, term, trunc, info = jax.vmap(env.step)(
            keys, env_state, action)
        final_value = (net.apply(runner.params, info["final_observation"])[1] if bootstrap
                       else jnp.zeros_like(value))
        t = Transition(obs, action, log_prob, value, reward, term, trunc, final_value,
                       label if label is not None else jnp.full_like(action, -1), costs,
                       **group)
        stats = {**env.stats(logits, action, label, info, term | trunc),
                 "reward": reward.mean()}
        return (env_state, next_obs, rng), (t, stats)

    return jax.lax.scan(env_step, (runner.env_state, runner.obs, runner.rng), None,
                        config.num_steps)


def minibatch_sgd(runner: Runner, rollout_end: tuple, data, loss_fn: Callable,
                  tx: optax.GradientTransformation, config: TrainConfig, stats: dict):
    """`update_epochs` passes over `data` (leaves (num_steps, num_envs, ...)), each a scan
    of `num_minibatches` gradient steps of `loss_fn(params, minibatch) -> (loss, aux)` on
    shuffled minibatches.

    `rollout_end` is (env_state, obs, rng) after the rollout. Returns the next `Runner`
    and the update's metrics (`update_metrics` of `stats` and the losses)."""
    env_state, obs, rng = rollout_end

    def minibatch_step(carry, mb):
        p, o = carry
        grads, aux = jax.grad(loss_fn, has_aux=True)(p, mb)
        updates, o = tx.update(grads, o, p)
        return (optax.apply_updates(p, updates), o), aux

    def epoch(carry, key):
        mbs = split_over_devices(shuffle_minibatches(key, data, config.num_minibatches))
        return jax.lax.scan(minibatch_step, carry, mbs)

    rng, k_epochs = jax.random.split(rng)
    (params, opt_state), losses = jax.lax.scan(
        epoch, (runner.params, runner.opt_state),
        jax.random.split(k_epochs, config.update_epochs))
    runner = Runner(params=params, opt_state=opt_state, env_state=env_state, obs=obs,
                    rng=rng, update=runner.update + 1)
    return runner, update_metrics(stats, losses)


def shuffle_minibatches(rng: jax.Array, batch, num_minibatches: int):
    """Flatten (num_steps, num_envs, ...) leaves, shuffle, split into minibatches."""
    lead = jax.tree_util.tree_leaves(batch)[0].shape
    size = lead[0] * lead[1]
    perm = jax.random.permutation(rng, size)

    def split(x):
        x = x.reshape((size,) + x.shape[2:])[perm]
        return x.reshape((num_minibatches, size // num_minibatches) + x.shape[1:])

    return jax.tree_util.tree_map(split, batch)


def split_over_devices(minibatches):
    """Split each minibatch (leaves (num_minibatches, size, ...)) over the devices of the
    mesh in context (`jax.set_mesh`, axis `vte.distributed.AXIS`), so each device takes the
    gradient of its share and XLA sums the shares; without such a mesh, unchanged."""
    if dist.AXIS not in jax.sharding.get_abstract_mesh().axis_names:
        return minibatches
    return jax.lax.with_sharding_constraint(minibatches, P(None, dist.AXIS))


def update_metrics(stats: dict, losses: dict) -> dict:
    """One scalar per metric: per-step stats averaged over the rollout, episode stats
    (`NAME_sum`, summed over the episodes that ended, `episodes` of them) averaged per
    episode (NaN when none ended), losses averaged over the epochs' minibatches."""
    count = stats["episodes"].sum()
    metrics = {}
    for k, v in stats.items():
        if k.endswith("_sum"):
            metrics[k[:-4]] = jnp.where(count > 0, v.sum() / jnp.maximum(count, 1), jnp.nan)
        elif k != "episodes":
            metrics[k] = v.mean()
    metrics.update({k: v.mean() for k, v in losses.items()})
    return metrics


def seed_keys(config: TrainConfig) -> jax.Array:
    """One key per seed (`--seeds`), from `--seed`."""
    return jax.random.split(jax.random.PRNGKey(config.seed), config.seeds)


def over_seeds(fn: Callable, seeds: int) -> Callable:
    """`fn` mapped over the leading seed axis of its argument and outputs: `jax.vmap` for
    several seeds; for one seed the axis is dropped and added back instead, because a
    vmap of size one made the PPO update about 40 % slower on CPU (its matrix products
    become batched ones)."""
    if seeds > 1:
        return jax.vmap(fn)

    def one(tree):
        out = fn(jax.tree_util.tree_map(lambda x: x[0], tree))
        return jax.tree_util.tree_map(lambda x: x[None], out)

    return one


def compile_train(make_update: Callable, config: TrainConfig):
    """`make_update`'s whole training as one jitted `train(rng) -> (runner, metrics)`,
    metrics stacked over the updates."""
    init, update = make_update(config)

    @jax.jit
    def train(rng):
        return jax.lax.scan(lambda r, _: update(r), init(rng), None, config.num_updates)

    return train
