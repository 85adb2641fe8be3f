"""The scheduler policy: a permutation-equivariant actor-critic over the nodes.

    net = vte.SchedulerNet()
    variables = net.init(key, obs)               # obs: one `vte.Observation`, or a batch
    logits, value = net.apply(variables, obs)    # logits (..., N + 1), value (...)

Why this shape. The cost of placing the head request on node n depends on node n's
features *together with* the request's (demand against free resources, GPU model, the
delay from the request's origin, missing preferred labels) and on the objective weights.
So every node is encoded by one shared MLP from its own features joined with the request
and the weights, in plain and log scale (the cost is a product of ratios such as
`(1 + util) / speed`, a sum in log space). A deep-sets context, the mean and max over the
nodes and the mean over the queue, conditions a second per-node layer (FiLM: a scale and
a shift). Each node gets a logit from its own embedding; defer and the value come from the
pooled context. Nothing depends on the number of nodes or their order: the same parameters
serve any `num_nodes`, and permuting the nodes permutes the logits.

The log of a flag column (a feature whose unit is "flag", always 0 or 1: tier, GPU model,
labels, `exists`, `up`; 16 of the 35 node features, 29 of the 36 request features) is the
affine function of it that equals `log(x + 0.01)` at 0 and 1, so the first layers
(`node_in`, `queue_enc`, `LogDense`) fold it into their kernel and bias instead of taking
logs of those columns: the same parameters and, on observations, the same outputs up to
float rounding, for 46 % fewer logarithms over the nodes (a PPO or imitation update 1.2x
as fast; `docs/history.md`).

Infeasible actions are masked with `jnp.where(action_mask, logits, finfo.min)`, so a
sampled or greedy action is always valid.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax

import numpy as np

from vte.cluster.observation import NODE_FEATURE_NAMES, NODE_TABLE, REQUEST_TABLE
from vte.cluster.types import Observation
from vte.layers import _MASKED, Dense, _affine, masked_logits  # noqa: F401 (re-exported)

_EXISTS = NODE_FEATURE_NAMES.index("exists")
_LOG_FLOOR = 1e-2  # log features are log(max(x, 0) + _LOG_FLOOR)


def _log_feature(x: jax.Array) -> jax.Array:
    """The log feature of a feature x: log(max(x, 0) + _LOG_FLOOR)."""
    return jnp.log(jnp.maximum(x, 0.0) + _LOG_FLOOR)


def _with_logs(x: jax.Array) -> jax.Array:
    """Features joined with their logs: products of features become sums."""
    return jnp.concatenate([x, _log_feature(x)], axis=-1)


def _flag_columns(table) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(flag columns, other columns) of an observation table (`vte.cluster.observation`)."""
    flags = tuple(i for i, f in enumerate(table) if f.unit == "flag")
    return flags, tuple(i for i in range(len(table)) if i not in flags)


NODE_FLAGS = _flag_columns(NODE_TABLE)
REQUEST_FLAGS = _flag_columns(REQUEST_TABLE)
# _log_feature of a flag x in {0, 1} is _LOG0 + x * (_LOG1 - _LOG0)
_LOG0 = float(np.log(np.float32(_LOG_FLOOR)))
_LOG1 = float(np.log(np.float32(1.0 + _LOG_FLOOR)))


class LogDense(nn.Module):
    """`Dense(features)` of `_with_logs(x)`, x (..., F), with the same parameters (kernel
    (2F, features), bias), computed with a logarithm of the non-flag columns only.

    The kernel's rows F + j (the log of column j) of each flag column j are folded into
    its rows j and the bias: x_j K[j] + log(x_j + 0.01) K[F + j] = x_j (K[j] + (log 1.01 -
    log 0.01) K[F + j]) + log 0.01 K[F + j] for x_j in {0, 1}. Gradients reach K[F + j]
    through the fold. On a flag column holding anything else than 0 or 1 (never in a vte
    observation) the log part is that affine function of it, not a logarithm.

    Attributes:
      features: output width.
      columns: (flag columns, other columns) of x's last axis, e.g. `NODE_FLAGS`.
      written_backward: `_affine`'s backward (as `Dense`), else XLA's (as `flax.linen.Dense`).
    """

    features: int
    columns: tuple[tuple[int, ...], tuple[int, ...]]
    written_backward: bool = True

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        flags, other = (np.asarray(c, np.int32) for c in self.columns)
        f = x.shape[-1]
        if f != flags.size + other.size:
            raise ValueError(f"LogDense: {f} input columns, the table has "
                             f"{flags.size + other.size}")
        kernel = self.param("kernel", nn.initializers.lecun_normal(), (2 * f, self.features),
                            jnp.float32)
        bias = self.param("bias", nn.initializers.zeros_init(), (self.features,), jnp.float32)
        kernel, bias = jnp.asarray(kernel), jnp.asarray(bias)   # numpy when loaded
        plain, logs = kernel[:f], kernel[f:]
        plain = plain.at[flags].add((_LOG1 - _LOG0) * logs[flags])
        bias = bias + _LOG0 * logs[flags].sum(0)
        x = x.astype(jnp.float32)
        x_in = jnp.concatenate([x, _log_feature(x[..., other])], -1)
        k_in = jnp.concatenate([plain, logs[other]], 0)
        return _affine(x_in, k_in, bias) if self.written_backward else x_in @ k_in + bias


