"""PPO in PureJaxRL's style on vte, unmasked: the whole training is one jitted function.

    python examples/purejaxrl_ppo.py                       # 16 nodes, 2M steps
    python examples/purejaxrl_ppo.py --total-timesteps 100000 --num-nodes 8   # a smoke run

The only vte line is the environment's construction: a gymnax environment with the
five-value step PureJaxRL's wrappers unpack and flat observations for its MLP,

    env = ClusterEnv(vte.EnvParams(num_nodes=16), observation="flat", step_api="legacy")

The agent ignores the action mask on purpose: an invalid action is penalised beyond the
worst valid one (vte/cluster/MODEL.md section 4), so the reward itself teaches validity. It prints
the greedy policy's held-out return beside random valid actions and the heuristics.
"""

from __future__ import annotations

import argparse
import time
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training.train_state import TrainState

import vte
from vte.adapters.gymnax import ClusterEnv


class ActorCritic(nn.Module):
    action_dim: int

    @nn.compact
    def __call__(self, x):
        a = nn.tanh(nn.Dense(128)(x))
        a = nn.tanh(nn.Dense(128)(a))
        logits = nn.Dense(self.action_dim, kernel_init=nn.initializers.orthogonal(0.01))(a)
        c = nn.tanh(nn.Dense(128)(x))
        c = nn.tanh(nn.Dense(128)(c))
        return logits, jnp.squeeze(nn.Dense(1)(c), -1)


class Transition(NamedTuple):
    done: jax.Array
    action: jax.Array
    value: jax.Array
    reward: jax.Array
    log_prob: jax.Array
    obs: jax.Array
    episode_return: jax.Array


class LogState(NamedTuple):
    env_state: object
    episode_return: jax.Array
    returned: jax.Array


