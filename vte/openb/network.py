"""A learned scheduler for the OpenB trace: a permutation-equivariant actor-critic over nodes.

    net = OpenBNet(hidden=64)
    variables = net.init(key, obs)               # obs: one `env.Observation`, or a batch
    logits, value = net.apply(variables, obs)    # logits (..., N + 1), value (...)
    policy = as_policy(net, variables, num_models)   # a policy of the replay (policies.py)

The GPU model enters the node features in one of two encodings (`env.ENCODINGS`): agnostic
(the default since the field exists), whether the pod may use the node's GPUs and their
memory and watts from the per-model table, so one network runs on a cluster of any GPU
models the table knows (`power.add_gpu_model`); onehot (runs saved before), a one-hot of the
node file's models, so such a network runs only on the models it was trained on.

Each node is encoded by one shared MLP from its own features joined with the pod's and the
arrived share; a deep-sets context (mean and max over the nodes) conditions a second
per-node layer (FiLM) and gives the "cannot place" logit and the value. The same
parameters serve any number of nodes in any order, so a model trained on sub-clusters of
64 nodes runs on the full 1213-node cluster. Infeasible actions are masked to the least
float32 (`vte.cluster.network.masked_logits`).

The power preference w (`Observation.preference`) and each node's power features
(`Observation.power`: the kW a placement adds, PWR's score) enter multiplied by w, each
through a linear map added to the node encoder's and the context's inputs (the same as
joining them to those inputs). At w = 0 they add exactly 0: a network trained at w = 0
computes what it did before the power inputs existed, bit for bit, and a network trained
across preferences (`--power-weight LOW HIGH`) learns what changes with w.
"""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from vte.layers import Dense, masked_logits
from vte.openb.cluster import Pod, Spec, State
from vte.openb.env import (AGNOSTIC, BASE_NODE_FEATURES, GPU_FEATURES, ONEHOT, Observation,
                           check_encoding, observe_with_gpu)
from vte.openb.policies import Policy
from vte.openb.power import PowerModel, power_model


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
        # THE PREFERENCE w and, per node, the power features, scaled by w (0 at w = 0)
        w = obs.preference[..., None]                                  # (..., 1)
        watts = (jnp.zeros(obs.nodes.shape[:-1] + (2,), jnp.float32) if obs.power is None
                 else obs.power)
        node_power = Dense(h, use_bias=False, name="power_in")(
            jnp.concatenate([watts, jnp.broadcast_to(w[..., None, :], watts.shape[:-1] + (1,))],
                            axis=-1) * w[..., None, :])              # (..., N, h)
        # PER-NODE ENCODER: Dense(concat(node, pod)) = Dense(node) + Dense(pod), broadcast
        x = (Dense(h, name="node_in")(obs.nodes)
             + Dense(h, use_bias=False, name="pod_in")(pod)[..., None, :] + node_power)
        x = nn.relu(x)
        x = nn.relu(Dense(h, name="node_hidden")(x))                 # (..., N, h)
        # POOLED CONTEXT over the nodes, with the pod and the preference
        ctx = jnp.concatenate([x.mean(-2), x.max(-2), pod], axis=-1)
        ctx = nn.relu(Dense(h, name="context")(ctx)
                      + Dense(h, use_bias=False, name="preference_in")(w))
        # PER-NODE HEAD: FiLM with the context, one logit per node, "cannot place" from ctx
        scale, shift = jnp.split(Dense(2 * h, name="film")(ctx)[..., None, :], 2, axis=-1)
        y = nn.relu(Dense(h, name="node_out")(x) * (1.0 + scale) + shift)
        node_logits = Dense(1, name="node_logit")(y)[..., 0]
        logits = jnp.concatenate([node_logits, Dense(1, name="none_logit")(ctx)], axis=-1)
        value = Dense(1, name="value")(nn.relu(Dense(h, name="value_hidden")(ctx)))[..., 0]
        return masked_logits(logits, obs.action_mask), value


def models_of(variables) -> int:
    """The GPU-model columns of a trained network's node input: the number of GPU models a
    one-hot network was built for (`GPU_FEATURES` for an agnostic one)."""
    return int(variables["params"]["node_in"]["kernel"].shape[0]) - BASE_NODE_FEATURES