class SchedulerNet(nn.Module):
    """Actor-critic over a variable number of nodes; works on any leading batch shape.

    Attributes:
      hidden: width of every layer.
      head_hidden: width of the value head's hidden layer.
      dense: the dense layer: `vte.cluster.network.Dense` (the default), or `flax.linen.Dense`
        for the same network with XLA's own backward pass (the comparison
        `Dense` describes).
    """

    hidden: int = 64
    head_hidden: int = 64
    dense: Any = Dense

    @nn.compact
    def __call__(self, obs: Observation) -> tuple[jax.Array, jax.Array]:
        h = self.hidden
        nodes = obs.nodes                                     # (..., N, F)
        exists = nodes[..., _EXISTS] > 0.5                    # (..., N)
        weights = obs.weights / 3.0                           # sampled weights sum to 3
        request = jnp.concatenate([_with_logs(obs.request), weights,
                                   jnp.log(weights + _LOG_FLOOR)], axis=-1)
        written = self.dense is Dense

        # QUEUE CONTEXT: deep set over the queued requests
        qmask = obs.queue_mask[..., None].astype(jnp.float32)
        q = nn.relu(LogDense(h, REQUEST_FLAGS, written, name="queue_enc")(obs.queue))
        q_mean = (q * qmask).sum(-2) / jnp.maximum(qmask.sum(-2), 1.0)
        q_fill = qmask.mean(-2)

        # PER-NODE ENCODER: node features joined with the head request and the weights.
        # Dense(concat(node, request)) = Dense(node) + Dense(request), the request part
        # computed once and broadcast over the nodes.
        x = (LogDense(h, NODE_FLAGS, written, name="node_in")(nodes)
             + self.dense(h, use_bias=False, name="request_in")(request)[..., None, :])
        x = nn.relu(x)
        x = nn.relu(self.dense(h, name="node_hidden")(x))        # (..., N, h)

        # POOLED CONTEXT: mean and max over existing nodes, the queue, the request
        m = exists[..., None].astype(jnp.float32)
        n_mean = (x * m).sum(-2) / jnp.maximum(m.sum(-2), 1.0)
        n_max = jnp.max(jnp.where(exists[..., None], x, 0.0), axis=-2)
        ctx = jnp.concatenate([n_mean, n_max, q_mean, q_fill, request,
                               obs.progress[..., None]], axis=-1)
        ctx = nn.relu(self.dense(h, name="context")(ctx))

        # PER-NODE HEAD: FiLM with the context, then one logit per node
        film = self.dense(2 * h, name="film")(ctx)[..., None, :]
        scale, shift = jnp.split(film, 2, axis=-1)
        y = nn.relu(self.dense(h, name="node_out")(x) * (1.0 + scale) + shift)
        node_logits = self.dense(1, name="node_logit")(y)[..., 0]      # (..., N)
        defer_logit = self.dense(1, name="defer_logit")(ctx)            # (..., 1)
        logits = jnp.concatenate([node_logits, defer_logit], axis=-1)
        logits = masked_logits(logits, obs.action_mask)

        # VALUE HEAD
        v = nn.relu(self.dense(self.head_hidden, name="value_hidden")(ctx))
        value = self.dense(1, name="value")(v)[..., 0]
        return logits, value


@dataclasses.dataclass(frozen=True, eq=False)
class NetworkPolicy:
    """A network and its weights as a policy `(key, obs, params) -> action` for one
    observation (`make_policy`; vmap it for batches).

    Greedy takes the most likely action; otherwise an action is sampled from the policy.
    `params` (the `EnvParams`) is accepted for the common policy signature and unused.
    `vte.evaluate` hands `variables` to its compiled program as an argument, not as
    constants, so evaluating other weights of the same shapes (another seed, a later
    checkpoint) runs the program it compiled for the first."""

    net: nn.Module
    variables: Any
    greedy: bool = True

    def __call__(self, key: jax.Array, obs: Observation, params=None) -> jax.Array:
        logits, _ = self.net.apply(self.variables, obs)
        if self.greedy:
            return jnp.argmax(logits, axis=-1).astype(jnp.int32)
        return jax.random.categorical(key, logits, axis=-1).astype(jnp.int32)


def make_policy(net: SchedulerNet, variables, greedy: bool = True) -> NetworkPolicy:
    """A policy `(key, obs, params) -> action` for one observation (vmap it for batches):
    `NetworkPolicy(net, variables, greedy)`.

    Greedy takes the most likely action; otherwise an action is sampled from the policy.
    `params` (the `EnvParams`) is accepted for the common policy signature and unused.
    """
    return NetworkPolicy(net, variables, greedy)


__all__ = ["SchedulerNet", "NetworkPolicy", "make_policy", "masked_logits"]