def make_train(config: dict, env: ClusterEnv, env_params):
    num_updates = config["TOTAL_TIMESTEPS"] // config["NUM_STEPS"] // config["NUM_ENVS"]
    minibatch = config["NUM_ENVS"] * config["NUM_STEPS"] // config["NUM_MINIBATCHES"]

    def schedule(count):
        frac = 1.0 - (count // (config["NUM_MINIBATCHES"] * config["UPDATE_EPOCHS"])) / num_updates
        return config["LR"] * frac

    def train(rng):
        # INIT NETWORK
        net = ActorCritic(env.action_space(env_params).n)
        rng, k_net = jax.random.split(rng)
        params = net.init(k_net, jnp.zeros(env.observation_space(env_params).shape))
        tx = optax.chain(optax.clip_by_global_norm(config["MAX_GRAD_NORM"]),
                         optax.adam(schedule, eps=1e-5))
        state = TrainState.create(apply_fn=net.apply, params=params, tx=tx)

        # INIT ENV
        rng, k_reset = jax.random.split(rng)
        obs, env_state = jax.vmap(env.reset, (0, None))(
            jax.random.split(k_reset, config["NUM_ENVS"]), env_params)
        zeros = jnp.zeros(config["NUM_ENVS"])
        log = LogState(env_state, zeros, zeros)

        def update(runner, u):
            # COLLECT TRAJECTORIES
            def env_step(runner, _):
                state, log, last_obs, rng = runner
                rng, k_act, k_step = jax.random.split(rng, 3)
                logits, value = net.apply(state.params, last_obs)
                action = jax.random.categorical(k_act, logits)
                log_prob = jnp.take_along_axis(jax.nn.log_softmax(logits), action[:, None], -1)[:, 0]
                obs, env_state, reward, done, _ = jax.vmap(env.step, (0, 0, 0, None))(
                    jax.random.split(k_step, config["NUM_ENVS"]), log.env_state, action,
                    env_params)
                ret = log.episode_return + reward
                log = LogState(env_state, ret * (1 - done), jnp.where(done, ret, log.returned))
                return (state, log, obs, rng), Transition(done, action, value, reward,
                                                           log_prob, last_obs, log.returned)

            runner, traj = jax.lax.scan(env_step, runner, None, config["NUM_STEPS"])
            state, log, last_obs, rng = runner
            _, last_value = net.apply(state.params, last_obs)

            # CALCULATE ADVANTAGE
            def gae_step(carry, t):
                gae, next_value = carry
                delta = t.reward + config["GAMMA"] * next_value * (1 - t.done) - t.value
                gae = delta + config["GAMMA"] * config["GAE_LAMBDA"] * (1 - t.done) * gae
                return (gae, t.value), gae
            _, adv = jax.lax.scan(gae_step, (jnp.zeros_like(last_value), last_value), traj,
                                  reverse=True)
            targets = adv + traj.value

            # UPDATE NETWORK
            def epoch(carry, _):
                state, rng = carry
                rng, k_perm = jax.random.split(rng)
                batch = jax.tree_util.tree_map(lambda x: x.reshape((-1,) + x.shape[2:]),
                                               (traj, adv, targets))
                perm = jax.random.permutation(k_perm, minibatch * config["NUM_MINIBATCHES"])
                batch = jax.tree_util.tree_map(
                    lambda x: x[perm].reshape((config["NUM_MINIBATCHES"], -1) + x.shape[1:]), batch)

                def sgd(state, mb):
                    t, adv, target = mb

                    def loss_fn(params):
                        logits, value = net.apply(params, t.obs)
                        logp = jnp.take_along_axis(jax.nn.log_softmax(logits), t.action[:, None], -1)[:, 0]
                        v_clip = t.value + (value - t.value).clip(-config["CLIP_EPS"], config["CLIP_EPS"])
                        v_loss = 0.5 * jnp.maximum((value - target) ** 2, (v_clip - target) ** 2).mean()
                        ratio = jnp.exp(logp - t.log_prob)
                        a = (adv - adv.mean()) / (adv.std() + 1e-8)
                        pg = -jnp.minimum(ratio * a, ratio.clip(1 - config["CLIP_EPS"],
                                                                1 + config["CLIP_EPS"]) * a).mean()
                        ent = -(jax.nn.softmax(logits) * jax.nn.log_softmax(logits)).sum(-1).mean()
                        return pg + config["VF_COEF"] * v_loss - config["ENT_COEF"] * ent
                    grads = jax.grad(loss_fn)(state.params)
                    return state.apply_gradients(grads=grads), None
                state, _ = jax.lax.scan(sgd, state, batch)
                return (state, rng), None

            (state, rng), _ = jax.lax.scan(epoch, (state, rng), None, config["UPDATE_EPOCHS"])
            mean_return = traj.episode_return[-1].mean()
            # PROGRESS: a line every tenth of the updates, from inside the compiled loop
            every = max(1, num_updates // 10)
            jax.lax.cond((u + 1) % every == 0, lambda: jax.debug.callback(
                _progress, u + 1, num_updates, mean_return, config["NUM_STEPS"] * config["NUM_ENVS"]),
                lambda: None)
            return (state, log, last_obs, rng), mean_return

        rng, k_run = jax.random.split(rng)
        runner, returns = jax.lax.scan(update, (state, log, obs, k_run), jnp.arange(num_updates))
        return runner[0], returns

    return train


def _progress(update, updates, mean_return, batch):
    print(f"  update {int(update):>4}/{updates}: {int(update) * batch:>10,} env steps, training "
          f"episode return {float(mean_return):8.2f}", flush=True)


# PureJaxRL's defaults, but for two: GAMMA 0, since each decision's reward is its own
# regret against the optimum (later rewards add only noise to its credit; vte's own PPO
# runs --gamma 0 too), and LR 1e-3 (2.5e-4 learns the same, slower).
CONFIG = {"LR": 1e-3, "NUM_ENVS": 64, "NUM_STEPS": 128, "TOTAL_TIMESTEPS": 2_000_000,
          "UPDATE_EPOCHS": 4, "NUM_MINIBATCHES": 8, "GAMMA": 0.0, "GAE_LAMBDA": 0.95,
          "CLIP_EPS": 0.2, "ENT_COEF": 0.01, "VF_COEF": 0.5, "MAX_GRAD_NORM": 0.5}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-nodes", type=int, default=16)
    p.add_argument("--total-timesteps", type=int, default=CONFIG["TOTAL_TIMESTEPS"])
    p.add_argument("--num-envs", type=int, default=CONFIG["NUM_ENVS"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gamma", type=float, default=CONFIG["GAMMA"])
    p.add_argument("--lr", type=float, default=CONFIG["LR"])
    p.add_argument("--ent-coef", type=float, default=CONFIG["ENT_COEF"])
    args = p.parse_args(argv)
    config = {**CONFIG, "TOTAL_TIMESTEPS": args.total_timesteps, "NUM_ENVS": args.num_envs,
              "GAMMA": args.gamma, "LR": args.lr, "ENT_COEF": args.ent_coef}

    params = vte.EnvParams(num_nodes=args.num_nodes)
    env = ClusterEnv(params, observation="flat", step_api="legacy")    # the vte line
    start = time.perf_counter()
    print(f"compiling and training {args.total_timesteps:,} steps ({config['NUM_ENVS']} "
          f"environments of {args.num_nodes} nodes, seed {args.seed}); a line every tenth:",
          flush=True)
    state, returns = jax.block_until_ready(
        jax.jit(make_train(config, env, env.default_params))(jax.random.PRNGKey(args.seed)))
    seconds = time.perf_counter() - start
    curve = np.asarray(returns)
    print(f"trained {args.total_timesteps:,} steps in {seconds:.0f} s; training return "
          f"{curve[: max(1, len(curve) // 10)].mean():.1f} (first tenth) -> "
          f"{curve[-max(1, len(curve) // 10):].mean():.1f} (last tenth)")

    from common import flat, held_out, report
    act = jax.jit(lambda o: jnp.argmax(state.apply_fn(state.params, o)[0], -1))
    scores = held_out({"purejaxrl_ppo": lambda obs: np.asarray(act(flat(obs)))}, params)
    report("PureJaxRL-style PPO (unmasked, greedy)", scores)
    return scores


if __name__ == "__main__":
    main()
