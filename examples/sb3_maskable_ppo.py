"""sb3-contrib's MaskablePPO on vte through Gymnasium, unchanged.

    pip install torch stable-baselines3 sb3-contrib
    python examples/sb3_maskable_ppo.py                    # 16 nodes, 100k steps
    python examples/sb3_maskable_ppo.py --total-timesteps 5000 --num-nodes 8   # a smoke run

The only vte line is the environment's construction. `observation="flat"` gives one
float32 vector for SB3's MlpPolicy (the dict observation works with "MultiInputPolicy"
too: every field has at least one dimension); MaskablePPO reads the valid actions from
the environment's `action_masks()` method. It prints the greedy policy's held-out return
beside random valid actions and the heuristics.
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
from sb3_contrib import MaskablePPO
from stable_baselines3.common.callbacks import BaseCallback

import vte
import vte.adapters.gymnasium  # noqa: F401  (registers the vte/ ids)


class Progress(BaseCallback):
    """A line after each rollout: steps so far, the rollout's mean reward, wall time."""

    def __init__(self, start: float):
        super().__init__()
        self.start = start

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        rewards = self.model.rollout_buffer.rewards
        print(f"  {self.num_timesteps:>8,} env steps: rollout mean reward "
              f"{float(rewards.mean()):7.3f} ({time.perf_counter() - self.start:.0f} s)",
              flush=True)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-nodes", type=int, default=16)
    p.add_argument("--total-timesteps", type=int, default=100_000)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    env = gym.make("vte/Cluster-v0", num_nodes=args.num_nodes, observation="flat")  # vte
    # gamma 0: each decision's reward is its own regret against the optimum.
    model = MaskablePPO("MlpPolicy", env, n_steps=1024, batch_size=256, gamma=0.0,
                        ent_coef=0.01, seed=args.seed, verbose=0)
    start = time.perf_counter()
    print(f"training {args.total_timesteps:,} steps ({args.num_nodes} nodes, seed {args.seed}):",
          flush=True)
    model.learn(total_timesteps=args.total_timesteps, callback=Progress(start))
    print(f"trained {args.total_timesteps:,} steps in {time.perf_counter() - start:.0f} s")

    from common import flat, held_out, report

    def greedy(obs):
        actions, _ = model.predict(flat(obs), action_masks=obs["action_mask"],
                                   deterministic=True)
        return actions

    scores = held_out({"maskable_ppo": greedy}, vte.EnvParams(num_nodes=args.num_nodes))
    report("sb3-contrib MaskablePPO (greedy)", scores)
    return scores


if __name__ == "__main__":
    main()
