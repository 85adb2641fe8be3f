"""PPO in CleanRL's style (one file, PyTorch) over `gymnasium.make_vec`, with action masking.

    pip install torch
    python examples/cleanrl_ppo.py                         # 16 nodes, 200k steps
    python examples/cleanrl_ppo.py --total-timesteps 4096 --num-nodes 8   # a smoke run

The vte line is the vector environment: 16 clusters stepped by one compiled call, flat
observations, and Gymnasium's same-step autoreset (passed to `make_vec` directly):

    envs = gym.make_vec("vte/Cluster-v0", num_envs=16, num_nodes=16, observation="flat",
                        autoreset_mode="SameStep")

Invalid actions are masked out of the logits with `envs.action_masks()` (CleanRL's
invalid-action-masking PPO). It prints the greedy policy's held-out return beside random
valid actions and the heuristics.
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn

import vte
import vte.adapters.gymnasium  # noqa: F401  (registers the vte/ ids)


def layer(i, o, std=np.sqrt(2)):
    lin = nn.Linear(i, o)
    nn.init.orthogonal_(lin.weight, std)
    nn.init.constant_(lin.bias, 0.0)
    return lin


class Agent(nn.Module):
    def __init__(self, obs_dim, n_actions):
        super().__init__()
        self.critic = nn.Sequential(layer(obs_dim, 128), nn.Tanh(), layer(128, 128), nn.Tanh(),
                                    layer(128, 1, 1.0))
        self.actor = nn.Sequential(layer(obs_dim, 128), nn.Tanh(), layer(128, 128), nn.Tanh(),
                                   layer(128, n_actions, 0.01))

    def logits(self, x, mask):
        return torch.where(mask, self.actor(x), torch.tensor(-1e8))

    def act(self, x, mask, action=None):
        dist = torch.distributions.Categorical(logits=self.logits(x, mask))
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action), dist.entropy(), self.critic(x).squeeze(-1)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-nodes", type=int, default=16)
    p.add_argument("--total-timesteps", type=int, default=200_000)
    p.add_argument("--num-envs", type=int, default=16)
    p.add_argument("--num-steps", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    lr, gamma, lam, epochs, minibatches, clip, ent, vf = 2.5e-4, 0.99, 0.95, 4, 4, 0.2, 0.01, 0.5
    torch.manual_seed(args.seed)

    envs = gym.make_vec("vte/Cluster-v0", num_envs=args.num_envs, num_nodes=args.num_nodes,
                        observation="flat", autoreset_mode="SameStep")       # the vte line
    obs_dim, n_actions = envs.single_observation_space.shape[0], envs.single_action_space.n
    agent = Agent(obs_dim, n_actions)
    optim = torch.optim.Adam(agent.parameters(), lr=lr, eps=1e-5)
    T, N = args.num_steps, args.num_envs
    buf = {k: torch.zeros((T, N) + s) for k, s in (("obs", (obs_dim,)), ("logp", ()),
                                                    ("reward", ()), ("done", ()), ("value", ()))}
    buf["action"] = torch.zeros((T, N), dtype=torch.long)
    buf["mask"] = torch.zeros((T, N, n_actions), dtype=torch.bool)

    obs, _ = envs.reset(seed=args.seed)
    obs = torch.tensor(obs)
    updates = args.total_timesteps // (T * N)
    start = time.perf_counter()
    print(f"training {updates * T * N:,} steps ({N} environments, seed {args.seed}):", flush=True)
    for update in range(updates):
        for g in optim.param_groups:
            g["lr"] = lr * (1.0 - update / updates)
        # COLLECT
        for t in range(T):
            mask = torch.tensor(envs.action_masks())
            with torch.no_grad():
                action, logp, _, value = agent.act(obs, mask)
            next_obs, reward, term, trunc, _ = envs.step(action.numpy())
            buf["obs"][t], buf["mask"][t], buf["action"][t] = obs, mask, action
            buf["logp"][t], buf["value"][t] = logp, value
            buf["reward"][t] = torch.tensor(reward)
            buf["done"][t] = torch.tensor(term | trunc, dtype=torch.float32)
            obs = torch.tensor(next_obs)
        # ADVANTAGES (same-step autoreset: a done step's successor starts a new episode)
        with torch.no_grad():
            next_value = agent.critic(obs).squeeze(-1)
        adv, last = torch.zeros((T, N)), torch.zeros(N)
        for t in reversed(range(T)):
            nv = next_value if t == T - 1 else buf["value"][t + 1]
            live = 1.0 - buf["done"][t]
            delta = buf["reward"][t] + gamma * nv * live - buf["value"][t]
            adv[t] = last = delta + gamma * lam * live * last
        ret = adv + buf["value"]
        # UPDATE
        flat = {k: v.reshape((T * N,) + v.shape[2:]) for k, v in buf.items()}
        fa, fr = adv.reshape(-1), ret.reshape(-1)
        for _ in range(epochs):
            for idx in torch.randperm(T * N).split(T * N // minibatches):
                _, logp, entropy, value = agent.act(flat["obs"][idx], flat["mask"][idx],
                                                    flat["action"][idx])
                ratio = (logp - flat["logp"][idx]).exp()
                a = (fa[idx] - fa[idx].mean()) / (fa[idx].std() + 1e-8)
                pg = torch.max(-a * ratio, -a * ratio.clamp(1 - clip, 1 + clip)).mean()
                loss = pg + vf * 0.5 * ((value - fr[idx]) ** 2).mean() - ent * entropy.mean()
                optim.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
                optim.step()
        if (update + 1) % max(1, updates // 10) == 0:      # a line every tenth of the updates
            print(f"  update {update + 1:>4}/{updates}: {(update + 1) * T * N:>8,} env steps, "
                  f"rollout mean reward {float(buf['reward'].mean()):7.3f} "
                  f"({time.perf_counter() - start:.0f} s)", flush=True)
    print(f"trained {updates * T * N:,} steps in {time.perf_counter() - start:.0f} s")
    envs.close()

    from common import flat as flatten, held_out, report

    def greedy(o):
        with torch.no_grad():
            x = torch.tensor(flatten(o))
            return agent.logits(x, torch.tensor(o["action_mask"])).argmax(-1).numpy()

    scores = held_out({"cleanrl_ppo": greedy}, vte.EnvParams(num_nodes=args.num_nodes))
    report("CleanRL-style PPO (masked, greedy)", scores)
    return scores


if __name__ == "__main__":
    main()