def encoding_of(variables, encoding: str | None = None) -> str:
    """The encoding a network was trained with: `encoding` when given (a run's config.json
    records it), else read off its input width: agnostic when it has `GPU_FEATURES`
    GPU-model columns, onehot otherwise (a one-hot network of exactly that many models
    must be given onehot: its run's config says so)."""
    if encoding is not None:
        return check_encoding(encoding)
    return AGNOSTIC if models_of(variables) == GPU_FEATURES else ONEHOT


def with_power_inputs(variables, hidden: int):
    """`variables` of a network saved before the power inputs existed, given zero weights
    for them (what such a network computes at any preference); others unchanged."""
    params = variables["params"]
    if "power_in" in params:
        return variables
    zeros = {"power_in": {"kernel": jnp.zeros((3, hidden), jnp.float32)},
             "preference_in": {"kernel": jnp.zeros((1, hidden), jnp.float32)}}
    return {**variables, "params": {**params, **zeros}}


def as_policy(net: OpenBNet, variables, num_models: int | Sequence[str], preference: float = 0.0,
              power: PowerModel | None = None, *, encoding: str | None = None,
              trained_models: Sequence[str] | None = None) -> Policy:
    """The network as a policy of the replay, `(key, state, pod, feasible, spec) -> (scores,
    shared_gpu)`: its logits score the nodes (the replay keeps the best feasible one, ties to
    the smallest rank) and a shared pod takes FGD's GPU, the environment's rule (`GPU_RULE`).
    `preference`: the power weight w in [0, 1] it schedules for (`Observation.preference`);
    `num_models`: the node file's GPU models (`NodeTable.models`), or their number; given
    by name, `power` defaults to their per-model table (`power.power_model`, which refuses a
    model it lacks), else to the bundled node files'. `encoding`: the one the network was
    trained with (its run's config.json; None: `encoding_of`). `trained_models`: a one-hot
    network's models by name (its run's node file), checked against the named models.

    Raises ValueError, before any work, when a one-hot network was trained on other GPU
    models (naming the ones it was trained on and the ones this node file adds), when the
    network's input width is not its encoding's, or on a preference outside [0, 1]."""
    names = None if isinstance(num_models, int) else tuple(num_models)
    count = max(len(names), 1) if names is not None else int(num_models)
    encoding = encoding_of(variables, encoding)
    columns = models_of(variables)
    if encoding == ONEHOT:
        known = trained_models is not None and names is not None
        trained = f" (one-hot: {', '.join(trained_models)})" if known else ""
        lacks = [m for m in names if m not in trained_models] if known else []
        unknown = f" ({', '.join(lacks)} unknown to it)" if lacks else ""
        if columns != count:
            raise ValueError(f"the network was trained on a node file with {columns} GPU "
                             f"models; this one has {count}{unknown}: use the node file it "
                             f"trained on{trained}, or a network of the agnostic encoding "
                             "(such as the zoo's openb-agnostic)")
        if known and tuple(trained_models) != names:
            raise ValueError(
                f"the network encodes GPU models one-hot and was trained on "
                f"{', '.join(trained_models)}; this node file's models are {', '.join(names)}"
                + (unknown or " (another order)")
                + ": use a node file of the models it trained on, or a network of the "
                "agnostic encoding (such as the zoo's openb-agnostic)")
    elif columns != GPU_FEATURES:
        raise ValueError(f"the network has {columns} GPU-model input columns; the agnostic "
                         f"encoding has {GPU_FEATURES}: is its encoding onehot?")
    if not 0.0 <= float(preference) <= 1.0:
        raise ValueError(f"preference={preference} is invalid: allowed a number in [0, 1]")
    if power is None and names is not None:
        power = power_model(names)        # ValueError naming a model the table lacks
    variables = with_power_inputs(variables, net.hidden)

    def policy(key: jax.Array, state: State, pod: Pod, feasible: jax.Array, spec: Spec):
        del key, feasible
        obs, shared_gpu = observe_with_gpu(state, pod, spec, count, preference, power,
                                           encoding)
        logits, _ = net.apply(variables, obs)
        return logits[:-1], shared_gpu

    return policy


__all__ = ["OpenBNet", "as_policy", "models_of", "encoding_of"]
