"""rejax's PPO on vte, unchanged: only the environment's construction names vte.

    python examples/rejax_ppo.py                          # 16 nodes, 2M steps
    python examples/rejax_ppo.py --total-timesteps 100000 --num-nodes 8   # a smoke run

rejax (`pip install rejax`) takes any gymnax environment whose step returns the five
legacy values and whose params carry `max_steps_in_episode`; it deep-copies the
environment. vte's gymnax adapter offers all three:

    env = ClusterEnv(vte.EnvParams(num_nodes=16), observation="flat", step_api="legacy")

The agent ignores the action mask (an invalid action is penalised beyond the worst valid
one, vte/cluster/MODEL.md section 4). gamma = 0: each decision's reward is its own regret against
the optimum, so later rewards only add noise to its credit (vte's own PPO runs --gamma 0). It prints the greedy policy's held-out return beside random
valid actions and the heuristics.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
from rejax import PPO

import vte
from vte.adapters.gymnax import ClusterEnv


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-nodes", type=int, default=16)
    p.add_argument("--total-timesteps", type=int, default=2_000_000)
    p.add_argument("--num-envs", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=3e-4)
    args = p.parse_args(argv)

    params = vte.EnvParams(num_nodes=args.num_nodes)
    env = ClusterEnv(params, observation="flat", step_api="legacy")     # the vte line
    algo = PPO.create(env=env, env_params=env.default_params,
                      total_timesteps=args.total_timesteps, num_envs=args.num_envs, num_steps=128,
                      num_epochs=4, num_minibatches=8, learning_rate=args.lr,
                      max_grad_norm=0.5, gamma=0.0, gae_lambda=0.95, ent_coef=0.01,
                      eval_freq=max(args.total_timesteps // 4, args.num_envs * 128),
                      agent_kwargs={"activation": "tanh", "hidden_layer_sizes": (128, 128)})
    default_eval = algo.eval_callback

    def eval_callback(algo, ts, rng):   # rejax's own evaluation, printed as it happens
        lengths, returns = default_eval(algo, ts, rng)
        jax.debug.callback(lambda step, r: print(f"  {int(step):>10,} env steps: rejax's "
                                                 f"evaluation return {float(r):8.2f}", flush=True),
                           ts.global_step, returns.mean())
        return lengths, returns

    algo = algo.replace(eval_callback=eval_callback)
    print(f"compiling and training {args.total_timesteps:,} steps ({args.num_envs} environments "
          f"of {args.num_nodes} nodes, seed {args.seed}); rejax evaluates every "
          f"{algo.eval_freq:,} steps:", flush=True)
    start = time.perf_counter()
    train_state, (lengths, returns) = jax.block_until_ready(
        jax.jit(algo.train)(jax.random.PRNGKey(args.seed)))
    seconds = time.perf_counter() - start
    curve = np.asarray(returns).mean(-1)
    print(f"trained {args.total_timesteps:,} steps in {seconds:.0f} s; rejax's evaluation "
          f"return per checkpoint: {', '.join(f'{r:.1f}' for r in curve)}")

    from common import flat, held_out, report
    actor = algo.actor

    @jax.jit
    def greedy(obs):
        logits = actor.apply(train_state.actor_ts.params, obs, method="_action_dist").logits
        return jnp.argmax(logits, -1)

    scores = held_out({"rejax_ppo": lambda obs: np.asarray(greedy(flat(obs)))}, params)
    report("rejax PPO (unmasked, greedy)", scores)
    return scores


if __name__ == "__main__":
    main()
