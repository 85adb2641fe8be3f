"""A learned scheduler for the OpenB trace: a permutation-equivariant actor-critic over nodes.

    net = OpenBNet(hidden=64)
    variables = net.init(key, obs)               # obs: one `env.Observation`, or a batch
    logits, value = net.apply(variables, obs)    # logits (..., N + 1), value (...)
    policy = as_policy(net, variables, num_models)   # a policy of the replay (policies.py)

Each node is encoded by one shared MLP from its own features joined with the pod's and the
arrived share; a deep-sets context (mean and max over the nodes) conditions a second
per-node layer (FiLM) and gives the "cannot place" logit and the value. The same
parameters serve any number of nodes in any order, so a model trained on sub-clusters of
64 nodes runs on the full 1213-node cluster. Infeasible actions are masked to the least
float32 (`vte.network.masked_logits`).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from vte.network import Dense, masked_logits
from vte.openb.cluster import Pod, Spec, State
from vte.openb.env import BASE_NODE_FEATURES, Observation, observe_with_gpu
from vte.openb.policies import Policy


class OpenBNet(nn.Module):
    """Actor-critic over a variable number of nodes; any leading batch shape.

    Attributes:
      hidden: width of every layer.
    """

    hidden: int = 64

    @nn.compact
    def __call__(self, obs: Observation) -> tuple[jax.Array, jax.Array]:
        h = self.hidden
        pod = jnp.concatenate([obs.pod, obs.progress[..., None]], axis=-1)
        # PER-NODE ENCODER: Dense(concat(node, pod)) = Dense(node) + Dense(pod), broadcast
        x = (Dense(h, name="node_in")(obs.nodes)
             + Dense(h, use_bias=False, name="pod_in")(pod)[..., None, :])
        x = nn.relu(x)
        x = nn.relu(Dense(h, name="node_hidden")(x))                 # (..., N, h)
        # POOLED CONTEXT over the nodes, with the pod
        ctx = jnp.concatenate([x.mean(-2), x.max(-2), pod], axis=-1)
        ctx = nn.relu(Dense(h, name="context")(ctx))
        # PER-NODE HEAD: FiLM with the context, one logit per node, "cannot place" from ctx
        scale, shift = jnp.split(Dense(2 * h, name="film")(ctx)[..., None, :], 2, axis=-1)
        y = nn.relu(Dense(h, name="node_out")(x) * (1.0 + scale) + shift)
        node_logits = Dense(1, name="node_logit")(y)[..., 0]
        logits = jnp.concatenate([node_logits, Dense(1, name="none_logit")(ctx)], axis=-1)
        value = Dense(1, name="value")(nn.relu(Dense(h, name="value_hidden")(ctx)))[..., 0]
        return masked_logits(logits, obs.action_mask), value


def models_of(variables) -> int:
    """The number of GPU models a trained network's input was built for."""
    return int(variables["params"]["node_in"]["kernel"].shape[0]) - BASE_NODE_FEATURES


def as_policy(net: OpenBNet, variables, num_models: int) -> Policy:
    """The network as a policy of the replay, `(key, state, pod, feasible, spec) -> (scores,
    shared_gpu)`: its logits score the nodes (the replay keeps the best feasible one, ties to
    the smallest rank) and a shared pod takes FGD's GPU, the environment's rule (`GPU_RULE`).

    Raises ValueError when the network was trained on another number of GPU models."""
    trained = models_of(variables)
    if trained != num_models:
        raise ValueError(f"the network was trained on a node file with {trained} GPU models; "
                         f"this one has {num_models}: use the node file it trained on")

    def policy(key: jax.Array, state: State, pod: Pod, feasible: jax.Array, spec: Spec):
        del key, feasible
        obs, shared_gpu = observe_with_gpu(state, pod, spec, num_models)
        logits, _ = net.apply(variables, obs)
        return logits[:-1], shared_gpu

    return policy


__all__ = ["OpenBNet", "as_policy", "models_of"]
